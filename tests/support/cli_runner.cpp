#include "support/cli_runner.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "support/child_processes.h"

namespace ds {

namespace {

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

cli_run run_cli(const std::string& args, const std::string& input, std::chrono::seconds timeout) {
    const std::string stem = ::testing::TempDir() + "/ds_cli_" + std::to_string(::getpid()) + "_" +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name();
    const std::string in_path = stem + "_in.json";
    const std::string out_path = stem + "_out.json";
    const std::string err_path = stem + "_err.txt";
    std::ofstream(in_path) << input;
    // The tool sits next to the test binary (build/bin/, or a GPU bundle's bin/).
    const std::string cmd = "timeout -s KILL " + std::to_string(timeout.count()) + " " + sibling_binary("distsample") +
                            " " + args + " < " + in_path + " > " + out_path + " 2> " + err_path;
    const int raw = std::system(cmd.c_str());
    cli_run r;
    r.exit_code = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    if (r.exit_code == 137) r.exit_code = -1;  // killed by timeout
    r.out = slurp(out_path);
    r.err = slurp(err_path);
    return r;
}

}  // namespace ds

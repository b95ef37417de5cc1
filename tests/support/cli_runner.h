// Runs the `distsample` tool as a user would: arguments, a file on stdin, stdout and stderr kept,
// the exit code. Bounded: a run past `timeout` is killed and reported as exit code -1.
#pragma once

#include <chrono>
#include <string>

namespace ds {

struct cli_run {
    int exit_code = -1;  // -1: killed by a signal or by the timeout
    std::string out;
    std::string err;
};

// `args` are split on spaces by the shell; `input` goes to stdin through a file. Files are named
// by the test's name and the pid, so parallel tests (and build trees) keep apart.
cli_run run_cli(const std::string& args, const std::string& input,
                std::chrono::seconds timeout = std::chrono::seconds(120));

}  // namespace ds

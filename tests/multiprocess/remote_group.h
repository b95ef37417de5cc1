// The fixture of the multi-process tests: a coordinator (`distsample coordinator`) and kTp rank
// processes (`distsample rank`, or model workers with their rank inside) started by the test, the
// coordinator driven through its stdin and stdout (cli/remote_commands.cpp); every child is killed
// and reaped in TearDown. Also the references a remote step is compared with: `distsample kernel`
// on the full logits and `distsample step` with in-process ranks over the local transport.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/child_processes.h"

namespace ds::remote_test {

using nlohmann::json;
using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kTp = 4;
constexpr int kVocab = 64;
constexpr milliseconds kStepTimeout{4000};
constexpr milliseconds kTransportTimeout{2000};
constexpr int kWorkerModelSeed = 9;                 // the example workers' model (cpu_worker --model-seed)
constexpr milliseconds kWorkerLogitsTimeout{1000};  // shorter than the transport's: a withholding worker is named

inline std::string tool_path() { return sibling_binary("distsample"); }

inline std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

inline std::string test_stem() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name) {
        if (c == '/') c = '_';
    }
    return ::testing::TempDir() + "/ds_remote_" + name;
}

inline std::string fmt_command(const std::vector<std::string>& argv) {
    std::string out;
    for (const std::string& a : argv) out += (out.empty() ? "" : " ") + a;
    return out;
}

// `distsample kernel sample|verify` on the same input: the reference.
inline json kernel_output(const std::string& op, const json& step) {
    const std::string stem = test_stem() + "_kernel";
    std::ofstream(stem + "_in.json") << step.dump();
    const std::string cmd = tool_path() + " kernel " + op + " < " + stem + "_in.json > " + stem + "_out.json 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << slurp(stem + "_out.json");
    return json::parse(slurp(stem + "_out.json"));
}

// `distsample step sample|verify` with TP in-process ranks over the local transport, in `mode`.
inline json local_transport_output(const std::string& op, const json& step, const std::string& mode) {
    const std::string stem = test_stem() + "_local";
    std::ofstream(stem + "_in.json") << step.dump();
    const std::string cmd = fmt_command({tool_path(), "step", op, "--tp", std::to_string(kTp), "--mode", mode,
                                         "--transport", "local", "--set", "vocab_size=" + std::to_string(kVocab)}) +
                            " < " + stem + "_in.json > " + stem + "_out.json 2> " + stem +
                            "_log.txt";  // it logs to stderr
    EXPECT_EQ(std::system(cmd.c_str()), 0) << slurp(stem + "_out.json") << slurp(stem + "_log.txt");
    return json::parse(slurp(stem + "_out.json"));
}

inline json random_step(bool verify, uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> logit(0.0f, 2.0f);
    const int bs = 5;  // pads to 8 with TP = 4
    const int n = verify ? 3 : 1;
    json step{{"vocab_size", kVocab}};
    json rows = json::array();
    for (int r = 0; r < bs * n; ++r) {
        json row = json::array();
        for (int i = 0; i < kVocab; ++i) row.push_back(logit(gen));
        rows.push_back(row);
    }
    step["logits"] = rows;
    json requests = json::array();
    for (int b = 0; b < bs; ++b) {
        json r{{"seed", 100 + b}, {"position", 7 * b}, {"temperature", b == 0 ? 0.0 : 0.7 + 0.1 * b}};
        if (b == 2) r["top_k"] = 8;
        if (b == 3) r["top_p"] = 0.8;
        if (b == 4) r["min_p"] = 0.05;
        requests.push_back(r);
    }
    step["requests"] = requests;
    if (verify) {
        std::uniform_int_distribution<int> token(0, kVocab - 1);
        json candidates = json::array();
        for (int b = 0; b < bs; ++b) candidates.push_back(json{token(gen), token(gen), token(gen)});
        step["candidates"] = candidates;
    }
    return step;
}

// Equal token for token; logprobs within float rounding (the sharded mode sums in another order).
inline void expect_same_outputs(const json& got, const json& want) {
    ASSERT_FALSE(got.contains("error")) << got.dump();
    for (const auto& [key, value] : want.items()) {
        ASSERT_TRUE(got.contains(key)) << key << " missing in " << got.dump();
        if (key != "logprobs") {
            EXPECT_EQ(got[key], value) << key;
            continue;
        }
        ASSERT_EQ(got[key].size(), value.size());
        for (size_t i = 0; i < value.size(); ++i) {
            if (value[i].is_null()) {
                EXPECT_TRUE(got[key][i].is_null()) << "logprobs[" << i << "]";
            } else {
                EXPECT_NEAR(got[key][i].get<double>(), value[i].get<double>(), 1e-5) << "logprobs[" << i << "]";
            }
        }
    }
}

// Whether `distsample kernel --backend cuda` runs here: a GPU and a build with CUDA.
inline bool cuda_backend_runs() {
    json step = random_step(false, 1);
    const std::string stem = test_stem() + "_cuda_probe";
    std::ofstream(stem + "_in.json") << step.dump();
    const std::string cmd =
        tool_path() + " kernel sample --backend cuda < " + stem + "_in.json > " + stem + "_out.json 2>&1";
    return std::system(cmd.c_str()) == 0;
}

class RemoteRanks : public ::testing::Test {
   protected:
    // The children append to their logs (a restarted rank to its predecessor's): start empty.
    void SetUp() override {
        std::signal(SIGPIPE, SIG_IGN);  // a dead coordinator fails the test, not the test binary
        std::remove((test_stem() + "_coordinator.log").c_str());
        for (int r = 0; r < kTp; ++r) std::remove((test_stem() + "_rank" + std::to_string(r) + ".log").c_str());
    }

    void TearDown() override {
        if (coordinator_in_ >= 0) ::close(coordinator_in_);
        if (coordinator_out_ >= 0) ::close(coordinator_out_);
        for (pid_t pid : children_) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
        }
    }

    // The group's flags, the same for the coordinator and every rank, then extra_args_.
    std::vector<std::string> group_args(const std::string& mode) const {
        std::vector<std::string> args{
            "--tp",        std::to_string(kTp),
            "--mode",      mode,
            "--transport", "ucx",
            "--threads",   "1",
            "--set",       "vocab_size=" + std::to_string(kVocab),
            "--set",       "max_batch=8",
            "--set",       "max_tokens_per_req=3",
            "--set",       "max_slots=16",
            "--set",       "step_timeout_ms=" + std::to_string(kStepTimeout.count()),
            "--set",       "transport_timeout_ms=" + std::to_string(kTransportTimeout.count())};
        args.insert(args.end(), extra_args_.begin(), extra_args_.end());
        return args;
    }

    // Where the processes run: the argv before the tool's (empty: on this host). Then where the
    // coordinator listens and which rank a process is, as flags (empty: from the topology config).
    virtual std::vector<std::string> coordinator_launcher() const { return {}; }
    virtual std::vector<std::string> rank_launcher(int /*rank*/) const { return {}; }
    virtual std::vector<std::string> listen_args() const { return {"--listen", "127.0.0.1:0"}; }
    virtual std::vector<std::string> rank_args(int rank) const {
        return {"--coordinator", address_, "--rank", std::to_string(rank)};
    }

    // fork + exec of `program` with stdin/stdout as given (-1: /dev/null and the test's log file).
    pid_t spawn(std::vector<std::string> launcher, std::vector<std::string> args, int in_fd, int out_fd,
                const std::string& log, const std::string& program = tool_path()) {
        args.insert(args.begin(), program);
        args.insert(args.begin(), launcher.begin(), launcher.end());
        std::vector<char*> argv;
        for (std::string& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        const pid_t pid = ::fork();
        if (pid == 0) {
            if (in_fd >= 0) ::dup2(in_fd, STDIN_FILENO);
            if (out_fd >= 0) ::dup2(out_fd, STDOUT_FILENO);
            if (FILE* f = std::fopen(log.c_str(), "a")) {
                ::dup2(fileno(f), STDERR_FILENO);
                if (out_fd < 0) ::dup2(fileno(f), STDOUT_FILENO);
            }
            ::execvp(argv[0], argv.data());
            ::_exit(127);
        }
        children_.push_back(pid);
        return pid;
    }

    // The process the ranks join (`distsample coordinator`, or `serve --rank-processes`), its stdin
    // and stdout on pipes, its stderr in the coordinator's log.
    void spawn_coordinator_process(const std::vector<std::string>& args) {
        int to_child[2];
        int from_child[2];
        ASSERT_EQ(::pipe(to_child), 0);
        ASSERT_EQ(::pipe(from_child), 0);
        spawn(coordinator_launcher(), args, to_child[0], from_child[1], test_stem() + "_coordinator.log");
        ::close(to_child[0]);
        ::close(from_child[1]);
        coordinator_in_ = to_child[1];
        coordinator_out_ = from_child[0];
    }

    void start_coordinator(const std::string& mode) {
        mode_ = mode;
        std::vector<std::string> args{"coordinator"};
        for (const std::string& a : listen_args()) args.push_back(a);
        for (const std::string& a : group_args(mode)) args.push_back(a);
        spawn_coordinator_process(args);
        const json first = read_reply(milliseconds(10000));
        ASSERT_TRUE(first.contains("listening")) << first.dump();
        address_ = first["listening"].get<std::string>();
    }

    pid_t start_rank(int rank) {
        std::vector<std::string> args{"rank"};
        for (const std::string& a : rank_args(rank)) args.push_back(a);
        for (const std::string& a : group_args(mode_)) args.push_back(a);
        return spawn(rank_launcher(rank), args, -1, -1, test_stem() + "_rank" + std::to_string(rank) + ".log");
    }

    // A rank inside a model worker (examples/tp_workers/cpu_worker.cpp) in place of `distsample
    // rank`, for topology.logits_source = worker: its model (kWorkerModelSeed) makes the rows. It
    // takes the group's flags as --set key=value (the coordinator's flags spelt as keys);
    // withhold_step K > 0 never hands in the K-th step's logits; shard_memory "device" hands its
    // shards in from GPU memory.
    pid_t start_worker(int rank, int withhold_step = 0, const std::string& shard_memory = "host") {
        std::vector<std::string> args{"--coordinator",
                                      address_,
                                      "--rank",
                                      std::to_string(rank),
                                      "--model-seed",
                                      std::to_string(kWorkerModelSeed),
                                      "--logits-timeout-ms",
                                      std::to_string(kWorkerLogitsTimeout.count()),
                                      "--withhold-step",
                                      std::to_string(withhold_step),
                                      "--shard-memory",
                                      shard_memory};
        const std::vector<std::string> group = group_args(mode_);
        for (size_t i = 0; i + 1 < group.size(); i += 2) {
            args.push_back("--set");
            if (group[i] == "--set") {
                args.push_back(group[i + 1]);
            } else {
                const std::string key = group[i] == "--threads" ? "threads_per_rank" : group[i].substr(2);
                args.push_back(key + "=" + group[i + 1]);
            }
        }
        return spawn({}, args, -1, -1, test_stem() + "_rank" + std::to_string(rank) + ".log",
                     sibling_binary("cpu_worker"));
    }

    // One line of the coordinator's output; false after `timeout`, with `line` saying why ("test: ...").
    bool read_line(milliseconds timeout, std::string& line) {
        const auto deadline = clock_type::now() + timeout;
        for (;;) {
            if (const size_t eol = pending_.find('\n'); eol != std::string::npos) {
                line = pending_.substr(0, eol);
                pending_.erase(0, eol + 1);
                return true;
            }
            const auto left = std::chrono::duration_cast<milliseconds>(deadline - clock_type::now()).count();
            pollfd p{coordinator_out_, POLLIN, 0};
            if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) {
                line = "test: no reply in time";
                return false;
            }
            char buf[65536];
            const ssize_t got = ::read(coordinator_out_, buf, sizeof buf);
            if (got <= 0) {
                line = "test: the coordinator closed its output";
                return false;
            }
            pending_.append(buf, static_cast<size_t>(got));
        }
    }

    // One line from the coordinator, or {"error": "test: ..."} after `timeout`.
    json read_reply(milliseconds timeout) {
        std::string line;
        if (!read_line(timeout, line)) return json{{"error", line}};
        return json::parse(line);
    }

    void send(const std::string& op, json step) {
        step["op"] = op;
        const std::string line = step.dump() + "\n";
        ASSERT_EQ(::write(coordinator_in_, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    }

    json call(const std::string& op, const json& step) {
        send(op, step);
        return read_reply(kStepTimeout + milliseconds(10000));
    }

    // Retries while the group forms (each attempt fails fast then).
    json call_until_ok(const std::string& op, const json& step, milliseconds within) {
        const auto deadline = clock_type::now() + within;
        json reply;
        do {
            reply = call(op, step);
            if (!reply.contains("error")) break;
            std::this_thread::sleep_for(milliseconds(100));
        } while (clock_type::now() < deadline);
        return reply;
    }

    // A sample step (retried while the group forms) and three verify steps from `seed` on, each
    // equal to `distsample kernel` on the full logits.
    void expect_steps_equal_the_kernel(uint32_t seed) {
        const json sample = random_step(false, seed);
        expect_same_outputs(call_until_ok("sample", sample, milliseconds(30000)), kernel_output("sample", sample));
        for (uint32_t s = seed + 1; s < seed + 4; ++s) {
            const json verify = random_step(true, s);
            expect_same_outputs(call("verify", verify), kernel_output("verify", verify));
        }
    }

    // Every line sent was answered once: nothing more arrives within `quiet`.
    void expect_no_more_replies(milliseconds quiet) {
        const json extra = read_reply(quiet);
        EXPECT_EQ(extra, (json{{"error", "test: no reply in time"}})) << "a step answered twice";
    }

    // Did the process `pid` (a child) exit by itself? Its exit status, or -1 while it runs.
    static int exit_status_within(pid_t pid, milliseconds within) {
        const auto deadline = clock_type::now() + within;
        int status = 0;
        while (clock_type::now() < deadline) {
            if (::waitpid(pid, &status, WNOHANG) == pid)
                return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            std::this_thread::sleep_for(milliseconds(20));
        }
        return -1;
    }

    void start_group(const std::string& mode) {
        start_coordinator(mode);
        for (int r = 0; r < kTp; ++r) ranks_.push_back(start_rank(r));
    }

    std::vector<std::string> extra_args_;  // more group flags (faults, a config file)
    std::vector<pid_t> children_;
    std::vector<pid_t> ranks_;
    int coordinator_in_ = -1;
    int coordinator_out_ = -1;
    std::string pending_;
    std::string address_;
    std::string mode_;
};

}  // namespace ds::remote_test

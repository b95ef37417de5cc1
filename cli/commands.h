// Subcommands of the `distsample` tool. Each returns the process exit code:
// 0 success, 2 bad input (one line on stderr naming the field), 1 any other failure.
#pragma once

#include <cstdint>
#include <string>

namespace ds::cli {

struct kernel_options {
    std::string backend = "cpu";
    int threads = 0;
};

// Reads one JSON step on stdin, prints one JSON result on stdout.
int run_kernel_command(bool verify, const kernel_options& options);

struct step_options {
    int tp = 4;
    std::string mode = "swap";
    std::string transport = "local";
    std::string backend = "cpu";
    std::string policy = "on_mismatch";
    int threads = 1;  // per rank
};

// Like run_kernel_command, through the coordinator and TP rank actors.
int run_step_command(bool verify, const step_options& options);

struct demo_options {
    int steps = 12;
    int batch = 6;
    int vocab = 32000;
    int draft_tokens = 3;
    uint64_t seed = 2026;
    int threads = 1;  // per rank
    std::string backend = "cpu";
    int tp = 4;
    std::string mode = "swap";
};

int run_demo_command(const demo_options& options);

}  // namespace ds::cli

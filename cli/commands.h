// Subcommands of the `distsample` tool. Each returns the process exit code:
// 0 success, 2 bad input (one line on stderr naming the field), 1 any other failure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds::cli {

struct kernel_options {
    std::string backend = "cpu";
    int threads = 0;
};

// Reads one JSON step on stdin, prints one JSON result on stdout.
int run_kernel_command(bool verify, const kernel_options& options);

// Where a group's configuration comes from (config/config_file.h): a JSON file, DISTSAMPLE_*
// variables, then key=value overrides; flags such as --tp are turned into overrides, last.
struct group_options {
    std::string config_file;
    std::vector<std::string> overrides;
};

struct step_options {
    group_options group;
};

// Like run_kernel_command, through the coordinator and TP rank actors.
int run_step_command(bool verify, const step_options& options);

struct demo_options {
    int steps = 12;
    int batch = 6;
    int vocab = 32000;
    int draft_tokens = 3;
    uint64_t seed = 2026;
    std::string model = "synthetic";  // or "ngram": a trigram model of `corpus`, its bigram model as draft
    std::string corpus = "/usr/share/common-licenses/GPL-3";
    group_options group;
};

int run_demo_command(const demo_options& options);

struct serve_options {
    group_options group;
    // The ranks are rank processes (`distsample rank`) joining on `ranks_listen` (HOST:PORT;
    // empty: the config key topology.coordinator); serving starts once all have joined, within
    // wait_ranks_ms (else exit 1 naming the missing rank). Otherwise rank threads of this process.
    bool rank_processes = false;
    std::string ranks_listen;
    int64_t wait_ranks_ms = 30000;
};

// Serves the gateway (config keys gateway.*) until SIGINT or SIGTERM.
int run_serve_command(const serve_options& options);

// A coordinator whose ranks are processes (`distsample rank`): publishes it on `listen`
// (HOST:PORT; empty: the config key topology.coordinator) and serves JSON steps on stdin, one
// per line (cli/remote_commands.cpp).
struct coordinator_options {
    std::string listen;
    // > 0: after the "listening" line, wait up to this long for the group to form, then print
    // {"ready": ...}; exit 1 if it does not form in time.
    int64_t wait_ranks_ms = 0;
    group_options group;
};

int run_coordinator_command(const coordinator_options& options);

// One rank process joining the coordinator at `coordinator` (HOST:PORT; empty: the config key
// topology.coordinator); serves until it is gone. rank -1: the rank whose topology.hosts entry
// is an address of this host.
struct rank_options {
    std::string coordinator;
    int32_t rank = -1;
    group_options group;
};

int run_rank_command(const rank_options& options);

// Prints the effective configuration as JSON, or one error line (exit 2).
int run_config_check_command(const group_options& options);

struct faults_report_options {
    std::string file;  // a fault report (actors/fault_report.h)
    bool json = false;
};

// Prints a fault report as a table per fault kind (or as JSON).
int run_faults_report_command(const faults_report_options& options);

}  // namespace ds::cli

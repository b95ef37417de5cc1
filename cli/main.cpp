// `distsample`: the command-line tool. See `distsample --help`.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "config/json_input.h"

namespace {

using ds::cli::group_options;

// Every subcommand's options, and the command that ran; filled while the parser is built.
struct command_line {
    ds::cli::kernel_options kernel;
    ds::cli::step_options step;
    ds::cli::demo_options demo;
    ds::cli::serve_options serve;
    ds::cli::coordinator_options coordinator;
    ds::cli::rank_options rank;
    group_options check;
    ds::cli::faults_report_options faults_report;
    // The leaf subcommands, each with the function that runs it.
    std::vector<std::pair<CLI::App*, std::function<int()>>> runners;

    void on(CLI::App* cmd, std::function<int()> run) { runners.emplace_back(cmd, std::move(run)); }
};

// Group settings: a config file, then DISTSAMPLE_* variables, then --set and the flags below (each
// flag is the override of one config key).
void add_group_options(CLI::App* cmd, group_options& group) {
    cmd->add_option("--config", group.config_file, "JSON configuration file (docs/configuration.md)");
    cmd->add_option("--set", group.overrides, "Override a configuration key: KEY=VALUE (repeatable)");
    auto flag = [cmd, &group](const char* name, const char* key, const char* help) {
        cmd->add_option_function<std::string>(
            name,
            [&group, key](const std::string& value) { group.overrides.push_back(std::string(key) + "=" + value); },
            help);
    };
    flag("--tp", "tp", "Tensor-parallel ranks (config key tp, default 4; V must be a multiple)");
    flag("--mode", "mode", "Distributed mode: swap, sharded or gathered (config key mode, default swap)");
    flag("--transport", "transport", "Transport between ranks: auto, local, ucx or nccl (config key transport)");
    flag("--backend", "backend", "Sampling backend: cpu or cuda (config key backend)");
    flag("--rank0-policy", "rank0_policy", "always, never or on_mismatch (config key rank0_policy)");
    flag("--threads", "threads_per_rank", "CPU worker threads per rank, 0 = all cores (config key threads_per_rank)");
    cmd->add_option_function<std::vector<std::string>>(
        "--fault",
        [&group](const std::vector<std::string>& faults) {
            for (const std::string& f : faults) group.overrides.push_back("faults.inject=" + f);
        },
        "Inject a fault: kind:rank=R[:steps=A-B][:p=P][:ms=D] (repeatable; config key faults.inject; "
        "docs/faults.md)");
    flag("--fault-seed", "faults.seed", "Seed of the faults' per-step coins (config key faults.seed)");
}

void add_kernel_commands(CLI::App& app, command_line& line) {
    CLI::App* kernel = app.add_subcommand(
        "kernel", "Run one step through a sampling backend: JSON step on stdin, JSON result on stdout");
    kernel->require_subcommand(1);
    CLI::App* sample =
        kernel->add_subcommand("sample", "Sample one token per request (input: vocab_size, logits, requests)");
    CLI::App* verify = kernel->add_subcommand(
        "verify",
        "Verify draft chains (input: vocab_size, logits, requests, candidates, optional thresholds and coins)");
    for (CLI::App* cmd : {sample, verify}) {
        cmd->add_option("--backend", line.kernel.backend, "Sampling backend: cpu or cuda")->capture_default_str();
        cmd->add_option("--threads", line.kernel.threads, "CPU worker threads (0 = all cores)")->capture_default_str();
    }
    line.on(sample, [&line] { return ds::cli::run_kernel_command(false, line.kernel); });
    line.on(verify, [&line] { return ds::cli::run_kernel_command(true, line.kernel); });
}

void add_step_commands(CLI::App& app, command_line& line) {
    CLI::App* step = app.add_subcommand(
        "step", "Run one step through the coordinator and TP rank actors: the JSON of `kernel` in, the same JSON out");
    step->require_subcommand(1);
    CLI::App* sample = step->add_subcommand("sample", "Sample one token per request");
    CLI::App* verify = step->add_subcommand("verify", "Verify draft chains");
    for (CLI::App* cmd : {sample, verify}) add_group_options(cmd, line.step.group);
    line.on(sample, [&line] { return ds::cli::run_step_command(false, line.step); });
    line.on(verify, [&line] { return ds::cli::run_step_command(true, line.step); });
}

void add_demo_command(CLI::App& app, command_line& line) {
    ds::cli::demo_options& demo = line.demo;
    CLI::App* cmd = app.add_subcommand(
        "demo",
        "Speculative decoding with synthetic target and draft models through the coordinator and TP rank actors");
    cmd->add_option("--steps", demo.steps, "Verify steps after the first sampled token")->capture_default_str();
    cmd->add_option("--batch", demo.batch, "Requests per step")->capture_default_str();
    cmd->add_option("--vocab", demo.vocab, "Vocabulary size")->capture_default_str();
    cmd->add_option("--draft-tokens", demo.draft_tokens, "Drafts per request per step (N - 1)")->capture_default_str();
    cmd->add_option("--seed", demo.seed, "Seed of the models and the requests")->capture_default_str();
    cmd->add_option(
           "--model", demo.model,
           "Target and draft models: synthetic, or ngram (a trigram model of --corpus, its bigram model as draft)")
        ->capture_default_str();
    cmd->add_option("--corpus", demo.corpus, "Text the ngram model is trained on")->capture_default_str();
    add_group_options(cmd, demo.group);
    line.on(cmd, [&line] { return ds::cli::run_demo_command(line.demo); });
}

void add_serve_command(CLI::App& app, command_line& line) {
    CLI::App* cmd = app.add_subcommand(
        "serve",
        "Serve the scheduler gateway (TCP, Unix socket, /metrics) in front of TP rank actors or rank processes");
    add_group_options(cmd, line.serve.group);
    auto gateway_flag = [cmd, &line](const char* name, const char* key, const char* help) {
        cmd->add_option_function<std::string>(
            name,
            [&line, key](const std::string& value) {
                line.serve.group.overrides.push_back(std::string("gateway.") + key + "=" + value);
            },
            help);
    };
    gateway_flag("--listen", "listen_address",
                 "TCP bind address, empty = no TCP (config key gateway.listen_address, default 127.0.0.1)");
    gateway_flag("--port", "port", "TCP port, 0 = any free port (config key gateway.port, default 7700)");
    gateway_flag("--unix-socket", "unix_socket", "Unix socket path (config key gateway.unix_socket)");
    gateway_flag("--secret", "secret", "Shared secret the first frame must carry (config key gateway.secret)");
    gateway_flag("--max-frame-bytes", "max_frame_bytes", "Largest frame accepted (config key gateway.max_frame_bytes)");
    gateway_flag("--metrics-port", "metrics_port",
                 "HTTP /metrics and /healthz port, -1 = off (config key gateway.metrics_port)");
    gateway_flag("--model", "model",
                 "Logits of steps without a payload: synthetic, ngram or none (config key gateway.model)");
    gateway_flag("--corpus", "corpus", "Text of the ngram model (config key gateway.corpus)");
    CLI::Option* processes =
        cmd->add_flag("--rank-processes", line.serve.rank_processes,
                      "The ranks are rank processes (`distsample rank`) that join this gateway (docs/gateway.md)");
    cmd->add_option("--ranks-listen", line.serve.ranks_listen,
                    "HOST:PORT the rank processes join, port 0: any free port (config key topology.coordinator, "
                    "default 127.0.0.1:7710)")
        ->needs(processes);
    cmd->add_option("--wait-ranks-ms", line.serve.wait_ranks_ms,
                    "Wait up to this long for every rank process to join before serving; exit 1 if they do not")
        ->check(CLI::Range(int64_t{1}, int64_t{3'600'000}))
        ->capture_default_str()
        ->needs(processes);
    line.on(cmd, [&line] { return ds::cli::run_serve_command(line.serve); });
}

void add_process_commands(CLI::App& app, command_line& line) {
    CLI::App* coordinator = app.add_subcommand("coordinator",
                                               "Coordinate rank processes (`distsample rank`): JSON steps on "
                                               "stdin, one per line with \"op\": sample|verify|health");
    coordinator->add_option("--listen", line.coordinator.listen,
                            "HOST:PORT the rank processes join, port 0: any free port (config key "
                            "topology.coordinator, default 127.0.0.1:7710)");
    coordinator
        ->add_option("--wait-ranks-ms", line.coordinator.wait_ranks_ms,
                     "Wait up to this long for every rank process to join and the group to form, then print "
                     "{\"ready\": ...} (0: do not wait)")
        ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}));
    add_group_options(coordinator, line.coordinator.group);
    line.on(coordinator, [&line] { return ds::cli::run_coordinator_command(line.coordinator); });

    CLI::App* rank =
        app.add_subcommand("rank", "One rank process: join the coordinator and run its steps (transport ucx)");
    rank->add_option("--coordinator", line.rank.coordinator,
                     "HOST:PORT of `distsample coordinator --listen` (config key topology.coordinator)");
    rank->add_option("--rank", line.rank.rank,
                     "This process's rank in [0, tp); default: the rank whose topology.hosts entry is this host");
    add_group_options(rank, line.rank.group);
    line.on(rank, [&line] { return ds::cli::run_rank_command(line.rank); });
}

void add_tool_commands(CLI::App& app, command_line& line) {
    CLI::App* config = app.add_subcommand("config", "Configuration files");
    config->require_subcommand(1);
    CLI::App* check = config->add_subcommand(
        "check", "Validate a configuration (file, DISTSAMPLE_* variables, --set) and print the effective values");
    check->add_option("file", line.check.config_file, "JSON configuration file")->required();
    check->add_option("--set", line.check.overrides, "Override a configuration key: KEY=VALUE (repeatable)");
    line.on(check, [&line] { return ds::cli::run_config_check_command(line.check); });

    CLI::App* faults = app.add_subcommand("faults", "Fault injection (docs/faults.md)");
    faults->require_subcommand(1);
    CLI::App* report =
        faults->add_subcommand("report", "Print a run's fault report: a table per fault kind, or --json");
    report->add_option("file", line.faults_report.file, "Fault report file (JSON, e.g. from DISTSAMPLE_FAULT_REPORT)")
        ->required();
    report->add_flag("--json", line.faults_report.json, "Print the report as JSON");
    line.on(report, [&line] { return ds::cli::run_faults_report_command(line.faults_report); });
}

// CLI11 answers a word that names no subcommand with "A subcommand is required": say which word,
// and what the subcommands at that place are.
std::string unknown_subcommand(const CLI::App& app, int argc, char** argv) {
    const CLI::App* at = &app;
    for (int i = 1; i < argc; ++i) {
        const std::string word = argv[i];
        const std::vector<const CLI::App*> subcommands = at->get_subcommands([](const CLI::App*) { return true; });
        if (word.empty() || word[0] == '-' || subcommands.empty()) return {};
        const auto next = std::find_if(subcommands.begin(), subcommands.end(),
                                       [&](const CLI::App* s) { return s->get_name() == word; });
        if (next == subcommands.end()) {
            std::string names;
            for (const CLI::App* s : subcommands) names += (names.empty() ? "" : ", ") + s->get_name();
            return "unknown subcommand " + ds::quote_text(word) + ": expected one of " + names + " (see --help)";
        }
        at = *next;
    }
    return {};
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"distsample: exact distributed sampling and speculative verification for LLM inference"};
    app.require_subcommand(1);
    command_line line;
    add_kernel_commands(app, line);
    add_step_commands(app, line);
    add_demo_command(app, line);
    add_serve_command(app, line);
    add_process_commands(app, line);
    add_tool_commands(app, line);
    if (const std::string unknown = unknown_subcommand(app, argc, argv); !unknown.empty()) {
        std::cerr << "error: " << unknown << '\n';
        return 2;
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);
        return code == 0 ? 0 : 2;
    }
    for (const auto& [cmd, run] : line.runners) {
        if (cmd->parsed()) return run();
    }
    return 2;
}

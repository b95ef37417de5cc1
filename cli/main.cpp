// `distsample`: the command-line tool. See `distsample --help`.
#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
    CLI::App app{"distsample: exact distributed sampling and speculative verification for LLM inference"};
    app.require_subcommand(1);

    ds::cli::kernel_options kernel;
    CLI::App* kernel_cmd = app.add_subcommand(
        "kernel", "Run one step through a sampling backend: JSON step on stdin, JSON result on stdout");
    kernel_cmd->require_subcommand(1);
    CLI::App* sample_cmd =
        kernel_cmd->add_subcommand("sample", "Sample one token per request (input: vocab_size, logits, requests)");
    CLI::App* verify_cmd = kernel_cmd->add_subcommand(
        "verify",
        "Verify draft chains (input: vocab_size, logits, requests, candidates, optional thresholds and coins)");
    for (CLI::App* cmd : {sample_cmd, verify_cmd}) {
        cmd->add_option("--backend", kernel.backend, "Sampling backend: cpu or cuda")->capture_default_str();
        cmd->add_option("--threads", kernel.threads, "CPU worker threads (0 = all cores)")->capture_default_str();
    }

    ds::cli::step_options step;
    CLI::App* step_cmd = app.add_subcommand(
        "step", "Run one step through the coordinator and TP rank actors: the JSON of `kernel` in, the same JSON out");
    step_cmd->require_subcommand(1);
    CLI::App* step_sample_cmd = step_cmd->add_subcommand("sample", "Sample one token per request");
    CLI::App* step_verify_cmd = step_cmd->add_subcommand("verify", "Verify draft chains");
    // Group settings: a config file, then DISTSAMPLE_* variables, then --set and the flags below
    // (each flag is the override of one config key).
    auto add_group_options = [](CLI::App* cmd, ds::cli::group_options& group) {
        cmd->add_option("--config", group.config_file, "JSON configuration file (see docs/configuration.md)");
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
        flag("--threads", "threads_per_rank",
             "CPU worker threads per rank, 0 = all cores (config key threads_per_rank)");
        cmd->add_option_function<std::vector<std::string>>(
            "--fault",
            [&group](const std::vector<std::string>& faults) {
                for (const std::string& f : faults) group.overrides.push_back("faults.inject=" + f);
            },
            "Inject a fault: kind:rank=R[:steps=A-B][:p=P][:ms=D] (repeatable; config key faults.inject; "
            "docs/faults.md)");
        flag("--fault-seed", "faults.seed", "Seed of the faults' per-step coins (config key faults.seed)");
    };
    for (CLI::App* cmd : {step_sample_cmd, step_verify_cmd}) add_group_options(cmd, step.group);

    ds::cli::demo_options demo;
    CLI::App* demo_cmd = app.add_subcommand(
        "demo",
        "Speculative decoding with synthetic target and draft models through the coordinator and TP rank actors");
    demo_cmd->add_option("--steps", demo.steps, "Verify steps after the first sampled token")->capture_default_str();
    demo_cmd->add_option("--batch", demo.batch, "Requests per step")->capture_default_str();
    demo_cmd->add_option("--vocab", demo.vocab, "Vocabulary size")->capture_default_str();
    demo_cmd->add_option("--draft-tokens", demo.draft_tokens, "Drafts per request per step (N - 1)")
        ->capture_default_str();
    demo_cmd->add_option("--seed", demo.seed, "Seed of the models and the requests")->capture_default_str();
    demo_cmd
        ->add_option(
            "--model", demo.model,
            "Target and draft models: synthetic, or ngram (a trigram model of --corpus, its bigram model as draft)")
        ->capture_default_str();
    demo_cmd->add_option("--corpus", demo.corpus, "Text the ngram model is trained on")->capture_default_str();
    add_group_options(demo_cmd, demo.group);

    ds::cli::group_options serve;
    CLI::App* serve_cmd = app.add_subcommand(
        "serve", "Serve the scheduler gateway (TCP, Unix socket, /metrics) in front of TP rank actors");
    add_group_options(serve_cmd, serve);
    auto gateway_flag = [serve_cmd, &serve](const char* name, const char* key, const char* help) {
        serve_cmd->add_option_function<std::string>(
            name,
            [&serve, key](const std::string& value) {
                serve.overrides.push_back(std::string("gateway.") + key + "=" + value);
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

    ds::cli::coordinator_options coordinator;
    CLI::App* coordinator_cmd = app.add_subcommand("coordinator",
                                                   "Coordinate rank processes (`distsample rank`): JSON steps on "
                                                   "stdin, one per line with \"op\": sample|verify|health");
    coordinator_cmd->add_option("--listen", coordinator.listen,
                                "HOST:PORT the rank processes join, port 0: any free port (config key "
                                "topology.coordinator, default 127.0.0.1:7710)");
    add_group_options(coordinator_cmd, coordinator.group);

    ds::cli::rank_options rank;
    CLI::App* rank_cmd =
        app.add_subcommand("rank", "One rank process: join the coordinator and run its steps (transport ucx)");
    rank_cmd->add_option("--coordinator", rank.coordinator,
                         "HOST:PORT of `distsample coordinator --listen` (config key topology.coordinator)");
    rank_cmd->add_option("--rank", rank.rank,
                         "This process's rank in [0, tp); default: the rank whose topology.hosts entry is this host");
    add_group_options(rank_cmd, rank.group);

    ds::cli::group_options check;
    CLI::App* config_cmd = app.add_subcommand("config", "Configuration files");
    config_cmd->require_subcommand(1);
    CLI::App* check_cmd = config_cmd->add_subcommand(
        "check", "Validate a configuration (file, DISTSAMPLE_* variables, --set) and print the effective values");
    check_cmd->add_option("file", check.config_file, "JSON configuration file")->required();
    check_cmd->add_option("--set", check.overrides, "Override a configuration key: KEY=VALUE (repeatable)");

    ds::cli::faults_report_options faults_report;
    CLI::App* faults_cmd = app.add_subcommand("faults", "Fault injection (docs/faults.md)");
    faults_cmd->require_subcommand(1);
    CLI::App* faults_report_cmd =
        faults_cmd->add_subcommand("report", "Print a run's fault report: a table per fault kind, or --json");
    faults_report_cmd
        ->add_option("file", faults_report.file, "Fault report file (JSON, e.g. from DISTSAMPLE_FAULT_REPORT)")
        ->required();
    faults_report_cmd->add_flag("--json", faults_report.json, "Print the report as JSON");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);
        return code == 0 ? 0 : 2;
    }
    if (sample_cmd->parsed()) return ds::cli::run_kernel_command(false, kernel);
    if (verify_cmd->parsed()) return ds::cli::run_kernel_command(true, kernel);
    if (step_sample_cmd->parsed()) return ds::cli::run_step_command(false, step);
    if (step_verify_cmd->parsed()) return ds::cli::run_step_command(true, step);
    if (demo_cmd->parsed()) return ds::cli::run_demo_command(demo);
    if (serve_cmd->parsed()) return ds::cli::run_serve_command(serve);
    if (coordinator_cmd->parsed()) return ds::cli::run_coordinator_command(coordinator);
    if (rank_cmd->parsed()) return ds::cli::run_rank_command(rank);
    if (check_cmd->parsed()) return ds::cli::run_config_check_command(check);
    if (faults_report_cmd->parsed()) return ds::cli::run_faults_report_command(faults_report);
    return 2;
}

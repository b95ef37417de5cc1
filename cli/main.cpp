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
    CLI::App* sample_cmd = kernel_cmd->add_subcommand("sample", "Sample one token per request (input: vocab_size, logits, requests)");
    CLI::App* verify_cmd = kernel_cmd->add_subcommand(
        "verify", "Verify draft chains (input: vocab_size, logits, requests, candidates, optional thresholds and coins)");
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
    for (CLI::App* cmd : {step_sample_cmd, step_verify_cmd}) {
        cmd->add_option("--tp", step.tp, "Tensor-parallel ranks (vocab_size must be a multiple)")->capture_default_str();
        cmd->add_option("--mode", step.mode, "Distributed mode: swap, sharded or gathered")->capture_default_str();
        cmd->add_option("--transport", step.transport, "Transport between ranks: local")->capture_default_str();
        cmd->add_option("--backend", step.backend, "Sampling backend: cpu or cuda")->capture_default_str();
        cmd->add_option("--rank0-policy", step.policy, "always, never or on_mismatch")->capture_default_str();
        cmd->add_option("--threads", step.threads, "CPU worker threads per rank (0 = all cores)")->capture_default_str();
    }

    ds::cli::demo_options demo;
    CLI::App* demo_cmd = app.add_subcommand("demo", "Speculative decoding with synthetic target and draft models through the coordinator and TP rank actors");
    demo_cmd->add_option("--steps", demo.steps, "Verify steps after the first sampled token")->capture_default_str();
    demo_cmd->add_option("--batch", demo.batch, "Requests per step")->capture_default_str();
    demo_cmd->add_option("--vocab", demo.vocab, "Vocabulary size")->capture_default_str();
    demo_cmd->add_option("--draft-tokens", demo.draft_tokens, "Drafts per request per step (N - 1)")->capture_default_str();
    demo_cmd->add_option("--seed", demo.seed, "Seed of the models and the requests")->capture_default_str();
    demo_cmd->add_option("--threads", demo.threads, "CPU worker threads per rank (0 = all cores)")->capture_default_str();
    demo_cmd->add_option("--tp", demo.tp, "Tensor-parallel rank actors")->capture_default_str();
    demo_cmd->add_option("--mode", demo.mode, "Distributed mode: swap, sharded or gathered")->capture_default_str();
    demo_cmd->add_option("--backend", demo.backend, "Sampling backend: cpu or cuda")->capture_default_str();

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
    return 2;
}

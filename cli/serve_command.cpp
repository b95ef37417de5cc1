// `distsample serve`: the scheduler gateway (gateway/server.h) in front of a group of TP rank
// actors in this process, or of rank processes (`distsample rank`) that join it
// (--rank-processes, docs/gateway.md), until SIGINT or SIGTERM.
#include <fmt/format.h>

#include <csignal>
#include <iostream>
#include <memory>

#include <distsample/group.h>

#include "cli/commands.h"
#include "config/config_file.h"
#include "config/gateway_config.h"
#include "config/topology_config.h"
#include "gateway/server.h"
#include "sources/model_factory.h"
#include "transport/tcp_bootstrap.h"

namespace ds::cli {

namespace {

// What the gateway runs with: the group's, the gateway's and the topology's settings, and the
// gateway's own model (null: gateway.model = none).
struct serve_setup {
    group_config config;
    gateway_config gateway;
    topology_config topology;
    std::unique_ptr<logits_source> model;
};

status load_setup(const serve_options& options, serve_setup& out) {
    const group_options& sources = options.group;
    DS_TRY(load_group_config(sources.config_file, sources.overrides, out.config));
    DS_TRY(load_gateway_config(sources.config_file, sources.overrides, out.gateway));
    if (options.rank_processes) {
        DS_TRY(load_topology_config(sources.config_file, sources.overrides, out.topology));
        // Before the model is built: a model the ranks would not use is refused, not trained.
        DS_TRY(check_model_against_ranks(out.gateway, out.topology));
    }
    const gateway_config& g = out.gateway;
    DS_TRY(make_logits_source(g.model, out.config.limits.vocab_size, g.model_seed, g.corpus, out.model));
    // The n-gram model's vocabulary is the corpus's: the group is sized to it.
    if (g.model == "ngram") out.config.limits.vocab_size = out.model->vocab_size();
    DS_TRY(validate_group_config(out.config));
    return validate_gateway_config(out.gateway);
}

// The ranks as rank processes: listens where they join, says where on one line, and waits
// (bounded by --wait-ranks-ms) until every one has joined and the group has formed.
status create_rank_processes(const serve_options& options, const serve_setup& setup, std::unique_ptr<group>& out) {
    const std::string& listen = options.ranks_listen.empty() ? setup.topology.coordinator : options.ranks_listen;
    const char* flag = options.ranks_listen.empty() ? "topology.coordinator =" : "--ranks-listen";
    result<host_port> address = parse_host_port(listen);
    if (!address.is_ok()) return status::invalid(fmt::format("{} {}: {}", flag, listen, address.error().message));
    DS_TRY(group::create_with_rank_processes(setup.config, setup.topology, address->host, address->port, out));
    fmt::print("distsample serve: rank processes join at {}:{}\n", address->host, out->rank_port());
    std::fflush(stdout);
    if (status s = out->wait_for_ranks(std::chrono::milliseconds(options.wait_ranks_ms)); !s.is_ok())
        return {s.code, fmt::format("--wait-ranks-ms {}: {}", options.wait_ranks_ms, s.message)};
    return status::success();
}

// Runs the gateway until SIGINT or SIGTERM.
status serve_until_stopped(const serve_setup& setup, group& ranks) {
    // Block the stop signals before the server's threads start, so only sigwait sees them.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    gateway::server server(setup.gateway, ranks, setup.model.get());
    DS_TRY(server.start());
    // One line a supervisor (or a test) can read the bound ports from.
    const group_config& c = setup.config;
    fmt::print("distsample serve: tcp {}:{} unix '{}' metrics {} | TP={} V={} {} mode, model {}, {}\n",
               setup.gateway.listen_address, server.tcp_port(), setup.gateway.unix_socket, server.metrics_port(),
               c.distribution.tp, c.limits.vocab_size, mode_name(c.distribution.mode), setup.gateway.model,
               ranks.rank_port() == 0 ? "rank threads" : "rank processes");
    std::fflush(stdout);
    int signal = 0;
    sigwait(&stop_signals, &signal);
    server.stop();
    return status::success();
}

int exit_code_after(const status& s) {
    if (s.is_ok()) return 0;
    std::cerr << "error: " << s.message << '\n';
    return s.code == status_code::invalid_argument ? 2 : 1;
}

}  // namespace

int run_serve_command(const serve_options& options) {
    serve_setup setup;
    if (status s = load_setup(options, setup); !s.is_ok()) {
        std::cerr << "error: " << s.message << '\n';
        return 2;
    }
    std::unique_ptr<group> ranks;
    const status created =
        options.rank_processes ? create_rank_processes(options, setup, ranks) : group::create(setup.config, ranks);
    if (!created.is_ok()) return exit_code_after(created);
    return exit_code_after(serve_until_stopped(setup, *ranks));
}

}  // namespace ds::cli

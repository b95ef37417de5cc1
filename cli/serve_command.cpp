// `distsample serve`: the scheduler gateway (gateway/server.h) in front of a group of TP rank
// actors in this process, until SIGINT or SIGTERM.
#include <fmt/format.h>

#include <csignal>
#include <iostream>
#include <memory>

#include <distsample/group.h>

#include "cli/commands.h"
#include "config/config_file.h"
#include "config/gateway_config.h"
#include "gateway/server.h"
#include "sources/model_factory.h"

namespace ds::cli {

int run_serve_command(const group_options& options) {
    group_config config;
    gateway_config gateway;
    std::unique_ptr<logits_source> model;  // fills the logits of steps without a payload (gateway.model), or null
    auto load = [&]() -> status {
        DS_TRY(load_group_config(options.config_file, options.overrides, config));
        DS_TRY(load_gateway_config(options.config_file, options.overrides, gateway));
        DS_TRY(make_logits_source(gateway.model, config.limits.vocab_size, gateway.model_seed, gateway.corpus, model));
        // The n-gram model's vocabulary is the corpus's: the group is sized to it.
        if (gateway.model == "ngram") config.limits.vocab_size = model->vocab_size();
        DS_TRY(validate_group_config(config));
        return validate_gateway_config(gateway);
    };
    if (status s = load(); !s.is_ok()) {
        std::cerr << "error: " << s.message << '\n';
        return 2;
    }
    std::unique_ptr<group> ranks;
    if (status s = group::create(config, ranks); !s.is_ok()) {
        std::cerr << "error: " << s.message << '\n';
        return s.code == status_code::invalid_argument ? 2 : 1;
    }

    // Block the stop signals before the server's threads start, so only sigwait sees them.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    gateway::server server(gateway, *ranks, model.get());
    if (status s = server.start(); !s.is_ok()) {
        std::cerr << "error: " << s.message << '\n';
        return s.code == status_code::invalid_argument ? 2 : 1;
    }
    // One line a supervisor (or a test) can read the bound ports from.
    fmt::print("distsample serve: tcp {}:{} unix '{}' metrics {} | TP={} V={} {} mode, model {}\n",
               gateway.listen_address, server.tcp_port(), gateway.unix_socket, server.metrics_port(),
               config.distribution.tp, config.limits.vocab_size, mode_name(config.distribution.mode), gateway.model);
    std::fflush(stdout);
    int signal = 0;
    sigwait(&stop_signals, &signal);
    server.stop();
    return 0;
}

}  // namespace ds::cli

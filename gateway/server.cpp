#include "gateway/server.h"

#include <fmt/format.h>
#include <boost/asio.hpp>

#include <atomic>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "gateway/admission.h"
#include "gateway/connection.h"
#include "gateway/handlers.h"
#include "gateway/http_endpoint.h"
#include "gateway/job_queue.h"
#include "gateway/listeners.h"
#include "gateway/log.h"

namespace ds::gateway {

namespace {

using tcp = asio::ip::tcp;
using unix_socket = asio::local::stream_protocol;

}  // namespace

struct server::impl {
    gateway_config config;
    group& ranks;
    const logits_source* model;
    gateway_metrics metrics;
    connection_budget budget;
    std::atomic<int32_t> http_sessions_open{0};
    // Stopped (every job run) before the io context goes: their jobs hold connections.
    job_queue dispatcher;
    job_queue completer;
    request_handlers handlers;
    // Connections and HTTP sessions refer to the members above.
    asio::io_context io;
    asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
    tcp::acceptor tcp_acceptor{io};
    unix_socket::acceptor unix_acceptor{io};
    tcp::acceptor http_acceptor{io};
    std::optional<accept_loop<tcp>> tcp_loop;
    std::optional<accept_loop<unix_socket>> unix_loop;
    std::optional<accept_loop<tcp>> http_loop;
    unix_socket_file socket_file;
    std::vector<std::thread> io_threads;
    uint16_t bound_tcp_port = 0;
    uint16_t bound_metrics_port = 0;
    std::mutex stop_mutex;
    bool stopped = false;

    impl(const gateway_config& c, group& g, const logits_source* m)
        : config(c),
          ranks(g),
          model(m),
          metrics(g.config().distribution.tp),
          budget(config),
          handlers(config, g, m, metrics, dispatcher, completer) {}

    connection_services services() { return {io, config, metrics, budget, handlers}; }
    status check_config() const;
    status start_listeners();
    status start();
    void stop();
};

status server::impl::check_config() const {
    DS_TRY(validate_gateway_config(config));
    if (model != nullptr && ranks.ranks_make_logits()) {
        return status::invalid(
            "gateway.model: expected none, the rank processes make their own logits (topology.logits_source)");
    }
    if (model != nullptr && model->vocab_size() != ranks.config().limits.vocab_size) {
        return status::invalid(fmt::format("gateway.model vocabulary = {}: expected the group's vocab_size = {}",
                                           model->vocab_size(), ranks.config().limits.vocab_size));
    }
    return status::success();
}

status server::impl::start_listeners() {
    if (!config.listen_address.empty()) {
        DS_TRY(listen_tcp(tcp_acceptor, config.listen_address, config.port, "gateway.port"));
        bound_tcp_port = tcp_acceptor.local_endpoint().port();
        tcp_loop.emplace(tcp_acceptor, "tcp", [this](tcp::socket s) { start_connection(std::move(s), services()); });
        tcp_loop->start();
    }
    if (!config.unix_socket.empty()) {
        DS_TRY(listen_unix(unix_acceptor, config.unix_socket, socket_file));
        unix_loop.emplace(unix_acceptor, "unix socket",
                          [this](unix_socket::socket s) { start_connection(std::move(s), services()); });
        unix_loop->start();
    }
    if (config.metrics_port >= 0 && !config.listen_address.empty()) {
        DS_TRY(listen_tcp(http_acceptor, config.listen_address, config.metrics_port, "gateway.metrics_port"));
        bound_metrics_port = http_acceptor.local_endpoint().port();
        http_loop.emplace(http_acceptor, "metrics", [this](tcp::socket s) {
            start_http_session(std::move(s), http_services{config, metrics, http_sessions_open, ranks, dispatcher});
        });
        http_loop->start();
    }
    return status::success();
}

status server::impl::start() {
    DS_TRY(check_config());
    DS_TRY(start_listeners());
    for (int32_t i = 0; i < config.io_threads; ++i) io_threads.emplace_back([this] { io.run(); });
    gateway_log().info("serving: tcp {}:{}, unix socket '{}', metrics port {}", config.listen_address, bound_tcp_port,
                       config.unix_socket, bound_metrics_port);
    return status::success();
}

void server::impl::stop() {
    std::lock_guard<std::mutex> lock(stop_mutex);
    if (stopped) return;
    stopped = true;
    // Stop the io threads first, so nothing hands the queues new work; then answer what the
    // queues hold (those replies are dropped with the connections).
    work.reset();
    io.stop();
    for (std::thread& t : io_threads) t.join();
    boost::system::error_code ignored;
    tcp_acceptor.close(ignored);
    unix_acceptor.close(ignored);
    http_acceptor.close(ignored);
    dispatcher.stop();
    completer.stop();
    remove_socket_file(socket_file);
}

server::server(const gateway_config& config, group& ranks, const logits_source* model)
    : impl_(std::make_unique<impl>(config, ranks, model)) {}
server::~server() { stop(); }
status server::start() { return impl_->start(); }
void server::stop() { impl_->stop(); }
uint16_t server::tcp_port() const { return impl_->bound_tcp_port; }
uint16_t server::metrics_port() const { return impl_->bound_metrics_port; }
const gateway_metrics& server::metrics() const { return impl_->metrics; }

}  // namespace ds::gateway

#include "gateway/server.h"

#include <fmt/format.h>
#include <boost/asio.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <mutex>
#include <thread>
#include <vector>

#include "gateway/connection.h"
#include "gateway/handlers.h"
#include "gateway/http_endpoint.h"
#include "gateway/job_queue.h"
#include "gateway/log.h"

namespace ds::gateway {

namespace {

using tcp = asio::ip::tcp;
using unix_socket = asio::local::stream_protocol;

status listen_tcp(tcp::acceptor& acceptor, const std::string& listen_address, int32_t port, const char* key) {
    boost::system::error_code ec;
    const asio::ip::address address =
        asio::ip::make_address(listen_address == "localhost" ? "127.0.0.1" : listen_address, ec);
    if (ec)
        return status::invalid(
            fmt::format("gateway.listen_address = '{}': expected an IP address ({})", listen_address, ec.message()));
    const tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
        return {status_code::internal,
                fmt::format("cannot listen on {}:{} ({} = {}): {}", listen_address, port, key, port, ec.message())};
    return status::success();
}

status listen_unix(unix_socket::acceptor& acceptor, const std::string& path) {
    // A socket file left by an earlier run is replaced; any other file is an error.
    struct stat existing {};
    if (::stat(path.c_str(), &existing) == 0 && S_ISSOCK(existing.st_mode)) ::unlink(path.c_str());
    boost::system::error_code ec;
    const unix_socket::endpoint endpoint(path);
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
        return {status_code::internal,
                fmt::format("cannot listen on gateway.unix_socket = '{}': {}", path, ec.message())};
    return status::success();
}

// Accepts connections until the acceptor closes; `serve` takes each socket.
template <class Acceptor, class Serve>
void accept_loop(Acceptor& acceptor, Serve serve) {
    using socket_type = typename Acceptor::protocol_type::socket;
    acceptor.async_accept([&acceptor, serve](boost::system::error_code ec, socket_type socket) {
        if (ec == asio::error::operation_aborted) return;
        if (!ec) serve(std::move(socket));
        accept_loop(acceptor, serve);
    });
}

}  // namespace

struct server::impl {
    gateway_config config;
    group& ranks;
    const logits_source* model;
    gateway_metrics metrics;
    // Stopped (every job run) before the io context goes: their jobs hold connections.
    job_queue dispatcher;
    job_queue completer;
    request_handlers handlers;
    // Connections refer to the members above.
    asio::io_context io;
    asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
    tcp::acceptor tcp_acceptor{io};
    unix_socket::acceptor unix_acceptor{io};
    tcp::acceptor http_acceptor{io};
    std::vector<std::thread> io_threads;
    uint16_t bound_tcp_port = 0;
    uint16_t bound_metrics_port = 0;
    std::mutex stop_mutex;
    bool stopped = false;

    impl(const gateway_config& c, group& g, const logits_source* m)
        : config(c),
          ranks(g),
          model(m),
          metrics(g.config().tp),
          handlers(config, g, m, metrics, dispatcher, completer) {}

    connection_services services() { return {io, config, metrics, handlers}; }
    status check_config() const;
    status start_listeners();
    status start();
    void stop();
};

status server::impl::check_config() const {
    if (std::string e = validate_gateway_config(config); !e.empty()) return status::invalid(e);
    if (model != nullptr && model->vocab_size() != ranks.config().vocab_size) {
        return status::invalid(fmt::format("gateway.model vocabulary = {}: expected the group's vocab_size = {}",
                                           model->vocab_size(), ranks.config().vocab_size));
    }
    return status::success();
}

status server::impl::start_listeners() {
    if (!config.listen_address.empty()) {
        DS_TRY(listen_tcp(tcp_acceptor, config.listen_address, config.port, "gateway.port"));
        bound_tcp_port = tcp_acceptor.local_endpoint().port();
        accept_loop(tcp_acceptor, [this](tcp::socket s) { start_connection(std::move(s), services()); });
    }
    if (!config.unix_socket.empty()) {
        DS_TRY(listen_unix(unix_acceptor, config.unix_socket));
        accept_loop(unix_acceptor, [this](unix_socket::socket s) { start_connection(std::move(s), services()); });
    }
    if (config.metrics_port >= 0 && !config.listen_address.empty()) {
        DS_TRY(listen_tcp(http_acceptor, config.listen_address, config.metrics_port, "gateway.metrics_port"));
        bound_metrics_port = http_acceptor.local_endpoint().port();
        accept_loop(http_acceptor, [this](tcp::socket s) {
            start_http_session(std::move(s), http_services{metrics, ranks, dispatcher});
        });
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
    if (!config.unix_socket.empty()) ::unlink(config.unix_socket.c_str());
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

#include "gateway/http_endpoint.h"

#include <fmt/format.h>

#include <chrono>
#include <istream>
#include <memory>
#include <string>

#include "gateway/log.h"

namespace ds::gateway {

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

std::string http_response(int code, const std::string& body) {
    const char* reason = code == 200   ? "OK"
                         : code == 404 ? "Not Found"
                         : code == 405 ? "Method Not Allowed"
                                       : "Service Unavailable";
    return fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: "
        "close\r\n\r\n{}",
        code, reason, body.size(), body);
}

class http_session : public std::enable_shared_from_this<http_session> {
   public:
    http_session(tcp::socket socket, const http_services& services)
        : socket_(std::move(socket)),
          strand_(asio::make_strand(socket_.get_executor())),
          deadline_(strand_),
          services_(services),
          request_(8192) {}

    ~http_session() { --services_.sessions_open; }

    void start() {
        expire_after(services_.config.read_timeout_ms, "gateway.read_timeout_ms");
        asio::async_read_until(
            socket_, request_, "\r\n\r\n",
            asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code ec, size_t) {
                if (!ec) self->route();
            }));
    }

   private:
    // Closes the socket (ending whatever waits on it) unless the session moves on first.
    void expire_after(int32_t ms, const char* key) {
        deadline_.expires_after(std::chrono::milliseconds(ms));
        deadline_.async_wait(
            asio::bind_executor(strand_, [self = shared_from_this(), key](boost::system::error_code ec) {
                if (ec) return;  // cancelled: the session moved on
                ++self->services_.metrics.limits_hit;
                gateway_log().warn("closed an HTTP connection on the metrics port: {} passed", key);
                boost::system::error_code ignored;
                self->socket_.close(ignored);
            }));
    }

    void route() {
        deadline_.cancel();
        std::istream in(&request_);
        std::string method;
        std::string target;
        in >> method >> target;
        if (method != "GET") return respond(405, "method not allowed\n");
        if (target == "/metrics") return respond(200, services_.metrics.render());
        if (target == "/healthz") return check_health();
        respond(404, "not found: try /metrics or /healthz\n");
    }

    void check_health() {
        services_.dispatcher.push([self = shared_from_this()] {
            const status s = self->services_.ranks.health();
            asio::post(self->strand_,
                       [self, s] { self->respond(s.is_ok() ? 200 : 503, s.is_ok() ? "ok\n" : s.message + "\n"); });
        });
    }

    void respond(int code, const std::string& body) {
        response_ = http_response(code, body);
        expire_after(services_.config.write_timeout_ms, "gateway.write_timeout_ms");
        asio::async_write(socket_, asio::buffer(response_),
                          asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code, size_t) {
                              self->deadline_.cancel();
                              boost::system::error_code ignored;
                              self->socket_.shutdown(tcp::socket::shutdown_both, ignored);
                          }));
    }

    tcp::socket socket_;
    asio::strand<tcp::socket::executor_type> strand_;
    asio::steady_timer deadline_;
    http_services services_;
    asio::streambuf request_;
    std::string response_;
};

// A connection over gateway.max_http_connections gets 503 at once, without its request read.
void refuse(tcp::socket& socket, const http_services& services) {
    ++services.metrics.connections_refused;
    const std::string response =
        http_response(503, fmt::format("gateway.max_http_connections = {} are open: try again later\n",
                                       services.config.max_http_connections));
    boost::system::error_code ignored;
    socket.non_blocking(true, ignored);
    socket.write_some(asio::buffer(response), ignored);
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
}

}  // namespace

void start_http_session(tcp::socket socket, const http_services& services) {
    if (services.sessions_open.fetch_add(1) >= services.config.max_http_connections) {
        --services.sessions_open;
        return refuse(socket, services);
    }
    std::make_shared<http_session>(std::move(socket), services)->start();
}

}  // namespace ds::gateway

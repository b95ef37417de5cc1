#include "gateway/http_endpoint.h"

#include <fmt/format.h>

#include <istream>
#include <memory>
#include <string>

namespace ds::gateway {

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class http_session : public std::enable_shared_from_this<http_session> {
   public:
    http_session(tcp::socket socket, const http_services& services)
        : socket_(std::move(socket)), services_(services), request_(8192) {}

    void start() {
        asio::async_read_until(socket_, request_, "\r\n\r\n",
                               [self = shared_from_this()](boost::system::error_code ec, size_t) {
                                   if (!ec) self->route();
                               });
    }

   private:
    void route() {
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
            asio::post(self->socket_.get_executor(),
                       [self, s] { self->respond(s.is_ok() ? 200 : 503, s.is_ok() ? "ok\n" : s.message + "\n"); });
        });
    }

    void respond(int code, const std::string& body) {
        const char* reason = code == 200   ? "OK"
                             : code == 404 ? "Not Found"
                             : code == 405 ? "Method Not Allowed"
                                           : "Service Unavailable";
        response_ = fmt::format(
            "HTTP/1.1 {} {}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: "
            "close\r\n\r\n{}",
            code, reason, body.size(), body);
        asio::async_write(socket_, asio::buffer(response_),
                          [self = shared_from_this()](boost::system::error_code, size_t) {
                              boost::system::error_code ignored;
                              self->socket_.shutdown(tcp::socket::shutdown_both, ignored);
                          });
    }

    tcp::socket socket_;
    http_services services_;
    asio::streambuf request_;
    std::string response_;
};

}  // namespace

void start_http_session(tcp::socket socket, const http_services& services) {
    std::make_shared<http_session>(std::move(socket), services)->start();
}

}  // namespace ds::gateway

// The gateway's listening sockets: binding them (a TCP port; a Unix socket path, replacing only a
// stale socket file), and accepting on them without spinning when accepting fails.
#pragma once

#include <sys/types.h>
#include <boost/asio.hpp>

#include <chrono>
#include <functional>
#include <string>

#include "core/status.h"
#include "gateway/log.h"

namespace ds::gateway {

namespace asio = boost::asio;

// Binds and listens; an error names the listen address, the port and its config key.
status listen_tcp(asio::ip::tcp::acceptor& acceptor, const std::string& listen_address, int32_t port, const char* key);

// The socket file a Unix listener created: removed at stop only while it is still that file.
struct unix_socket_file {
    std::string path;
    dev_t device = 0;
    ino_t inode = 0;
};

// Binds and listens at `path`. A socket file there that refuses connections (left by a process
// that is gone) is replaced; a live one (another server) or any other file is an error.
status listen_unix(asio::local::stream_protocol::acceptor& acceptor, const std::string& path,
                   unix_socket_file& created);
void remove_socket_file(const unix_socket_file& created);

// Accepts on an acceptor until it closes, handing each socket to `serve`. When accepting fails
// (out of file descriptors: EMFILE, ENFILE) it logs and pauses before the next try, the pause
// doubling up to a second, instead of spinning.
template <class Protocol>
class accept_loop {
   public:
    using socket_type = typename Protocol::socket;

    accept_loop(typename Protocol::acceptor& acceptor, const char* name, std::function<void(socket_type)> serve)
        : acceptor_(acceptor), retry_(acceptor.get_executor()), name_(name), serve_(std::move(serve)) {}

    void start() {
        acceptor_.async_accept([this](boost::system::error_code ec, socket_type socket) {
            if (ec == asio::error::operation_aborted) return;
            if (ec) return back_off(ec);
            pause_ = std::chrono::milliseconds{0};
            serve_(std::move(socket));
            start();
        });
    }

   private:
    void back_off(const boost::system::error_code& ec) {
        pause_ = std::min(std::max(2 * pause_, std::chrono::milliseconds{50}), std::chrono::milliseconds{1000});
        gateway_log().warn("accepting on the {} listener failed: {}; trying again in {} ms", name_, ec.message(),
                           pause_.count());
        retry_.expires_after(pause_);
        retry_.async_wait([this](boost::system::error_code wait_ec) {
            if (!wait_ec && acceptor_.is_open()) start();
        });
    }

    typename Protocol::acceptor& acceptor_;
    asio::steady_timer retry_;
    const char* name_;
    std::function<void(socket_type)> serve_;
    std::chrono::milliseconds pause_{0};
};

}  // namespace ds::gateway

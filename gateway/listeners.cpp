#include "gateway/listeners.h"

#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>

namespace ds::gateway {

namespace {

using tcp = asio::ip::tcp;
using unix_socket = asio::local::stream_protocol;

// Makes `path` free for a new socket: nothing there, or a stale socket file removed.
status free_socket_path(const std::string& path) {
    struct stat existing {};
    if (::lstat(path.c_str(), &existing) != 0) return status::success();
    if (!S_ISSOCK(existing.st_mode)) {
        return status::invalid(
            fmt::format("gateway.unix_socket = '{}': the path exists and is not a socket: expected a free path", path));
    }
    asio::io_context io;
    unix_socket::socket probe(io);
    boost::system::error_code ec;
    probe.connect(unix_socket::endpoint(path), ec);
    if (!ec) {
        return status::invalid(fmt::format(
            "gateway.unix_socket = '{}': another server is listening there: stop it or choose another path", path));
    }
    if (ec != asio::error::connection_refused) {
        return {status_code::internal,
                fmt::format("gateway.unix_socket = '{}': cannot tell whether the socket there is in use: {}", path,
                            ec.message())};
    }
    ::unlink(path.c_str());  // nobody listens: a file left by a server that is gone
    return status::success();
}

}  // namespace

status listen_tcp(tcp::acceptor& acceptor, const std::string& listen_address, int32_t port, const char* key) {
    boost::system::error_code ec;
    const asio::ip::address address =
        asio::ip::make_address(listen_address == "localhost" ? "127.0.0.1" : listen_address, ec);
    if (ec) {
        return status::invalid(
            fmt::format("gateway.listen_address = '{}': expected an IP address ({})", listen_address, ec.message()));
    }
    const tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
        return {status_code::internal,
                fmt::format("cannot listen on {}:{} ({} = {}): {}", listen_address, port, key, port, ec.message())};
    }
    return status::success();
}

status listen_unix(unix_socket::acceptor& acceptor, const std::string& path, unix_socket_file& created) {
    DS_TRY(free_socket_path(path));
    boost::system::error_code ec;
    const unix_socket::endpoint endpoint(path);
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    struct stat bound {};
    if (!ec && ::lstat(path.c_str(), &bound) != 0) ec.assign(errno, boost::system::system_category());
    if (ec) {
        return {status_code::internal,
                fmt::format("cannot listen on gateway.unix_socket = '{}': {}", path, ec.message())};
    }
    created = unix_socket_file{path, bound.st_dev, bound.st_ino};
    return status::success();
}

void remove_socket_file(const unix_socket_file& created) {
    struct stat now {};
    if (created.path.empty() || ::lstat(created.path.c_str(), &now) != 0) return;
    // Ours may have been removed and the path reused by another server: that socket is not ours.
    if (now.st_dev == created.device && now.st_ino == created.inode) ::unlink(created.path.c_str());
}

}  // namespace ds::gateway

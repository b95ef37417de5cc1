#include "transport/socket_io.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace ds::net {

namespace {

constexpr std::chrono::milliseconds kConnectRetry{20};

int remaining_ms(clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    return left > 0 ? static_cast<int>(left) : 0;
}

}  // namespace

unique_fd::~unique_fd() {
    if (fd_ >= 0) ::close(fd_);
}

status io_error(const std::string& what) {
    return {status_code::internal, fmt::format("{}: {}", what, std::strerror(errno))};
}

status wait_ready(int fd, short events, clock::time_point deadline, const char* what) {
    pollfd p{fd, events, 0};
    for (;;) {
        const int n = ::poll(&p, 1, remaining_ms(deadline));
        if (n > 0) return status::success();
        if (n == 0) return {status_code::timeout, fmt::format("timed out while {}", what)};
        if (errno != EINTR) return io_error(fmt::format("poll while {}", what));
    }
}

// Both try the socket first and wait only when it has no room or no data: a frame whose bytes are
// there costs one system call, not a poll and a call (a hop of the answer lane reads several).
status write_all(int fd, const void* data, size_t bytes, clock::time_point deadline) {
    const auto* p = static_cast<const char*>(data);
    while (bytes > 0) {
        const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (status s = wait_ready(fd, POLLOUT, deadline, "sending"); !s.is_ok()) return s;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return io_error("send");
        p += n;
        bytes -= static_cast<size_t>(n);
    }
    return status::success();
}

status read_all(int fd, void* data, size_t bytes, clock::time_point deadline) {
    auto* p = static_cast<char*>(data);
    while (bytes > 0) {
        const ssize_t n = ::recv(fd, p, bytes, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (status s = wait_ready(fd, POLLIN, deadline, "receiving"); !s.is_ok()) return s;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) return {status_code::aborted, "the peer closed the connection"};
        if (n < 0) return io_error("recv");
        p += n;
        bytes -= static_cast<size_t>(n);
    }
    return status::success();
}

status resolve(const std::string& host, uint16_t port, sockaddr_in& address) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0) {
        return status::invalid(fmt::format("host '{}': {}", host, ::gai_strerror(rc)));
    }
    std::memcpy(&address, found->ai_addr, sizeof address);
    ::freeaddrinfo(found);
    address.sin_port = htons(port);
    return status::success();
}

status listen_tcp(const std::string& host, uint16_t port, unique_fd& out, uint16_t& bound_port) {
    sockaddr_in address{};
    DS_TRY(resolve(host, port, address));
    unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) return io_error("socket");
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
        return io_error(fmt::format("bind {}:{}", host, port));
    }
    if (::listen(fd.get(), SOMAXCONN) != 0) return io_error("listen");
    socklen_t length = sizeof address;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length);
    bound_port = ntohs(address.sin_port);
    out = std::move(fd);
    return status::success();
}

status connect_tcp(const std::string& host, uint16_t port, clock::time_point deadline, unique_fd& out) {
    sockaddr_in address{};
    DS_TRY(resolve(host, port, address));
    for (;;) {
        unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (fd.get() < 0) return io_error("socket");
        if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
            const int one = 1;
            ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            out = std::move(fd);
            return status::success();
        }
        if (errno != ECONNREFUSED && errno != EINTR) return io_error(fmt::format("connect {}:{}", host, port));
        if (clock::now() + kConnectRetry > deadline) {
            return {status_code::timeout, fmt::format("nothing listens at {}:{}", host, port)};
        }
        std::this_thread::sleep_for(kConnectRetry);
    }
}

}  // namespace ds::net

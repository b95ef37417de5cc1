// Blocking TCP helpers with deadlines, shared by the bootstrap rendezvous (tcp_bootstrap.h) and
// the answer lane (actors/answer_lane.h). Every wait is bounded by the caller's deadline.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "core/status.h"

namespace ds::net {

using clock = std::chrono::steady_clock;

// Owns a file descriptor; move-only.
class unique_fd {
   public:
    unique_fd() = default;
    explicit unique_fd(int fd) : fd_(fd) {}
    unique_fd(unique_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    unique_fd& operator=(unique_fd&& other) noexcept {
        std::swap(fd_, other.fd_);
        return *this;
    }
    unique_fd(const unique_fd&) = delete;
    unique_fd& operator=(const unique_fd&) = delete;
    ~unique_fd();
    int get() const { return fd_; }
    int release() { return std::exchange(fd_, -1); }

   private:
    int fd_ = -1;
};

// `what` and errno's words, as an internal status.
status io_error(const std::string& what);

// Waits until fd is ready for `events` (poll's) or the deadline passes (timeout naming `what`).
status wait_ready(int fd, short events, clock::time_point deadline, const char* what);
status write_all(int fd, const void* data, size_t bytes, clock::time_point deadline);
// Aborted when the peer closes the connection first.
status read_all(int fd, void* data, size_t bytes, clock::time_point deadline);

template <class T>
status write_value(int fd, T value, clock::time_point deadline) {
    return write_all(fd, &value, sizeof value, deadline);
}

template <class T>
status read_value(int fd, T& value, clock::time_point deadline) {
    return read_all(fd, &value, sizeof value, deadline);
}

// host (a name or an IPv4 address) and port as an IPv4 address.
status resolve(const std::string& host, uint16_t port, sockaddr_in& address);
// A listening socket on host:port (port 0: an ephemeral one); `bound_port` is the port it got.
status listen_tcp(const std::string& host, uint16_t port, unique_fd& out, uint16_t& bound_port);
// A connection to host:port with TCP_NODELAY, retried on refusal until `deadline` (the listener may
// not be up yet).
status connect_tcp(const std::string& host, uint16_t port, clock::time_point deadline, unique_fd& out);

}  // namespace ds::net

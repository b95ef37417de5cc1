#include "transport/tcp_bootstrap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

namespace ds {

namespace {

using clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x64737462;  // "dstb"
constexpr uint64_t kMaxBlobBytes = 1 << 20;
constexpr std::chrono::milliseconds kConnectRetry{20};

class unique_fd {
   public:
    unique_fd() = default;
    explicit unique_fd(int fd) : fd_(fd) {}
    unique_fd(unique_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    unique_fd& operator=(unique_fd&& other) noexcept {
        std::swap(fd_, other.fd_);
        return *this;
    }
    ~unique_fd() {
        if (fd_ >= 0) ::close(fd_);
    }
    int get() const { return fd_; }
    int release() { return std::exchange(fd_, -1); }

   private:
    int fd_ = -1;
};

status io_error(const std::string& what) {
    return {status_code::internal, fmt::format("{}: {}", what, std::strerror(errno))};
}

int remaining_ms(clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    return left > 0 ? static_cast<int>(left) : 0;
}

// Waits until fd is ready for `events` or the deadline passes.
status wait_ready(int fd, short events, clock::time_point deadline, const char* what) {
    pollfd p{fd, events, 0};
    for (;;) {
        const int n = ::poll(&p, 1, remaining_ms(deadline));
        if (n > 0) return status::success();
        if (n == 0) return {status_code::timeout, fmt::format("bootstrap: timed out while {}", what)};
        if (errno != EINTR) return io_error(fmt::format("bootstrap: poll while {}", what));
    }
}

status write_all(int fd, const void* data, size_t bytes, clock::time_point deadline) {
    const auto* p = static_cast<const char*>(data);
    while (bytes > 0) {
        if (status s = wait_ready(fd, POLLOUT, deadline, "sending"); !s.is_ok()) return s;
        const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return io_error("bootstrap: send");
        p += n;
        bytes -= static_cast<size_t>(n);
    }
    return status::success();
}

status read_all(int fd, void* data, size_t bytes, clock::time_point deadline) {
    auto* p = static_cast<char*>(data);
    while (bytes > 0) {
        if (status s = wait_ready(fd, POLLIN, deadline, "receiving"); !s.is_ok()) return s;
        const ssize_t n = ::recv(fd, p, bytes, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) return {status_code::aborted, "bootstrap: the peer closed the connection"};
        if (n < 0) return io_error("bootstrap: recv");
        p += n;
        bytes -= static_cast<size_t>(n);
    }
    return status::success();
}

template <class T>
status write_value(int fd, T value, clock::time_point deadline) {
    return write_all(fd, &value, sizeof value, deadline);
}

template <class T>
status read_value(int fd, T& value, clock::time_point deadline) {
    return read_all(fd, &value, sizeof value, deadline);
}

status write_blob(int fd, const std::string& blob, clock::time_point deadline) {
    if (status s = write_value<uint64_t>(fd, blob.size(), deadline); !s.is_ok()) return s;
    return write_all(fd, blob.data(), blob.size(), deadline);
}

status read_blob(int fd, std::string& blob, clock::time_point deadline) {
    uint64_t length = 0;
    if (status s = read_value(fd, length, deadline); !s.is_ok()) return s;
    if (length > kMaxBlobBytes)
        return {status_code::internal, fmt::format("bootstrap: blob of {} bytes exceeds {}", length, kMaxBlobBytes)};
    blob.resize(length);
    return read_all(fd, blob.data(), length, deadline);
}

status resolve(const std::string& host, uint16_t port, sockaddr_in& address) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0) {
        return status::invalid(fmt::format("bootstrap host '{}': {}", host, ::gai_strerror(rc)));
    }
    std::memcpy(&address, found->ai_addr, sizeof address);
    ::freeaddrinfo(found);
    address.sin_port = htons(port);
    return status::success();
}

}  // namespace

result<host_port> parse_host_port(const std::string& text) {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) return status::invalid(fmt::format("'{}': expected HOST:PORT", text));
    const std::string digits = text.substr(colon + 1);
    // strtoul alone would take " 80", "+80" and "-0".
    const bool decimal =
        !digits.empty() && digits.size() <= 5 && digits.find_first_not_of("0123456789") == std::string::npos;
    const unsigned long value = decimal ? std::strtoul(digits.c_str(), nullptr, 10) : 0;
    if (!decimal || value > 65535)
        return status::invalid(fmt::format("'{}': expected a port in [0, 65535] after the colon", text));
    return host_port{text.substr(0, colon), static_cast<uint16_t>(value)};
}

tcp_rendezvous::~tcp_rendezvous() {
    if (listen_fd_ >= 0) ::close(listen_fd_);
}

status tcp_rendezvous::listen(const std::string& host, uint16_t port) {
    sockaddr_in address{};
    if (status s = resolve(host, port, address); !s.is_ok()) return s;
    unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) return io_error("bootstrap: socket");
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
        return io_error(fmt::format("bootstrap: bind {}:{}", host, port));
    }
    if (::listen(fd.get(), SOMAXCONN) != 0) return io_error("bootstrap: listen");
    socklen_t length = sizeof address;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    listen_fd_ = fd.release();
    return status::success();
}

status tcp_rendezvous::serve(int32_t world_size, std::chrono::milliseconds timeout) {
    if (listen_fd_ < 0) return status::invalid("bootstrap: serve() before listen()");
    const auto deadline = clock::now() + timeout;
    std::vector<unique_fd> ranks(static_cast<size_t>(world_size));
    std::vector<std::string> blobs(static_cast<size_t>(world_size));
    for (int32_t arrived = 0; arrived < world_size;) {
        if (status s = wait_ready(listen_fd_, POLLIN, deadline, "waiting for ranks"); !s.is_ok()) {
            std::string missing;
            for (int32_t r = 0; r < world_size; ++r) {
                if (ranks[static_cast<size_t>(r)].get() < 0)
                    missing += fmt::format("{}rank {}", missing.empty() ? "" : ", ", r);
            }
            return {status_code::timeout, fmt::format("bootstrap: {} of {} ranks arrived within {} ms; missing {}",
                                                      arrived, world_size, timeout.count(), missing)};
        }
        unique_fd fd(::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC));
        if (fd.get() < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return io_error("bootstrap: accept");
        }
        uint32_t magic = 0;
        int32_t rank = -1, world = 0;
        std::string blob;
        status s = read_value(fd.get(), magic, deadline);
        if (s.is_ok()) s = read_value(fd.get(), rank, deadline);
        if (s.is_ok()) s = read_value(fd.get(), world, deadline);
        if (s.is_ok() && magic != kMagic) continue;  // not one of ours: drop the connection
        if (s.is_ok()) s = read_blob(fd.get(), blob, deadline);
        if (!s.is_ok()) return s;
        if (world != world_size)
            return status::invalid(
                fmt::format("bootstrap: rank {} says world_size = {}, expected {}", rank, world, world_size));
        if (rank < 0 || rank >= world_size)
            return status::invalid(fmt::format("bootstrap: rank {} outside [0, {})", rank, world_size));
        if (ranks[static_cast<size_t>(rank)].get() >= 0)
            return status::invalid(fmt::format("bootstrap: rank {} arrived twice", rank));
        ranks[static_cast<size_t>(rank)] = std::move(fd);
        blobs[static_cast<size_t>(rank)] = std::move(blob);
        ++arrived;
    }
    for (const unique_fd& fd : ranks) {
        for (const std::string& blob : blobs) {
            if (status s = write_blob(fd.get(), blob, deadline); !s.is_ok()) return s;
        }
    }
    return status::success();
}

tcp_bootstrap::tcp_bootstrap(std::string host, uint16_t port, int32_t rank, int32_t world_size,
                             std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port), rank_(rank), world_size_(world_size), timeout_(timeout) {}

status tcp_bootstrap::exchange(const std::string& mine, std::vector<std::string>& all) {
    const auto deadline = clock::now() + timeout_;
    sockaddr_in address{};
    if (status s = resolve(host_, port_, address); !s.is_ok()) return s;
    unique_fd fd;
    for (;;) {  // the rendezvous may not listen yet
        fd = unique_fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (fd.get() < 0) return io_error("bootstrap: socket");
        if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) break;
        if (errno != ECONNREFUSED && errno != EINTR)
            return io_error(fmt::format("bootstrap: connect {}:{}", host_, port_));
        if (clock::now() + kConnectRetry > deadline) {
            return {status_code::timeout,
                    fmt::format("bootstrap: no rendezvous at {}:{} within {} ms", host_, port_, timeout_.count())};
        }
        std::this_thread::sleep_for(kConnectRetry);
    }
    const int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    status s = write_value(fd.get(), kMagic, deadline);
    if (s.is_ok()) s = write_value(fd.get(), rank_, deadline);
    if (s.is_ok()) s = write_value(fd.get(), world_size_, deadline);
    if (s.is_ok()) s = write_blob(fd.get(), mine, deadline);
    all.assign(static_cast<size_t>(world_size_), std::string());
    for (size_t r = 0; s.is_ok() && r < all.size(); ++r) s = read_blob(fd.get(), all[r], deadline);
    if (!s.is_ok()) return {s.code, fmt::format("rank {}: {}", rank_, s.message)};
    return s;
}

}  // namespace ds

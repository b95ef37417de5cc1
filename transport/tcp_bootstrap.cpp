#include "transport/tcp_bootstrap.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <utility>

#include "transport/socket_io.h"

namespace ds {

namespace {

using net::clock;

constexpr uint32_t kMagic = 0x64737462;  // "dstb"
constexpr uint64_t kMaxBlobBytes = 1 << 20;

// The socket helpers' failure, said as the bootstrap's.
status named(status s) {
    if (s.is_ok()) return s;
    return {s.code, fmt::format("bootstrap: {}", s.message)};
}

status write_blob(int fd, const std::string& blob, clock::time_point deadline) {
    DS_TRY(net::write_value<uint64_t>(fd, blob.size(), deadline));
    return net::write_all(fd, blob.data(), blob.size(), deadline);
}

status read_blob(int fd, std::string& blob, clock::time_point deadline) {
    uint64_t length = 0;
    DS_TRY(net::read_value(fd, length, deadline));
    if (length > kMaxBlobBytes)
        return {status_code::internal, fmt::format("blob of {} bytes exceeds {}", length, kMaxBlobBytes)};
    blob.resize(length);
    return net::read_all(fd, blob.data(), length, deadline);
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
    net::unique_fd fd;
    DS_TRY(named(net::listen_tcp(host, port, fd, port_)));
    listen_fd_ = fd.release();
    return status::success();
}

status tcp_rendezvous::serve(int32_t world_size, std::chrono::milliseconds timeout) {
    if (listen_fd_ < 0) return status::invalid("bootstrap: serve() before listen()");
    const auto deadline = clock::now() + timeout;
    std::vector<net::unique_fd> ranks(static_cast<size_t>(world_size));
    std::vector<std::string> blobs(static_cast<size_t>(world_size));
    for (int32_t arrived = 0; arrived < world_size;) {
        if (status s = net::wait_ready(listen_fd_, POLLIN, deadline, "waiting for ranks"); !s.is_ok()) {
            std::string missing;
            for (int32_t r = 0; r < world_size; ++r) {
                if (ranks[static_cast<size_t>(r)].get() < 0)
                    missing += fmt::format("{}rank {}", missing.empty() ? "" : ", ", r);
            }
            return {status_code::timeout, fmt::format("bootstrap: {} of {} ranks arrived within {} ms; missing {}",
                                                      arrived, world_size, timeout.count(), missing)};
        }
        net::unique_fd fd(::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC));
        if (fd.get() < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return net::io_error("bootstrap: accept");
        }
        uint32_t magic = 0;
        int32_t rank = -1, world = 0;
        std::string blob;
        status s = net::read_value(fd.get(), magic, deadline);
        if (s.is_ok()) s = net::read_value(fd.get(), rank, deadline);
        if (s.is_ok()) s = net::read_value(fd.get(), world, deadline);
        if (s.is_ok() && magic != kMagic) continue;  // not one of ours: drop the connection
        if (s.is_ok()) s = read_blob(fd.get(), blob, deadline);
        if (!s.is_ok()) return named(s);
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
    for (const net::unique_fd& fd : ranks) {
        for (const std::string& blob : blobs) {
            if (status s = write_blob(fd.get(), blob, deadline); !s.is_ok()) return named(s);
        }
    }
    return status::success();
}

tcp_bootstrap::tcp_bootstrap(std::string host, uint16_t port, int32_t rank, int32_t world_size,
                             std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port), rank_(rank), world_size_(world_size), timeout_(timeout) {}

status tcp_bootstrap::exchange(const std::string& mine, std::vector<std::string>& all) {
    const auto deadline = clock::now() + timeout_;
    net::unique_fd fd;
    if (status s = net::connect_tcp(host_, port_, deadline, fd); !s.is_ok()) {
        if (s.code != status_code::timeout) return named(s);
        return {status_code::timeout,
                fmt::format("bootstrap: no rendezvous at {}:{} within {} ms", host_, port_, timeout_.count())};
    }
    status s = net::write_value(fd.get(), kMagic, deadline);
    if (s.is_ok()) s = net::write_value(fd.get(), rank_, deadline);
    if (s.is_ok()) s = net::write_value(fd.get(), world_size_, deadline);
    if (s.is_ok()) s = write_blob(fd.get(), mine, deadline);
    all.assign(static_cast<size_t>(world_size_), std::string());
    for (size_t r = 0; s.is_ok() && r < all.size(); ++r) s = read_blob(fd.get(), all[r], deadline);
    if (!s.is_ok()) return {s.code, fmt::format("rank {}: bootstrap: {}", rank_, s.message)};
    return s;
}

}  // namespace ds

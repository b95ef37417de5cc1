#include "transport/local_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <vector>

namespace ds::net {

namespace {

constexpr size_t kMaxNameBytes = 100;

status local_address(const std::string& name, sockaddr_un& address, socklen_t& length) {
    if (name.empty() || name.size() > kMaxNameBytes || name.find('\0') != std::string::npos)
        return status::invalid(
            fmt::format("local socket name of {} bytes: expected 1 to {}, no NUL", name.size(), kMaxNameBytes));
    address = sockaddr_un{};
    address.sun_family = AF_UNIX;
    // sun_path[0] stays NUL: the abstract namespace.
    std::memcpy(address.sun_path + 1, name.data(), name.size());
    length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    return status::success();
}

// The descriptors a received message carried, owned; false when its control data was cut short.
bool take_descriptors(msghdr& message, std::vector<unique_fd>& out) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; ++i) {
            int fd = -1;
            std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            out.emplace_back(fd);
        }
    }
    return (message.msg_flags & MSG_CTRUNC) == 0;
}

}  // namespace

status listen_local(const std::string& name, unique_fd& out) {
    sockaddr_un address{};
    socklen_t length = 0;
    DS_TRY(local_address(name, address, length));
    unique_fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) return io_error("socket");
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0)
        return io_error(fmt::format("bind local socket '{}'", name));
    if (::listen(fd.get(), SOMAXCONN) != 0) return io_error("listen");
    out = std::move(fd);
    return status::success();
}

status connect_local(const std::string& name, unique_fd& out) {
    sockaddr_un address{};
    socklen_t length = 0;
    DS_TRY(local_address(name, address, length));
    // Non-blocking: a full backlog fails at once instead of waiting without a deadline.
    unique_fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (fd.get() < 0) return io_error("socket");
    for (;;) {
        if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), length) == 0) break;
        if (errno == EINTR) continue;
        if (errno == ECONNREFUSED || errno == ENOENT)
            return {status_code::aborted, fmt::format("nothing listens at local socket '{}'", name)};
        if (errno == EAGAIN) return {status_code::aborted, fmt::format("local socket '{}' is not accepting", name)};
        return io_error(fmt::format("connect local socket '{}'", name));
    }
    out = std::move(fd);
    return status::success();
}

status send_with_descriptors(int fd, const void* data, size_t bytes, const int* descriptors, int count,
                             clock::time_point deadline) {
    if (bytes == 0 || count < 0 || count > kMaxPassedDescriptors)
        return status::invalid(fmt::format("{} bytes with {} descriptors: expected at least 1 byte and 0 to {}", bytes,
                                           count, kMaxPassedDescriptors));
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedDescriptors)] = {};
    iovec part{const_cast<void*>(data), bytes};
    msghdr message{};
    message.msg_iov = &part;
    message.msg_iovlen = 1;
    if (count > 0) {
        message.msg_control = control;
        message.msg_controllen = CMSG_SPACE(sizeof(int) * static_cast<size_t>(count));
        cmsghdr* c = CMSG_FIRSTHDR(&message);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * static_cast<size_t>(count));
        std::memcpy(CMSG_DATA(c), descriptors, sizeof(int) * static_cast<size_t>(count));
    }
    for (;;) {
        const ssize_t n = ::sendmsg(fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            DS_TRY(wait_ready(fd, POLLOUT, deadline, "sending"));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return io_error("sendmsg");
        // The descriptors went with the first byte; the rest (if any) is plain data.
        return write_all(fd, static_cast<const char*>(data) + n, bytes - static_cast<size_t>(n), deadline);
    }
}

status receive_with_descriptors(int fd, void* data, size_t bytes, unique_fd* descriptors, int count,
                                clock::time_point deadline) {
    if (bytes == 0 || count < 0 || count > kMaxPassedDescriptors)
        return status::invalid(fmt::format("{} bytes with {} descriptors: expected at least 1 byte and 0 to {}", bytes,
                                           count, kMaxPassedDescriptors));
    // Room for more than expected, so that a peer sending too many is seen and refused.
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * (kMaxPassedDescriptors + 1))] = {};
    iovec part{data, bytes};
    msghdr message{};
    message.msg_iov = &part;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    ssize_t n = 0;
    for (;;) {
        n = ::recvmsg(fd, &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            DS_TRY(wait_ready(fd, POLLIN, deadline, "receiving"));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        break;
    }
    if (n == 0) return {status_code::aborted, "the peer closed the connection"};
    if (n < 0) return io_error("recvmsg");
    std::vector<unique_fd> received;
    const bool whole = take_descriptors(message, received);
    if (!whole || received.size() != static_cast<size_t>(count))
        return status::invalid(fmt::format("a message with {}{} descriptors: expected {}", received.size(),
                                           whole ? "" : " (or more)", count));
    for (int i = 0; i < count; ++i) descriptors[i] = std::move(received[static_cast<size_t>(i)]);
    return read_all(fd, static_cast<char*>(data) + n, bytes - static_cast<size_t>(n), deadline);
}

}  // namespace ds::net

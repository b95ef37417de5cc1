// Local sockets (transport/local_socket.h): a name nobody listens at is refused at once, a bad
// name is refused naming the limit, and descriptors passed with a message reach the peer and work
// there; a message with more or fewer descriptors than expected is refused and leaks none.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>

#include "transport/local_socket.h"

namespace ds::net {
namespace {

constexpr std::chrono::milliseconds kTimeout{5000};

std::string unique_name(const char* what) { return "distsample-test-" + std::to_string(::getpid()) + "-" + what; }

// A connected pair through a listener at a fresh name.
void connected_pair(const char* what, unique_fd& client, unique_fd& server) {
    unique_fd listener;
    ASSERT_TRUE(listen_local(unique_name(what), listener).is_ok());
    ASSERT_TRUE(connect_local(unique_name(what), client).is_ok());
    server = unique_fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    ASSERT_GE(server.get(), 0);
}

int open_descriptors() {
    int n = 0;
    for (int fd = 0; fd < 1024; ++fd) n += ::fcntl(fd, F_GETFD) != -1 ? 1 : 0;
    return n;
}

TEST(LocalSocket, ANameNobodyListensAtIsRefusedAtOnce) {
    unique_fd fd;
    const auto began = std::chrono::steady_clock::now();
    const status s = connect_local(unique_name("nobody"), fd);
    EXPECT_EQ(s.code, status_code::aborted) << s.message;
    EXPECT_NE(s.message.find("nothing listens"), std::string::npos) << s.message;
    EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(1)) << "the refusal waited";
}

TEST(LocalSocket, ANameTooLongOrEmptyIsRefusedNamingTheLimit) {
    unique_fd fd;
    for (const std::string& name : {std::string(), std::string(101, 'n'), std::string("a\0b", 3)}) {
        const status s = listen_local(name, fd);
        EXPECT_EQ(s.code, status_code::invalid_argument);
        EXPECT_NE(s.message.find("expected 1 to 100"), std::string::npos) << s.message;
    }
}

TEST(LocalSocket, PassedDescriptorsWorkOnTheOtherSide) {
    unique_fd client, server;
    connected_pair("pass", client, server);
    int pipe_ends[2];
    ASSERT_EQ(::pipe(pipe_ends), 0);
    unique_fd read_end(pipe_ends[0]), write_end(pipe_ends[1]);
    const uint64_t message = 0x1122334455667788;
    const int passed[] = {write_end.get()};
    ASSERT_TRUE(
        send_with_descriptors(client.get(), &message, sizeof message, passed, 1, clock::now() + kTimeout).is_ok());
    uint64_t got = 0;
    unique_fd received[1];
    const status s = receive_with_descriptors(server.get(), &got, sizeof got, received, 1, clock::now() + kTimeout);
    ASSERT_TRUE(s.is_ok()) << s.message;
    EXPECT_EQ(got, message);
    ASSERT_GE(received[0].get(), 0);
    EXPECT_NE(received[0].get(), write_end.get());
    ASSERT_EQ(::write(received[0].get(), "z", 1), 1);
    char byte = 0;
    ASSERT_EQ(::read(read_end.get(), &byte, 1), 1);
    EXPECT_EQ(byte, 'z');
}

TEST(LocalSocket, AMessageWithOtherThanTheExpectedDescriptorsIsRefusedAndLeaksNone) {
    unique_fd client, server;
    connected_pair("count", client, server);
    const int before = open_descriptors();
    const uint32_t message = 7;
    const int passed[] = {client.get(), client.get()};
    for (const int sent : {0, 2}) {
        ASSERT_TRUE(send_with_descriptors(client.get(), &message, sizeof message, passed, sent, clock::now() + kTimeout)
                        .is_ok());
        uint32_t got = 0;
        unique_fd received[1];
        const status s = receive_with_descriptors(server.get(), &got, sizeof got, received, 1, clock::now() + kTimeout);
        EXPECT_EQ(s.code, status_code::invalid_argument) << sent;
        EXPECT_NE(s.message.find("expected 1"), std::string::npos) << s.message;
        EXPECT_EQ(open_descriptors(), before) << sent << " descriptors sent";
    }
    uint32_t got = 0;
    unique_fd received[1];
    const auto began = std::chrono::steady_clock::now();
    EXPECT_EQ(receive_with_descriptors(server.get(), &got, sizeof got, received, 1,
                                       clock::now() + std::chrono::milliseconds(50))
                  .code,
              status_code::timeout);
    // poll's wait is whole milliseconds, rounded down.
    EXPECT_GE(std::chrono::steady_clock::now() - began, std::chrono::milliseconds(45));
}

}  // namespace
}  // namespace ds::net

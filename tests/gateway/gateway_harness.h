// A gateway in the test process: TP 2 rank actors on the CPU backend, V = 64, the synthetic model
// for steps without logits, listening on a free loopback port and a Unix socket.
#pragma once

#include <gtest/gtest.h>
#include <boost/asio.hpp>

#include <poll.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <distsample/group.h>

#include "clients/cpp/distsample_client.h"
#include "gateway/server.h"
#include "sources/synthetic_logits.h"

namespace ds::gateway::testing {

constexpr int32_t kVocab = 64;

inline group_config small_group_config() {
    group_config c;
    c.distribution.tp = 2;
    c.limits.vocab_size = kVocab;
    c.limits.max_batch = 8;
    c.limits.max_tokens_per_req = 4;
    c.limits.max_slots = 40;
    c.limits.max_penalty_tokens = 64;
    c.limits.max_logit_bias = 8;
    c.distribution.step_timeout = std::chrono::milliseconds(20000);
    c.transport.timeout = std::chrono::milliseconds(20000);
    return c;
}

struct running_gateway {
    std::unique_ptr<group> ranks;
    std::unique_ptr<synthetic_lm> model;
    std::unique_ptr<server> gateway;
    gateway_config config;

    // `adjust` changes the gateway's settings further before it starts.
    explicit running_gateway(const std::string& secret = "", int32_t max_frame_bytes = 1 << 20,
                             const group_config& group_settings = small_group_config(),
                             const std::function<void(gateway_config&)>& adjust = {}) {
        EXPECT_TRUE(group::create(group_settings, ranks).is_ok());
        synthetic_lm_config m;
        m.vocab_size = kVocab;
        model = std::make_unique<synthetic_lm>(m);
        config.port = 0;
        config.metrics_port = 0;
        config.secret = secret;
        config.max_frame_bytes = max_frame_bytes;
        config.unix_socket = ::testing::TempDir() + "/ds_gateway_" + std::to_string(::getpid()) + ".sock";
        if (adjust) adjust(config);
        gateway = std::make_unique<server>(config, *ranks, model.get());
        const status s = gateway->start();
        EXPECT_TRUE(s.is_ok()) << s.message;
    }
    ~running_gateway() { gateway->stop(); }

    std::string address() const { return "127.0.0.1:" + std::to_string(gateway->tcp_port()); }

    std::unique_ptr<client::gateway_client> connect(const std::string& secret = "") const {
        std::unique_ptr<client::gateway_client> c;
        const status s = client::gateway_client::connect(address(), secret, c);
        EXPECT_TRUE(s.is_ok()) << s.message;
        return c;
    }
};

// A connection that sends raw bytes, as a broken or hostile client would, over TCP or a Unix
// socket. Its reads are bounded: a reply that does not come within the wait counts as none.
struct raw_connection {
    boost::asio::io_context io;
    boost::asio::generic::stream_protocol::socket socket{io};
    frame_reader reader{1 << 20};

    explicit raw_connection(uint16_t port) {
        const boost::asio::ip::tcp::endpoint at(boost::asio::ip::make_address("127.0.0.1"), port);
        socket.connect(boost::asio::generic::stream_protocol::endpoint(at));
    }
    explicit raw_connection(const std::string& unix_path) {
        const boost::asio::local::stream_protocol::endpoint at(unix_path);
        socket.connect(boost::asio::generic::stream_protocol::endpoint(at));
    }

    // Takes over a TCP socket the test connected itself.
    explicit raw_connection(int connected_tcp_socket) {
        socket.assign(boost::asio::generic::stream_protocol(AF_INET, IPPROTO_TCP), connected_tcp_socket);
    }

    void send(const std::string& bytes) { boost::asio::write(socket, boost::asio::buffer(bytes)); }

    // The next reply frame; false at end of stream, or when nothing came within `wait`.
    bool receive(wire::Reply& reply, std::chrono::milliseconds wait = std::chrono::seconds(20)) {
        const uint8_t* payload = nullptr;
        size_t size = 0;
        wire::Error error;
        while (reader.next(payload, size, error) != frame_reader::result::frame) {
            if (!readable_within(wait)) return false;
            std::array<uint8_t, 4096> chunk{};
            boost::system::error_code ec;
            const size_t n = socket.read_some(boost::asio::buffer(chunk), ec);
            if (ec) return false;
            reader.append(chunk.data(), n);
        }
        return reply.ParseFromArray(payload, static_cast<int>(size));
    }

    // True once the server has closed the connection (end of stream or reset) within `wait`.
    bool closed_within(std::chrono::milliseconds wait) {
        std::array<uint8_t, 4096> chunk{};
        const auto until = std::chrono::steady_clock::now() + wait;
        while (readable_within(
            std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()))) {
            boost::system::error_code ec;
            socket.read_some(boost::asio::buffer(chunk), ec);
            if (ec) return true;
        }
        return false;
    }

    bool readable_within(std::chrono::milliseconds wait) {
        pollfd p{socket.native_handle(), POLLIN, 0};
        return ::poll(&p, 1, static_cast<int>(std::max<int64_t>(wait.count(), 0))) > 0;
    }
};

// A frame header declaring `length` bytes.
inline std::string header(uint32_t length) {
    return std::string{static_cast<char>(length >> 24), static_cast<char>(length >> 16), static_cast<char>(length >> 8),
                       static_cast<char>(length)};
}

// A Stats request frame of protocol `version`.
inline std::string stats_frame(uint32_t version = kProtocolVersion) {
    wire::Request r;
    r.set_version(version);
    r.set_request_id(5);
    r.mutable_stats();
    std::string out;
    append_frame(r, out);
    return out;
}

// GET `target` on the metrics port: the whole response, as the server sent it before closing.
inline std::string http_get(uint16_t port, const std::string& target) {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket socket(io);
    socket.connect(boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
    boost::asio::write(socket, boost::asio::buffer("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n"));
    std::string response;
    boost::system::error_code ec;
    boost::asio::read(socket, boost::asio::dynamic_buffer(response), ec);
    return response;
}

// Sampling parameters of a test request.
inline wire::SamplingParams test_params(uint64_t seed) {
    wire::SamplingParams p;
    p.set_temperature(0.9f);
    p.set_top_k(20);
    p.set_seed(seed);
    return p;
}

}  // namespace ds::gateway::testing

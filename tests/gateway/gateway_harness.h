// A gateway in the test process: TP 2 rank actors on the CPU backend, V = 64, the synthetic model
// for steps without logits, listening on a free loopback port and a Unix socket.
#pragma once

#include <gtest/gtest.h>
#include <boost/asio.hpp>

#include <unistd.h>
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
    c.tp = 2;
    c.vocab_size = kVocab;
    c.max_batch = 8;
    c.max_tokens_per_req = 4;
    c.max_slots = 40;
    c.max_penalty_tokens = 64;
    c.max_logit_bias = 8;
    c.step_timeout = std::chrono::milliseconds(20000);
    c.transport_timeout = std::chrono::milliseconds(20000);
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

// Sampling parameters of a test request.
inline wire::SamplingParams test_params(uint64_t seed) {
    wire::SamplingParams p;
    p.set_temperature(0.9f);
    p.set_top_k(20);
    p.set_seed(seed);
    return p;
}

}  // namespace ds::gateway::testing

// The gateway end to end over real sockets: steps equal the group's own outputs; bad frames get
// their typed error and close only their connection; authentication; 16 connections pipelining
// 1,000 steps each; /metrics and /healthz; a fault plan injected and cleared.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "gateway/steps.h"
#include "gateway_harness.h"

namespace ds::gateway {
namespace {

// Registers one request (params from `seed`, history {1, 2}) and makes `step` a one-request step
// for it at position 2.
void register_one_request(client::gateway_client& c, uint64_t seed, wire::Step& step) {
    int32_t slot = 0;
    ASSERT_TRUE(c.register_request(testing::test_params(seed), {1, 2}, slot).is_ok());
    step.add_slots(slot);
    step.add_positions(2);
}

namespace asio = boost::asio;
using asio::ip::tcp;
using testing::header;
using testing::http_get;
using testing::kVocab;
using testing::raw_connection;
using testing::running_gateway;
using testing::stats_frame;

TEST(GatewayServer, StepsEqualTheGroupsOutputs) {
    running_gateway gw;
    auto c = gw.connect();
    int32_t slot_a = 0;
    int32_t slot_b = 7;
    ASSERT_TRUE(c->register_request(testing::test_params(1), {3, 4}, slot_a).is_ok());
    ASSERT_TRUE(c->register_request(testing::test_params(2), {}, slot_b).is_ok());
    EXPECT_EQ(slot_a, 1);  // the lowest free slot
    EXPECT_EQ(slot_b, 7);

    // A verify step with a logits payload, and the same step straight through a second group.
    const int32_t n = 3;
    std::vector<float> logits(size_t{2} * n * kVocab);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 7919) % 97) * 0.05f;
    wire::Step step;
    for (int32_t s : {slot_a, slot_b}) step.add_slots(s);
    step.add_positions(10);
    step.add_positions(20);
    step.set_tokens_per_req(n);
    for (int32_t t : {1, 2, 3, 4, 5, 6}) step.add_candidates(t);
    step.mutable_logits()->Add(logits.begin(), logits.end());
    wire::StepReply reply;
    const status s = c->step(step, true, reply);
    ASSERT_TRUE(s.is_ok()) << s.message;

    std::unique_ptr<group> direct;
    ASSERT_TRUE(group::create(testing::small_group_config(), direct).is_ok());
    ASSERT_TRUE(direct->register_request(slot_a, params_of(testing::test_params(1)), {3, 4}).is_ok());
    ASSERT_TRUE(direct->register_request(slot_b, params_of(testing::test_params(2))).is_ok());
    step_request expected;
    expected.kind = step_kind::verify;
    expected.tokens_per_req = n;
    expected.slots = {slot_a, slot_b};
    expected.positions = {10, 20};
    expected.candidates = {1, 2, 3, 4, 5, 6};
    expected.shards = split_vocab(logits_view{logits.data(), logits_dtype::f32, 2 * n, kVocab, kVocab}, 2);
    const step_reply want = direct->step(expected);
    ASSERT_TRUE(want.result.is_ok());
    EXPECT_EQ(std::vector<int32_t>(reply.predict().begin(), reply.predict().end()),
              std::vector<int32_t>(want.outputs.packed.begin(), want.outputs.packed.begin() + 2 * n));
    EXPECT_EQ(std::vector<int32_t>(reply.accept_length().begin(), reply.accept_length().end()),
              std::vector<int32_t>(want.outputs.packed.begin() + 2 * n, want.outputs.packed.end()));
    // Bit for bit (unused positions are NaN).
    ASSERT_EQ(static_cast<size_t>(reply.logprobs_size()), want.outputs.logprobs.size());
    EXPECT_EQ(std::memcmp(reply.logprobs().data(), want.outputs.logprobs.data(),
                          want.outputs.logprobs.size() * sizeof(float)),
              0);

    // A sample step from the server's model; health; stats; release.
    wire::Step sample;
    sample.add_slots(slot_a);
    sample.add_positions(11);
    ASSERT_TRUE(c->step(sample, false, reply).is_ok());
    ASSERT_EQ(reply.predict_size(), 1);
    EXPECT_GE(reply.predict(0), 0);
    wire::Request health;
    health.mutable_health();
    wire::Reply health_reply;
    ASSERT_TRUE(c->call(health, health_reply).is_ok());
    EXPECT_TRUE(health_reply.health().ok());
    wire::StatsReply stats;
    ASSERT_TRUE(c->stats(stats).is_ok());
    EXPECT_EQ(stats.steps(), 2u);
    EXPECT_EQ(stats.registered_slots(), 2u);
    EXPECT_EQ(stats.vocab_size(), kVocab);
    EXPECT_EQ(stats.protocol_version(), kProtocolVersion);
    ASSERT_TRUE(c->release(slot_b).is_ok());
    const status again = c->release(slot_b);
    EXPECT_NE(again.message.find("UNKNOWN_SLOT"), std::string::npos) << again.message;
}

TEST(GatewayServer, TypedErrorsKeepTheConnection) {
    running_gateway gw;
    auto c = gw.connect();
    int32_t slot = 0;
    wire::SamplingParams bad = testing::test_params(1);
    bad.set_top_p(1.5f);
    const status s = c->register_request(bad, {}, slot);
    EXPECT_NE(s.message.find("BAD_FIELD"), std::string::npos) << s.message;
    EXPECT_NE(s.message.find("top_p"), std::string::npos) << s.message;
    const status history = c->register_request(testing::test_params(1), {1, kVocab}, slot);
    EXPECT_NE(history.message.find("BAD_FIELD history[1]"), std::string::npos) << history.message;
    wire::Step step;
    step.add_slots(3);
    step.add_positions(0);
    wire::StepReply reply;
    const status unknown = c->step(step, false, reply);
    EXPECT_NE(unknown.message.find("UNKNOWN_SLOT slots[0]"), std::string::npos) << unknown.message;
    wire::StatsReply stats;
    EXPECT_TRUE(c->stats(stats).is_ok());  // still connected
}

TEST(GatewayServer, AStalledRankIsATimeoutAndTheNextStepWorks) {
    group_config settings = testing::small_group_config();
    settings.distribution.step_timeout = std::chrono::milliseconds(300);
    running_gateway gw("", 1 << 20, settings);
    auto c = gw.connect();
    wire::Step step;
    ASSERT_NO_FATAL_FAILURE(register_one_request(*c, 4, step));
    ASSERT_TRUE(gw.ranks->inject_fault(1, rank_fault::stall).is_ok());
    wire::StepReply reply;
    const status failed = c->step(step, false, reply);
    EXPECT_NE(failed.message.find("TIMEOUT"), std::string::npos) << failed.message;
    EXPECT_NE(failed.message.find("rank 1"), std::string::npos) << failed.message;
    const status next = c->step(step, false, reply);
    EXPECT_TRUE(next.is_ok()) << next.message;
    EXPECT_EQ(gw.gateway->metrics().rank_failures.load(), 1u);
}

constexpr const char* kFaultSecret = "faults";

TEST(GatewayServer, InjectAndClearAFaultPlan) {
    group_config settings = testing::small_group_config();
    settings.distribution.step_timeout = std::chrono::milliseconds(300);  // the hang below
    running_gateway gw(kFaultSecret, 1 << 20, settings);                  // fault injection needs a secret
    auto c = gw.connect(kFaultSecret);
    wire::Step step;
    ASSERT_NO_FATAL_FAILURE(register_one_request(*c, 4, step));
    wire::Request inject;
    inject.mutable_inject()->add_faults("alter_token:rank=1");
    wire::Reply ok;
    ASSERT_TRUE(c->call(inject, ok).is_ok());
    EXPECT_TRUE(ok.ok());
    wire::StepReply reply;
    ASSERT_TRUE(c->step(step, false, reply).is_ok());
    EXPECT_EQ(reply.desync_events(), 1u) << "rank 1 alters every step's first token";
    wire::Request clear;
    clear.mutable_clear();
    ASSERT_TRUE(c->call(clear, ok).is_ok());
    ASSERT_TRUE(c->step(step, false, reply).is_ok());
    EXPECT_EQ(reply.desync_events(), 0u);
    // The fault counts per kind, in the stats reply and /metrics: one alter_token injected,
    // detected and repaired; nothing else.
    wire::StatsReply stats;
    ASSERT_TRUE(c->stats(stats).is_ok());
    ASSERT_EQ(stats.faults_size(), static_cast<int>(std::size(kAllFaultKinds)));
    for (const wire::FaultCounts& f : stats.faults()) {
        const uint64_t expected = f.kind() == "alter_token" ? 1 : 0;
        EXPECT_EQ(f.injected(), expected) << f.kind();
        EXPECT_EQ(f.detected(), expected) << f.kind();
        EXPECT_EQ(f.repaired(), expected) << f.kind();
        EXPECT_EQ(f.masked(), 0u) << f.kind();
        EXPECT_EQ(f.failed_steps(), 0u) << f.kind();
    }
    const std::string metrics = http_get(gw.gateway->metrics_port(), "/metrics");
    for (const char* family : {"injected", "detected", "repaired"}) {
        const std::string series = fmt::format("distsample_faults_{}_total{{kind=\"alter_token\"}} 1\n", family);
        EXPECT_NE(metrics.find(series), std::string::npos) << series << metrics;
    }
    EXPECT_NE(metrics.find("distsample_faults_failed_steps_total{kind=\"hang\"} 0\n"), std::string::npos) << metrics;
    // A failed step carries no step id: the gateway counts the group's ids in submission order,
    // so a plan naming step 3 is accounted to step 3.
    wire::Request hang;
    hang.mutable_inject()->add_faults("hang:rank=1:steps=3");
    ASSERT_TRUE(c->call(hang, ok).is_ok());
    EXPECT_FALSE(c->step(step, false, reply).is_ok());
    ASSERT_TRUE(c->step(step, false, reply).is_ok());
    EXPECT_EQ(reply.step_id(), 4u);
    const gateway_metrics::fault_counts& hangs = gw.gateway->metrics().faults[static_cast<size_t>(fault_kind::hang)];
    EXPECT_EQ(hangs.injected.load(), 1u);
    EXPECT_EQ(hangs.detected.load(), 1u);
    EXPECT_EQ(hangs.failed_steps.load(), 1u);
    wire::Request bad;
    bad.mutable_inject()->add_faults("hang:rank=1");
    bad.mutable_inject()->add_faults("melt:rank=1");
    wire::Reply error;
    const status unknown_kind = c->call(bad, error);
    EXPECT_NE(unknown_kind.message.find("BAD_FIELD"), std::string::npos) << unknown_kind.message;
    EXPECT_NE(unknown_kind.message.find("faults[1]"), std::string::npos) << unknown_kind.message;
    bad.mutable_inject()->set_faults(1, "hang:rank=2");
    const status no_such_rank = c->call(bad, error);
    EXPECT_NE(no_such_rank.message.find("faults[1].rank = 2"), std::string::npos)
        << "tp is 2: " << no_such_rank.message;
    EXPECT_EQ(gw.gateway->metrics().desync_events.load(), 1u);
}

TEST(GatewayServer, ConnectionFaultsSlowOrCutOneStepsReplyAndTheClientReconnects) {
    running_gateway gw(kFaultSecret);
    auto c = gw.connect(kFaultSecret);
    auto bystander = gw.connect(kFaultSecret);
    wire::Step step;
    ASSERT_NO_FATAL_FAILURE(register_one_request(*c, 5, step));
    wire::Request inject;
    inject.mutable_inject()->add_faults("slow_connection:steps=1:ms=200");
    inject.mutable_inject()->add_faults("cut_connection:steps=2");
    wire::Reply ok;
    ASSERT_TRUE(c->call(inject, ok).is_ok());
    wire::StepReply reply;
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(c->step(step, false, reply).is_ok());
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200)) << "step 1's reply held 200 ms";
    const status cut = c->step(step, false, reply);
    EXPECT_EQ(cut.code, status_code::aborted);
    EXPECT_NE(cut.message.find("closed the connection before replying"), std::string::npos) << cut.message;
    ASSERT_TRUE(bystander->step(step, false, reply).is_ok()) << "another connection is unaffected";
    EXPECT_EQ(reply.step_id(), 3u);
    c = gw.connect(kFaultSecret);  // the client reconnects and goes on
    ASSERT_TRUE(c->step(step, false, reply).is_ok());
    EXPECT_EQ(reply.step_id(), 4u);
    // The cut step was answered by the ranks and counted once; its reply dropped and counted.
    EXPECT_EQ(gw.gateway->metrics().steps.load(), 4u);
    EXPECT_EQ(gw.gateway->metrics().replies_dropped.load(), 1u);
    wire::StatsReply stats;
    ASSERT_TRUE(c->stats(stats).is_ok());
    for (const wire::FaultCounts& f : stats.faults()) {
        if (f.kind() == "cut_connection") {
            EXPECT_EQ(f.injected(), 1u);
            EXPECT_EQ(f.detected(), 1u);
        } else if (f.kind() == "slow_connection") {
            EXPECT_EQ(f.injected(), 1u);
            EXPECT_EQ(f.masked(), 1u);
        } else {
            EXPECT_EQ(f.injected(), 0u) << f.kind();
        }
    }
}

TEST(GatewayServer, BadFramesGetTheirErrorAndCloseOnlyTheirConnection) {
    running_gateway gw(/*secret=*/"", /*max_frame_bytes=*/4096);
    auto bystander = gw.connect();
    struct bad_frame {
        const char* name;
        std::string bytes;
        bool half_close;  // the client stops sending (a truncated frame)
        wire::Error::Code code;
    };
    const bad_frame cases[] = {
        {"malformed", header(12) + "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", false, wire::Error::MALFORMED},
        {"truncated", header(100) + "0123456789", true, wire::Error::MALFORMED},
        {"oversized", header(5000), false, wire::Error::FRAME_TOO_LARGE},
        // More bytes than the server reads before it rejects: it drains them, so the client
        // reads the error instead of a reset connection.
        {"oversized with a body", header(200000) + std::string(200000, 'x'), false, wire::Error::FRAME_TOO_LARGE},
        {"wrong version", stats_frame(2), false, wire::Error::VERSION_MISMATCH},
        {"empty", header(0), false, wire::Error::MALFORMED},
    };
    for (const bad_frame& c : cases) {
        SCOPED_TRACE(c.name);
        raw_connection raw(gw.gateway->tcp_port());
        raw.send(stats_frame(kProtocolVersion));  // a good request first: answered before the error
        raw.send(c.bytes);
        if (c.half_close) raw.socket.shutdown(tcp::socket::shutdown_send);
        wire::Reply reply;
        ASSERT_TRUE(raw.receive(reply));
        EXPECT_TRUE(reply.has_stats());
        ASSERT_TRUE(raw.receive(reply));
        ASSERT_TRUE(reply.has_error());
        EXPECT_EQ(reply.error().code(), c.code) << reply.error().message();
        EXPECT_FALSE(raw.receive(reply)) << "the connection should be closed";
        wire::StatsReply stats;
        EXPECT_TRUE(bystander->stats(stats).is_ok());
    }
    EXPECT_EQ(gw.gateway->metrics().frames_rejected.load(), std::size(cases));
}

TEST(GatewayServer, SharedSecret) {
    running_gateway gw("letmein");
    std::unique_ptr<client::gateway_client> c;
    EXPECT_TRUE(client::gateway_client::connect(gw.address(), "letmein", c).is_ok());
    wire::StatsReply stats;
    EXPECT_TRUE(c->stats(stats).is_ok());
    const status wrong = client::gateway_client::connect(gw.address(), "guess", c);
    EXPECT_NE(wrong.message.find("UNAUTHENTICATED"), std::string::npos) << wrong.message;
    raw_connection raw(gw.gateway->tcp_port());  // no Auth frame at all
    raw.send(stats_frame(kProtocolVersion));
    wire::Reply reply;
    ASSERT_TRUE(raw.receive(reply));
    EXPECT_EQ(reply.error().code(), wire::Error::UNAUTHENTICATED);
    EXPECT_FALSE(raw.receive(reply));
}

TEST(GatewayServer, UnixSocket) {
    running_gateway gw;
    std::unique_ptr<client::gateway_client> c;
    ASSERT_TRUE(client::gateway_client::connect("unix:" + gw.config.unix_socket, "", c).is_ok());
    wire::StatsReply stats;
    EXPECT_TRUE(c->stats(stats).is_ok());
}

// Every step answered once, in order per connection, nothing lost.
TEST(GatewayServer, SixteenConnectionsPipelineAThousandStepsEach) {
    constexpr int kConnections = 16;
    constexpr int kSteps = 1000;
    running_gateway gw;
    std::atomic<int> failures{0};
    std::vector<std::thread> clients;
    for (int i = 0; i < kConnections; ++i) {
        clients.emplace_back([&, i] {
            auto c = gw.connect();
            int32_t slot = 0;
            if (!c->register_request(testing::test_params(static_cast<uint64_t>(i)), {1, 2}, slot).is_ok()) {
                ++failures;
                return;
            }
            std::vector<uint64_t> ids;
            for (int k = 0; k < kSteps; ++k) {
                wire::Request r;
                wire::Step& s = k % 2 == 0 ? *r.mutable_sample_step() : *r.mutable_verify_step();
                s.add_slots(slot);
                s.add_positions(k);
                if (k % 2 == 1) {  // a verify step of N = 2 with logits from the wire
                    s.set_tokens_per_req(2);
                    s.add_candidates(k % kVocab);
                    s.add_candidates((k * 3) % kVocab);
                    for (int v = 0; v < 2 * kVocab; ++v) s.add_logits(static_cast<float>((v * (k + 1)) % 13));
                }
                uint64_t id = 0;
                if (!c->send(r, id).is_ok()) {
                    ++failures;
                    return;
                }
                ids.push_back(id);
            }
            for (int k = 0; k < kSteps; ++k) {
                wire::Reply reply;
                if (!c->receive(reply).is_ok() || reply.request_id() != ids[static_cast<size_t>(k)] ||
                    !reply.has_step() || reply.step().accept_length_size() != 1) {
                    ++failures;
                    return;
                }
            }
        });
    }
    for (std::thread& t : clients) t.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(gw.gateway->metrics().steps.load(), uint64_t{kConnections} * kSteps);
    EXPECT_EQ(gw.gateway->metrics().step_errors.load(), 0u);
}

// With small frames allowed, a client pipelining many frames makes the server pause reading
// (at 4 frames' worth of unanswered bytes) and resume: everything is still answered, in order.
TEST(GatewayServer, ReadingPausesAndResumesUnderPipelining) {
    running_gateway gw("", /*max_frame_bytes=*/1024, testing::small_group_config(),
                       [](gateway_config& c) { c.max_connection_bytes = 4 * 1024; });
    auto c = gw.connect();
    int32_t slot = 0;
    ASSERT_TRUE(c->register_request(testing::test_params(8), {}, slot).is_ok());
    std::vector<uint64_t> ids;
    for (int k = 0; k < 300; ++k) {
        wire::Request r;
        wire::Step& s = *r.mutable_sample_step();
        s.add_slots(slot);
        s.add_positions(k);
        for (int v = 0; v < kVocab; ++v) s.add_logits(static_cast<float>((v * k) % 7));
        uint64_t id = 0;
        ASSERT_TRUE(c->send(r, id).is_ok());
        ids.push_back(id);
    }
    for (uint64_t id : ids) {
        wire::Reply reply;
        ASSERT_TRUE(c->receive(reply).is_ok());
        EXPECT_EQ(reply.request_id(), id);
        EXPECT_TRUE(reply.has_step()) << reply.DebugString();
    }
}

TEST(GatewayServer, MetricsAndHealthz) {
    running_gateway gw;
    auto c = gw.connect();
    wire::Step step;
    ASSERT_NO_FATAL_FAILURE(register_one_request(*c, 3, step));
    wire::StepReply reply;
    ASSERT_TRUE(c->step(step, false, reply).is_ok());
    const std::string metrics = http_get(gw.gateway->metrics_port(), "/metrics");
    EXPECT_NE(metrics.find("HTTP/1.1 200 OK"), std::string::npos);
    EXPECT_NE(metrics.find("distsample_steps_total 1\n"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("distsample_step_latency_seconds_count 1\n"), std::string::npos);
    EXPECT_NE(metrics.find("distsample_accept_length_bucket{le=\"1\"} 1\n"), std::string::npos);
    for (int rank = 0; rank < gw.ranks->config().distribution.tp; ++rank) {  // one series per rank
        const std::string series = "{rank=\"" + std::to_string(rank) + "\"} 1\n";
        EXPECT_NE(metrics.find("distsample_rank_transport_seconds_count" + series), std::string::npos) << metrics;
        EXPECT_NE(metrics.find("distsample_rank_compute_seconds_count" + series), std::string::npos) << metrics;
    }
    EXPECT_NE(metrics.find("distsample_desync_events_total 0\n"), std::string::npos);
    EXPECT_NE(http_get(gw.gateway->metrics_port(), "/healthz").find("200 OK"), std::string::npos);
    EXPECT_NE(http_get(gw.gateway->metrics_port(), "/nothing").find("404"), std::string::npos);
}

}  // namespace
}  // namespace ds::gateway

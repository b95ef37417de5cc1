// The wire format without a server: every message through the framing and back, the frame
// reader's errors, step validation before allocation, and the gateway configuration section.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "config/config_file.h"
#include "config/gateway_config.h"
#include "gateway/protocol.h"
#include "gateway/steps.h"
#include "gateway_harness.h"

namespace ds::gateway {
namespace {

using google::protobuf::util::MessageDifferencer;
using testing::kVocab;

wire::Step small_step(bool verify) {
    wire::Step s;
    s.add_slots(1);
    s.add_slots(2);
    s.add_positions(5);
    s.add_positions(9);
    if (verify) {
        s.set_tokens_per_req(2);
        for (int32_t t : {3, 4, 5, 6}) s.add_candidates(t);
        s.set_threshold_single(0.5f);
    }
    return s;
}

std::vector<wire::Request> every_request() {
    std::vector<wire::Request> out(7);
    out[0].mutable_auth()->set_secret("s3cret");
    wire::Register& r = *out[1].mutable_register_();
    r.set_scheduler_request_id(77);
    r.set_slot(3);
    *r.mutable_params() = testing::test_params(5);
    (*r.mutable_params()->mutable_logit_bias())[7] = -100.0f;
    r.add_history(1);
    r.add_history(2);
    out[2].mutable_release()->set_slot(3);
    *out[3].mutable_sample_step() = small_step(false);
    out[3].mutable_sample_step()->add_logits(0.5f);
    *out[4].mutable_verify_step() = small_step(true);
    out[4].mutable_verify_step()->add_bitmask(0xFFFFFFFFu);
    out[5].mutable_health();
    out[6].mutable_stats();
    for (size_t i = 0; i < out.size(); ++i) {
        out[i].set_version(kProtocolVersion);
        out[i].set_request_id(1000 + i);
    }
    return out;
}

std::vector<wire::Reply> every_reply() {
    std::vector<wire::Reply> out(6);
    *out[0].mutable_error() = make_error(wire::Error::BAD_FIELD, "positions", "3 positions: expected 2");
    out[1].set_ok(true);
    out[2].mutable_registered()->set_slot(4);
    out[2].mutable_registered()->set_scheduler_request_id(77);
    wire::StepReply& s = *out[3].mutable_step();
    s.set_step_id(12);
    for (int32_t t : {3, 4, -1}) s.add_predict(t);
    s.add_accept_length(2);
    s.add_logprobs(-0.25f);
    s.add_row_errors(0);
    out[4].mutable_health()->set_ok(true);
    out[5].mutable_stats()->set_steps(99);
    for (size_t i = 0; i < out.size(); ++i) {
        out[i].set_version(kProtocolVersion);
        out[i].set_request_id(i);
    }
    return out;
}

TEST(GatewayProtocol, EveryRequestRoundTripsThroughTheFraming) {
    const std::vector<wire::Request> requests = every_request();
    std::string stream;
    for (const wire::Request& r : requests) append_frame(r, stream);
    // Fed one byte at a time, the reader still finds every frame.
    frame_reader reader(1 << 20);
    std::vector<wire::Request> decoded;
    for (char c : stream) {
        reader.append(reinterpret_cast<const uint8_t*>(&c), 1);
        const uint8_t* payload = nullptr;
        size_t size = 0;
        wire::Error error;
        while (reader.next(payload, size, error) == frame_reader::result::frame) {
            wire::Request r;
            ASSERT_TRUE(decode_request(payload, size, r, error)) << error.message();
            decoded.push_back(r);
        }
    }
    ASSERT_EQ(decoded.size(), requests.size());
    for (size_t i = 0; i < requests.size(); ++i) EXPECT_TRUE(MessageDifferencer::Equals(decoded[i], requests[i])) << i;
    EXPECT_EQ(reader.buffered(), 0u);
}

TEST(GatewayProtocol, EveryReplyRoundTripsThroughTheFraming) {
    const std::vector<wire::Reply> replies = every_reply();
    std::string stream;
    for (const wire::Reply& r : replies) append_frame(r, stream);
    frame_reader reader(1 << 20);
    reader.append(reinterpret_cast<const uint8_t*>(stream.data()), stream.size());
    for (const wire::Reply& expected : replies) {
        const uint8_t* payload = nullptr;
        size_t size = 0;
        wire::Error error;
        ASSERT_EQ(reader.next(payload, size, error), frame_reader::result::frame);
        wire::Reply r;
        ASSERT_TRUE(r.ParseFromArray(payload, static_cast<int>(size)));
        EXPECT_TRUE(MessageDifferencer::Equals(r, expected));
    }
}

TEST(GatewayProtocol, FramingErrors) {
    wire::Error error;
    const uint8_t* payload = nullptr;
    size_t size = 0;
    {
        frame_reader reader(100);
        const uint8_t header[4] = {0, 0, 0, 101};
        reader.append(header, 4);
        ASSERT_EQ(reader.next(payload, size, error), frame_reader::result::error);
        EXPECT_EQ(error.code(), wire::Error::FRAME_TOO_LARGE);
        EXPECT_NE(error.message().find("at most 100"), std::string::npos) << error.message();
    }
    {
        frame_reader reader(100);
        const uint8_t header[4] = {0, 0, 0, 0};
        reader.append(header, 4);
        ASSERT_EQ(reader.next(payload, size, error), frame_reader::result::error);
        EXPECT_EQ(error.code(), wire::Error::MALFORMED);
    }
    {
        frame_reader reader(100);
        const uint8_t partial[6] = {0, 0, 0, 10, 1, 2};
        reader.append(partial, 6);
        ASSERT_EQ(reader.next(payload, size, error), frame_reader::result::need_more);
        EXPECT_EQ(reader.buffered(), 6u);
        EXPECT_EQ(reader.truncated_error().code(), wire::Error::MALFORMED);
        EXPECT_NE(reader.truncated_error().message().find("truncated"), std::string::npos);
    }
    const std::string garbage = "\xff\xff\xff\xff not protobuf";
    wire::Request r;
    ASSERT_FALSE(decode_request(reinterpret_cast<const uint8_t*>(garbage.data()), garbage.size(), r, error));
    EXPECT_EQ(error.code(), wire::Error::MALFORMED);

    wire::Request old = every_request()[5];
    old.set_version(7);
    const std::string old_bytes = old.SerializeAsString();
    ASSERT_FALSE(decode_request(reinterpret_cast<const uint8_t*>(old_bytes.data()), old_bytes.size(), r, error));
    EXPECT_EQ(error.code(), wire::Error::VERSION_MISMATCH);
    EXPECT_EQ(error.field(), "version");

    wire::Request empty;
    empty.set_version(kProtocolVersion);
    const std::string empty_bytes = empty.SerializeAsString();
    ASSERT_FALSE(decode_request(reinterpret_cast<const uint8_t*>(empty_bytes.data()), empty_bytes.size(), r, error));
    EXPECT_EQ(error.code(), wire::Error::MALFORMED);
}

// Counts from the wire are checked against the limits before anything is sized from them.
TEST(GatewayProtocol, StepValidationNamesTheField) {
    const group_config config = testing::small_group_config();
    slot_table slots(config.limits.max_slots);
    slots.set(1, {}, 1);
    slots.set(2, {}, 1);
    synthetic_lm_config m;
    m.vocab_size = kVocab;
    const synthetic_lm model(m);
    struct bad_case {
        std::function<void(wire::Step&)> change;
        wire::Error::Code code;
        std::string field;
    };
    const bad_case cases[] = {
        {[](wire::Step& s) { s.mutable_slots()->Resize(9, 1); }, wire::Error::BAD_FIELD, "slots"},
        {[](wire::Step& s) { s.set_tokens_per_req(5); }, wire::Error::BAD_FIELD, "tokens_per_req"},
        {[](wire::Step& s) { s.add_positions(1); }, wire::Error::BAD_FIELD, "positions"},
        {[](wire::Step& s) { s.add_candidates(1); }, wire::Error::BAD_FIELD, "candidates"},
        {[](wire::Step& s) { s.add_bitmask(1); }, wire::Error::BAD_FIELD, "bitmask"},
        {[](wire::Step& s) { s.mutable_logits()->Resize(1 << 20, 0.0f); }, wire::Error::BAD_FIELD, "logits"},
        {[](wire::Step& s) { s.set_slots(1, 3); }, wire::Error::UNKNOWN_SLOT, "slots[1]"},
        {[](wire::Step& s) { s.set_slots(0, -5); }, wire::Error::UNKNOWN_SLOT, "slots[0]"},
    };
    for (const bad_case& c : cases) {
        auto request = std::make_shared<wire::Request>();
        *request->mutable_verify_step() = small_step(true);
        c.change(*request->mutable_verify_step());
        prepared_step step;
        wire::Error error;
        EXPECT_FALSE(prepare_step(request, config, slots, logits_supplier::frame_or_model, &model, step, error));
        EXPECT_EQ(error.code(), c.code) << error.message();
        EXPECT_EQ(error.field(), c.field) << error.message();
        EXPECT_TRUE(step.model_logits.empty());
    }
    // Without a model a step must carry its logits.
    auto request = std::make_shared<wire::Request>();
    *request->mutable_sample_step() = small_step(false);
    prepared_step step;
    wire::Error error;
    EXPECT_FALSE(prepare_step(request, config, slots, logits_supplier::frame, nullptr, step, error));
    EXPECT_EQ(error.field(), "logits");
    // A good verify step: the model fills bs * N rows, row b*N+j after draft j.
    request->clear_sample_step();
    *request->mutable_verify_step() = small_step(true);
    ASSERT_TRUE(prepare_step(request, config, slots, logits_supplier::frame_or_model, &model, step, error))
        << error.message();
    ASSERT_EQ(step.model_logits.size(), size_t{4} * kVocab);
    std::vector<float> row(kVocab);
    model.logits(logits_source::next_context(0, 6), row.data());  // request 1, after its draft 6
    EXPECT_TRUE(std::equal(row.begin(), row.end(), step.model_logits.begin() + 3 * kVocab));
    EXPECT_EQ(step.request.thresholds.single, 0.5f);
    EXPECT_EQ(step.request.thresholds.acc, 1.0f);

    // Ranks that make their own logits: the step goes without shards, and one carrying logits is
    // refused naming the field.
    prepared_step own;
    ASSERT_TRUE(prepare_step(request, config, slots, logits_supplier::ranks, nullptr, own, error)) << error.message();
    EXPECT_TRUE(own.request.shards.empty());
    EXPECT_TRUE(own.model_logits.empty());
    request->mutable_verify_step()->mutable_logits()->Resize(4 * kVocab, 0.0f);
    prepared_step refused;
    EXPECT_FALSE(prepare_step(request, config, slots, logits_supplier::ranks, nullptr, refused, error));
    EXPECT_EQ(error.field(), "logits");
    EXPECT_NE(error.message().find("expected none, the rank processes make their own logits"), std::string::npos)
        << error.message();
}

TEST(GatewaySlots, ContextFollowsCommitsOfTheCurrentRegistrationOnly) {
    slot_table slots(4);
    EXPECT_EQ(slots.free_slot(), 1);
    slots.set(1, {5, 6, 7}, 1);
    EXPECT_EQ(slots.context(1), (uint64_t{6} << 32) | 7);
    const uint64_t first = slots.generation(1);
    const int32_t emitted[] = {8, 9};
    slots.commit(1, first, emitted, 2);
    EXPECT_EQ(slots.context(1), (uint64_t{8} << 32) | 9);
    slots.set(1, {1, 2}, 1);  // registered again while a step of the first registration is in flight
    slots.commit(1, first, emitted, 2);
    EXPECT_EQ(slots.context(1), (uint64_t{1} << 32) | 2);
    EXPECT_EQ(slots.free_slot(), 2);
    EXPECT_TRUE(slots.release(1));
    EXPECT_FALSE(slots.release(1));
    EXPECT_FALSE(slots.registered(1));
    EXPECT_EQ(slots.registered_count(), 0);
}

TEST(GatewayProtocol, UnsetParamsAreNeutral) {
    const sampling_params p = params_of(wire::SamplingParams{});
    const sampling_params neutral;
    EXPECT_EQ(p.temperature, neutral.temperature);
    EXPECT_EQ(p.top_k, neutral.top_k);
    EXPECT_EQ(p.top_p, neutral.top_p);
    EXPECT_EQ(p.repetition_penalty, neutral.repetition_penalty);
    wire::SamplingParams greedy;
    greedy.set_temperature(0.0f);
    EXPECT_TRUE(is_greedy(params_of(greedy)));
}

TEST(GatewayConfig, SectionOfTheSameSources) {
    const std::string path = ::testing::TempDir() + "/" + std::to_string(::getpid()) + "_ds_gateway_config.json";
    std::ofstream(path) << R"({"tp": 2, "gateway": {"port": 9000, "model": "ngram", "secret": "x"}})";
    setenv("DISTSAMPLE_GATEWAY_MAX_FRAME_BYTES", "4096", 1);
    gateway_config gateway;
    group_config group;
    const std::vector<std::string> overrides = {"gateway.port=9001", "mode=sharded"};
    EXPECT_EQ(load_group_config(path, overrides, group).message, "");  // the group loader leaves the section alone
    EXPECT_TRUE(load_gateway_config(path, overrides, gateway).is_ok());
    unsetenv("DISTSAMPLE_GATEWAY_MAX_FRAME_BYTES");
    EXPECT_EQ(group.distribution.tp, 2);
    EXPECT_EQ(group.distribution.mode, dist_mode::sharded);
    EXPECT_EQ(gateway.port, 9001);             // override over file
    EXPECT_EQ(gateway.model, "ngram");         // file
    EXPECT_EQ(gateway.max_frame_bytes, 4096);  // environment
    EXPECT_EQ(gateway_config_to_json(gateway)["secret"], "***");

    gateway_config bad;
    EXPECT_NE(load_gateway_config("", {"gateway.port=70000"}, bad)
                  .message.find(
                      "config key 'gateway.port' = '70000' (from the command line): expected an integer in [0, 65535]"),
              std::string::npos);
    EXPECT_NE(load_gateway_config("", {"gateway.colour=red"}, bad).message.find("config key 'gateway.colour'"),
              std::string::npos);
    EXPECT_NE(load_group_config("", {"nosuch.key=1"}, group).message.find("config key 'nosuch.key'"),
              std::string::npos);
    gateway_config open;
    open.listen_address = "0.0.0.0";
    EXPECT_NE(validate_gateway_config(open).message.find("expected gateway.secret"), std::string::npos);
    open.secret = "x";
    EXPECT_TRUE(validate_gateway_config(open).is_ok());
}

}  // namespace
}  // namespace ds::gateway

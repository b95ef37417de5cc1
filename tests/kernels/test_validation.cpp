// Every validation error path: the message names the field and the allowed range.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/validation.h"
#include "support/backend_harness.h"

using namespace ds;
using ds::testing::small_config;

namespace {

void expect_invalid(const status& s, const std::string& field, const std::string& range) {
    EXPECT_EQ(s.code, status_code::invalid_argument) << s.message;
    EXPECT_NE(s.message.find(field), std::string::npos) << "message '" << s.message << "' should name " << field;
    EXPECT_NE(s.message.find(range), std::string::npos) << "message '" << s.message << "' should state " << range;
}

}  // namespace

TEST(ValidateParams, EachFieldOutOfRange) {
    const kernel_config config = small_config(100, 4, 4, 8);
    EXPECT_TRUE(validate_sampling_params(sampling_params{}, config).is_ok());
    struct bad_case {
        void (*mutate)(sampling_params&);
        const char* field;
        const char* range;
    };
    const bad_case cases[] = {
        {[](sampling_params& p) { p.temperature = -0.1f; }, "temperature", ">= 0"},
        {[](sampling_params& p) { p.temperature = std::numeric_limits<float>::infinity(); }, "temperature", ">= 0"},
        {[](sampling_params& p) { p.temperature = std::nanf(""); }, "temperature", ">= 0"},
        {[](sampling_params& p) { p.top_k = 0; }, "top_k", "-1 (no limit) or an integer >= 1"},
        {[](sampling_params& p) { p.top_k = -5; }, "top_k", "-1 (no limit) or an integer >= 1"},
        {[](sampling_params& p) { p.top_p = 0.0f; }, "top_p", "(0, 1]"},
        {[](sampling_params& p) { p.top_p = 1.5f; }, "top_p", "(0, 1]"},
        {[](sampling_params& p) { p.min_p = -0.1f; }, "min_p", "[0, 1]"},
        {[](sampling_params& p) { p.min_p = 1.1f; }, "min_p", "[0, 1]"},
        {[](sampling_params& p) { p.presence_penalty = 2.5f; }, "presence_penalty", "[-2, 2]"},
        {[](sampling_params& p) { p.frequency_penalty = -3.0f; }, "frequency_penalty", "[-2, 2]"},
        {[](sampling_params& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty", "(0, 10]"},
        {[](sampling_params& p) { p.repetition_penalty = 11.0f; }, "repetition_penalty", "(0, 10]"},
        {[](sampling_params& p) {
             p.logit_bias = {{100, 1.0f}};
         },
         "logit_bias[100]", "[0, 100)"},
        {[](sampling_params& p) {
             p.logit_bias = {{-1, 1.0f}};
         },
         "logit_bias[-1]", "[0, 100)"},
        {[](sampling_params& p) {
             p.logit_bias = {{3, 101.0f}};
         },
         "logit_bias[3]", "[-100, 100]"},
        {[](sampling_params& p) {
             p.logit_bias.assign(17, logit_bias_entry{1, 1.0f});
         },
         "logit_bias", "at most 16"},
    };
    for (const bad_case& c : cases) {
        sampling_params p;
        c.mutate(p);
        expect_invalid(validate_sampling_params(p, config, "requests[2]."), std::string("requests[2].") + c.field,
                       c.range);
    }
}

TEST(ValidateThresholds, Ranges) {
    expect_invalid(validate_thresholds({-0.1f, 1.0f}), "threshold_single", "[0, 1]");
    expect_invalid(validate_thresholds({1.0f, 0.0f}), "threshold_acc", "(0, 1]");
    expect_invalid(validate_thresholds({1.0f, 1.5f}), "threshold_acc", "(0, 1]");
    EXPECT_TRUE(validate_thresholds({0.0f, 0.5f}).is_ok());
}

class ValidateStep : public ::testing::Test {
   public:
    kernel_config config = small_config(64, 4, 3, 8);
    std::vector<float> logits = std::vector<float>(4 * 3 * 64, 0.0f);
    std::vector<int32_t> slots{1, 2, 3, 0};
    std::vector<int64_t> positions{0, 5, 9, 0};
    std::vector<int32_t> candidates = std::vector<int32_t>(12, 1);
    std::vector<double> coins = std::vector<double>(8, 0.5);
    std::vector<double> final_coins = std::vector<double>(4, 0.5);

    step_input verify_step() {
        step_input in = ds::testing::make_step(logits, 64, slots, positions, 3, &candidates);
        return in;
    }
};

TEST_F(ValidateStep, AcceptsAWellFormedStep) {
    EXPECT_TRUE(validate_step(verify_step(), step_kind::verify, config).is_ok());
    step_input empty = verify_step();
    empty.batch_size = 0;
    empty.logits.rows = 0;
    EXPECT_TRUE(validate_step(empty, step_kind::verify, config).is_ok());
}

TEST_F(ValidateStep, EachFieldOutOfRange) {
    struct bad_case {
        void (*mutate)(step_input&, ValidateStep&);
        step_kind kind;
        const char* field;
        const char* range;
    };
    const bad_case cases[] = {
        {[](step_input& s, ValidateStep&) { s.batch_size = 5; }, step_kind::verify, "batch_size", "[0, 4]"},
        {[](step_input& s, ValidateStep&) { s.batch_size = -1; }, step_kind::verify, "batch_size", "[0, 4]"},
        {[](step_input&, ValidateStep&) {}, step_kind::sample, "tokens_per_req", "[1, 1]"},
        {[](step_input& s, ValidateStep&) { s.tokens_per_req = 4; }, step_kind::verify, "tokens_per_req", "[1, 3]"},
        {[](step_input& s, ValidateStep&) { s.logits.vocab = 63; }, step_kind::verify, "logits.vocab", "expected 64"},
        {[](step_input& s, ValidateStep&) { s.logits.rows = 11; }, step_kind::verify, "logits.rows", "= 12"},
        {[](step_input& s, ValidateStep&) { s.logits.row_stride = 32; }, step_kind::verify, "logits.row_stride",
         ">= vocab"},
        {[](step_input& s, ValidateStep&) { s.logits.data = nullptr; }, step_kind::verify, "logits.data", "non-null"},
        {[](step_input& s, ValidateStep&) { s.slots = nullptr; }, step_kind::verify, "slots", "slot ids"},
        {[](step_input& s, ValidateStep&) { s.positions = nullptr; }, step_kind::verify, "positions", "positions"},
        {[](step_input&, ValidateStep& t) { t.slots[2] = 8; }, step_kind::verify, "slots[2]", "[0, 7]"},
        {[](step_input&, ValidateStep& t) { t.slots[1] = -1; }, step_kind::verify, "slots[1]", "[0, 7]"},
        {[](step_input&, ValidateStep& t) { t.positions[3] = -4; }, step_kind::verify, "positions[3]", "[0, "},
        {[](step_input& s, ValidateStep&) { s.candidates = nullptr; }, step_kind::verify, "candidates",
         "tokens_per_req ids"},
        {[](step_input&, ValidateStep& t) { t.candidates[5] = 64; }, step_kind::verify, "candidates[1][2]", "[0, 63]"},
        {[](step_input&, ValidateStep& t) { t.candidates[0] = -1; }, step_kind::verify, "candidates[0][0]", "[0, 63]"},
        {[](step_input& s, ValidateStep&) { s.thresholds.single = 2.0f; }, step_kind::verify, "threshold_single",
         "[0, 1]"},
        {[](step_input& s, ValidateStep&) { s.thresholds.acc = 0.0f; }, step_kind::verify, "threshold_acc", "(0, 1]"},
        {[](step_input& s, ValidateStep& t) {
             t.coins[3] = 1.5;
             s.coins = t.coins.data();
         },
         step_kind::verify, "coins[1][1]", "[0, 1]"},
        {[](step_input& s, ValidateStep& t) {
             t.final_coins[2] = -0.5;
             s.final_coins = t.final_coins.data();
         },
         step_kind::verify, "final_coins[2]", "[0, 1]"},
    };
    for (const bad_case& c : cases) {
        ValidateStep& self = *this;
        const std::vector<int32_t> saved_slots = slots;
        const std::vector<int64_t> saved_positions = positions;
        const std::vector<int32_t> saved_candidates = candidates;
        step_input s = verify_step();
        c.mutate(s, self);
        expect_invalid(validate_step(s, c.kind, config), c.field, c.range);
        slots = saved_slots;
        positions = saved_positions;
        candidates = saved_candidates;
    }
}

TEST_F(ValidateStep, BackendRejectsInvalidStepsWithoutTouchingOutputs) {
    ds::testing::backend_harness h(config);
    step_input s = verify_step();
    s.thresholds.acc = 2.0f;
    const status st = h.run(step_kind::verify, s);
    expect_invalid(st, "threshold_acc", "(0, 1]");
    for (int32_t v : h.packed) EXPECT_EQ(v, -7);
}

TEST(ValidateConfig, EachFieldOutOfRange) {
    EXPECT_EQ(validate_kernel_config(kernel_config{}).message, "");
    kernel_config c;
    c.vocab_size = 0;
    EXPECT_NE(validate_kernel_config(c).message.find("kernel_config.vocab_size = 0"), std::string::npos);
    c = kernel_config{};
    c.max_slots = 1;
    EXPECT_NE(validate_kernel_config(c).message.find("kernel_config.max_slots"), std::string::npos);
    c = kernel_config{};
    c.max_tokens_per_req = 65;
    EXPECT_NE(validate_kernel_config(c).message.find("[1, 64]"), std::string::npos);
    c = kernel_config{};
    c.threads = -1;
    EXPECT_NE(validate_kernel_config(c).message.find("kernel_config.threads"), std::string::npos);
    std::unique_ptr<sampling_backend> backend;
    expect_invalid(make_backend(backend_kind::cpu, c, backend), "kernel_config.threads", "[0, 1024]");
}

TEST(ValidatePool, SlotsAndHistory) {
    kernel_config config = small_config(16, 2, 1, 4);
    config.max_penalty_tokens = 2;
    param_pool pool(config);
    expect_invalid(pool.register_request(0, sampling_params{}), "slot = 0", "[1, 3]");
    expect_invalid(pool.register_request(4, sampling_params{}), "slot = 4", "[1, 3]");
    expect_invalid(pool.release(9), "slot = 9", "[1, 3]");
    sampling_params bad;
    bad.top_p = 2.0f;
    expect_invalid(pool.register_request(1, bad), "top_p", "(0, 1]");
    sampling_params penalised;
    penalised.frequency_penalty = 1.0f;
    const int32_t out_of_vocab[] = {16};
    expect_invalid(pool.register_request(1, penalised, out_of_vocab, 1), "tokens[0] = 16", "[0, 16)");
    const int32_t three_distinct[] = {1, 2, 3};
    expect_invalid(pool.register_request(1, penalised, three_distinct, 3), "max_penalty_tokens = 2", "at most");
}

TEST(BackendFactory, NamesAndUnavailableBackends) {
    expect_invalid(parse_backend_kind("tpu").to_status(), "backend = 'tpu'", "'cpu' or 'cuda'");
    const result<backend_kind> parsed = parse_backend_kind("cuda");
    ASSERT_TRUE(parsed.is_ok());
    const backend_kind kind = *parsed;
    // Without CUDA support or a GPU the request is refused with a pointer to the CPU backend.
    std::unique_ptr<sampling_backend> backend;
    const status s = make_backend(kind, kernel_config{}, backend);
    if (!s.is_ok()) {
        EXPECT_EQ(s.code, status_code::unsupported);
        EXPECT_NE(s.message.find("--backend cpu"), std::string::npos);
    } else {
        EXPECT_STREQ(backend->name(), "cuda");
    }
}

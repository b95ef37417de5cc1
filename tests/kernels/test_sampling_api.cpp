// The engine-facing API (include/distsample/sampling.h) on the host: the same outputs as a
// backend step over its slot pool, field-named errors, per-row errors, slot indexing, commits,
// and penalties at every verify position.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "support/random_calls.h"
#include "support/reference_sampler.h"

namespace {

using namespace ds;
using ds::testing::call_outputs;
using ds::testing::random_call;

status run_call(const sampling_call& call) {
    std::vector<uint64_t> workspace((workspace_bytes(call) + 7) / 8);
    const workspace_ref ws{workspace.data(), workspace.size() * 8};
    return call.tokens_per_req > 1 || call.candidates != nullptr ? verify(call, ws) : sample(call, ws);
}

void expect_same(const call_outputs& a, const call_outputs& b, bool logprobs, const std::string& what) {
    EXPECT_EQ(a.predict, b.predict) << what;
    EXPECT_EQ(a.accept_index, b.accept_index) << what;
    EXPECT_EQ(a.accept_length, b.accept_length) << what;
    EXPECT_EQ(a.row_error, b.row_error) << what;
    if (!logprobs) return;
    for (size_t i = 0; i < a.logprobs.size(); ++i) {
        if (std::isnan(a.logprobs[i]) || std::isnan(b.logprobs[i])) {
            EXPECT_EQ(std::isnan(a.logprobs[i]), std::isnan(b.logprobs[i])) << what << " logprob " << i;
        } else {
            EXPECT_EQ(a.logprobs[i], b.logprobs[i]) << what << " logprob " << i;
        }
    }
}

TEST(SamplingApi, EqualsTheBackendStepOnRandomBatches) {
    std::mt19937_64 rng(2026);
    for (int trial = 0; trial < 300; ++trial) {
        random_call c = ds::testing::make_random_call(rng, 5000, trial % 2 == 1);
        c.logprobs = logprob_mode::processed;
        call_outputs engine(c);
        ASSERT_TRUE(run_call(ds::testing::make_call(c, engine)).is_ok()) << trial;
        cpu::cpu_backend backend(ds::testing::config_for(c));
        call_outputs step(c);
        const status s = ds::testing::run_on_backend(c, backend, step);
        ASSERT_TRUE(s.is_ok()) << trial << ": " << s.message;
        expect_same(engine, step, true, "trial " + std::to_string(trial));
    }
}

TEST(SamplingApi, RawLogprobsAreTheLogSoftmaxOfTheLogitsAsGiven) {
    std::mt19937_64 rng(17);
    int checked = 0;
    for (int trial = 0; trial < 60; ++trial) {
        random_call c = ds::testing::make_random_call(rng, 3000, false);
        c.dtype = logits_dtype::f32;
        c.logprobs = logprob_mode::raw;
        call_outputs out(c);
        ASSERT_TRUE(run_call(ds::testing::make_call(c, out)).is_ok());
        for (int32_t b = 0; b < c.batch_size; ++b) {
            if (out.predict[static_cast<size_t>(b)] < 0) continue;
            const std::vector<float> row(c.logits_f32.begin() + b * c.vocab, c.logits_f32.begin() + (b + 1) * c.vocab);
            const long double expected = ds::testing::reference_logprob(row, out.predict[static_cast<size_t>(b)]);
            EXPECT_NEAR(out.logprobs[static_cast<size_t>(b)], static_cast<double>(expected), 1e-5) << trial;
            ++checked;
        }
    }
    EXPECT_GT(checked, 100);
}

// The smallest case where drafts must count as emitted: greedy with a frequency penalty. Row 1
// sees draft 1 (token 0) as emitted, so its logit drops by 1.5 and token 1 wins there.
TEST(SamplingApi, VerifyRowsSeeTheDraftsBeforeThemForPenalties) {
    const std::vector<float> logits{1, 0, 1, 0, 1, 0};
    const std::vector<int32_t> candidates{1, 0, 0};
    std::vector<int32_t> predict(3), accept_index(3), accept_length(1);
    sampling_call call;
    call.logits = {logits.data(), logits_dtype::f32, 3, 2, 2, false};
    call.batch_size = 1;
    call.tokens_per_req = 3;
    call.params.temperature = param<float>::uniform(0.0f);
    call.params.frequency_penalty = param<float>::uniform(1.5f);
    call.candidates = candidates.data();
    call.outputs = {predict.data(), accept_index.data(), accept_length.data(), nullptr, nullptr};
    ASSERT_TRUE(run_call(call).is_ok());
    EXPECT_EQ(predict, (std::vector<int32_t>{0, 1, -1}));
    EXPECT_EQ(accept_length[0], 2);
}

// A draft without mass — masked, or with a -inf or NaN logit — is never accepted, even with the
// lossy threshold_single = 0 that accepts every draft with mass.
TEST(SamplingApi, ThresholdSingleZeroNeverAcceptsAForbiddenDraft) {
    const float inf = std::numeric_limits<float>::infinity();
    // Three requests, N = 2; row 0 of each judges its draft: masked (token 1), -inf (token 2), NaN (token 3).
    const std::vector<float> logits{0, 5, 0, 0, 0, 0, 0, 0,  //
                                    0, 0, -inf, 0, 0, 0, 0, 0, 0, 0, 0, std::nanf(""), 0, 0, 0, 0};
    const std::vector<int32_t> candidates{0, 1, 0, 2, 0, 3};
    const std::vector<uint32_t> bitmask{0xFDu, 0xFFu, 0xFFu, 0xFFu, 0xFFu, 0xFFu};  // row 0 forbids token 1
    std::vector<int32_t> predict(6), accept_index(6), accept_length(3);
    sampling_call call;
    call.logits = {logits.data(), logits_dtype::f32, 6, 4, 4, false};
    call.batch_size = 3;
    call.tokens_per_req = 2;
    call.candidates = candidates.data();
    call.bitmask = bitmask.data();
    call.thresholds = {0.0f, 1.0f};
    call.outputs = {predict.data(), accept_index.data(), accept_length.data(), nullptr, nullptr};
    ASSERT_TRUE(run_call(call).is_ok());
    for (int32_t b = 0; b < 3; ++b) {
        EXPECT_EQ(accept_length[static_cast<size_t>(b)], 1) << b;
        EXPECT_NE(predict[static_cast<size_t>(b) * 2], candidates[static_cast<size_t>(b) * 2 + 1]) << b;
    }
}

TEST(SamplingApi, OutOfRangeRowsAreFlaggedNotSampled) {
    const std::vector<float> logits{0.5f, 1.5f, -1.0f, 0.5f, 1.5f, -1.0f};
    const std::vector<float> top_p{0.9f, 1.5f};  // row 1 out of range
    std::vector<int32_t> predict(2), accept_index(2), accept_length(2);
    std::vector<uint8_t> row_error(2, 9);
    sampling_call call;
    call.logits = {logits.data(), logits_dtype::f32, 2, 3, 3, false};
    call.batch_size = 2;
    call.params.top_p = param<float>::per_row(top_p.data());
    call.outputs = {predict.data(), accept_index.data(), accept_length.data(), nullptr, row_error.data()};
    ASSERT_TRUE(run_call(call).is_ok());
    EXPECT_GE(predict[0], 0);
    EXPECT_EQ(row_error[0], kRowOk);
    EXPECT_EQ(predict[1], -1);
    EXPECT_EQ(row_error[1], kRowErrorInvalidParams);
    EXPECT_EQ(accept_length[1], 1);
}

TEST(SamplingApi, ABrokenAllGreedyPromiseIsFlagged) {
    const std::vector<float> logits{0.5f, 1.5f, -1.0f};
    std::vector<int32_t> predict(1), accept_index(1), accept_length(1);
    std::vector<uint8_t> row_error(1);
    sampling_call call;
    call.logits = {logits.data(), logits_dtype::f32, 1, 3, 3, false};
    call.batch_size = 1;
    call.all_greedy_hint = true;  // but temperature is 1
    call.outputs = {predict.data(), accept_index.data(), accept_length.data(), nullptr, row_error.data()};
    ASSERT_TRUE(run_call(call).is_ok());
    EXPECT_EQ(row_error[0], kRowErrorInvalidParams);
    call.params.temperature = param<float>::uniform(0.0f);
    ASSERT_TRUE(run_call(call).is_ok());
    EXPECT_EQ(row_error[0], kRowOk);
    EXPECT_EQ(predict[0], 1);
}

TEST(SamplingApi, ErrorsNameTheField) {
    const std::vector<float> logits(8, 0.0f);
    std::vector<int32_t> predict(2), accept_index(2), accept_length(2);
    auto base = [&] {
        sampling_call call;
        call.logits = {logits.data(), logits_dtype::f32, 2, 4, 4, false};
        call.batch_size = 2;
        call.outputs = {predict.data(), accept_index.data(), accept_length.data(), nullptr, nullptr};
        return call;
    };
    auto message = [&](const sampling_call& call) { return run_call(call).message; };
    sampling_call c = base();
    c.params.top_p = param<float>::uniform(0.0f);
    EXPECT_NE(message(c).find("top_p = 0: expected a number in (0, 1]"), std::string::npos) << message(c);
    c = base();
    c.params.temperature = param<float>::uniform(-1.0f);
    EXPECT_NE(message(c).find("temperature = -1"), std::string::npos) << message(c);
    c = base();
    c.params.top_k = param<int32_t>::uniform(0);
    EXPECT_NE(message(c).find("top_k = 0"), std::string::npos);
    c = base();
    c.logits.rows = 3;
    EXPECT_NE(message(c).find("logits.rows = 3"), std::string::npos);
    c = base();
    c.logits.vocab = 0;
    EXPECT_NE(message(c).find("logits.vocab = 0"), std::string::npos);
    c = base();
    c.outputs.accept_length = nullptr;
    EXPECT_NE(message(c).find("outputs"), std::string::npos);
    c = base();
    c.logprobs = logprob_mode::raw;
    EXPECT_NE(message(c).find("outputs.logprobs"), std::string::npos);
    c = base();
    c.positions = param<int64_t>::uniform(-1);
    EXPECT_NE(message(c).find("positions = -1"), std::string::npos);
    c = base();
    const std::vector<int32_t> slots{1, 2};
    c.slots = slots.data();
    EXPECT_NE(message(c).find("num_slots"), std::string::npos);
    c = base();
    c.tokens_per_req = 2;
    c.batch_size = 1;
    EXPECT_NE(message(c).find("candidates"), std::string::npos);
    c = base();
    std::vector<uint64_t> tiny(1);
    EXPECT_NE(sample(c, {tiny.data(), 8}).message.find("workspace.bytes = 8"), std::string::npos);
}

// Per-slot state held by the caller: parameters indexed by slot, seen lists of fixed capacity
// grown by commit_tokens, as a stateful engine keeps them.
TEST(SamplingApi, SlotIndexedStateAndCommitsMatchTheBackend) {
    constexpr int32_t kVocab = 50, kSlots = 4, kCapacity = 16;
    std::mt19937_64 rng(5);
    std::vector<float> temperature{0.0f, 0.8f, 1.2f, 0.0f};
    std::vector<float> frequency{0.0f, 0.7f, -0.4f, 1.1f};
    std::vector<int64_t> seed{0, 11, 22, 33};
    std::vector<int32_t> seen_tokens(kSlots * kCapacity), seen_counts(kSlots * kCapacity), seen_sizes(kSlots, 0);
    kernel_config config;
    config.vocab_size = kVocab;
    config.max_slots = kSlots;
    config.max_batch = 3;
    config.max_tokens_per_req = 1;
    config.max_penalty_tokens = kCapacity;
    config.threads = 1;
    cpu::cpu_backend backend(config);
    for (int32_t slot = 1; slot < kSlots; ++slot) {
        sampling_params p;
        p.temperature = temperature[static_cast<size_t>(slot)];
        p.frequency_penalty = frequency[static_cast<size_t>(slot)];
        p.seed = static_cast<uint64_t>(seed[static_cast<size_t>(slot)]);
        ASSERT_TRUE(backend.pool().register_request(slot, p).is_ok());
    }
    const std::vector<int32_t> slots{3, 1, 2};
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int step = 0; step < 12; ++step) {
        std::vector<float> logits(3 * kVocab);
        for (float& l : logits) l = normal(rng);
        const std::vector<int64_t> positions{step, step + 5, step + 9};
        std::vector<int32_t> predict(3), accept_index(3), accept_length(3);
        sampling_call call;
        call.logits = {logits.data(), logits_dtype::f32, 3, kVocab, kVocab, false};
        call.batch_size = 3;
        call.slots = slots.data();
        call.num_slots = kSlots;
        call.params.temperature = param<float>::per_row(temperature.data());
        call.params.frequency_penalty = param<float>::per_row(frequency.data());
        call.params.seed = param<int64_t>::per_row(seed.data());
        call.params.seen = {seen_tokens.data(), seen_counts.data(), nullptr, seen_sizes.data(), kCapacity};
        call.positions = param<int64_t>::per_row(positions.data());
        call.outputs = {predict.data(), accept_index.data(), accept_length.data(), nullptr, nullptr};
        ASSERT_TRUE(run_call(call).is_ok());

        std::vector<int32_t> packed(6);
        std::vector<int32_t> step_index(3);
        step_input input;
        input.logits = call.logits;
        input.slots = slots.data();
        input.positions = positions.data();
        input.batch_size = 3;
        ASSERT_TRUE(backend.sample(input, {packed.data(), step_index.data(), nullptr, nullptr}).is_ok());
        EXPECT_EQ(std::vector<int32_t>(packed.begin(), packed.begin() + 3), predict) << step;
        ASSERT_TRUE(backend.commit_tokens(input, {packed.data(), step_index.data(), nullptr, nullptr}).is_ok());

        commit_call commit;
        commit.batch_size = 3;
        commit.slots = slots.data();
        commit.predict = predict.data();
        commit.accept_length = accept_length.data();
        commit.seen_tokens = seen_tokens.data();
        commit.seen_counts = seen_counts.data();
        commit.seen_sizes = seen_sizes.data();
        commit.capacity = kCapacity;
        commit.max_slots = kSlots;
        commit.vocab = kVocab;
        ASSERT_TRUE(commit_tokens(commit).is_ok());
    }
    for (int32_t slot = 1; slot < kSlots; ++slot) {
        EXPECT_EQ(seen_sizes[static_cast<size_t>(slot)], backend.pool().seen_tokens(slot).size) << slot;
    }
}

}  // namespace

namespace {

TEST(SamplingApi, CopyOutputsCopiesEveryGivenOutput) {
    std::vector<int32_t> predict{1, 2}, accept_index{0, 1}, accept_length{1, 1};
    std::vector<uint8_t> row_error{0, 2};
    std::vector<int32_t> predict_to(2, -9), index_to(2, -9), length_to(2, -9);
    std::vector<uint8_t> error_to(2, 9);
    const sampling_outputs from{predict.data(), accept_index.data(), accept_length.data(), nullptr, row_error.data()};
    const sampling_outputs to{predict_to.data(), index_to.data(), length_to.data(), nullptr, error_to.data()};
    ASSERT_TRUE(copy_outputs(from, to, 2, 1, false).is_ok());
    EXPECT_EQ(predict_to, predict);
    EXPECT_EQ(index_to, accept_index);
    EXPECT_EQ(length_to, accept_length);
    EXPECT_EQ(error_to, row_error);
    EXPECT_NE(copy_outputs(from, to, -1, 1, false).message.find("batch_size = -1"), std::string::npos);
}

}  // namespace

// The CPU backend against the seed's verification cases, the reference filter, and the
// exactness contract's invariances.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "kernels/cpu/row_sampler.h"
#include "kernels/det_math.h"
#include "support/backend_harness.h"
#include "support/reference_sampler.h"

using namespace ds;
using ds::testing::backend_harness;
using ds::testing::make_step;
using ds::testing::small_config;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> random_row(std::mt19937_64& rng, int32_t vocab, float spread) {
    std::normal_distribution<float> normal(0.0f, spread);
    std::vector<float> row(static_cast<size_t>(vocab));
    for (float& l : row) l = normal(rng);
    return row;
}

sampling_params random_params(std::mt19937_64& rng) {
    sampling_params p;
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    p.temperature = 0.2f + 1.5f * unit(rng);
    p.top_k = unit(rng) < 0.5f ? -1 : 1 + static_cast<int32_t>(rng() % 40);
    p.top_p = unit(rng) < 0.5f ? 1.0f : 0.05f + 0.95f * unit(rng);
    p.min_p = unit(rng) < 0.5f ? 0.0f : 0.3f * unit(rng);
    p.seed = rng();
    return p;
}

}  // namespace

// --- The seed's greedy chain cases --------------------------------------------------------------

class GreedyChain : public ::testing::TestWithParam<int32_t> {};

TEST_P(GreedyChain, SeedCases) {
    const int32_t bs = GetParam();
    constexpr int32_t kVocab = 61750 + 6;
    constexpr int32_t kN = 4;
    const int32_t targets[kN] = {1266, 9400, 61749, 6620};
    // Row b*N+j peaks at targets[j].
    std::vector<float> logits(static_cast<size_t>(bs) * kN * kVocab, 0.0f);
    for (int32_t b = 0; b < bs; ++b) {
        for (int32_t j = 0; j < kN; ++j) logits[(static_cast<size_t>(b) * kN + j) * kVocab + targets[j]] = 1.0f;
    }
    backend_harness h(small_config(kVocab, bs, kN, bs + 1));
    sampling_params greedy;
    greedy.temperature = 0.0f;
    std::vector<int32_t> slots(static_cast<size_t>(bs));
    std::vector<int64_t> positions(static_cast<size_t>(bs), 10);
    for (int32_t b = 0; b < bs; ++b) {
        slots[static_cast<size_t>(b)] = b + 1;
        h.register_request(b + 1, greedy);
    }
    struct chain_case {
        std::vector<int32_t> candidates;
        int32_t accepted;
        std::vector<int32_t> predict;
    };
    const chain_case cases[] = {
        {{23958, 1266, 9400, 61749}, 3, {1266, 9400, 61749, 6620}},  // all match
        {{23958, 1, 2, 3}, 0, {1266, -1, -1, -1}},                   // no match
        {{23958, 1266, 5, 61749}, 1, {1266, 9400, -1, -1}},          // partial
    };
    for (const chain_case& c : cases) {
        std::vector<int32_t> candidates;
        for (int32_t b = 0; b < bs; ++b) candidates.insert(candidates.end(), c.candidates.begin(), c.candidates.end());
        ASSERT_TRUE(h.run(step_kind::verify, make_step(logits, kVocab, slots, positions, kN, &candidates)).is_ok());
        for (int32_t b = 0; b < bs; ++b) {
            ASSERT_EQ(h.accept_length(b), c.accepted + 1) << "request " << b;
            for (int32_t j = 0; j < kN; ++j) {
                EXPECT_EQ(h.predict(b, j), c.predict[static_cast<size_t>(j)]);
                EXPECT_EQ(h.accept_index[static_cast<size_t>(b) * kN + j], j <= c.accepted ? b * kN + j : -1);
            }
            EXPECT_EQ(h.row_error[static_cast<size_t>(b)], 0);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(BatchSizes, GreedyChain, ::testing::Values(1, 8, 32, 64, 127));

// --- The seed's target-only case ----------------------------------------------------------------

namespace {

// V = 16; logits are log-probabilities. Row 0: 0.95 at 11 (and 0.05 at 3); row 1: 0.1 at 12 and
// 1.0 at 5; rows 2 and 3 uniform.
std::vector<float> target_only_logits() {
    std::vector<float> logits(4 * 16, kNegInf);
    logits[11] = std::log(0.95f);
    logits[3] = std::log(0.05f);
    logits[16 + 12] = std::log(0.1f);
    logits[16 + 5] = 0.0f;
    for (int i = 32; i < 64; ++i) logits[static_cast<size_t>(i)] = 0.0f;
    return logits;
}

}  // namespace

TEST(TargetOnlyChain, SeedCaseRejectsSecondDraftAndResamples) {
    backend_harness h(small_config(16, 1, 4, 2));
    sampling_params p;
    p.seed = 7;
    h.register_request(1, p);
    const std::vector<float> logits = target_only_logits();
    const std::vector<int32_t> slots{1};
    const std::vector<int64_t> positions{0};
    const std::vector<int32_t> candidates{10, 11, 12, 13};
    const std::vector<double> coins{0.5, 0.9, 0.5};
    const std::vector<double> final_coins{0.1};
    step_input step = make_step(logits, 16, slots, positions, 4, &candidates);
    step.coins = coins.data();
    step.final_coins = final_coins.data();
    step.thresholds = verify_thresholds{0.9f, 1.0f};
    ASSERT_TRUE(h.run(step_kind::verify, step).is_ok());
    EXPECT_EQ(h.accept_length(0), 2);
    EXPECT_EQ(h.predict(0, 0), 11);
    EXPECT_EQ(h.predict(0, 1), 5);
    EXPECT_EQ(h.predict(0, 2), -1);
    EXPECT_EQ(h.accept_index[0], 0);
    EXPECT_EQ(h.accept_index[1], 1);
    EXPECT_EQ(h.accept_index[2], -1);

    // threshold_single = 0 accepts every draft; the bonus token comes from the last row.
    step.thresholds = verify_thresholds{0.0f, 1.0f};
    ASSERT_TRUE(h.run(step_kind::verify, step).is_ok());
    EXPECT_EQ(h.accept_length(0), 4);
    EXPECT_EQ(h.predict(0, 0), 11);
    EXPECT_EQ(h.predict(0, 1), 12);
    EXPECT_EQ(h.predict(0, 2), 13);
    EXPECT_GE(h.predict(0, 3), 0);
}

TEST(TargetOnlyChain, PhiloxCoinsAreStatelessAndKeyedByPosition) {
    backend_harness h(small_config(16, 2, 4, 3));
    sampling_params p;
    p.seed = 99;
    h.register_request(1, p);
    h.register_request(2, p);  // same request in another slot: same outputs
    std::vector<float> logits = target_only_logits();
    const std::vector<float> one = logits;
    logits.insert(logits.end(), one.begin(), one.end());
    const std::vector<int32_t> slots{1, 2};
    const std::vector<int64_t> positions{40, 40};
    const std::vector<int32_t> candidates{10, 11, 12, 13, 10, 11, 12, 13};
    ASSERT_TRUE(h.run(step_kind::verify, make_step(logits, 16, slots, positions, 4, &candidates)).is_ok());
    const std::vector<int32_t> first = h.packed;
    EXPECT_EQ(h.accept_length(0), h.accept_length(1));
    for (int j = 0; j < 4; ++j) EXPECT_EQ(h.predict(0, j), h.predict(1, j));
    ASSERT_TRUE(h.run(step_kind::verify, make_step(logits, 16, slots, positions, 4, &candidates)).is_ok());
    EXPECT_EQ(h.packed, first) << "a repeated step draws the same coins";
}

// --- Filtering equals the reference -------------------------------------------------------------

TEST(RowSampler, FilterCutMatchesReferenceOnRandomRows) {
    std::mt19937_64 rng(1234);
    for (int trial = 0; trial < 400; ++trial) {
        const int32_t vocab = 1 + static_cast<int32_t>(rng() % 700);
        std::vector<float> row = random_row(rng, vocab, trial % 2 ? 3.0f : 0.3f);
        if (trial % 3 == 0) {  // heavy ties
            for (float& l : row) l = std::round(l);
        }
        if (trial % 5 == 0) row[rng() % vocab] = kNegInf;
        sampling_params p = random_params(rng);
        if (p.top_k == 1) p.top_k = 2;
        cpu::row_sampler sampler(vocab);
        const int32_t top = sampler.argmax(row.data());
        ASSERT_GE(top, 0);
        const uint64_t kept = sampler.build_distribution(row.data(), top, request_of(p));
        const std::vector<uint64_t> expected = ds::testing::reference_kept_mass(row, p);
        uint64_t expected_total = 0;
        for (int32_t i = 0; i < vocab; ++i) {
            ASSERT_EQ(sampler.kept_mass_of(i), expected[static_cast<size_t>(i)])
                << "trial " << trial << " token " << i << " top_k " << p.top_k << " top_p " << p.top_p << " min_p "
                << p.min_p;
            expected_total += expected[static_cast<size_t>(i)];
        }
        ASSERT_EQ(kept, expected_total);
        // The inverse CDF visits kept tokens in index order.
        uint64_t prefix = 0;
        for (int32_t i = 0; i < vocab; ++i) {
            if (expected[static_cast<size_t>(i)] == 0) continue;
            EXPECT_EQ(sampler.token_at(prefix, -1), i);
            prefix += expected[static_cast<size_t>(i)];
            EXPECT_EQ(sampler.token_at(prefix - 1, -1), i);
        }
        EXPECT_EQ(sampler.token_at(kept, -1), -1);
    }
}

// --- Invariance: a request's token depends on nothing but its own row, params and position ------

TEST(Invariance, TokenIndependentOfBatchRowAndNeighbours) {
    constexpr int32_t kVocab = 500;
    constexpr int32_t kBs = 9;
    std::mt19937_64 rng(77);
    for (int trial = 0; trial < 30; ++trial) {
        const std::vector<float> row = random_row(rng, kVocab, 2.0f);
        const sampling_params subject = random_params(rng);
        int32_t reference_token = -2;
        for (int32_t place : {0, 4, 8}) {
            backend_harness h(small_config(kVocab, kBs, 1, 32, 1 + place % 2));
            std::vector<float> logits;
            std::vector<int32_t> slots;
            std::vector<int64_t> positions;
            for (int32_t b = 0; b < kBs; ++b) {
                const int32_t slot = b == place ? 20 + place : b + 1;
                if (b == place) {
                    h.register_request(slot, subject);
                    logits.insert(logits.end(), row.begin(), row.end());
                } else {
                    h.register_request(slot, random_params(rng));
                    const std::vector<float> other = random_row(rng, kVocab, 2.0f);
                    logits.insert(logits.end(), other.begin(), other.end());
                }
                slots.push_back(slot);
                positions.push_back(b == place ? 123 : static_cast<int64_t>(rng() % 1000));
            }
            ASSERT_TRUE(h.run(step_kind::sample, make_step(logits, kVocab, slots, positions)).is_ok());
            const int32_t token = h.predict(place, 0);
            if (reference_token == -2) reference_token = token;
            EXPECT_EQ(token, reference_token) << "trial " << trial << " place " << place;
        }
    }
}

TEST(Invariance, ThreadCountDoesNotChangeOutputs) {
    constexpr int32_t kVocab = 4096;
    constexpr int32_t kBs = 64;
    constexpr int32_t kN = 3;
    std::mt19937_64 rng(5);
    std::vector<float> logits;
    for (int32_t r = 0; r < kBs * kN; ++r) {
        const std::vector<float> row = random_row(rng, kVocab, 2.5f);
        logits.insert(logits.end(), row.begin(), row.end());
    }
    std::vector<int32_t> slots;
    std::vector<int64_t> positions;
    std::vector<int32_t> candidates;
    std::vector<sampling_params> params;
    for (int32_t b = 0; b < kBs; ++b) {
        slots.push_back(b + 1);
        positions.push_back(b * 3);
        params.push_back(random_params(rng));
        for (int32_t j = 0; j < kN; ++j) candidates.push_back(static_cast<int32_t>(rng() % 8));
    }
    std::vector<int32_t> outputs[2];
    for (int threads : {1, 4}) {
        backend_harness h(small_config(kVocab, kBs, kN, kBs + 1, threads));
        for (int32_t b = 0; b < kBs; ++b) h.register_request(b + 1, params[static_cast<size_t>(b)]);
        ASSERT_TRUE(h.run(step_kind::verify, make_step(logits, kVocab, slots, positions, kN, &candidates)).is_ok());
        outputs[threads == 1 ? 0 : 1] = h.packed;
    }
    EXPECT_EQ(outputs[0], outputs[1]);
}

TEST(Invariance, SampleEqualsVerifyWithoutDrafts) {
    constexpr int32_t kVocab = 300;
    std::mt19937_64 rng(11);
    backend_harness h(small_config(kVocab, 16, 1, 17));
    std::vector<float> logits;
    std::vector<int32_t> slots;
    std::vector<int64_t> positions;
    std::vector<int32_t> anchors;
    for (int32_t b = 0; b < 16; ++b) {
        h.register_request(b + 1, random_params(rng));
        const std::vector<float> row = random_row(rng, kVocab, 2.0f);
        logits.insert(logits.end(), row.begin(), row.end());
        slots.push_back(b + 1);
        positions.push_back(b * 100);
        anchors.push_back(0);
    }
    ASSERT_TRUE(h.run(step_kind::sample, make_step(logits, kVocab, slots, positions)).is_ok());
    const std::vector<int32_t> sampled = h.packed;
    ASSERT_TRUE(h.run(step_kind::verify, make_step(logits, kVocab, slots, positions, 1, &anchors)).is_ok());
    EXPECT_EQ(h.packed, sampled);
}

// --- Greedy, masks, NaN and errors ----------------------------------------------------------------

TEST(Greedy, IgnoresNanAndBreaksTiesToLowestIndex) {
    backend_harness h(small_config(8, 3, 1, 4));
    sampling_params greedy;
    greedy.temperature = 0.0f;
    sampling_params top1;
    top1.top_k = 1;  // also greedy
    h.register_request(1, greedy);
    h.register_request(2, top1);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> logits{
        nan,  1.0f, 3.0f, 3.0f, nan,  2.0f, 0.0f, 3.0f,  // tie at 2, 3, 7 -> 2
        0.0f, 5.0f, nan,  5.0f, 1.0f, 1.0f, 1.0f, 1.0f,  // tie at 1, 3 -> 1
        nan,  nan,  nan,  nan,  nan,  nan,  nan,  nan,   // nothing allowed -> -1 and an error flag
    };
    const std::vector<int32_t> slots{1, 2, 0};
    const std::vector<int64_t> positions{0, 0, 0};
    ASSERT_TRUE(h.run(step_kind::sample, make_step(logits, 8, slots, positions)).is_ok());
    EXPECT_EQ(h.predict(0, 0), 2);
    EXPECT_EQ(h.predict(1, 0), 1);
    EXPECT_EQ(h.predict(2, 0), -1);
    EXPECT_EQ(h.row_error, (std::vector<uint8_t>{0, 0, 1}));
    EXPECT_TRUE(std::isnan(h.logprobs[2]));
}

TEST(Bitmask, MaskedTokensAreNeverSampledAndAllMaskedRowsFail) {
    constexpr int32_t kVocab = 40;  // two words, the second partly beyond V
    backend_harness h(small_config(kVocab, 64, 1, 65));
    std::mt19937_64 rng(3);
    std::vector<float> logits;
    std::vector<uint32_t> mask;
    std::vector<int32_t> slots;
    std::vector<int64_t> positions;
    for (int32_t b = 0; b < 64; ++b) {
        sampling_params p;
        p.temperature = b == 0 ? 0.0f : 2.0f;
        p.seed = static_cast<uint64_t>(b);
        h.register_request(b + 1, p);
        for (int32_t i = 0; i < kVocab; ++i) logits.push_back(i == 5 ? 10.0f : 0.0f);  // 5 is the favourite
        mask.push_back(b == 63 ? 0u : 0xAAAAAAAAu);  // odd tokens only (last row: nothing)
        mask.push_back(b == 63 ? 0u : 0x000000AAu);
        slots.push_back(b + 1);
        positions.push_back(b);
    }
    step_input step = make_step(logits, kVocab, slots, positions);
    step.bitmask = mask.data();
    ASSERT_TRUE(h.run(step_kind::sample, step).is_ok());
    EXPECT_EQ(h.predict(0, 0), 5);  // greedy: best allowed
    for (int32_t b = 1; b < 63; ++b) {
        const int32_t t = h.predict(b, 0);
        EXPECT_EQ(t % 2, 1) << t;
        EXPECT_LT(t, kVocab);
        EXPECT_EQ(h.row_error[static_cast<size_t>(b)], 0);
    }
    EXPECT_EQ(h.predict(63, 0), -1);
    EXPECT_EQ(h.row_error[63], 1);
}

TEST(VerifyErrors, AllMaskedRowEndsTheChainWithAnError) {
    backend_harness h(small_config(8, 1, 3, 2));
    sampling_params p;
    h.register_request(1, p);
    std::vector<float> logits(24, 0.0f);
    logits[3] = 10.0f;
    const std::vector<uint32_t> mask{0x08u, 0x0u, 0xFFu};  // row 0: only 3; row 1: nothing
    const std::vector<int32_t> slots{1};
    const std::vector<int64_t> positions{0};
    const std::vector<int32_t> candidates{0, 3, 4};
    step_input step = make_step(logits, 8, slots, positions, 3, &candidates);
    step.bitmask = mask.data();
    ASSERT_TRUE(h.run(step_kind::verify, step).is_ok());
    EXPECT_EQ(h.accept_length(0), 2);  // draft 3 has probability 1 under row 0
    EXPECT_EQ(h.predict(0, 0), 3);
    EXPECT_EQ(h.predict(0, 1), -1);
    EXPECT_EQ(h.row_error[0], 1);
}

// --- Penalties, bias, logprobs, dtypes -------------------------------------------------------------

TEST(Penalties, AdjustSeenTokensAndCountsFollowCommittedTokens) {
    backend_harness h(small_config(4, 1, 1, 2));
    sampling_params p;
    p.temperature = 0.0f;
    p.presence_penalty = 0.5f;
    h.register_request(1, p);
    const std::vector<float> logits{2.0f, 1.8f, 1.0f, 0.0f};
    const std::vector<int32_t> slots{1};
    const std::vector<int64_t> positions{0};
    const step_input step = make_step(logits, 4, slots, positions);
    // Step 1: nothing seen yet -> token 0. Committing it penalises token 0 by 0.5 -> token 1 next.
    ASSERT_TRUE(h.run(step_kind::sample, step).is_ok());
    EXPECT_EQ(h.predict(0, 0), 0);
    const step_output out{h.packed.data(), h.accept_index.data(), h.logprobs.data(), h.row_error.data()};
    ASSERT_TRUE(h.backend->commit_tokens(step, out).is_ok());
    ASSERT_TRUE(h.run(step_kind::sample, step).is_ok());
    EXPECT_EQ(h.predict(0, 0), 1);

    // Frequency: 2 occurrences of token 0 at 0.2 each -> 1.6 < 1.8 -> token 1.
    sampling_params f;
    f.temperature = 0.0f;
    f.frequency_penalty = 0.2f;
    const int32_t history[] = {0, 0};
    ASSERT_TRUE(h.backend->pool().register_request(1, f, history, 2).is_ok());
    ASSERT_TRUE(h.run(step_kind::sample, step).is_ok());
    EXPECT_EQ(h.predict(0, 0), 1);

    // Repetition 1.25 on token 0: 2.0 / 1.25 = 1.6 < 1.8 -> token 1; negative logits are multiplied.
    sampling_params r;
    r.temperature = 0.0f;
    r.repetition_penalty = 1.25f;
    ASSERT_TRUE(h.backend->pool().register_request(1, r, history, 1).is_ok());
    ASSERT_TRUE(h.run(step_kind::sample, step).is_ok());
    EXPECT_EQ(h.predict(0, 0), 1);

    // Re-registering resets the counts.
    ASSERT_TRUE(h.backend->pool().register_request(1, p).is_ok());
    ASSERT_TRUE(h.run(step_kind::sample, step).is_ok());
    EXPECT_EQ(h.predict(0, 0), 0);
}

TEST(LogitBias, AddsToTheLogitBeforeSampling) {
    backend_harness h(small_config(6, 1, 1, 2));
    sampling_params p;
    p.temperature = 0.0f;
    p.logit_bias = {{4, 5.0f}, {0, -100.0f}};
    h.register_request(1, p);
    const std::vector<float> logits{3.0f, 2.0f, 1.0f, 0.0f, -1.0f, 0.5f};
    const std::vector<int32_t> slots{1};
    const std::vector<int64_t> positions{0};
    ASSERT_TRUE(h.run(step_kind::sample, make_step(logits, 6, slots, positions)).is_ok());
    EXPECT_EQ(h.predict(0, 0), 4);  // -1 + 5 = 4 beats 3 - 100 and 2
}

TEST(Logprobs, WithinOneMillionthOfLongDoubleReference) {
    constexpr int32_t kVocab = 2000;
    std::mt19937_64 rng(8);
    backend_harness h(small_config(kVocab, 32, 1, 33));
    std::vector<float> logits;
    std::vector<int32_t> slots;
    std::vector<int64_t> positions;
    for (int32_t b = 0; b < 32; ++b) {
        h.register_request(b + 1, random_params(rng));
        const std::vector<float> row = random_row(rng, kVocab, 4.0f);
        logits.insert(logits.end(), row.begin(), row.end());
        slots.push_back(b + 1);
        positions.push_back(b);
    }
    ASSERT_TRUE(h.run(step_kind::sample, make_step(logits, kVocab, slots, positions)).is_ok());
    for (int32_t b = 0; b < 32; ++b) {
        const std::vector<float> row(logits.begin() + b * kVocab, logits.begin() + (b + 1) * kVocab);
        const sampling_params& params = h.backend->pool().params(b + 1);
        const long double expected = is_greedy(params)
                                         ? ds::testing::reference_logprob(row, h.predict(b, 0))
                                         : ds::testing::reference_processed_logprob(row, params, h.predict(b, 0));
        EXPECT_NEAR(h.logprobs[static_cast<size_t>(b)], static_cast<double>(expected), 1e-5);
    }
}

TEST(Dtypes, HalfPrecisionRowsSampleLikeTheirFloatValues) {
    constexpr int32_t kVocab = 256;
    std::mt19937_64 rng(21);
    std::vector<uint16_t> bf16(8 * kVocab);
    std::vector<uint16_t> f16(8 * kVocab);
    std::vector<float> from_bf16(8 * kVocab);
    std::vector<float> from_f16(8 * kVocab);
    for (size_t i = 0; i < bf16.size(); ++i) {
        bf16[i] = static_cast<uint16_t>(0x3F00 + rng() % 0x180);  // about 0.5 .. 6
        f16[i] = static_cast<uint16_t>(0x3800 + rng() % 0xA00);
        from_bf16[i] = ds::detmath::bf16_bits_to_float(bf16[i]);
        from_f16[i] = ds::detmath::fp16_bits_to_float(f16[i]);
    }
    std::vector<int32_t> slots;
    std::vector<int64_t> positions;
    backend_harness h(small_config(kVocab, 8, 1, 9));
    for (int32_t b = 0; b < 8; ++b) {
        sampling_params p = random_params(rng);
        h.register_request(b + 1, p);
        slots.push_back(b + 1);
        positions.push_back(b);
    }
    struct variant {
        const void* data;
        logits_dtype dtype;
        const std::vector<float>* as_float;
    };
    for (const variant& v :
         {variant{bf16.data(), logits_dtype::bf16, &from_bf16}, variant{f16.data(), logits_dtype::f16, &from_f16}}) {
        step_input half = make_step(*v.as_float, kVocab, slots, positions);
        ASSERT_TRUE(h.run(step_kind::sample, half).is_ok());
        const std::vector<int32_t> expected = h.packed;
        half.logits.data = v.data;
        half.logits.dtype = v.dtype;
        ASSERT_TRUE(h.run(step_kind::sample, half).is_ok());
        EXPECT_EQ(h.packed, expected) << dtype_name(v.dtype);
    }
}

// --- Parameter pool --------------------------------------------------------------------------------

TEST(ParamPool, SlotZeroIsNeutralAndReleaseRestoresDefaults) {
    param_pool pool(small_config(16, 4, 1, 4));
    EXPECT_LT(pool.params(0).temperature, exact::kGreedyTemperature);
    EXPECT_FALSE(pool.register_request(0, sampling_params{}).is_ok());
    sampling_params p;
    p.temperature = 0.5f;
    p.presence_penalty = 1.0f;
    const int32_t tokens[] = {3, 3, 4};
    ASSERT_TRUE(pool.register_request(2, p, tokens, 3).is_ok());
    EXPECT_EQ(pool.params(2).temperature, 0.5f);
    ASSERT_EQ(pool.seen_tokens(2).size, 2);
    EXPECT_EQ(pool.seen_tokens(2).data[0].count, 2);
    ASSERT_TRUE(pool.release(2).is_ok());
    EXPECT_EQ(pool.params(2).temperature, 1.0f);
    EXPECT_EQ(pool.seen_tokens(2).size, 0);
}

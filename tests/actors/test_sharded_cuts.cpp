// Exact sharded mode's top-k / top-p cuts (docs/architecture.md, Modes): rows built to land on the edges of
// the candidate exchange (ties in Q across ranks, k = 128, a boundary exactly at a summarized
// depth, a non-deciding rank at the 255-candidate cap) and on its radix-select fallback (a flat
// row with top_p only, one candidate past the cap, one token past the deepest summary) give the
// CPU backend's outputs on the full rows for TP 1, 2, 3, 4 and 8, as do masked and all-NaN rows.
// The bytes the ranks receive show which way each row was settled.
#include <distsample/group.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <utility>

#include "support/backend_harness.h"

namespace ds {
namespace {

// Divisible by 1, 2, 3, 4 and 8; even a TP-8 shard (1,200 tokens) is deeper than the 1,024
// largest masses a rank summarizes.
constexpr int32_t kVocab = 9600;
constexpr int32_t kRows = 2;  // two requests per step: two draws from each row
constexpr int32_t kRadixRounds = 6;
constexpr int32_t kHistogramWords = 512;

// What one radix-select pass alone brings the ranks: 6 rounds of a 512-word histogram per row,
// all-reduced across tp ranks. The candidate exchange of these rows stays far below it.
int64_t radix_pass_bytes(int32_t tp) {
    return int64_t{tp} * (tp - 1) * kRadixRounds * kHistogramWords * sizeof(uint64_t);
}

enum class settled_by { candidates, radix };

struct cut_case {
    std::string name;
    sampling_params params;
    std::function<void(std::mt19937_64&, float*)> fill;  // one row of kVocab logits
    settled_by expected = settled_by::candidates;        // at TP >= 2
    std::vector<uint32_t> mask_row;                      // empty: no bitmask
};

cut_case make_case(std::string name, const sampling_params& params, std::function<void(std::mt19937_64&, float*)> fill,
                   settled_by expected = settled_by::candidates, std::vector<uint32_t> mask_row = {}) {
    return cut_case{std::move(name), params, std::move(fill), expected, std::move(mask_row)};
}

float low() { return -40.0f; }  // mass 0 at temperature 1: never kept

void gaussian(std::mt19937_64& rng, float* row) {
    std::normal_distribution<float> g(0.0f, 2.0f);
    for (int32_t i = 0; i < kVocab; ++i) row[i] = g(rng);
}

// A language-model-like row: Zipf-shaped with noise, most of the mass in the first shard, and a
// few hot tokens on the other ranks.
void zipf(std::mt19937_64& rng, float* row) {
    std::uniform_real_distribution<float> noise(-0.6f, 0.6f);
    for (int32_t i = 0; i < kVocab; ++i) row[i] = -1.1f * std::log(1.0f + static_cast<float>(i)) + noise(rng);
    for (const int32_t hot : {kVocab / 3, kVocab / 2 + 5, kVocab - 9}) row[hot] += 6.0f;
}

// Tokens [0, count) with strictly decreasing logits, all others without mass: the whole prefix
// on rank 0, so a boundary at the k-th token lies exactly at a summarized depth when k is one.
void staircase(float* row, int32_t count) {
    for (int32_t i = 0; i < kVocab; ++i) row[i] = i < count ? -0.01f * static_cast<float>(i) : low();
}

// `per_group` equal logits at the start of the first and of the middle shard of a TP-2 split
// (two different ranks for every TP >= 2), nothing else with mass.
void two_tied_groups(float* row, int32_t per_group) {
    for (int32_t i = 0; i < kVocab; ++i) row[i] = low();
    for (int32_t i = 0; i < per_group; ++i) {
        row[i] = 0.0f;
        row[kVocab / 2 + i] = 0.0f;
    }
}

// Ten tokens of equal logit in every eighth of the vocabulary (so on every rank for any TP),
// far above the rest.
void ties_everywhere(std::mt19937_64& rng, float* row) {
    std::uniform_real_distribution<float> tail(-9.0f, -8.0f);
    for (int32_t i = 0; i < kVocab; ++i) row[i] = tail(rng);
    for (int32_t part = 0; part < 8; ++part) {
        for (int32_t t = 0; t < 10; ++t) row[part * (kVocab / 8) + 37 * t] = 5.0f;
    }
}

sampling_params with(float temperature, int32_t top_k, float top_p, float min_p = 0.0f) {
    sampling_params p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    return p;
}

std::vector<cut_case> cases() {
    std::vector<cut_case> c;
    c.push_back(make_case(
        "flat row, top_p only", with(1.0f, -1, 0.5f),
        [](std::mt19937_64& rng, float* row) {
            std::uniform_real_distribution<float> u(-0.5f, 0.5f);
            for (int32_t i = 0; i < kVocab; ++i) row[i] = u(rng);
        },
        settled_by::radix));
    c.push_back(make_case("ties in Q across ranks, top_k cuts inside them", with(1.0f, 13, 1.0f), ties_everywhere));
    c.push_back(make_case("ties in Q across ranks, top_p cuts inside them", with(1.0f, -1, 0.5f), ties_everywhere));
    c.push_back(make_case("k = 128", with(0.8f, 128, 1.0f), gaussian));
    c.push_back(make_case("k = 128 then top_p and min_p", with(1.3f, 128, 0.8f, 0.01f), gaussian));
    c.push_back(make_case("top_p only on a Zipf row with hot tokens", with(0.8f, -1, 0.9f), zipf));
    for (const int32_t k : {4, 16, 64, 256, 1024, 5, 17, 65, 257}) {
        c.push_back(make_case("boundary at the k-th token of one rank, k = " + std::to_string(k), with(1.0f, k, 1.0f),
                              [](std::mt19937_64&, float* row) { staircase(row, 1200); }));
    }
    c.push_back(make_case(
        "one token past the deepest summary, k = 1025", with(1.0f, 1025, 1.0f),
        [](std::mt19937_64&, float* row) { staircase(row, 1200); }, settled_by::radix));
    c.push_back(make_case("a second rank at the candidate cap (255)", with(1.0f, -1, 0.9f),
                          [](std::mt19937_64&, float* row) { two_tied_groups(row, 255); }));
    c.push_back(make_case(
        "a second rank past the candidate cap (256)", with(1.0f, -1, 0.9f),
        [](std::mt19937_64&, float* row) { two_tied_groups(row, 256); }, settled_by::radix));
    std::vector<uint32_t> every_seventh(static_cast<size_t>(bitmask_words(kVocab)), 0);
    for (int32_t i = 0; i < kVocab; i += 7) every_seventh[static_cast<size_t>(i / 32)] |= 1u << (i % 32);
    c.push_back(make_case("masked row: every seventh token allowed", with(1.0f, 40, 0.7f), gaussian,
                          settled_by::candidates, every_seventh));
    c.push_back(make_case("masked row: nothing allowed", with(1.0f, 40, 0.7f), gaussian, settled_by::candidates,
                          std::vector<uint32_t>(static_cast<size_t>(bitmask_words(kVocab)), 0)));
    c.push_back(make_case("all-NaN row", with(1.0f, -1, 0.9f), [](std::mt19937_64&, float* row) {
        for (int32_t i = 0; i < kVocab; ++i) row[i] = NAN;
    }));
    return c;
}

group_config sharded_config(int32_t tp) {
    group_config c;
    c.distribution.tp = tp;
    c.limits.vocab_size = kVocab;
    c.limits.max_batch = kRows;
    c.limits.max_tokens_per_req = 1;
    c.limits.max_slots = kRows + 1;
    c.distribution.mode = dist_mode::sharded;
    c.distribution.step_timeout = std::chrono::milliseconds(10000);
    c.transport.timeout = std::chrono::milliseconds(10000);
    return c;
}

// On the CPU shard primitives and the CUDA ones (skipped without a GPU).
class ShardedCuts : public ::testing::TestWithParam<std::tuple<int32_t, backend_kind>> {};

TEST_P(ShardedCuts, EqualTheBackendOnFullRowsAndSettleTheExpectedWay) {
    const auto [tp, backend] = GetParam();
    group_config config = sharded_config(tp);
    config.backend = backend;
    std::unique_ptr<group> g;
    status st = group::create(config, g);
    if (st.code == status_code::unsupported) GTEST_SKIP() << st.message;
    ASSERT_TRUE(st.is_ok()) << st.message;
    std::mt19937_64 rng(77);
    for (const cut_case& c : cases()) {
        SCOPED_TRACE(c.name + ", tp = " + std::to_string(tp));
        std::vector<float> logits(static_cast<size_t>(kRows) * kVocab);
        for (int32_t b = 0; b < kRows; ++b) c.fill(rng, logits.data() + static_cast<size_t>(b) * kVocab);
        const std::vector<int32_t> slots = {1, 2};
        const std::vector<int64_t> positions = {11, 12};
        std::vector<uint32_t> bitmask;
        for (int32_t b = 0; b < kRows && !c.mask_row.empty(); ++b)
            bitmask.insert(bitmask.end(), c.mask_row.begin(), c.mask_row.end());

        testing::backend_harness reference(testing::small_config(kVocab, kRows, 1, kRows + 1));
        for (int32_t b = 0; b < kRows; ++b) {
            sampling_params p = c.params;
            p.seed = 500 + static_cast<uint64_t>(b);
            reference.register_request(slots[static_cast<size_t>(b)], p);
            ASSERT_TRUE(g->register_request(slots[static_cast<size_t>(b)], p).is_ok());
        }
        step_input in = testing::make_step(logits, kVocab, slots, positions);
        in.bitmask = bitmask.empty() ? nullptr : bitmask.data();
        st = reference.run(step_kind::sample, in);
        ASSERT_TRUE(st.is_ok()) << st.message;

        step_request request;
        request.kind = step_kind::sample;
        request.tokens_per_req = 1;
        request.slots = slots;
        request.positions = positions;
        request.bitmask = bitmask;
        request.shards = split_vocab(logits_view{logits.data(), logits_dtype::f32, kRows, kVocab, kVocab}, tp);
        const step_reply reply = g->step(request);
        ASSERT_TRUE(reply.result.is_ok()) << reply.result.message;
        EXPECT_EQ(reply.outputs.packed, reference.packed);
        EXPECT_EQ(reply.outputs.row_error, reference.row_error);
        for (size_t i = 0; i < reference.logprobs.size(); ++i) {
            const float expected = reference.logprobs[i];
            const float got = reply.outputs.logprobs[i];
            if (std::isnan(expected)) {
                EXPECT_TRUE(std::isnan(got)) << "logprob " << i;
            } else {
                EXPECT_NEAR(expected, got, 1e-5) << "logprob " << i;
            }
        }
        if (tp >= 2) {
            int64_t received = 0;
            for (const step_timing& t : reply.rank_timing) received += t.rank_received_bytes;
            if (c.expected == settled_by::radix) {
                EXPECT_GE(received, radix_pass_bytes(tp)) << "expected the radix-select fallback";
            } else {
                EXPECT_LT(received, radix_pass_bytes(tp)) << "expected the candidate exchange";
            }
        }
        for (const int32_t slot : slots) ASSERT_TRUE(g->release(slot).is_ok());
    }
}

INSTANTIATE_TEST_SUITE_P(Tp, ShardedCuts,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8),
                                            ::testing::Values(backend_kind::cpu, backend_kind::cuda)),
                         [](const auto& param_info) {
                             return std::string(backend_name(std::get<1>(param_info.param))) + "_tp" +
                                    std::to_string(std::get<0>(param_info.param));
                         });

}  // namespace
}  // namespace ds

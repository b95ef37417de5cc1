// Distribution tests with fixed seeds (so they are deterministic): sampled tokens follow the
// filtered target distribution, target-only verification with thresholds 1.0 emits its first
// token exactly as plain sampling would, whatever the draft, and later tokens of a chain see the
// accepted drafts as emitted (penalties).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include "kernels/exact_rules.h"
#include "support/backend_harness.h"
#include "support/chi_square.h"
#include "support/reference_sampler.h"

using namespace ds;
using ds::testing::backend_harness;
using ds::testing::small_config;

namespace {

constexpr int32_t kVocab = 48;
constexpr int32_t kBatch = 1000;
constexpr int32_t kDraws = 20000;
constexpr double kMinPValue = 0.001;

std::vector<float> test_row() {
    std::mt19937_64 rng(2024);
    std::normal_distribution<float> normal(0.0f, 1.5f);
    std::vector<float> row(kVocab);
    for (float& l : row) l = normal(rng);
    row[7] = row[9];  // a tie, to exercise the index order
    return row;
}

std::vector<double> expected_distribution(const std::vector<float>& row, const sampling_params& p) {
    const std::vector<uint64_t> kept = ds::testing::reference_kept_mass(row, p);
    double total = 0.0;
    for (uint64_t q : kept) total += static_cast<double>(q);
    std::vector<double> probs(kept.size());
    for (size_t i = 0; i < kept.size(); ++i) probs[i] = static_cast<double>(kept[i]) / total;
    return probs;
}

// Runs kDraws requests (kBatch per step, every request its own seed) and counts the first
// emitted token. With n == 2, each request verifies `draft` against `row` (row 1 arbitrary).
std::vector<int64_t> draw_counts(const std::vector<float>& row, sampling_params p, int32_t n, int32_t draft) {
    backend_harness h(small_config(kVocab, kBatch, n, kBatch + 1, 2));
    std::vector<float> logits;
    for (int32_t b = 0; b < kBatch * n; ++b) logits.insert(logits.end(), row.begin(), row.end());
    std::vector<int32_t> slots(kBatch);
    std::vector<int64_t> positions(kBatch, 17);
    std::vector<int32_t> candidates;
    for (int32_t b = 0; b < kBatch; ++b) {
        slots[static_cast<size_t>(b)] = b + 1;
        for (int32_t j = 0; j < n; ++j) candidates.push_back(j == 1 ? draft : 0);
    }
    std::vector<int64_t> counts(kVocab, 0);
    for (int32_t round = 0; round < kDraws / kBatch; ++round) {
        for (int32_t b = 0; b < kBatch; ++b) {
            p.seed = static_cast<uint64_t>(round) * kBatch + static_cast<uint64_t>(b) + 1;
            h.register_request(b + 1, p);
        }
        step_input step = ds::testing::make_step(logits, kVocab, slots, positions, n, n > 1 ? &candidates : nullptr);
        const status s = h.run(n > 1 ? step_kind::verify : step_kind::sample, step);
        EXPECT_TRUE(s.is_ok()) << s.message;
        for (int32_t b = 0; b < kBatch; ++b) {
            const int32_t token = h.predict(b, 0);
            if (token >= 0) ++counts[static_cast<size_t>(token)];
        }
    }
    return counts;
}

struct filter_case {
    const char* name;
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
};

sampling_params params_of(const filter_case& c) {
    sampling_params p;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    return p;
}

const filter_case kCases[] = {
    {"plain", 1.0f, -1, 1.0f, 0.0f}, {"temperature", 0.6f, -1, 1.0f, 0.0f}, {"top_k", 1.0f, 6, 1.0f, 0.0f},
    {"top_p", 1.0f, -1, 0.7f, 0.0f}, {"min_p", 1.0f, -1, 1.0f, 0.15f},      {"combined", 0.8f, 12, 0.9f, 0.05f},
};

class FilteredDistribution : public ::testing::TestWithParam<filter_case> {};

}  // namespace

TEST_P(FilteredDistribution, SampleMatchesFilteredTarget) {
    const std::vector<float> row = test_row();
    const sampling_params p = params_of(GetParam());
    const std::vector<double> expected = expected_distribution(row, p);
    const std::vector<int64_t> counts = draw_counts(row, p, 1, 0);
    const ds::testing::chi_square_result r = ds::testing::chi_square_test(counts, expected);
    EXPECT_EQ(r.unexpected, 0) << "tokens outside the filtered set were sampled";
    EXPECT_GT(r.p_value, kMinPValue) << "chi2=" << r.statistic << " dof=" << r.dof;
}

TEST_P(FilteredDistribution, TargetOnlyVerifyFirstTokenIsExactWhateverTheDraft) {
    const std::vector<float> row = test_row();
    const sampling_params p = params_of(GetParam());
    const std::vector<double> expected = expected_distribution(row, p);
    // A likely draft, an unlikely one, and one the filters remove (or the least likely).
    int32_t likely = 0;
    int32_t unlikely = 0;
    for (int32_t i = 0; i < kVocab; ++i) {
        if (expected[static_cast<size_t>(i)] > expected[static_cast<size_t>(likely)]) likely = i;
        if (expected[static_cast<size_t>(i)] < expected[static_cast<size_t>(unlikely)]) unlikely = i;
    }
    int32_t middling = (likely + 1) % kVocab;
    for (int32_t draft : {likely, middling, unlikely}) {
        const std::vector<int64_t> counts = draw_counts(row, p, 2, draft);
        const ds::testing::chi_square_result r = ds::testing::chi_square_test(counts, expected);
        EXPECT_EQ(r.unexpected, 0) << "draft " << draft;
        EXPECT_GT(r.p_value, kMinPValue) << "draft " << draft << " chi2=" << r.statistic << " dof=" << r.dof;
    }
}

INSTANTIATE_TEST_SUITE_P(Filters, FilteredDistribution, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<filter_case>& param_info) {
                             return std::string(param_info.param.name);
                         });

// Penalties at every verify position: given that the draft was accepted as the first token, the
// second emitted token must follow the target with that draft counted as emitted, exactly as
// sampling it step by step after committing the first token would.
TEST(PenalisedVerify, SecondTokenSeesTheAcceptedDraftAsEmitted) {
    const std::vector<float> row = test_row();
    sampling_params p;
    p.frequency_penalty = 1.2f;
    p.presence_penalty = 0.4f;
    p.repetition_penalty = 1.3f;
    const std::vector<double> first = expected_distribution(row, p);
    const auto draft = static_cast<int32_t>(std::max_element(first.begin(), first.end()) - first.begin());
    std::vector<float> penalised = row;  // the draft emitted once before row 1
    penalised[static_cast<size_t>(draft)] =
        exact::penalised_logit(row[static_cast<size_t>(draft)], 1, {p.presence_penalty, p.frequency_penalty,
                                                                    p.repetition_penalty});
    const std::vector<double> second = expected_distribution(penalised, p);

    backend_harness h(small_config(kVocab, kBatch, 3, kBatch + 1, 2));
    std::vector<float> logits;
    for (int32_t r = 0; r < kBatch * 3; ++r) logits.insert(logits.end(), row.begin(), row.end());
    std::vector<int32_t> slots(kBatch);
    std::vector<int64_t> positions(kBatch, 1000);
    std::vector<int32_t> candidates;
    for (int32_t b = 0; b < kBatch; ++b) {
        slots[static_cast<size_t>(b)] = b + 1;
        // Anchor, the likely draft, then a draft the second row rarely accepts.
        candidates.insert(candidates.end(), {0, draft, (draft + 1) % kVocab});
    }
    std::vector<int64_t> first_counts(kVocab, 0), second_counts(kVocab, 0);
    for (int32_t round = 0; round < 3 * kDraws / kBatch; ++round) {
        for (int32_t b = 0; b < kBatch; ++b) {
            p.seed = static_cast<uint64_t>(round) * kBatch + static_cast<uint64_t>(b) + 1;
            h.register_request(b + 1, p);
        }
        const step_input step = ds::testing::make_step(logits, kVocab, slots, positions, 3, &candidates);
        ASSERT_TRUE(h.run(step_kind::verify, step).is_ok());
        for (int32_t b = 0; b < kBatch; ++b) {
            ++first_counts[static_cast<size_t>(h.predict(b, 0))];
            if (h.predict(b, 0) == draft) ++second_counts[static_cast<size_t>(h.predict(b, 1))];
        }
    }
    for (const auto& [name, counts, expected] :
         {std::tuple{"first", first_counts, first}, std::tuple{"second", second_counts, second}}) {
        const ds::testing::chi_square_result r = ds::testing::chi_square_test(counts, expected);
        EXPECT_EQ(r.unexpected, 0) << name;
        EXPECT_GT(r.p_value, kMinPValue) << name << " chi2=" << r.statistic << " dof=" << r.dof;
    }
    // Without the draft counted, row 1 would follow `first`: that must be rejected.
    EXPECT_LT(ds::testing::chi_square_test(second_counts, first).p_value, kMinPValue);
}

TEST(ChiSquare, PValuesMatchKnownQuantiles) {
    EXPECT_NEAR(ds::testing::chi_square_p_value(3.841, 1), 0.05, 1e-3);
    EXPECT_NEAR(ds::testing::chi_square_p_value(18.307, 10), 0.05, 1e-3);
    EXPECT_NEAR(ds::testing::chi_square_p_value(29.588, 10), 0.001, 1e-4);
    // A biased sampler is caught: observed counts skewed from uniform.
    const std::vector<int64_t> skewed{1200, 1000, 1000, 800};
    const std::vector<double> uniform(4, 0.25);
    EXPECT_LT(ds::testing::chi_square_test(skewed, uniform).p_value, kMinPValue);
}

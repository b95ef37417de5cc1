// The exactness core: Philox known answers, the integer mass, the shared rules, fixed-point draws.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/det_math.h"
#include "kernels/exact_rules.h"

namespace dm = ds::detmath;


// Random123's kat_vectors for philox4x32 with 10 rounds: counter[4], key[2] -> output[4].
TEST(Philox, MatchesRandom123KnownAnswers) {
    struct kat {
        uint32_t counter[4];
        uint32_t key[2];
        uint32_t expected[4];
    };
    const kat vectors[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (const kat& v : vectors) {
        const dm::philox_out out = dm::philox4x32_10(v.counter, v.key);
        for (int i = 0; i < 4; ++i) EXPECT_EQ(out.v[i], v.expected[i]) << "word " << i;
    }
}

TEST(Philox, KeyLayoutIsSeedPositionDraftPurpose) {
    const uint64_t seed = 0x0123456789abcdefull;
    const uint64_t position = 0x00000002fedcba98ull;
    const uint32_t key[2] = {0x89abcdefu, 0x01234567u};
    const uint32_t counter[4] = {0xfedcba98u, 0x2u, 3u, 1u};
    const dm::philox_out out = dm::philox4x32_10(counter, key);
    EXPECT_EQ(dm::random_bits64(seed, position, 3, dm::draw_purpose::coin),
              (static_cast<uint64_t>(out.v[1]) << 32) | out.v[0]);
    // Every field changes the stream.
    const uint64_t base = dm::random_bits64(seed, position, 3, dm::draw_purpose::coin);
    EXPECT_NE(base, dm::random_bits64(seed + 1, position, 3, dm::draw_purpose::coin));
    EXPECT_NE(base, dm::random_bits64(seed, position + 1, 3, dm::draw_purpose::coin));
    EXPECT_NE(base, dm::random_bits64(seed, position, 4, dm::draw_purpose::coin));
    EXPECT_NE(base, dm::random_bits64(seed, position, 3, dm::draw_purpose::token));
}

TEST(TokenMass, WithinSevenTenMillionthsOfTheExactWeightAboveTwoToThe30) {
    // x = (l - max) * log2(e) / T over every 61st float in [-28, 0) at three temperatures.
    namespace ex = ds::exact;
    double worst = 0.0;
    int64_t checked = 0;
    for (float temperature : {1.0f, 0.7f, 1.9f}) {
        const float scale = ex::mass_scale(temperature);
        for (uint32_t bits = dm::float_as_bits(-0.0f) + 1; bits <= dm::float_as_bits(-28.0f); bits += 61) {
            const float l = dm::bits_as_float(bits);
            const long double exact = std::exp(static_cast<long double>(l) / temperature) * 1099511627776.0L;
            if (exact < 1073741824.0L) continue;  // below 2^30 the floor itself is the larger error
            const long double got = static_cast<long double>(ex::token_mass(l, 0.0f, scale));
            worst = std::max(worst, static_cast<double>(std::fabs(got - exact) / exact));
            ++checked;
        }
    }
    EXPECT_GT(checked, 1'000'000);
    EXPECT_LT(worst, 7e-7);
}

TEST(TokenMass, EdgeCases) {
    namespace ex = ds::exact;
    EXPECT_EQ(ex::token_mass(2.5f, 2.5f, ex::kUnitScale), ex::kMassOne);
    EXPECT_EQ(ex::token_mass(INFINITY, INFINITY, ex::kUnitScale), ex::kMassOne);
    EXPECT_EQ(ex::token_mass(1.0f, INFINITY, ex::kUnitScale), 0u);
    EXPECT_EQ(ex::token_mass(INFINITY, 0.0f, ex::kUnitScale), ex::kMassOne);  // above the maximum
    EXPECT_EQ(ex::token_mass(3.0f, 0.0f, ex::kUnitScale), ex::kMassOne);
    EXPECT_EQ(ex::token_mass(-INFINITY, 0.0f, ex::kUnitScale), 0u);
    EXPECT_EQ(ex::token_mass(NAN, 0.0f, ex::kUnitScale), 0u);
    EXPECT_EQ(ex::token_mass(-1.0f, 0.0f, 1.0f), ex::kMassOne / 2);  // 2^-1 exactly
    EXPECT_EQ(ex::token_mass(-40.0f, 0.0f, 1.0f), 1u);               // 2^-40 of the top token
    EXPECT_EQ(ex::token_mass(-41.0f, 0.0f, 1.0f), 0u);               // below it: no mass
    EXPECT_EQ(ex::token_mass(-1e-30f, 0.0f, ex::kUnitScale), ex::kMassOne);  // 2^r rounds to 1
    EXPECT_EQ(ex::min_p_mass_threshold(0.0f), 1u);
    EXPECT_EQ(ex::min_p_mass_threshold(1.0f), ex::kMassOne);
    EXPECT_EQ(ex::top_p_mass_target(1.0f, 12345), 12345u);
    EXPECT_EQ(ex::top_p_mass_target(0.5f, 3), 2u);  // ceil(1.5)
}

// The kernels' form for rows with a finite maximum gives token_mass's value for every logit such a
// row can hold: at or below the maximum, -inf and NaN, at every temperature's scale.
TEST(TokenMass, UnderAFiniteMaximumEqualsTheGeneralForm) {
    namespace ex = ds::exact;
    std::mt19937 rng(17);
    std::uniform_real_distribution<float> spread(-60.0f, 60.0f);
    std::uniform_real_distribution<float> below(0.0f, 80.0f);
    std::uniform_real_distribution<float> log_temperature(-13.8f, 4.6f);  // T in [1e-6, 100]
    const float special[] = {-INFINITY, NAN, -3.4e38f, 0.0f, -0.0f, -1e-30f, -1e-7f};
    int64_t checked = 0;
    for (int i = 0; i < 1'000'000; ++i) {
        const float max_logit = i % 1000 == 0 ? 3.4e38f : spread(rng);
        const float scale = ex::mass_scale(std::exp(log_temperature(rng)));
        float l = max_logit - below(rng) * (i % 3 == 0 ? 1e-4f : 1.0f);
        if (i % 97 == 0) l = max_logit;
        if (i % 101 == 0) l = std::nextafter(max_logit, -INFINITY);
        if (i % 103 == 0) l = special[(i / 103) % 7] + (i % 2 == 0 ? 0.0f : max_logit);
        if (!(l <= max_logit) && !std::isnan(l)) continue;
        ASSERT_EQ(ex::token_mass_under_finite_max(l, max_logit, scale), ex::token_mass(l, max_logit, scale))
            << "l " << l << " max " << max_logit << " scale " << scale;
        ++checked;
    }
    EXPECT_GT(checked, 950'000);
}

TEST(TokenMass, SumsOfAFullRowCannotWrap) {
    // The largest vocabulary, every token at the top weight: the sum still fits in 64 bits.
    const uint64_t sum = static_cast<uint64_t>(ds::exact::kMaxVocab) * ds::exact::kMassOne;
    EXPECT_EQ(sum / ds::exact::kMassOne, static_cast<uint64_t>(ds::exact::kMaxVocab));
}

TEST(ExactRules, AcceptanceNeverTakesADraftWithoutMass) {
    namespace ex = ds::exact;
    EXPECT_FALSE(ex::accepts_draft(0, ex::kMassOne, 0.0, 0.0f, 1.0f));  // threshold_single = 0
    EXPECT_TRUE(ex::accepts_draft(1, ex::kMassOne, 0.5, 0.0f, 1.0f));
    EXPECT_TRUE(ex::accepts_draft(ex::kMassOne / 2, ex::kMassOne, 0.5, 1.0f, 1.0f));   // coin <= p
    EXPECT_FALSE(ex::accepts_draft(ex::kMassOne / 2, ex::kMassOne, 0.6, 1.0f, 1.0f));  // coin > p
    const ex::residual all = ex::residual_after(100, 100);
    EXPECT_EQ(all.mass, 100u);
    EXPECT_FALSE(all.excludes_draft);
    const ex::residual rest = ex::residual_after(100, 30);
    EXPECT_EQ(rest.mass, 70u);
    EXPECT_TRUE(rest.excludes_draft);
}

TEST(ExactRules, PenaltiesCountDraftsBeforeTheRow) {
    namespace ex = ds::exact;
    const ex::penalties p{0.5f, 1.5f, 2.0f};
    EXPECT_EQ(ex::penalised_logit(4.0f, 2, p), 4.0f / 2.0f - 3.0f - 0.5f);
    EXPECT_EQ(ex::penalised_logit(-4.0f, 1, p), -8.0f - 1.5f - 0.5f);
    const int32_t drafts[] = {7, 3, 7, 9};
    EXPECT_EQ(ex::occurrences(drafts, 4, 7), 2);
    EXPECT_EQ(ex::occurrences(drafts, 2, 7), 1);
    EXPECT_TRUE(ex::first_occurrence(drafts, 1));
    EXPECT_FALSE(ex::first_occurrence(drafts, 2));
}

TEST(FixedPoint, MulHigh64IsFloorOfUniformTimesMass) {
    EXPECT_EQ(dm::mul_high64(0, 1000), 0u);
    EXPECT_EQ(dm::mul_high64(~uint64_t{0}, 1000), 999u);
    EXPECT_EQ(dm::mul_high64(uint64_t{1} << 63, 1000), 500u);
    EXPECT_EQ(dm::unit_double_to_bits(0.5), uint64_t{1} << 63);
    EXPECT_EQ(dm::unit_double_to_bits(1.0), ~uint64_t{0});
    EXPECT_EQ(dm::unit_double_to_bits(0.0), 0u);
    EXPECT_EQ(dm::bits_to_unit_double(uint64_t{1} << 63), 0.5);
}

TEST(HalfPrecision, ConvertsExactly) {
    EXPECT_EQ(dm::bf16_bits_to_float(0x3F80), 1.0f);
    EXPECT_EQ(dm::bf16_bits_to_float(0xC040), -3.0f);
    EXPECT_EQ(dm::fp16_bits_to_float(0x3C00), 1.0f);
    EXPECT_EQ(dm::fp16_bits_to_float(0xC000), -2.0f);
    EXPECT_EQ(dm::fp16_bits_to_float(0x7BFF), 65504.0f);
    EXPECT_EQ(dm::fp16_bits_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
    EXPECT_EQ(dm::fp16_bits_to_float(0xFC00), -INFINITY);
    EXPECT_TRUE(std::isnan(dm::fp16_bits_to_float(0x7E00)));
}

// The exactness core: Philox known answers, det_exp / det_log accuracy, fixed-point masses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/det_math.h"

namespace dm = ds::detmath;

namespace {

// Distance in units in the last place between two finite floats of the same sign.
int64_t ulp_distance(float a, float b) {
    int32_t ia = 0;
    int32_t ib = 0;
    std::memcpy(&ia, &a, 4);
    std::memcpy(&ib, &b, 4);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return std::llabs(static_cast<int64_t>(ia) - ib);
}

}  // namespace

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

TEST(DetExp, WithinOneUlpOfLongDoubleOverTheUsedRange) {
    // Every 61st float bit pattern in [-87, 0): about 17 million arguments.
    int64_t worst = 0;
    float worst_x = 0.0f;
    int64_t checked = 0;
    const uint32_t lo = dm::float_as_bits(-0.0f) + 1;
    const uint32_t hi = dm::float_as_bits(dm::kExpMinArg);
    for (uint32_t bits = lo; bits <= hi; bits += 61) {
        const float x = dm::bits_as_float(bits);
        const float expected = static_cast<float>(std::exp(static_cast<long double>(x)));
        const int64_t d = ulp_distance(dm::det_exp(x), expected);
        if (d > worst) {
            worst = d;
            worst_x = x;
        }
        ++checked;
    }
    EXPECT_GT(checked, 10'000'000);
    EXPECT_LE(worst, 1) << "worst argument " << worst_x;
}

TEST(DetExp, EdgeCases) {
    EXPECT_EQ(dm::det_exp(0.0f), 1.0f);
    EXPECT_EQ(dm::det_exp(-0.0f), 1.0f);
    EXPECT_EQ(dm::det_exp(3.0f), 1.0f);  // clamped: the sampler only asks for x <= 0
    EXPECT_EQ(dm::det_exp(-INFINITY), 0.0f);
    EXPECT_EQ(dm::det_exp(-88.0f), 0.0f);
    EXPECT_TRUE(std::isnan(dm::det_exp(NAN)));
    EXPECT_GT(dm::det_exp(dm::kExpMinArg), 0.0f);
}

TEST(DetLog, WithinTwoUlpOfLongDouble) {
    int64_t worst = 0;
    for (uint32_t bits = 0x00800000u; bits < 0x7f800000u; bits += 97) {
        const float x = dm::bits_as_float(bits);
        const float expected = static_cast<float>(std::log(static_cast<long double>(x)));
        const float got = dm::det_log(x);
        // Near x = 1 the result is tiny; compare against an absolute floor there.
        if (std::fabs(expected) < 1e-6f) {
            EXPECT_NEAR(got, expected, 1e-12f) << x;
            continue;
        }
        worst = std::max(worst, ulp_distance(got, expected));
    }
    EXPECT_LE(worst, 2);
    EXPECT_EQ(dm::det_log(1.0f), 0.0f);
    EXPECT_EQ(dm::det_log(0.0f), -INFINITY);
    EXPECT_EQ(dm::det_log(-1.0f), -INFINITY);
    EXPECT_EQ(dm::det_log(INFINITY), INFINITY);
    EXPECT_TRUE(std::isnan(dm::det_log(NAN)));
    EXPECT_NEAR(dm::det_log(1e-42f), std::log(static_cast<double>(1e-42f)), 1e-5);  // subnormal input
}

TEST(FixedPoint, MassIsFloorOfWeightTimesTwoToThe40) {
    EXPECT_EQ(dm::weight_to_mass(1.0f), dm::kMassOne);
    EXPECT_EQ(dm::weight_to_mass(0.5f), dm::kMassOne / 2);
    EXPECT_EQ(dm::weight_to_mass(0.0f), 0u);
    EXPECT_EQ(dm::weight_to_mass(std::ldexp(1.0f, -41)), 0u);  // below 2^-40: no mass
    EXPECT_EQ(dm::weight_to_mass(std::ldexp(1.0f, -40)), 1u);
    const float w = 0.3f;
    EXPECT_EQ(dm::weight_to_mass(w), static_cast<uint64_t>(std::floor(static_cast<long double>(w) * 1099511627776.0L)));
    EXPECT_EQ(dm::min_p_mass_threshold(0.0f), 0u);
    EXPECT_EQ(dm::min_p_mass_threshold(1.0f), dm::kMassOne);
    EXPECT_EQ(dm::top_p_mass_target(1.0f, 12345), 12345u);
    EXPECT_EQ(dm::top_p_mass_target(0.5f, 3), 2u);  // ceil(1.5)
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

// The shared exactness math gives the same bits on the GPU as on the host (docs/semantics.md,
// "Exactness"): the integer mass over the whole range it is used on, and the Philox streams.
// Skips where there is no GPU.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/cuda/det_math_probe.h"
#include "kernels/det_math.h"
#include "kernels/exact_rules.h"

namespace dm = ds::detmath;

TEST(GpuDetMath, MassAndPhiloxMatchTheHostBitForBit) {
    if (ds::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    constexpr int64_t kCount = 1 << 24;  // 16.7 million values
    std::vector<float> logits(kCount);
    std::vector<float> scales(kCount);
    std::mt19937 rng(7);
    const uint32_t lo = dm::float_as_bits(-0.0f);
    const uint32_t hi = dm::float_as_bits(-90.0f);
    const float scale_choices[] = {ds::exact::kUnitScale, ds::exact::mass_scale(0.7f), ds::exact::mass_scale(1.3f),
                                   ds::exact::mass_scale(1e-5f), ds::exact::mass_scale(25.0f)};
    for (int64_t i = 0; i < kCount; ++i) {
        // Every float in [-90, 0] is reachable: walk the bit patterns, plus random ones.
        const uint32_t walk = lo + static_cast<uint32_t>((static_cast<uint64_t>(i) * (hi - lo)) / kCount);
        logits[static_cast<size_t>(i)] = dm::bits_as_float(i % 2 ? walk : lo + rng() % (hi - lo));
        scales[static_cast<size_t>(i)] = scale_choices[rng() % 5];
    }
    logits[0] = -INFINITY;
    logits[1] = NAN;
    logits[2] = INFINITY;
    std::vector<uint64_t> mass_out(kCount), bits_out(kCount);
    const ds::status s = ds::cuda::probe_det_math(logits.data(), scales.data(), kCount, 0xfeedull, mass_out.data(),
                                                  bits_out.data());
    ASSERT_TRUE(s.is_ok()) << s.message;
    int64_t mismatches = 0;
    for (int64_t i = 0; i < kCount; ++i) {
        const size_t k = static_cast<size_t>(i);
        const bool mass_same = ds::exact::token_mass(logits[k], 0.0f, scales[k]) == mass_out[k];
        const bool bits_same = dm::random_bits64(0xfeedull, static_cast<uint64_t>(i), static_cast<uint32_t>(i % 7),
                                                 dm::draw_purpose::token) == bits_out[k];
        if (!(mass_same && bits_same) && ++mismatches <= 5) {
            ADD_FAILURE() << "index " << i << " mass(" << logits[k] << ", scale " << scales[k] << ") " << mass_same
                          << " philox " << bits_same;
        }
    }
    EXPECT_EQ(mismatches, 0);
}

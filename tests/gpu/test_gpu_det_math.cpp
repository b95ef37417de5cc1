// The shared math gives the same bits on the GPU as on the host (docs/semantics.md, Deterministic exp). Skips where
// there is no GPU.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/cuda/det_math_probe.h"
#include "kernels/det_math.h"

namespace dm = ds::detmath;

TEST(GpuDetMath, ExpLogMassAndPhiloxMatchTheHostBitForBit) {
    if (ds::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    constexpr int64_t kCount = 1 << 24;  // 16.7 million values
    std::vector<float> exp_in(kCount);
    std::vector<float> log_in(kCount);
    std::mt19937 rng(7);
    const uint32_t exp_lo = dm::float_as_bits(-0.0f);
    const uint32_t exp_hi = dm::float_as_bits(-90.0f);
    for (int64_t i = 0; i < kCount; ++i) {
        // Every float in [-90, 0] is reachable: walk the bit patterns, plus random ones.
        const uint32_t walk = exp_lo + static_cast<uint32_t>((static_cast<uint64_t>(i) * (exp_hi - exp_lo)) / kCount);
        exp_in[static_cast<size_t>(i)] = dm::bits_as_float(i % 2 ? walk : exp_lo + rng() % (exp_hi - exp_lo));
        log_in[static_cast<size_t>(i)] = dm::bits_as_float(1 + rng() % 0x7f7fffffu);
    }
    exp_in[0] = -INFINITY;
    exp_in[1] = NAN;
    std::vector<float> exp_out(kCount), log_out(kCount);
    std::vector<uint64_t> mass_out(kCount), bits_out(kCount);
    const ds::status s = ds::cuda::probe_det_math(exp_in.data(), log_in.data(), kCount, 0xfeedull, exp_out.data(),
                                                  log_out.data(), mass_out.data(), bits_out.data());
    ASSERT_TRUE(s.is_ok()) << s.message;
    int64_t mismatches = 0;
    for (int64_t i = 0; i < kCount; ++i) {
        const size_t k = static_cast<size_t>(i);
        const float e = dm::det_exp(exp_in[k]);
        const bool exp_same = dm::float_as_bits(e) == dm::float_as_bits(exp_out[k]);
        const bool log_same = dm::float_as_bits(dm::det_log(log_in[k])) == dm::float_as_bits(log_out[k]);
        const bool mass_same = (e == e ? dm::weight_to_mass(e) : 0) == mass_out[k];
        const bool bits_same = dm::random_bits64(0xfeedull, static_cast<uint64_t>(i), static_cast<uint32_t>(i % 7),
                                                 dm::draw_purpose::token) == bits_out[k];
        if (!(exp_same && log_same && mass_same && bits_same) && ++mismatches <= 5) {
            ADD_FAILURE() << "index " << i << " exp(" << exp_in[k] << ") " << exp_same << " log(" << log_in[k] << ") "
                          << log_same << " mass " << mass_same << " philox " << bits_same;
        }
    }
    EXPECT_EQ(mismatches, 0);
}

// The mass bins the CUDA kernel selects cuts with (kernels/cuda/chain_kernel_params.h): a larger
// mass never falls into a lower bin, nor, within one bin, into a lower sub-bin, so the tokens of
// the bins and sub-bins above a boundary are exactly the tokens of larger mass; and every token
// whose mass falls into a bin has its mass exponent in the bin's band, which kernels select on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "kernels/cuda/chain_kernel_params.h"
#include "kernels/exact_rules.h"

namespace {

using ds::cuda::band_of_bin;
using ds::cuda::kBoundarySubBins;
using ds::cuda::kMassHistogramBins;
using ds::cuda::least_mass_of_bin;
using ds::cuda::mass_bin;
using ds::cuda::mass_sub_bin;

// Every mass up to 2^14, then random ones up to 2^40 and their neighbours.
std::vector<uint64_t> sample_masses() {
    std::vector<uint64_t> masses;
    for (uint64_t q = 1; q <= (uint64_t{1} << 14); ++q) masses.push_back(q);
    std::mt19937_64 rng(7);
    for (int i = 0; i < 200000; ++i) {
        const uint64_t q = (rng() >> (rng() % 64)) % ds::exact::kMassOne + 1;
        for (uint64_t d : {uint64_t{0}, uint64_t{1}}) masses.push_back(q + d);
    }
    masses.push_back(ds::exact::kMassOne);
    return masses;
}

TEST(MassBins, ALargerMassNeverFallsIntoALowerBinOrSubBin) {
    const std::vector<uint64_t> masses = sample_masses();
    for (uint64_t q : masses) {
        for (uint64_t larger : {q + 1, q + q / 3 + 1, q * 2}) {
            const int bin = mass_bin(q);
            const int larger_bin = mass_bin(larger);
            ASSERT_GE(larger_bin, bin) << q << " " << larger;
            if (larger_bin == bin) {
                ASSERT_GE(mass_sub_bin(larger), mass_sub_bin(q)) << q << " " << larger;
            }
        }
    }
}

TEST(MassBins, SubBinsAreInRangeAndSmallMassesHaveTheirOwn) {
    for (uint64_t q : sample_masses()) {
        ASSERT_GE(mass_sub_bin(q), 0) << q;
        ASSERT_LT(mass_sub_bin(q), kBoundarySubBins) << q;
        ASSERT_GE(q, least_mass_of_bin(mass_bin(q))) << q;
    }
    // Below 2^12 a mass's bin and sub-bin name it alone.
    for (uint64_t q = 1; q < 4096; ++q) {
        ASSERT_NE(std::make_pair(mass_bin(q), mass_sub_bin(q)), std::make_pair(mass_bin(q + 1), mass_sub_bin(q + 1)))
            << q;
    }
}

TEST(MassBins, ABinsSubBinsSpreadItsMasses) {
    // A bin of masses [2^30, 1.5 * 2^30) uses every sub-bin, in order.
    const uint64_t low = uint64_t{1} << 30;
    const uint64_t width = low / 2 / kBoundarySubBins;
    for (int s = 0; s < kBoundarySubBins; ++s) {
        EXPECT_EQ(mass_sub_bin(low + static_cast<uint64_t>(s) * width), s);
        EXPECT_EQ(mass_bin(low + static_cast<uint64_t>(s) * width), mass_bin(low));
    }
}

// The token's mass falls into a bin whose band holds its exponent (the row's maximum aside).
void expect_in_band(float logit, float max_logit, float scale) {
    const uint64_t q = ds::exact::token_mass(logit, max_logit, scale);
    if (q == 0 || logit == max_logit) return;
    const float x = ds::exact::mass_exponent(logit, max_logit, scale);
    ASSERT_TRUE(band_of_bin(mass_bin(q)).holds(x))
        << "logit " << logit << " max " << max_logit << " scale " << scale << " q " << q << " bin " << mass_bin(q);
}

TEST(MassBins, EveryMassIsInItsBinsBandAtTheBinsEdges) {
    // Scale 1 and maximum 0: the exponent is the logit itself, placed around every bin's least mass.
    for (int bin = 0; bin < kMassHistogramBins; ++bin) {
        const float edge =
            static_cast<float>(std::log2(static_cast<double>(least_mass_of_bin(bin))) - ds::exact::kMassBits);
        float x = edge;
        for (int step = 0; step < 2000; ++step) x = std::nextafter(x, -100.0f);
        for (int step = 0; step < 4000 && x <= 0.0f; ++step, x = std::nextafter(x, 1.0f)) expect_in_band(x, 0.0f, 1.0f);
    }
}

TEST(MassBins, EveryMassIsInItsBinsBandForRandomRows) {
    std::mt19937 rng(11);
    std::normal_distribution<float> logit(0.0f, 4.0f);
    std::uniform_real_distribution<float> temperature(0.05f, 3.0f);
    for (int row = 0; row < 200; ++row) {
        const float max_logit = 12.0f + logit(rng);
        const float scale = ds::exact::mass_scale(temperature(rng));
        for (int i = 0; i < 20000; ++i) expect_in_band(std::fmin(max_logit, logit(rng)), max_logit, scale);
    }
    // The lowest bins take every exponent that can have mass, and never -64 (NaN and -inf).
    EXPECT_TRUE(band_of_bin(0).holds(-40.5f));
    EXPECT_FALSE(band_of_bin(0).holds(ds::exact::mass_exponent(-HUGE_VALF, 0.0f, 1.0f)));
    EXPECT_FALSE(band_of_bin(1).holds(ds::exact::mass_exponent(NAN, 0.0f, 1.0f)));
}

}  // namespace

// The mass bins the CUDA kernel selects cuts with (kernels/cuda/chain_kernel_params.h): a larger
// mass never falls into a lower bin, nor, within one bin, into a lower sub-bin, so the tokens of
// the bins and sub-bins above a boundary are exactly the tokens of larger mass.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "kernels/cuda/chain_kernel_params.h"
#include "kernels/exact_rules.h"

namespace {

using ds::cuda::kBoundarySubBins;
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

}  // namespace

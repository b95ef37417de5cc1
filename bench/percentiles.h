// The p50, p90 and p99 of a benchmark's samples, one definition for every benchmark: the sample at
// rank q * (n - 1) of the sorted samples (zero when there are none).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace ds::bench {

struct percentiles {
    double p50 = 0;
    double p90 = 0;
    double p99 = 0;
};

inline percentiles of(std::vector<double> samples) {
    if (samples.empty()) return {};
    std::sort(samples.begin(), samples.end());
    auto at = [&](double q) { return samples[static_cast<size_t>(q * static_cast<double>(samples.size() - 1))]; };
    return {at(0.50), at(0.90), at(0.99)};
}

}  // namespace ds::bench

#include "support/reference_sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/exact_rules.h"

namespace ds::testing {


int32_t reference_argmax(const std::vector<float>& row) {
    int32_t best = -1;
    for (int32_t i = 0; i < static_cast<int32_t>(row.size()); ++i) {
        if (std::isnan(row[i]) || row[i] == -INFINITY) continue;
        if (best < 0 || row[i] > row[best]) best = i;
    }
    return best;
}

std::vector<uint64_t> reference_kept_mass(const std::vector<float>& row, const sampling_params& params) {
    const auto v = static_cast<int32_t>(row.size());
    std::vector<uint64_t> mass(row.size(), 0);
    const int32_t top = reference_argmax(row);
    if (top < 0) return mass;
    for (int32_t i = 0; i < v; ++i) {
        if (std::isnan(row[i]) || row[i] == -INFINITY) continue;
        mass[i] = ds::exact::token_mass(row[i], row[top], ds::exact::mass_scale(params.temperature));
    }
    std::vector<int32_t> order;
    for (int32_t i = 0; i < v; ++i) {
        if (mass[i] > 0) order.push_back(i);
    }
    std::sort(order.begin(), order.end(),
              [&](int32_t a, int32_t b) { return mass[a] != mass[b] ? mass[a] > mass[b] : a < b; });
    size_t keep = order.size();
    if (params.top_k > 0) keep = std::min(keep, static_cast<size_t>(params.top_k));
    uint64_t top_k_mass = 0;
    for (size_t i = 0; i < keep; ++i) top_k_mass += mass[order[i]];
    const uint64_t target = ds::exact::top_p_mass_target(params.top_p, top_k_mass);
    uint64_t prefix = 0;
    size_t shortest = 0;
    while (shortest < keep && prefix < target) prefix += mass[order[shortest++]];
    const uint64_t min_mass = ds::exact::min_p_mass_threshold(params.min_p);
    std::vector<uint64_t> kept(row.size(), 0);
    for (size_t i = 0; i < shortest; ++i) {
        const int32_t token = order[i];
        if (mass[token] >= min_mass) kept[token] = mass[token];
    }
    return kept;
}

long double reference_logprob(const std::vector<float>& row, int32_t token) {
    const int32_t top = reference_argmax(row);
    long double sum = 0.0L;
    for (float l : row) {
        if (std::isnan(l) || l == -INFINITY) continue;
        sum += std::exp(static_cast<long double>(l) - row[top]);
    }
    return static_cast<long double>(row[token]) - row[top] - std::log(sum);
}

long double reference_processed_logprob(const std::vector<float>& row, const sampling_params& params,
                                        int32_t token) {
    const std::vector<uint64_t> kept = reference_kept_mass(row, params);
    const int32_t top = reference_argmax(row);
    long double sum = 0.0L;
    for (size_t i = 0; i < row.size(); ++i) {
        if (kept[i] > 0) sum += std::exp((static_cast<long double>(row[i]) - row[top]) / params.temperature);
    }
    return (static_cast<long double>(row[token]) - row[top]) / params.temperature - std::log(sum);
}

std::vector<double> reference_distribution(const std::vector<float>& row, const sampling_params& params) {
    const std::vector<uint64_t> mass = reference_kept_mass(row, params);
    double total = 0.0;
    for (uint64_t m : mass) total += static_cast<double>(m);
    std::vector<double> probs;
    for (uint64_t m : mass) probs.push_back(static_cast<double>(m) / total);
    return probs;
}

}  // namespace ds::testing

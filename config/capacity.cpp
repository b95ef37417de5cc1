#include "config/capacity.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <utility>

namespace ds {

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
// Bytes of one entry of each buffer (kernels/param_pool.h, kernels/cpu/row_sampler.h).
constexpr uint64_t kTokenCountBytes = 8;        // token, count
constexpr uint64_t kLogitBiasBytes = 8;         // token, bias
constexpr uint64_t kSamplerBytesPerToken = 16;  // logit, mass, order
constexpr uint64_t kLogitBytes = 4;             // f32

uint64_t u64(int64_t value) { return static_cast<uint64_t>(std::max<int64_t>(0, value)); }

int64_t max_rows(const group_config& config) { return int64_t{config.max_pad_bs()} * config.limits.max_tokens_per_req; }

}  // namespace

int64_t max_swap_rows(const group_config& config) {
    switch (config.distribution.mode) {
        case dist_mode::gathered: return max_rows(config);
        case dist_mode::swap: return max_rows(config) / config.distribution.tp;
        case dist_mode::sharded: return 0;
    }
    return 0;
}

std::size_t max_collective_bytes(const group_config& config) {
    return static_cast<std::size_t>(max_rows(config)) * 512 * sizeof(uint64_t);
}

uint64_t rank_memory::total() const {
    return penalty_counts + logit_biases + samplers + swap_rows + collectives + shard_rows;
}

rank_memory estimate_rank_memory(const group_config& config, int32_t cpu_threads) {
    const group_limits& l = config.limits;
    const uint64_t vocab = u64(l.vocab_size);
    const int32_t threads = config.tuning.threads_per_rank > 0 ? config.tuning.threads_per_rank : cpu_threads;
    rank_memory m;
    m.penalty_counts = u64(l.max_slots) * u64(l.max_penalty_tokens) * kTokenCountBytes;
    m.logit_biases = u64(l.max_slots) * u64(l.max_logit_bias) * kLogitBiasBytes;
    m.samplers = u64(threads) * vocab * kSamplerBytesPerToken;
    m.swap_rows = u64(max_swap_rows(config)) * vocab * kLogitBytes;
    m.collectives = u64(config.distribution.tp) * max_collective_bytes(config);
    if (config.distribution.mode == dist_mode::sharded) {
        m.shard_rows =
            u64(l.max_batch) * u64(l.max_tokens_per_req) * (vocab / u64(config.distribution.tp)) * kLogitBytes;
    }
    return m;
}

uint64_t memory_budget_bytes(const group_config& config) {
    if (config.limits.memory_budget_mib > 0) return u64(config.limits.memory_budget_mib) * kMiB;
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page_size = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page_size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) : UINT64_MAX;
}

status check_memory_budget(const group_config& config, int32_t ranks_here) {
    const auto cores = static_cast<int32_t>(std::max<long>(1, ::sysconf(_SC_NPROCESSORS_ONLN)));
    const rank_memory m = estimate_rank_memory(config, cores);
    const uint64_t needed = m.total() * u64(ranks_here);
    const uint64_t budget = memory_budget_bytes(config);
    if (needed <= budget) return status::success();
    // The part to name: the largest, with the keys that size it.
    const std::array<std::pair<uint64_t, const char*>, 6> parts = {{
        {m.penalty_counts, "max_slots * max_penalty_tokens (penalty counts)"},
        {m.logit_biases, "max_slots * max_logit_bias (logit bias entries)"},
        {m.samplers, "threads_per_rank * vocab_size (sampler scratch)"},
        {m.swap_rows, "max_batch * max_tokens_per_req * vocab_size (the vocab swap's rows)"},
        {m.collectives, "tp * max_batch * max_tokens_per_req (the collectives' buffers)"},
        {m.shard_rows, "max_batch * max_tokens_per_req * vocab_size / tp (sharded rows)"},
    }};
    const auto largest = std::max_element(parts.begin(), parts.end());
    const std::string who = ranks_here == 1 ? "a rank needs" : fmt::format("{} ranks need", ranks_here);
    return status::invalid(
        fmt::format("{} {} (each rank {}, of which {} for {}): expected at most the memory budget of {} "
                    "(memory_budget_mib = {}{}; docs/configuration.md, Limits)",
                    who, format_bytes(needed), format_bytes(m.total()), format_bytes(largest->first), largest->second,
                    format_bytes(budget), config.limits.memory_budget_mib,
                    config.limits.memory_budget_mib == 0 ? ": this host's memory" : ""));
}

std::string format_bytes(uint64_t bytes) {
    static constexpr std::array<const char*, 5> kUnits = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double value = static_cast<double>(bytes);
    std::size_t unit = 0;
    while (value >= 1024.0 && unit + 1 < kUnits.size()) {
        value /= 1024.0;
        ++unit;
    }
    return unit == 0 ? fmt::format("{} bytes", bytes) : fmt::format("{:.1f} {}", value, kUnits[unit]);
}

}  // namespace ds

#include "config/group_config.h"

#include <fmt/format.h>

#include <utility>

namespace ds {

namespace {

status check_range(const char* key, int64_t value, int64_t lo, int64_t hi) {
    if (value >= lo && value <= hi) return status::success();
    return status::invalid(fmt::format("{} = {}: expected an integer in [{}, {}]", key, value, lo, hi));
}

// What plan_step needs of the group: checked on every step, so only these few comparisons.
status check_step_sizes(const group_config& config) {
    const int32_t tp = config.distribution.tp;
    const group_limits& limits = config.limits;
    DS_TRY(check_range("tp", tp, 1, kMaxTp));
    if (limits.vocab_size < 1) return status::invalid(fmt::format("vocab_size = {}: expected >= 1", limits.vocab_size));
    if (limits.vocab_size % tp != 0) {
        return status::invalid(fmt::format(
            "vocab_size = {}: expected a multiple of tp = {} (every rank holds V / TP tokens)", limits.vocab_size, tp));
    }
    if (limits.max_batch < 1) return status::invalid(fmt::format("max_batch = {}: expected >= 1", limits.max_batch));
    if (limits.max_tokens_per_req < 1) {
        return status::invalid(fmt::format("max_tokens_per_req = {}: expected >= 1", limits.max_tokens_per_req));
    }
    return status::success();
}

}  // namespace

status validate_group_config(const group_config& config) {
    DS_TRY(check_step_sizes(config));
    const group_limits& limits = config.limits;
    const tuning_config& tuning = config.tuning;
    if (limits.max_slots < 2)
        return status::invalid(fmt::format("max_slots = {}: expected >= 2 (slot 0 is reserved)", limits.max_slots));
    // The upper ends, so that no size is refused later under a kernel_config name.
    DS_TRY(check_range("vocab_size", limits.vocab_size, 1, kMaxVocabSize));
    DS_TRY(check_range("max_batch", limits.max_batch, 1, kMaxBatchSize));
    DS_TRY(check_range("max_tokens_per_req", limits.max_tokens_per_req, 1, kMaxTokensPerRequest));
    DS_TRY(check_range("max_slots", limits.max_slots, 2, kMaxSlots));
    DS_TRY(check_range("max_penalty_tokens", limits.max_penalty_tokens, 0, kMaxPenaltyTokens));
    DS_TRY(check_range("max_logit_bias", limits.max_logit_bias, 0, kMaxLogitBias));
    DS_TRY(check_range("memory_budget_mib", limits.memory_budget_mib, 0, kMaxMemoryBudgetMib));
    DS_TRY(check_range("threads_per_rank", tuning.threads_per_rank, 0, kMaxThreads));
    if (tuning.scheduler_threads < 1 || tuning.scheduler_threads > kMaxSchedulerThreads) {
        return status::invalid(fmt::format("scheduler_threads = {}: expected an integer in [1, {}]",
                                           tuning.scheduler_threads, kMaxSchedulerThreads));
    }
    for (const auto& [name, value] :
         {std::pair{"scheduler_spin_us", tuning.scheduler_spin_us}, std::pair{"reply_spin_us", tuning.reply_spin_us},
          std::pair{"rank_spin_us", tuning.rank_spin_us}}) {
        if (value < 0 || value > kMaxSpinMicroseconds) {
            return status::invalid(
                fmt::format("{} = {}: expected an integer in [0, {}]", name, value, kMaxSpinMicroseconds));
        }
    }
    if (config.distribution.step_timeout.count() <= 0) {
        return status::invalid(
            fmt::format("step_timeout = {} ms: expected > 0", config.distribution.step_timeout.count()));
    }
    if (config.transport.timeout.count() <= 0) {
        return status::invalid(
            fmt::format("transport_timeout = {} ms: expected > 0", config.transport.timeout.count()));
    }
    return validate_fault_plan(config.faults, config.distribution.tp);
}

result<step_plan> plan_step(const group_config& config, int32_t bs, int32_t n) {
    DS_TRY(check_step_sizes(config));
    const group_limits& limits = config.limits;
    const int32_t tp = config.distribution.tp;
    if (bs < 1) return status::invalid(fmt::format("batch_size = {}: expected at least 1 request", bs));
    if (bs > limits.max_batch)
        return status::invalid(fmt::format("batch_size = {}: expected at most max_batch = {}", bs, limits.max_batch));
    if (n < 1 || n > limits.max_tokens_per_req) {
        return status::invalid(
            fmt::format("tokens_per_req = {}: expected an integer in [1, {}]", n, limits.max_tokens_per_req));
    }
    step_plan plan;
    plan.bs = bs;
    plan.tp = tp;
    plan.pad_bs = (bs + tp - 1) / tp * tp;
    // The seed's checks, kept although the rounding above implies them: a plan that breaks them
    // would hand a rank rows it has no buffer for.
    if (plan.pad_bs > config.max_pad_bs()) {
        return status::invalid(
            fmt::format("pad_bs = {}: expected at most max_pad_bs = {}", plan.pad_bs, config.max_pad_bs()));
    }
    if (plan.pad_bs % tp != 0)
        return status::invalid(fmt::format("pad_bs = {}: expected a multiple of tp = {}", plan.pad_bs, tp));
    plan.reqs_per_rank = plan.pad_bs / tp;
    plan.tokens_per_req = n;
    plan.shard_vocab = limits.vocab_size / tp;
    return plan;
}

}  // namespace ds

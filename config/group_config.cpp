#include "config/group_config.h"

#include <fmt/format.h>

#include <utility>

namespace ds {

const char* mode_name(dist_mode mode) {
    switch (mode) {
        case dist_mode::gathered: return "gathered";
        case dist_mode::swap: return "swap";
        case dist_mode::sharded: return "sharded";
    }
    return "unknown";
}

bool parse_mode(const std::string& name, dist_mode& mode) {
    for (dist_mode m : {dist_mode::gathered, dist_mode::swap, dist_mode::sharded}) {
        if (name == mode_name(m)) {
            mode = m;
            return true;
        }
    }
    return false;
}

const char* policy_name(rank0_policy policy) {
    switch (policy) {
        case rank0_policy::always: return "always";
        case rank0_policy::never: return "never";
        case rank0_policy::on_mismatch: return "on_mismatch";
    }
    return "unknown";
}

bool parse_policy(const std::string& name, rank0_policy& policy) {
    for (rank0_policy p : {rank0_policy::always, rank0_policy::never, rank0_policy::on_mismatch}) {
        if (name == policy_name(p)) {
            policy = p;
            return true;
        }
    }
    return false;
}

const char* ucx_memory_mode_name(ucx_memory_mode mode) {
    switch (mode) {
        case ucx_memory_mode::automatic: return "auto";
        case ucx_memory_mode::direct: return "direct";
        case ucx_memory_mode::staged: return "staged";
    }
    return "unknown";
}

bool parse_ucx_memory_mode(const std::string& name, ucx_memory_mode& mode) {
    for (ucx_memory_mode m : {ucx_memory_mode::automatic, ucx_memory_mode::direct, ucx_memory_mode::staged}) {
        if (name == ucx_memory_mode_name(m)) {
            mode = m;
            return true;
        }
    }
    return false;
}

std::string validate_group_config(const group_config& config) {
    if (std::string e = validate_group_limits(config.limits()); !e.empty()) return e;
    if (config.max_slots < 2)
        return fmt::format("max_slots = {}: expected >= 2 (slot 0 is reserved)", config.max_slots);
    if (config.threads_per_rank < 0)
        return fmt::format("threads_per_rank = {}: expected >= 0", config.threads_per_rank);
    if (config.scheduler_threads < 1 || config.scheduler_threads > kMaxSchedulerThreads) {
        return fmt::format("scheduler_threads = {}: expected an integer in [1, {}]", config.scheduler_threads,
                           kMaxSchedulerThreads);
    }
    for (const auto& [name, value] :
         {std::pair{"scheduler_spin_us", config.scheduler_spin_us}, std::pair{"reply_spin_us", config.reply_spin_us},
          std::pair{"rank_spin_us", config.rank_spin_us}}) {
        if (value < 0 || value > kMaxSpinMicroseconds)
            return fmt::format("{} = {}: expected an integer in [0, {}]", name, value, kMaxSpinMicroseconds);
    }
    if (config.step_timeout.count() <= 0)
        return fmt::format("step_timeout = {} ms: expected > 0", config.step_timeout.count());
    if (config.transport_timeout.count() <= 0) {
        return fmt::format("transport_timeout = {} ms: expected > 0", config.transport_timeout.count());
    }
    return validate_fault_plan(config.faults, config.tp);
}

std::string validate_group_limits(const group_limits& limits) {
    if (limits.tp < 1 || limits.tp > 1024) return fmt::format("tp = {}: expected an integer in [1, 1024]", limits.tp);
    if (limits.vocab_size < 1) return fmt::format("vocab_size = {}: expected >= 1", limits.vocab_size);
    if (limits.vocab_size % limits.tp != 0) {
        return fmt::format("vocab_size = {}: expected a multiple of tp = {} (every rank holds V / TP tokens)",
                           limits.vocab_size, limits.tp);
    }
    if (limits.max_batch < 1) return fmt::format("max_batch = {}: expected >= 1", limits.max_batch);
    if (limits.max_tokens_per_req < 1) {
        return fmt::format("max_tokens_per_req = {}: expected >= 1", limits.max_tokens_per_req);
    }
    return {};
}

std::string plan_step(const group_limits& limits, int32_t bs, int32_t n, step_plan& plan) {
    if (std::string e = validate_group_limits(limits); !e.empty()) return e;
    if (bs < 1) return fmt::format("batch_size = {}: expected at least 1 request", bs);
    if (bs > limits.max_batch)
        return fmt::format("batch_size = {}: expected at most max_batch = {}", bs, limits.max_batch);
    if (n < 1 || n > limits.max_tokens_per_req) {
        return fmt::format("tokens_per_req = {}: expected an integer in [1, {}]", n, limits.max_tokens_per_req);
    }
    plan.bs = bs;
    plan.tp = limits.tp;
    plan.pad_bs = (bs + limits.tp - 1) / limits.tp * limits.tp;
    // The seed's checks, kept although the rounding above implies them: a plan that breaks them
    // would hand a rank rows it has no buffer for.
    if (plan.pad_bs > limits.max_pad_bs()) {
        return fmt::format("pad_bs = {}: expected at most max_pad_bs = {}", plan.pad_bs, limits.max_pad_bs());
    }
    if (plan.pad_bs % limits.tp != 0)
        return fmt::format("pad_bs = {}: expected a multiple of tp = {}", plan.pad_bs, limits.tp);
    plan.reqs_per_rank = plan.pad_bs / limits.tp;
    plan.tokens_per_req = n;
    plan.shard_vocab = limits.vocab_size / limits.tp;
    return {};
}

}  // namespace ds

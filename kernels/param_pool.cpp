#include "kernels/param_pool.h"

#include <fmt/format.h>

#include "kernels/validation.h"

namespace ds {

param_pool::param_pool(const kernel_config& config)
    : config_(config),
      params_(static_cast<size_t>(config.max_slots)),
      counts_(static_cast<size_t>(config.max_slots) * static_cast<size_t>(config.max_penalty_tokens)),
      count_sizes_(static_cast<size_t>(config.max_slots), 0) {
    // Slot 0: greedy and unmodified, so phantom rows can never produce NaN or touch the RNG.
    params_[0].temperature = 0.0f;
}

status param_pool::check_slot(int32_t slot) const {
    if (slot >= 1 && slot < config_.max_slots) return status::success();
    return status::invalid(
        fmt::format("slot = {}: expected an integer in [1, {}] (slot 0 is reserved)", slot, config_.max_slots - 1));
}

status param_pool::register_request(int32_t slot, const sampling_params& params) {
    return register_request(slot, params, nullptr, 0);
}

status param_pool::register_request(int32_t slot, const sampling_params& params, const int32_t* history,
                                    int32_t history_size) {
    status s = check_slot(slot);
    if (s.is_ok()) s = validate_sampling_params(params, config_);
    if (!s.is_ok()) return s;
    params_[static_cast<size_t>(slot)] = params;  // reuses the reserved bias capacity
    count_sizes_[static_cast<size_t>(slot)] = 0;
    return record_tokens(slot, history, history_size);
}

status param_pool::release(int32_t slot) {
    status s = check_slot(slot);
    if (!s.is_ok()) return s;
    params_[static_cast<size_t>(slot)] = sampling_params{};
    count_sizes_[static_cast<size_t>(slot)] = 0;
    return status::success();
}

status param_pool::record_tokens(int32_t slot, const int32_t* tokens, int32_t count) {
    status s = check_slot(slot);
    if (!s.is_ok() || !params_[static_cast<size_t>(slot)].has_penalties()) return s;
    token_count* row = counts_.data() + static_cast<size_t>(slot) * static_cast<size_t>(config_.max_penalty_tokens);
    int32_t& size = count_sizes_[static_cast<size_t>(slot)];
    for (int32_t i = 0; i < count; ++i) {
        const int32_t token = tokens[i];
        if (token < 0 || token >= config_.vocab_size) {
            return status::invalid(
                fmt::format("tokens[{}] = {}: expected a token id in [0, {})", i, token, config_.vocab_size));
        }
        int32_t j = 0;
        while (j < size && row[j].token != token) ++j;
        if (j < size) {
            ++row[j].count;
        } else if (size < config_.max_penalty_tokens) {
            row[size++] = token_count{token, 1};
        } else {
            return status::invalid(
                fmt::format("slot {} has seen {} distinct tokens: penalties track at most max_penalty_tokens = {}",
                            slot, size + 1, config_.max_penalty_tokens));
        }
    }
    return status::success();
}

token_count_span param_pool::seen_tokens(int32_t slot) const {
    const size_t offset = static_cast<size_t>(slot) * static_cast<size_t>(config_.max_penalty_tokens);
    return token_count_span{counts_.data() + offset, count_sizes_[static_cast<size_t>(slot)]};
}

request_view param_pool::request(int32_t slot, int64_t position) const {
    return request_of(params(slot), seen_tokens(slot), position);
}

request_view request_of(const sampling_params& p, token_count_span seen, int64_t position) {
    request_view r;
    r.temperature = p.temperature;
    r.top_k = p.top_k;
    r.top_p = p.top_p;
    r.min_p = p.min_p;
    r.seed = p.seed;
    r.position = static_cast<uint64_t>(position);
    r.penalties = {p.presence_penalty, p.frequency_penalty, p.repetition_penalty};
    // {token, value} pairs: each field is every second int32 or float.
    static_assert(sizeof(logit_bias_entry) == 2 * sizeof(int32_t) && sizeof(token_count) == 2 * sizeof(int32_t));
    if (!p.logit_bias.empty()) {
        r.bias_tokens = {&p.logit_bias.front().token, 2};
        r.bias_values = {&p.logit_bias.front().bias, 2};
        r.bias_count = static_cast<int32_t>(p.logit_bias.size());
    }
    if (p.has_penalties() && seen.size > 0) {
        r.seen_tokens = {&seen.data->token, 2};
        r.seen_counts = {&seen.data->count, 2};
        r.seen_count = seen.size;
    }
    return r;
}

status record_step_tokens(param_pool& pool, const step_input& step, const step_output& out) {
    const int32_t n = step.tokens_per_req;
    const int32_t* lengths = accept_length_of(out, step.batch_size, n);
    for (int32_t b = 0; b < step.batch_size; ++b) {
        if (step.slots[b] == 0) continue;  // phantom rows have no history
        const int32_t* emitted = predict_of(out) + static_cast<int64_t>(b) * n;
        int32_t count = 0;
        while (count < lengths[b] && emitted[count] >= 0) ++count;
        status s = pool.record_tokens(step.slots[b], emitted, count);
        if (!s.is_ok()) return s;
    }
    return status::success();
}

}  // namespace ds

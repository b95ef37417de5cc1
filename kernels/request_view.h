// One request's sampling inputs for one step, whatever holds them: a backend's slot pool or the
// arrays and scalars of an engine's sampling_call. Both samplers (the CPU backend and the CUDA
// kernels) read requests only through this view, so the two sources behave alike.
// Compiled by g++ and nvcc; no CUDA types.
#pragma once

#include <cmath>
#include <cstdint>

#include <distsample/sampling.h>

#include "kernels/det_math.h"
#include "kernels/exact_rules.h"

namespace ds {

// Elements `stride` apart: a field of an array of structs (stride 2 for {token, value} pairs) or
// a plain array (stride 1).
template <class T>
struct strided {
    const T* data = nullptr;
    int32_t stride = 1;

    DS_HD T operator[](int64_t i) const { return data[i * stride]; }
};

// The parameter ranges of docs/semantics.md, shared by host validation (which names the field)
// and the device, which flags the row (kRowErrorInvalidParams). NaN fails every check.
namespace ranges {
DS_HD bool temperature(float v) { return v >= 0.0f && v <= 3.402823466e38f; }
DS_HD bool top_k(int32_t v) { return v == -1 || v >= 1; }
DS_HD bool top_p(float v) { return v > 0.0f && v <= 1.0f; }
DS_HD bool min_p(float v) { return v >= 0.0f && v <= 1.0f; }
DS_HD bool additive_penalty(float v) { return v >= -2.0f && v <= 2.0f; }
DS_HD bool repetition_penalty(float v) { return v > 0.0f && v <= 10.0f; }
DS_HD bool bias(float v) { return v >= -100.0f && v <= 100.0f; }
DS_HD bool token(int32_t v, int32_t vocab) { return v >= 0 && v < vocab; }
}  // namespace ranges

struct request_view {
    float temperature = 1.0f;
    int32_t top_k = -1;
    float top_p = 1.0f;
    float min_p = 0.0f;
    uint64_t seed = 0;
    uint64_t position = 0;
    exact::penalties penalties;
    strided<int32_t> bias_tokens;
    strided<float> bias_values;
    int32_t bias_count = 0;
    strided<int32_t> seen_tokens;  // distinct tokens emitted before the step
    strided<int32_t> seen_counts;
    int32_t seen_count = 0;
    uint8_t error = kRowOk;  // kRowErrorInvalidParams: a value above is out of range

    DS_HD bool greedy() const { return exact::is_greedy(temperature, top_k); }
};

template <class T>
DS_HD T value_at(const param<T>& p, int64_t i) {
    return p.values != nullptr ? p.values[i] : p.scalar;
}

// The entries [begin, begin + count) of list `i`.
template <class V>
DS_HD void list_bounds(const token_list<V>& list, int64_t i, int32_t& begin, int32_t& count) {
    if (list.tokens == nullptr) {
        begin = 0;
        count = 0;
    } else if (list.offsets != nullptr) {
        begin = list.offsets[i];
        count = list.offsets[i + 1] - begin;
    } else {
        begin = static_cast<int32_t>(i * list.stride);
        count = list.sizes[i];
    }
}

// Whether request b's candidates are token ids. Every candidate is read, with no stop at the
// first bad one, so the reads do not wait on each other (on a GPU they may cross the bus from
// mapped host memory).
DS_HD bool candidates_in_vocab(const sampling_call& call, int32_t b) {
    if (call.candidates == nullptr) return true;
    const int32_t n = call.tokens_per_req;
    const int32_t* candidates = call.candidates + static_cast<int64_t>(b) * n;
    bool all_in_vocab = true;
    for (int32_t j = 0; j < n; ++j) all_in_vocab &= ranges::token(candidates[j], call.logits.vocab);
    return all_in_vocab;
}

// Request b of `call`, its values checked against the ranges (the lists' bounds and token ids
// too) and against the call's all-greedy promise; error = kRowErrorInvalidParams when one fails.
DS_HD request_view resolve_request(const sampling_call& call, int32_t b) {
    const request_sources& s = call.params;
    const int64_t at = call.slots != nullptr ? call.slots[b] : b;
    request_view r;
    if (call.slots != nullptr && (at < 0 || at >= call.num_slots)) {
        r.error = kRowErrorInvalidParams;
        return r;
    }
    r.temperature = value_at(s.temperature, at);
    r.top_k = value_at(s.top_k, at);
    r.top_p = value_at(s.top_p, at);
    r.min_p = value_at(s.min_p, at);
    r.seed = static_cast<uint64_t>(value_at(s.seed, at));
    const int64_t position = value_at(call.positions, b);
    r.position = static_cast<uint64_t>(position);
    r.penalties = {value_at(s.presence_penalty, at), value_at(s.frequency_penalty, at),
                   value_at(s.repetition_penalty, at)};
    int32_t begin = 0;
    list_bounds(s.logit_bias, at, begin, r.bias_count);
    r.bias_tokens = {s.logit_bias.tokens + begin, 1};
    r.bias_values = {s.logit_bias.values + begin, 1};
    list_bounds(s.seen, at, begin, r.seen_count);
    r.seen_tokens = {s.seen.tokens + begin, 1};
    r.seen_counts = {s.seen.values + begin, 1};
    const int32_t vocab = call.logits.vocab;
    bool ok = ranges::temperature(r.temperature) && ranges::top_k(r.top_k) && ranges::top_p(r.top_p) &&
              ranges::min_p(r.min_p) && ranges::additive_penalty(r.penalties.presence) &&
              ranges::additive_penalty(r.penalties.frequency) &&
              ranges::repetition_penalty(r.penalties.repetition) && position >= 0 && r.bias_count >= 0 &&
              r.seen_count >= 0;
    for (int32_t k = 0; ok && k < r.bias_count; ++k) {
        ok = ranges::token(r.bias_tokens[k], vocab) && ranges::bias(r.bias_values[k]);
    }
    for (int32_t k = 0; ok && k < r.seen_count; ++k) {
        ok = ranges::token(r.seen_tokens[k], vocab) && r.seen_counts[k] >= 1;
    }
    ok = candidates_in_vocab(call, b) && ok;
    // A broken all-greedy promise is flagged the same way on every device.
    ok = ok && !(call.all_greedy_hint && (!r.greedy() || r.bias_count > 0 || r.penalties.active()));
    if (!ok) {
        r = request_view{};
        r.error = kRowErrorInvalidParams;
    }
    return r;
}

}  // namespace ds

// A step as the samplers run it, whichever entry point it came through: a backend step over its
// slot pool (step_input) or an engine's sampling_call. Requests are read separately, through
// request_view.
#pragma once

#include <cstdint>

#include <distsample/sampling.h>

#include "kernels/sampling_types.h"

namespace ds {

struct chain_step {
    logits_view logits;
    int32_t batch_size = 0;
    int32_t tokens_per_req = 1;
    const int32_t* candidates = nullptr;  // [bs, N] or null for sample
    const uint32_t* bitmask = nullptr;    // [bs * N, ceil(V / 32)] or null
    verify_thresholds thresholds;
    const double* coins = nullptr;        // [bs, N - 1] replacements for the Philox coins, or null
    const double* final_coins = nullptr;  // [bs] replacements for the final draws, or null
    logprob_mode logprobs = logprob_mode::none;
    sampling_outputs outputs;
};

// A backend step's view of its inputs and packed outputs; logprobs are the processed ones.
inline chain_step chain_step_of(const step_input& step, const step_output& out) {
    chain_step c;
    c.logits = step.logits;
    c.batch_size = step.batch_size;
    c.tokens_per_req = step.tokens_per_req;
    c.candidates = step.tokens_per_req > 1 ? step.candidates : nullptr;
    c.bitmask = step.bitmask;
    c.thresholds = step.thresholds;
    c.coins = step.coins;
    c.final_coins = step.final_coins;
    c.logprobs = out.logprobs != nullptr ? logprob_mode::processed : logprob_mode::none;
    c.outputs = {predict_of(out), out.accept_index, accept_length_of(out, step.batch_size, step.tokens_per_req),
                 out.logprobs, out.row_error};
    return c;
}

// An engine call's view (its per-request parameters are read with resolve_request).
inline chain_step chain_step_of(const sampling_call& call) {
    chain_step c;
    c.logits = call.logits;
    c.batch_size = call.batch_size;
    c.tokens_per_req = call.tokens_per_req;
    c.candidates = call.candidates;
    c.bitmask = call.bitmask;
    c.thresholds = call.thresholds;
    c.logprobs = call.outputs.logprobs != nullptr ? call.logprobs : logprob_mode::none;
    c.outputs = call.outputs;
    return c;
}

}  // namespace ds

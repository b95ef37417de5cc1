// The request's chain walk from its rows' results: accepted drafts, the final token and its
// log-probability (docs/semantics.md, Verify).
// One of the chain kernel's parts (chain_kernel.cu includes top_p_rows.cuh, which includes the rest
// in order); device code for that one translation unit.
#pragma once

#include "kernels/cuda/cut_selection.cuh"

namespace ds::cuda {

namespace {

// The random bits that pick the token drawn at row k of request b.
__device__ uint64_t draw_bits(const chain_kernel_params& p, const request_view& r, int32_t b, int32_t k) {
    return p.final_coins != nullptr
               ? dm::unit_double_to_bits(p.final_coins[b])
               : dm::random_bits64(r.seed, r.position, static_cast<uint32_t>(k), dm::draw_purpose::token);
}

// The logit of `token` in `row` as given (raw logprobs).
__device__ float given_logit(const chain_kernel_params& p, int64_t row, int32_t token) {
    const int64_t at = row * p.row_stride + token;
    if (p.dtype == logits_dtype::f32) return static_cast<const float*>(p.logits)[at];
    const uint16_t bits = static_cast<const uint16_t*>(p.logits)[at];
    return p.dtype == logits_dtype::bf16 ? dm::bf16_bits_to_float(bits) : dm::fp16_bits_to_float(bits);
}

// The log-probability of the token emitted at row k of request b (docs/semantics.md,
// "Log-probabilities"); `logit` is its processed logit there.
__device__ float emitted_logprob(const chain_kernel_params& p, const request_view& r, int64_t row, int32_t token,
                                 float logit) {
    const row_result& s = p.workspace.results[row];
    if (p.logprobs == logprob_mode::raw) {
        return static_cast<float>(exact::log_probability(
            exact::shifted_logit(given_logit(p, row, token), __ldcg(&s.raw_max)), 1.0f, __ldcg(&s.raw_sum)));
    }
    const double shifted = exact::shifted_logit(logit, __ldcg(&s.max_logit));
    if (r.greedy()) return static_cast<float>(exact::log_probability(shifted, 1.0f, __ldcg(&s.softmax_sum)));
    return static_cast<float>(exact::log_probability(shifted, r.temperature, exact::mass_weight(__ldcg(&s.kept_mass))));
}

// The last block of request b to finish (all its threads): walk the chain from the rows' results
// and write the outputs. A request with invalid parameters, or one whose rows' blocks did not meet
// in time, emits nothing and is flagged. The request's drafts are read into `staged` (shared
// memory, kMaxDrafts entries) by the block's threads together first: the candidates may be in
// mapped host memory, where each read waits on the bus, and the walk reads them one after another.
__device__ void walk_chain(const chain_kernel_params& p, const request_view& r, int32_t b, int32_t* staged) {
    const int32_t n = p.tokens_per_req;
    const int64_t base = static_cast<int64_t>(b) * n;
    for (int32_t k = static_cast<int32_t>(threadIdx.x); k + 1 < n; k += static_cast<int32_t>(blockDim.x))
        staged[k] = p.candidates[base + k + 1];
    __syncthreads();
    if (threadIdx.x != 0) return;
    const chain_workspace& ws = p.workspace;
    const uint8_t error = r.error != kRowOk                                           ? r.error
                          : *static_cast<volatile uint32_t*>(&ws.control->fault) != 0 ? kRowErrorKernelFault
                                                                                      : kRowOk;
    int32_t accepted = 0;
    int32_t final_token = -1;
    for (int32_t k = 0; error == kRowOk && k < n; ++k) {
        const row_result& s = ws.results[base + k];
        const int32_t top = __ldcg(&s.top);
        if (top < 0) break;  // nothing allowed: the chain ends with an error flag
        const bool has_next_draft = k + 1 < n;
        const int32_t next_draft = has_next_draft ? staged[k] : -1;
        bool draft_accepted = false;
        if (r.greedy()) {
            draft_accepted = has_next_draft && next_draft == top;
        } else if (has_next_draft) {
            const double coin = p.coins != nullptr
                                    ? p.coins[static_cast<int64_t>(b) * (n - 1) + k]
                                    : dm::bits_to_unit_double(dm::random_bits64(
                                          r.seed, r.position, static_cast<uint32_t>(k + 1), dm::draw_purpose::coin));
            draft_accepted = exact::accepts_draft(__ldcg(&s.draft_mass), __ldcg(&s.kept_mass), coin,
                                                  p.thresholds.single, p.thresholds.acc);
        }
        if (!draft_accepted) {
            final_token = __ldcg(&s.stop_token);
            break;
        }
        ++accepted;
    }
    const sampling_outputs& out = p.outputs;
    for (int32_t k = 0; k < n; ++k) {
        const bool emitted = error == kRowOk && k <= accepted;
        const int32_t token = k < accepted ? staged[k] : (k == accepted ? final_token : -1);
        out.predict[base + k] = emitted ? token : -1;
        out.accept_index[base + k] = emitted || k == 0 ? static_cast<int32_t>(base + k) : -1;
        if (out.logprobs != nullptr) {
            float logprob = __int_as_float(0x7fc00000);  // NaN
            if (emitted && token >= 0) {
                // An accepted draft is the next row's draft: its logit was published there.
                const float l =
                    k < accepted ? __ldcg(&ws.sync[base + k].draft_logit) : __ldcg(&ws.results[base + k].stop_logit);
                logprob = emitted_logprob(p, r, base + k, token, l);
            }
            out.logprobs[base + k] = logprob;
        }
    }
    out.accept_length[b] = error == kRowOk ? accepted + 1 : 1;
    if (out.row_error != nullptr) {
        out.row_error[b] = error != kRowOk ? error : (final_token < 0 ? kRowErrorNothingAllowed : kRowOk);
    }
}

}  // namespace

}  // namespace ds::cuda

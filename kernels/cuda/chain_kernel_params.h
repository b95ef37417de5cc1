// Parameters of the one CUDA kernel that runs a sampling or verification step (DESIGN.md §6:
// one params struct per kernel, with documented shapes). Plain C++: no CUDA types.
#pragma once

#include <cstdint>

#include "kernels/param_pool.h"
#include "kernels/sampling_types.h"

namespace ds::cuda {

// A request's slot parameters, gathered from the host pool into the step's staging buffer.
struct request_params {
    int64_t position = 0;
    uint64_t seed = 0;
    float temperature = 1.0f;
    float top_p = 1.0f;
    float min_p = 0.0f;
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    float repetition_penalty = 1.0f;
    int32_t top_k = -1;
    int32_t greedy = 0;
    int32_t bias_offset = 0;  // into chain_kernel_params::bias
    int32_t bias_count = 0;
    int32_t seen_offset = 0;  // into chain_kernel_params::seen (0 entries unless penalised)
    int32_t seen_count = 0;
};

// One thread block per logits row analyses it; the last block of each request walks its chain.
struct chain_kernel_params {
    // Inputs (device memory).
    const void* logits = nullptr;           // [batch * tokens_per_req rows, row_stride]
    logits_dtype dtype = logits_dtype::f32;
    int64_t row_stride = 0;
    int32_t vocab = 0;
    int32_t batch_size = 0;
    int32_t tokens_per_req = 1;
    const request_params* requests = nullptr;  // [batch]
    const int32_t* candidates = nullptr;       // [batch * N] or null for sample
    const double* coins = nullptr;             // [batch * (N-1)] or null (Philox)
    const double* final_coins = nullptr;       // [batch] or null (Philox)
    const logit_bias_entry* bias = nullptr;
    const token_count* seen = nullptr;
    const uint32_t* bitmask = nullptr;         // [rows * ceil(V/32)] or null
    verify_thresholds thresholds;
    // Workspaces of [rows * vocab] floats: rows that penalties, bias or the mask modify, and each
    // row's weights det_exp((l - max) / T); per-row summaries (chain_kernel_summary_bytes() each);
    // per-request counters of finished rows, zero between steps (the kernel resets them).
    float* processed = nullptr;
    float* weights = nullptr;
    void* summaries = nullptr;
    int32_t* row_counters = nullptr;
    // Outputs (device memory, laid out as step_output).
    int32_t* packed = nullptr;        // predict [batch * N] then accept_length [batch]
    int32_t* accept_index = nullptr;  // [batch * N]
    float* logprobs = nullptr;        // [batch * N] or null to skip
    uint8_t* row_error = nullptr;     // [batch]

    // Empty when launchable, else what is wrong.
    const char* check() const {
        if (batch_size <= 0) return "batch_size must be positive";
        if (logits == nullptr || requests == nullptr || packed == nullptr || accept_index == nullptr ||
            row_error == nullptr || processed == nullptr || weights == nullptr || summaries == nullptr ||
            row_counters == nullptr) {
            return "a required pointer is null";
        }
        if (tokens_per_req > 1 && candidates == nullptr) return "verify needs candidates";
        if (row_stride < vocab || vocab <= 0) return "row_stride must be >= vocab > 0";
        return nullptr;
    }
};

}  // namespace ds::cuda

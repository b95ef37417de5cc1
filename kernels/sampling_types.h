// The vocabulary of the sampling kernels: request parameters, logits views, step descriptions,
// and outputs (status lives in core/status.h). Shared by every backend; no CUDA types here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <distsample/sampling.h>

#include "core/status.h"
#include "kernels/exact_rules.h"

namespace ds {

struct logit_bias_entry {
    int32_t token = 0;
    float bias = 0.0f;
};

// Per-request sampling parameters, registered once into a slot. Defaults are neutral.
// Ranges are enforced by validate_sampling_params (kernels/validation.h).
struct sampling_params {
    float temperature = 1.0f;                  // >= 0; < kGreedyTemperature means greedy
    int32_t top_k = -1;                        // -1 (all) or >= 1
    float top_p = 1.0f;                        // (0, 1]
    float min_p = 0.0f;                        // [0, 1]
    uint64_t seed = 0;                         // keys the request's random stream
    float presence_penalty = 0.0f;             // [-2, 2]: subtracted once from every token already seen
    float frequency_penalty = 0.0f;            // [-2, 2]: subtracted once per occurrence
    float repetition_penalty = 1.0f;           // (0, 10]: seen tokens' logits divided (>0) or multiplied (<0)
    std::vector<logit_bias_entry> logit_bias;  // ids in [0, V), biases in [-100, 100]

    bool has_penalties() const {
        return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
    }
};

inline bool is_greedy(const sampling_params& p) { return exact::is_greedy(p.temperature, p.top_k); }

// One step over bs requests with n_per_req logits rows each (1 for sample; N for verify).
// Row b * n_per_req + j of `logits` is the distribution after candidate j of request b.
struct step_input {
    logits_view logits;
    const int32_t* slots = nullptr;      // [bs] parameter-pool slots (0 = neutral phantom row)
    const int64_t* positions = nullptr;  // [bs] sequence length before this step (>= 0)
    int32_t batch_size = 0;
    int32_t tokens_per_req = 1;           // N
    const int32_t* candidates = nullptr;  // [bs, N] verify only: anchor then N-1 drafts
    const uint32_t* bitmask = nullptr;    // [bs*N, ceil(V/32)] bit 1 = allowed; null = all
    verify_thresholds thresholds;
    // Optional replacements for the Philox draws (tests and replay): coins [bs, N-1] and
    // final_coins [bs], each a uniform in [0, 1].
    const double* coins = nullptr;
    const double* final_coins = nullptr;
};

// Outputs of a step, in caller-owned memory. The packed buffer holds predict [bs*N] followed by
// accept_length [bs], so one copy returns both (docs/semantics.md, Outputs).
struct step_output {
    int32_t* packed = nullptr;        // [bs*N + bs]
    int32_t* accept_index = nullptr;  // [bs*N] flat row ids of accepted positions, -1 after
    float* logprobs = nullptr;        // [bs*N] log-softmax of the processed logits at predict
    uint8_t* row_error = nullptr;     // [bs] 1 when a row the request used allowed no token
};

inline int32_t* predict_of(const step_output& out) { return out.packed; }
inline int32_t* accept_length_of(const step_output& out, int32_t bs, int32_t n) {
    return out.packed + static_cast<int64_t>(bs) * n;
}

enum class step_kind { sample, verify };

inline int32_t bitmask_words(int32_t vocab) { return (vocab + 31) / 32; }

}  // namespace ds

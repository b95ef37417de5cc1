// Random engine calls (include/distsample/sampling.h) over host memory, with the same requests
// expressible as slot-pool steps: the CPU engine path, the backends and the CUDA path are checked
// against each other on the same inputs.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/sampling_backend.h"

namespace ds::testing {

struct random_call {
    int32_t vocab = 0;
    int32_t batch_size = 0;
    int32_t tokens_per_req = 1;
    logits_dtype dtype = logits_dtype::f32;
    std::vector<float> logits_f32;      // rows * vocab (the values, also for half dtypes)
    std::vector<uint16_t> logits_half;  // rows * vocab for bf16 / f16
    std::vector<sampling_params> requests;
    std::vector<std::vector<int32_t>> histories;  // tokens already emitted, per request
    std::vector<int64_t> positions;
    std::vector<int32_t> candidates;  // [bs, N] for verify, empty for sample
    std::vector<uint32_t> bitmask;    // [rows, words] or empty
    verify_thresholds thresholds;
    logprob_mode logprobs = logprob_mode::processed;
    bool per_row = true;  // parameters as per-row arrays (else the first request's as scalars for all)

    // Per-row arrays and CSR lists for the engine call (filled by make_call).
    std::vector<float> temperature, top_p, min_p, presence, frequency, repetition;
    std::vector<int32_t> top_k;
    std::vector<int64_t> seed;
    std::vector<int32_t> bias_offsets, bias_tokens, seen_offsets, seen_tokens, seen_counts;
    std::vector<float> bias_values;

    bool verify() const { return tokens_per_req > 1 || !candidates.empty(); }
    int64_t rows() const { return int64_t{batch_size} * tokens_per_req; }
    const void* logits_data() const;
};

// Outputs of one call, host memory.
struct call_outputs {
    std::vector<int32_t> predict, accept_index, accept_length;
    std::vector<float> logprobs;
    std::vector<uint8_t> row_error;

    explicit call_outputs(const random_call& c);
    sampling_outputs view();
};

// A random batch: vocabularies small and odd or up to `max_vocab`, every parameter kind, ties,
// -inf and NaN logits, bias, penalties with histories, bitmasks, drafts.
random_call make_random_call(std::mt19937_64& rng, int32_t max_vocab, bool verify);

// The engine call over `c`'s host arrays, writing to `out`.
sampling_call make_call(random_call& c, call_outputs& out);

// The same step through a backend's slot pool (request b in slot b + 1).
status run_on_backend(const random_call& c, sampling_backend& backend, call_outputs& out);

// The smallest kernel_config that fits `c`.
kernel_config config_for(const random_call& c);

}  // namespace ds::testing

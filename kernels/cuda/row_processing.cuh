// Processed logits on the device (docs/semantics.md, Penalties and bias): the bitmask, the
// penalties (with the drafts before a verify row) and the logit bias applied to a range of a row's
// tokens by one block, as cpu::row_sampler applies them. Shared by the chain kernel (a chunk in
// shared memory) and the sharded sampler's shard rows (a shard in global memory).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/block_primitives.cuh"
#include "kernels/exact_rules.h"
#include "kernels/request_view.h"

namespace ds::cuda {

namespace {

// The drafts row j of request b counts as emitted before it: drafts 1..j.
struct row_drafts {
    const int32_t* tokens;
    int32_t count;
};

// Turns a loaded chunk into processed logits: mask, then penalties (each penalised token once,
// with its count before the step plus its occurrences among the drafts before the row), then
// bias, as cpu::row_sampler; masking first is equivalent because -inf stays -inf.
// `mask` is the row's bitmask over the whole vocabulary (null: everything allowed); `chunk` holds
// the tokens [first, first + count).
__device__ inline void process_chunk(const uint32_t* mask, const request_view& r, row_drafts drafts, int32_t first,
                              int32_t count, float* chunk) {
    if (mask != nullptr) {
        for (int32_t i = threadIdx.x; i < count; i += kBlockThreads) {
            const int32_t token = first + i;
            if (((mask[token >> 5] >> (token & 31)) & 1u) == 0) chunk[i] = -HUGE_VALF;
        }
        __syncthreads();
    }
    auto in_chunk = [&](int32_t token) { return token >= first && token < first + count; };
    if (r.penalties.active()) {
        for (int32_t k = threadIdx.x; k < r.seen_count; k += kBlockThreads) {  // distinct tokens
            const int32_t token = r.seen_tokens[k];
            if (!in_chunk(token)) continue;
            const int32_t times = r.seen_counts[k] + exact::occurrences(drafts.tokens, drafts.count, token);
            chunk[token - first] = exact::penalised_logit(chunk[token - first], times, r.penalties);
        }
        for (int32_t i = threadIdx.x; i < drafts.count; i += kBlockThreads) {  // drafts not seen before
            const int32_t token = drafts.tokens[i];
            if (!in_chunk(token) || !exact::first_occurrence(drafts.tokens, i)) continue;
            bool seen = false;
            for (int32_t k = 0; k < r.seen_count && !seen; ++k) seen = r.seen_tokens[k] == token;
            if (seen) continue;
            const int32_t times = exact::occurrences(drafts.tokens, drafts.count, token);
            chunk[token - first] = exact::penalised_logit(chunk[token - first], times, r.penalties);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {  // in order: ids may repeat
        for (int32_t k = 0; k < r.bias_count; ++k) {
            const int32_t token = r.bias_tokens[k];
            if (in_chunk(token)) chunk[token - first] = chunk[token - first] + r.bias_values[k];
        }
    }
    __syncthreads();
}

}  // namespace

}  // namespace ds::cuda

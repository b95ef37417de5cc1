// How a block of the chain kernel walks its chunk, and the per-token math it does there. Shared
// with the floor probes (floor_probes.cu), so a probe times exactly the kernel's arithmetic.
#pragma once

#include <cstdint>

#include "kernels/cuda/block_primitives.cuh"
#include "kernels/cuda/chain_kernel_params.h"
#include "kernels/det_math.h"

namespace ds::cuda {

// A chunk is read in rounds of kBlockThreads float4s: in round s thread t holds the 4 tokens
// (s * kBlockThreads + t) * 4 .. + 3, so a warp reads 512 consecutive bytes (no bank conflicts)
// and each round covers a contiguous range of tokens in thread order.
constexpr int kPerThread = kChunkTokens / kBlockThreads;
constexpr int kSliceTokens = 4;
constexpr int kSlices = kPerThread / kSliceTokens;  // rounds
static_assert(kPerThread % kSliceTokens == 0 && kPerThread <= 64, "whole float4s; one 64-bit candidate mask");
static_assert(kSlices % 4 == 0, "rounds are counted four at a time in 16-bit fields");

// A thread's running argmax. Strict: the lowest index wins ties; NaN and -inf never win.
__device__ __forceinline__ void keep_if_larger(float value, int32_t token, float& best, int32_t& best_index) {
    if (value > best) {
        best = value;
        best_index = token;
    }
}

// keep_if_larger over Tokens consecutive tokens from `first`, with the same result: the vector's
// float maximum first (NaN ignored unless every value is NaN, which never wins), and only a
// vector that beats the running best looks for the lowest token holding it. The common vector
// costs a few instructions instead of a compare and two selects per token.
template <int Tokens>
__device__ __forceinline__ void keep_vector_if_larger(const float (&values)[Tokens], int32_t first, float& best,
                                                      int32_t& best_index) {
    float top = values[0];
#pragma unroll
    for (int k = 1; k < Tokens; ++k) top = fmaxf(top, values[k]);
    if (top > best) {
#pragma unroll
        for (int k = Tokens - 1; k >= 0; --k) {
            // The token's own value: of two equal zeros, its sign.
            if (values[k] == top) best_index = first + k, best = values[k];
        }
    }
}

// A thread's running sums of the mass pass: tokens with mass, their mass, and the mass of those
// at or above the min_p threshold.
struct mass_sums {
    uint64_t nonzero = 0;
    uint64_t total = 0;
    uint64_t min_p = 0;

    __device__ __forceinline__ void add(uint64_t mass, uint64_t min_mass) {
        nonzero += mass > 0 ? 1 : 0;
        total += mass;
        min_p += mass >= min_mass ? mass : 0;
    }
};

}  // namespace ds::cuda

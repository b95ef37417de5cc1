// The chain kernel's block: its constants, shared memory, the row barriers, loading and
// processing a chunk, and the walk over a chunk's tokens.
// One of the chain kernel's parts (chain_kernel.cu includes top_p_rows.cuh, which includes the rest
// in order); device code for that one translation unit.
#pragma once

#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "config/kernel_config.h"
#include "kernels/cuda/block_primitives.cuh"
#include "kernels/cuda/chain_kernel.h"
#include "kernels/cuda/row_processing.cuh"
#include "kernels/cuda/token_math.cuh"
#include "kernels/det_math.h"
#include "kernels/exact_rules.h"

namespace ds::cuda {

namespace dm = ds::detmath;

namespace {

constexpr int32_t kSortCapacity = 2048;  // candidates cut by sorting; more use radix selection
constexpr int32_t kMaxDrafts = kMaxTokensPerRequest - 1;  // of one request
constexpr int kRadixDigitBits = 10;
constexpr int kRadixBins = 1 << kRadixDigitBits;
constexpr int kRadixUnroll = 8;
constexpr int kMassBitsUsed = exact::kMassBits + 1;  // masses are at most 2^40
constexpr uint64_t kBarrierTimeoutNs = 2'000'000'000;
// Sort key of a candidate: (mass desc, token asc) as one descending integer.
constexpr int kKeyTokenBits = 22;
constexpr uint64_t kKeyTokenMask = (uint64_t{1} << kKeyTokenBits) - 1;
static_assert(kMassBitsUsed + kKeyTokenBits <= 64, "keys fit 64 bits");
// Rows with 1 < top_k <= kLogitTopKLimit find their top-k candidates on the logits (below).
constexpr int32_t kLogitTopKLimit = 128;
// Top-k rows bin a chunk's tokens by d = (chunk max - logit) * scale, the log2 of the weight
// ratio, kNearnessPerUnit bins per unit.
constexpr int kNearnessBins = 2048;
constexpr float kNearnessPerUnit = 48.0f;
static_assert(kNearnessBins % kBlockThreads == 0, "whole bins per thread");
// No token whose weight is below 2^-kMassReach of the top token's has mass (2^-40 and below).
constexpr float kMassReach = exact::kMassBits + 1.0f;
// A token whose weight is below 2^-kListMargin of k tokens' weights has less mass than each of
// them (2^1.5 > 2 leaves room for the rounding of the weights): it can be left out of the top k.
constexpr float kListMargin = 1.5f;

// Top-p rows stage the places of a warp's tokens near the boundary until 32 wait (top_p_rows.cuh):
// fewer than 32 wait before a round adds a warp's 32 * kSliceTokens tokens.
constexpr int kStagedPerWarp = 32 + 32 * kSliceTokens;

// The row as every block of it sees it after the barriers.
struct row_totals {
    int32_t top;
    float max_logit;
    uint64_t nonzero;
    uint64_t mass_total;
    uint64_t min_p_mass;
    double softmax_sum;
    float raw_max;
    double raw_sum;
};

struct kernel_shared {
    union alignas(16) {
        float chunk[kChunkTokens];     // this block's processed logits
        uint64_t keys[kSortCapacity];  // the row's candidates as sort keys (the cut's block)
        int32_t drafts[kMaxDrafts];    // the request's, for the chain walk (its last block)
        struct {
            uint32_t count[kRadixBins];
            uint64_t mass[kRadixBins];
        } radix;  // the cut's block, many candidates
    } data;
    union {
        uint32_t histogram[kMassHistogramBins];         // the chunk's masses by bin (cut rows)
        uint32_t nearness[kNearnessBins];               // the chunk's tokens by distance to its maximum (top-k rows)
        struct {
            uint32_t high[kWarps][kMassHistogramBins];  // bits 20 and up of the masses, summed
            uint32_t low[kWarps][kMassHistogramBins];   // bits 0 to 19, summed
        } warp_bin_mass;                                // the chunk's masses by bin, per warp (top-p rows)
        uint64_t row_bin_mass[kMassHistogramBins];      // the row's masses by bin (top-p rows)
        struct {
            uint16_t staged[kWarps][kStagedPerWarp];    // places of tokens waiting for their masses, per warp
            uint32_t listed[kChunkTokens / 32];         // the chunk's tokens in the boundary bin, one bit each
        } band;                                         // top-p rows after the row's first barrier
    };
    block_scratch scratch;
    row_totals totals;      // the row's combined maxima and masses (thread 0 combines)
    uint64_t owner_before;  // no-cut rows: kept mass before the chunk that holds the draw
    int32_t owner;
    int32_t owner_region;  // rows without a cut: the region of the owner's chunk that holds the draw, or -1
    int32_t list_offset;  // cut rows: this chunk's first place in the row's candidate list
    int32_t list_count;
    int32_t gathered;  // top-p rows' last block: the sort keys gathered
    uint32_t ticket;
    bool flag;
};

static_assert(kWarps == kMassRegions, "a chunk's mass regions are its warps'");

// Three blocks per SM on Hopper (228 KB of shared memory, 1 KB of it reserved per block).
static_assert(3 * (sizeof(kernel_shared) + 1024) <= 228 * 1024, "three blocks fit an SM");

using cut = exact::filter_cut;

__device__ __forceinline__ uint64_t mass_of(float logit, float max_logit, float scale) {
    return exact::token_mass(logit, max_logit, scale);
}

// Calls pass(mass) with the row's per-token mass, a function of the logit: the shorter form of a
// finite maximum (every row but one holding +inf), token_mass otherwise; the same values. For the
// passes over every token of a chunk, so the choice is made once per pass, not per token.
template <class Pass>
__device__ __forceinline__ void with_row_mass(float max_logit, float scale, const Pass& pass) {
    if (max_logit < HUGE_VALF) {
        pass([=](float logit) { return exact::token_mass_under_finite_max(logit, max_logit, scale); });
    } else {
        pass([=](float logit) { return exact::token_mass(logit, max_logit, scale); });
    }
}

// The unit-temperature weight of a token relative to `max_logit` (logprob normalisers).
__device__ __forceinline__ double unit_weight(float logit, float max_logit) {
    return exact::mass_weight(exact::token_mass(logit, max_logit, exact::kUnitScale));
}

__device__ __forceinline__ uint64_t global_nanoseconds() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// The step's kernels overlap their launches (programmatic dependent launch, sm_90): the prepare
// kernel lets the sampling kernel start at once, and the sampling kernel reads its logits while
// the prepare kernel still runs; it waits for it (its writes visible) before it touches the
// workspace. Both are no-ops where the launch did not ask for the overlap.
__device__ __forceinline__ void let_the_sampling_kernel_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_the_prepare_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Publishes thread 0's writes (threads that wrote global memory fence themselves first) and
// counts the block in; with `expected`, waits until that many blocks have. A wait past
// kBarrierTimeoutNs raises the launch's fault flag instead of hanging.
__device__ void arrive(uint32_t* counter, uint32_t expected, const chain_kernel_params& p) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(counter, 1u);
        if (expected > 0) {
            const uint64_t start = global_nanoseconds();
            while (*static_cast<volatile uint32_t*>(counter) < expected) {
                if (global_nanoseconds() - start > kBarrierTimeoutNs) {
                    atomicExch(&p.workspace.control->fault, 1u);
                    break;
                }
                __nanosleep(64);
            }
            __threadfence();
        }
    }
    __syncthreads();
}

// Loads `vectors` 16-byte vectors of 8 halves each into shared memory as floats: asynchronous
// copies bring the halves into the chunk's upper half (the whole chunk in flight at once), then
// they are widened in place. The lower half of the floats lies below the halves; the upper half
// overwrites them, so those are read into registers before anyone writes.
template <class Widen>
__device__ __forceinline__ void load_half_chunk(const uint4* source, int32_t vectors, Widen widen, float* chunk) {
    constexpr int kUpperPerThread = kChunkTokens / 8 / 2 / kBlockThreads;
    auto* halves = reinterpret_cast<uint4*>(chunk) + vectors;  // bytes [16 vectors, 32 vectors)
    for (int32_t q = threadIdx.x; q < vectors; q += kBlockThreads) __pipeline_memcpy_async(halves + q, source + q, 16);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    auto store = [&](int32_t q, const uint4& v) {
        const uint32_t words[4] = {v.x, v.y, v.z, v.w};
        float wide[8];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            wide[2 * k] = widen(static_cast<uint16_t>(words[k]));
            wide[2 * k + 1] = widen(static_cast<uint16_t>(words[k] >> 16));
        }
        reinterpret_cast<float4*>(chunk)[2 * q] = make_float4(wide[0], wide[1], wide[2], wide[3]);
        reinterpret_cast<float4*>(chunk)[2 * q + 1] = make_float4(wide[4], wide[5], wide[6], wide[7]);
    };
    const int32_t lower = vectors / 2;
    uint4 upper[kUpperPerThread];
#pragma unroll
    for (int i = 0; i < kUpperPerThread; ++i) {
        const int32_t q = lower + threadIdx.x + i * kBlockThreads;
        if (q < vectors) upper[i] = halves[q];
    }
    for (int32_t q = threadIdx.x; q < lower; q += kBlockThreads) store(q, halves[q]);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kUpperPerThread; ++i) {
        const int32_t q = lower + threadIdx.x + i * kBlockThreads;
        if (q < vectors) store(q, upper[i]);
    }
}

// Tokens [first, first + count) of `row` as whole 16-byte fp32 vectors, or null where they are
// not fp32 or not aligned to 16 bytes.
__device__ __forceinline__ const float4* vector_source(const chain_kernel_params& p, int64_t row, int32_t first,
                                                       int32_t count) {
    if (p.dtype != logits_dtype::f32 || count % 4 != 0) return nullptr;
    const float* source = static_cast<const float*>(p.logits) + row * p.row_stride + first;
    return (reinterpret_cast<uintptr_t>(source) & 15) == 0 ? reinterpret_cast<const float4*>(source) : nullptr;
}

// Loads tokens [first, first + count) of `row` into shared memory as the logits are given.
__device__ void load_raw_chunk(const chain_kernel_params& p, int64_t row, int32_t first, int32_t count, float* chunk) {
    const int64_t offset = row * p.row_stride + first;
    if (p.dtype == logits_dtype::f32) {
        if (const float4* vectors = vector_source(p, row, first, count)) {
            // Asynchronous copies straight into shared memory: the whole chunk in flight at once.
            for (int32_t q = threadIdx.x; q < count / 4; q += kBlockThreads)
                __pipeline_memcpy_async(reinterpret_cast<float4*>(chunk) + q, vectors + q, 16);
            __pipeline_commit();
            __pipeline_wait_prior(0);
        } else {
            const float* source = static_cast<const float*>(p.logits) + offset;
            for (int32_t i = threadIdx.x; i < count; i += kBlockThreads) chunk[i] = source[i];
        }
    } else {
        const uint16_t* source = static_cast<const uint16_t*>(p.logits) + offset;
        const bool bf16 = p.dtype == logits_dtype::bf16;
        auto widen = [bf16](uint16_t bits) {
            return bf16 ? dm::bf16_bits_to_float(bits) : dm::fp16_bits_to_float(bits);
        };
        if ((reinterpret_cast<uintptr_t>(source) & 15) == 0 && count % 8 == 0) {
            // One widening per dtype, chosen once per chunk rather than per token.
            const auto* vectors = reinterpret_cast<const uint4*>(source);
            if (bf16) {
                load_half_chunk(vectors, count / 8, [](uint16_t bits) { return dm::bf16_bits_to_float(bits); }, chunk);
            } else {
                load_half_chunk(vectors, count / 8, [](uint16_t bits) { return dm::fp16_bits_to_float(bits); }, chunk);
            }
        } else {
            for (int32_t i = threadIdx.x; i < count; i += kBlockThreads) chunk[i] = widen(source[i]);
        }
    }
    __syncthreads();  // the vector paths stored other threads' elements
}

__device__ __forceinline__ row_drafts drafts_of(const chain_kernel_params& p, int32_t b, int32_t j) {
    const int64_t base = static_cast<int64_t>(b) * p.tokens_per_req;
    return {p.candidates != nullptr ? p.candidates + base + 1 : nullptr, p.candidates != nullptr ? j : 0};
}

// Row `row`'s bitmask words, or null when the step has none.
__device__ __forceinline__ const uint32_t* mask_of(const chain_kernel_params& p, int64_t row) {
    return p.bitmask != nullptr ? p.bitmask + row * ((p.vocab + 31) / 32) : nullptr;
}

// This thread's slice of round `round` of a chunk: its first token's index in the chunk, and the
// values, -inf past `count`.
__device__ __forceinline__ int32_t read_slice(const float* chunk, int32_t count, int round,
                                              float (&values)[kSliceTokens]) {
    const int32_t first = (round * kBlockThreads + static_cast<int32_t>(threadIdx.x)) * kSliceTokens;
    if (first + kSliceTokens <= count) {
        const float4 q = *reinterpret_cast<const float4*>(chunk + first);
        values[0] = q.x;
        values[1] = q.y;
        values[2] = q.z;
        values[3] = q.w;
    } else {
#pragma unroll
        for (int k = 0; k < kSliceTokens; ++k) values[k] = first + k < count ? chunk[first + k] : -HUGE_VALF;
    }
    return first;
}

// Calls visit(round, first, values) for this thread's tokens round by round (increasing token
// order): `first` is the index in the chunk of values[0]; tokens past `count` read as -inf,
// which has no mass and never wins.
template <class Visit>
__device__ __forceinline__ void for_each_slice(const float* chunk, int32_t count, const Visit& visit) {
#pragma unroll 4
    for (int round = 0; round < kSlices; ++round) {
        float values[kSliceTokens];
        const int32_t first = read_slice(chunk, count, round, values);
        visit(round, first, values);
    }
}

// Chunks that need no processing are copied in kLoadStages groups of rounds, each thread copying
// its own slices (those for_each_slice gives it), so a thread works on its first slices while its
// later ones are in flight.
constexpr int kLoadStages = 4;
static_assert(kSlices % kLoadStages == 0, "whole rounds per stage");

// Copies a chunk from `source` (vector_source) and calls visit(round, first, values) for this
// thread's slices as they land, in the order of for_each_slice. No thread reads another's slices
// before the caller's next __syncthreads.
template <class Visit>
__device__ __forceinline__ void for_each_landing_slice(const float4* source, int32_t count, float* chunk,
                                                       const Visit& visit) {
    constexpr int kRoundsPerStage = kSlices / kLoadStages;
    const int32_t vectors = count / 4;
#pragma unroll
    for (int round = 0; round < kSlices; ++round) {
        const int32_t q = round * kBlockThreads + static_cast<int32_t>(threadIdx.x);
        if (q < vectors) __pipeline_memcpy_async(reinterpret_cast<float4*>(chunk) + q, source + q, 16);
        if ((round + 1) % kRoundsPerStage == 0) __pipeline_commit();
    }
#pragma unroll
    for (int stage = 0; stage < kLoadStages; ++stage) {
        __pipeline_wait_prior(kLoadStages - 1 - stage);
#pragma unroll
        for (int round = stage * kRoundsPerStage; round < (stage + 1) * kRoundsPerStage; ++round) {
            float values[kSliceTokens];
            const int32_t first = read_slice(chunk, count, round, values);
            visit(round, first, values);
        }
    }
}

}  // namespace

}  // namespace ds::cuda

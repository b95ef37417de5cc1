// The kernels of the sharded sampler's device side (shard_rows.cu): one block of kBlockThreads per
// row a query names, every sum and scan on integers, every decision through kernels/exact_rules.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/block_primitives.cuh"
#include "kernels/cuda/row_processing.cuh"
#include "kernels/cuda/token_math.cuh"
#include "kernels/det_math.h"
#include "kernels/sampling_types.h"
#include "kernels/shard_queries.h"

namespace ds::cuda {

namespace {

namespace dm = ds::detmath;

// The shard's rows in device memory.
struct row_buffers {
    float* logits;     // [rows, shard_vocab] processed
    uint64_t* masses;  // [rows, shard_vocab]
    int32_t shard_vocab;

    __device__ const float* logits_of(int64_t row) const { return logits + row * shard_vocab; }
    __device__ uint64_t* masses_of(int64_t row) const { return masses + row * shard_vocab; }
};

// ---- prepare: load, process, argmax -----------------------------------------------------------
struct prepare_args {
    const void* logits;
    logits_dtype dtype;
    int64_t row_stride;
    const request_view* requests;  // [bs], lists in device memory
    const int32_t* candidates;     // [bs * n] or null
    const uint32_t* bitmask;       // [rows, mask_words] or null
    int32_t mask_words;
    int32_t tokens_per_req;
    int32_t vocab_offset;
    float* best_logit;
    int32_t* best_index;
};

__device__ float logit_at(const prepare_args& a, int64_t at) {
    switch (a.dtype) {
        case logits_dtype::bf16: return dm::bf16_bits_to_float(static_cast<const uint16_t*>(a.logits)[at]);
        case logits_dtype::f16: return dm::fp16_bits_to_float(static_cast<const uint16_t*>(a.logits)[at]);
        case logits_dtype::f32: break;
    }
    return static_cast<const float*>(a.logits)[at];
}

__global__ void __launch_bounds__(kBlockThreads) prepare_kernel(row_buffers rows, prepare_args a) {
    __shared__ block_scratch sh;
    const int64_t row = blockIdx.x;
    const int32_t b = static_cast<int32_t>(row / a.tokens_per_req);
    const int32_t j = static_cast<int32_t>(row % a.tokens_per_req);
    float* out = rows.logits + row * rows.shard_vocab;
    for (int32_t i = threadIdx.x; i < rows.shard_vocab; i += kBlockThreads)
        out[i] = logit_at(a, row * a.row_stride + i);
    __syncthreads();
    const row_drafts drafts{
        a.candidates != nullptr ? a.candidates + static_cast<int64_t>(b) * a.tokens_per_req + 1 : nullptr,
        a.candidates != nullptr ? j : 0};
    process_chunk(a.bitmask != nullptr ? a.bitmask + row * a.mask_words : nullptr, a.requests[b], drafts,
                  a.vocab_offset, rows.shard_vocab, out);
    float best = -HUGE_VALF;
    int32_t best_index = -1;
    for (int32_t i = threadIdx.x; i < rows.shard_vocab; i += kBlockThreads) keep_if_larger(out[i], i, best, best_index);
    float value = 0.0f;
    const int32_t index = block_argmax(best, best_index, value, sh);
    if (threadIdx.x == 0) {
        a.best_index[row] = index;
        a.best_logit[row] = value;
    }
}

// ---- masses -------------------------------------------------------------------------------------
struct mass_args {
    const float* max_logit;        // [rows]
    const uint8_t* has_max;        // [rows]
    const int32_t* stochastic_of;  // [rows]: k, or -1
    const float* temperatures;     // [stochastic]
    uint64_t* unit_sums;           // [rows]
    uint64_t* counts_and_masses;   // [2 * stochastic]
};

__global__ void __launch_bounds__(kBlockThreads) mass_kernel(row_buffers rows, mass_args a) {
    __shared__ block_scratch sh;
    const int64_t row = blockIdx.x;
    const float* l = rows.logits_of(row);
    const float max_logit = a.max_logit[row];
    uint64_t unit = 0;
    if (a.has_max[row] != 0) {
        unit = block_sum_over([&](int32_t i) { return exact::token_mass(l[i], max_logit, exact::kUnitScale); },
                              rows.shard_vocab, sh);
    }
    if (threadIdx.x == 0) a.unit_sums[row] = unit;
    const int32_t k = a.stochastic_of[row];
    if (k < 0) return;
    const float scale = exact::mass_scale(a.temperatures[k]);
    uint64_t* mass = rows.masses_of(row);
    uint64_t count = 0;
    uint64_t sum = 0;
    for (int32_t i = threadIdx.x; i < rows.shard_vocab; i += kBlockThreads) {
        const uint64_t q = exact::token_mass(l[i], max_logit, scale);
        mass[i] = q;
        count += q > 0 ? 1 : 0;
        sum += q;
    }
    count = block_sum(count, sh);
    sum = block_sum(sum, sh);
    if (threadIdx.x == 0) {
        a.counts_and_masses[2 * k] = count;
        a.counts_and_masses[2 * k + 1] = sum;
    }
}

// ---- the largest masses of cut rows (from their rows sorted in descending order) ---------------
__global__ void __launch_bounds__(kBlockThreads)
    copy_rows_kernel(const uint64_t* from, const int64_t* rows, int32_t width, uint64_t* to) {
    const uint64_t* source = from + rows[blockIdx.x] * width;
    uint64_t* target = to + static_cast<int64_t>(blockIdx.x) * width;
    for (int32_t i = threadIdx.x; i < width; i += kBlockThreads) target[i] = source[i];
}

__global__ void __launch_bounds__(kBlockThreads)
    level_kernel(const uint64_t* sorted, int32_t width, const uint64_t* depths, int32_t levels, uint64_t* out) {
    __shared__ block_scratch sh;
    const uint64_t* row = sorted + static_cast<int64_t>(blockIdx.x) * width;
    const auto deepest = static_cast<int32_t>(min(static_cast<uint64_t>(width), depths[levels - 1]));
    const uint64_t nonzero = block_sum_over([&](int32_t i) -> uint64_t { return row[i] > 0 ? 1 : 0; }, deepest, sh);
    for (int32_t level = 0; level < levels; ++level) {
        const auto covered = static_cast<int32_t>(min(nonzero, depths[level]));
        const uint64_t above = block_sum_over([&](int32_t i) { return row[i]; }, covered, sh);
        if (threadIdx.x == 0) {
            uint64_t* word = out + (static_cast<int64_t>(blockIdx.x) * levels + level) * 2;
            word[0] = covered > 0 ? row[covered - 1] : 0;
            word[1] = above;
        }
    }
}

// ---- candidates: tokens at or above a threshold, in token order ---------------------------------
struct candidate_task {
    int64_t row;
    uint64_t threshold;
    uint64_t room;
    uint64_t offset;  // into the outputs
};

__global__ void __launch_bounds__(kBlockThreads) candidate_kernel(row_buffers rows, const candidate_task* tasks,
                                                                  uint64_t* masses, int32_t* tokens, uint64_t* counts) {
    __shared__ block_scratch sh;
    const candidate_task t = tasks[blockIdx.x];
    const uint64_t* mass = rows.masses_of(t.row);
    // In token order: each warp counts its region, then lists its tokens 32 at a time.
    const warp_region region = region_of_warp(rows.shard_vocab);
    const int lane = static_cast<int>(threadIdx.x & 31);
    uint64_t mine = 0;
    for (int32_t i = region.begin + lane; i < region.end; i += 32) mine += mass[i] >= t.threshold ? 1 : 0;
    uint64_t total = 0;
    uint64_t at = __shfl_sync(kFullMask, block_exclusive_scan(mine, total, sh), 0);  // the region's first place
    for (int32_t first = region.begin; first < region.end && at < t.room; first += 32) {
        const int32_t i = first + lane;
        const bool listed = i < region.end && mass[i] >= t.threshold;
        const unsigned ballot = __ballot_sync(kFullMask, listed);
        const uint64_t place = at + static_cast<uint64_t>(__popc(ballot & lanes_below()));
        if (listed && place < t.room) {
            masses[t.offset + place] = mass[i];
            tokens[t.offset + place] = i;
        }
        at += static_cast<uint64_t>(__popc(ballot));
    }
    if (threadIdx.x == 0) counts[blockIdx.x] = total;
}

// ---- radix-select histograms -------------------------------------------------------------------
constexpr int kDigitBins = 256;

__global__ void __launch_bounds__(kBlockThreads)
    histogram_kernel(row_buffers rows, const int64_t* row_ids, const exact::filter_cut* domains,
                     const uint64_t* prefixes, int shift, uint64_t* histograms) {
    __shared__ unsigned long long bins[2 * kDigitBins];  // counts, then masses
    for (int i = threadIdx.x; i < 2 * kDigitBins; i += kBlockThreads) bins[i] = 0;
    __syncthreads();
    const uint64_t* mass = rows.masses_of(row_ids[blockIdx.x]);
    const exact::filter_cut domain = domains[blockIdx.x];
    const uint64_t prefix = prefixes[blockIdx.x];
    for (int32_t i = threadIdx.x; i < rows.shard_vocab; i += kBlockThreads) {
        const uint64_t q = mass[i];
        if (q == 0 || !domain.keeps(i, q) || (q >> (shift + 8)) != prefix) continue;
        const auto digit = static_cast<int>((q >> shift) & 255u);
        atomicAdd(&bins[digit], 1ull);
        atomicAdd(&bins[kDigitBins + digit], static_cast<unsigned long long>(q));
    }
    __syncthreads();
    uint64_t* out = histograms + static_cast<int64_t>(blockIdx.x) * 2 * kDigitBins;
    for (int i = threadIdx.x; i < 2 * kDigitBins; i += kBlockThreads) out[i] = bins[i];
}

// ---- ties at a mass: how many, and the nth ---------------------------------------------------
__global__ void __launch_bounds__(kBlockThreads)
    tie_kernel(row_buffers rows, const tie_query* queries, int64_t* counts, int32_t* tokens) {
    __shared__ block_scratch sh;
    const tie_query t = queries[blockIdx.x];
    const uint64_t* mass = rows.masses_of(static_cast<int64_t>(t.row));
    auto tied = [&](int32_t i) -> uint64_t { return mass[i] == t.q && t.domain.keeps(i, t.q) ? 1 : 0; };
    const uint64_t ties = block_sum_over(tied, rows.shard_vocab, sh);
    const int32_t found = t.nth >= 0 ? block_find_prefix(tied, rows.shard_vocab, static_cast<uint64_t>(t.nth), sh) : -1;
    if (threadIdx.x == 0) {
        counts[blockIdx.x] = static_cast<int64_t>(ties);
        tokens[blockIdx.x] = found;
    }
}

// ---- kept masses and the owners' draws ------------------------------------------------------
__global__ void __launch_bounds__(kBlockThreads)
    kept_kernel(row_buffers rows, const kept_request* requests, uint64_t* kept) {
    __shared__ block_scratch sh;
    const kept_request k = requests[blockIdx.x];
    const uint64_t* mass = rows.masses_of(static_cast<int64_t>(k.row));
    const uint64_t sum = block_sum_over([&](int32_t i) { return k.cut.keeps(i, mass[i]) ? mass[i] : uint64_t{0}; },
                                        rows.shard_vocab, sh);
    if (threadIdx.x == 0) {
        kept[2 * blockIdx.x] = sum;
        kept[2 * blockIdx.x + 1] = k.draft >= 0 && k.cut.keeps(k.draft, mass[k.draft]) ? mass[k.draft] : 0;
    }
}

__global__ void __launch_bounds__(kBlockThreads)
    draw_kernel(row_buffers rows, const mass_draw* draws, int32_t* tokens) {
    __shared__ block_scratch sh;
    const mass_draw d = draws[blockIdx.x];
    const uint64_t* mass = rows.masses_of(static_cast<int64_t>(d.row));
    auto kept = [&](int32_t i) -> uint64_t { return i != d.excluded && d.cut.keeps(i, mass[i]) ? mass[i] : 0; };
    const int32_t token = block_find_prefix(kept, rows.shard_vocab, d.target, sh);
    if (threadIdx.x == 0) tokens[blockIdx.x] = token;
}

__global__ void gather_logits_kernel(row_buffers rows, const row_token* at, int64_t count, float* out) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < count) out[i] = rows.logits_of(static_cast<int64_t>(at[i].row))[at[i].token];
}

}  // namespace

}  // namespace ds::cuda

// A row's totals combined from its chunks' partials: maxima, logprob normalisers, masses.
// One of the chain kernel's parts (chain_kernel.cu includes top_p_rows.cuh, which includes the rest
// in order); device code for that one translation unit.
#pragma once

#include "kernels/cuda/chain_walk.cuh"

namespace ds::cuda {

namespace {

// What the helpers of a sampled row need to know about it.
struct row_context {
    const chain_kernel_params& p;
    const request_view& r;
    float scale;  // exact::mass_scale(r.temperature)
    int64_t row;
    int32_t b;  // request
    int32_t j;  // row within the request (its draft index)
    int32_t chunks;
    int32_t draft;  // the draft judged against this row, -1 if none
    uint64_t min_mass;
};

// Counts this block in (after publishing thread 0's writes, as arrive); true, to every thread,
// for the last of `total` blocks, which then sees every other block's writes.
__device__ bool arrive_last(uint32_t* counter, uint32_t total, bool& shared_flag) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        shared_flag = atomicAdd(counter, 1u) == total - 1;
        if (shared_flag) __threadfence();
    }
    __syncthreads();
    return shared_flag;
}

// What a row's logprobs need from its chunks: the processed softmax sum (greedy rows of the
// processed mode) and the raw maximum and sum (raw mode).
struct logprob_needs {
    bool softmax;
    bool raw;
};

__device__ __forceinline__ logprob_needs needs_of(const chain_kernel_params& p, const request_view& r) {
    const bool any = p.outputs.logprobs != nullptr;
    return {any && p.logprobs == logprob_mode::processed && r.greedy(), any && p.logprobs == logprob_mode::raw};
}

// Sum over a warp's lanes of each chunk's weight sum rescaled from the chunk's maximum to `best`
// (a float result, within 1e-7 of a direct sum); lane c reads chunks c, c + 32, ...
template <class Max, class Sum>
__device__ double rescaled_sum(int32_t chunks, float best, const Max& chunk_max, const Sum& chunk_sum) {
    double sum = 0.0;
    for (int32_t c = static_cast<int32_t>(threadIdx.x); c < chunks; c += 32) {
        const float m = chunk_max(c);
        if (!(m > -HUGE_VALF)) continue;  // nothing allowed there
        sum += chunk_sum(c) * (m == best ? 1.0 : exp(static_cast<double>(m) - best));
    }
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(kFullMask, sum, offset);
    return sum;
}

// sh.totals.top / max_logit / softmax_sum / raw_max / raw_sum from the chunks' partials. Warp 0
// combines, in a fixed order for a given chunk count.
__device__ void combine_maxima(const chunk_partial* partials, int32_t chunks, logprob_needs needs, row_totals& totals) {
    if (threadIdx.x < 32) {
        float best = 0.0f;
        int32_t top = -1;
        float raw_best = -HUGE_VALF;
        for (int32_t c = static_cast<int32_t>(threadIdx.x); c < chunks; c += 32) {
            const float value = __ldcg(&partials[c].max_logit);
            const int32_t index = __ldcg(&partials[c].max_index);
            if (argmax_better(value, index, best, top)) {
                best = value;
                top = index;
            }
            raw_best = fmaxf(raw_best, __ldcg(&partials[c].raw_max));
        }
        warp_argmax(best, top);
        double softmax = 0.0;
        if (needs.softmax && top >= 0) {
            softmax = rescaled_sum(
                chunks, best,
                [&](int32_t c) {
                    return __ldcg(&partials[c].max_index) < 0 ? -HUGE_VALF : __ldcg(&partials[c].max_logit);
                },
                [&](int32_t c) { return __ldcg(&partials[c].softmax_sum); });
        }
        double raw = 0.0;
        if (needs.raw) {
            for (int offset = 16; offset > 0; offset >>= 1)
                raw_best = fmaxf(raw_best, __shfl_xor_sync(kFullMask, raw_best, offset));
            raw = rescaled_sum(
                chunks, raw_best, [&](int32_t c) { return __ldcg(&partials[c].raw_max); },
                [&](int32_t c) { return __ldcg(&partials[c].raw_sum); });
        }
        if (threadIdx.x == 0) totals = row_totals{top, top >= 0 ? best : 0.0f, 0, 0, 0, softmax, raw_best, raw};
    }
    __syncthreads();
}

// The logprob fields every writer of a row_result copies from the row's totals.
__device__ __forceinline__ void copy_logprob_totals(const row_totals& totals, row_result& result) {
    result.softmax_sum = totals.softmax_sum;
    result.raw_max = totals.raw_max;
    result.raw_sum = totals.raw_sum;
}

// sh.totals' nonzero, mass_total and min_p_mass from the chunks' (exact integer sums).
__device__ void combine_masses(const chunk_partial* partials, int32_t chunks, kernel_shared& sh) {
    if (threadIdx.x < 32) {
        uint64_t nonzero = 0, mass_total = 0, min_p_mass = 0;
        for (int32_t c = static_cast<int32_t>(threadIdx.x); c < chunks; c += 32) {
            nonzero += __ldcg(&partials[c].nonzero);
            mass_total += __ldcg(&partials[c].mass_total);
            min_p_mass += __ldcg(&partials[c].min_p_mass);
        }
        nonzero = warp_sum(nonzero);
        mass_total = warp_sum(mass_total);
        min_p_mass = warp_sum(min_p_mass);
        if (threadIdx.x == 0) {
            sh.totals.nonzero = nonzero;
            sh.totals.mass_total = mass_total;
            sh.totals.min_p_mass = min_p_mass;
        }
    }
    __syncthreads();
}

// A greedy row's last block to arrive combines the chunks' maxima: the row's argmax is also the
// token its request emits if the chain stops there.
__device__ void combine_greedy_row(const chunk_partial* partials, int32_t chunks, logprob_needs needs, row_sync& sync,
                                   row_result& result, row_totals& totals, bool& shared_flag) {
    if (!arrive_last(&sync.maxima_arrived, static_cast<uint32_t>(chunks), shared_flag)) return;
    combine_maxima(partials, chunks, needs, totals);
    if (threadIdx.x == 0) {
        result.top = totals.top;
        result.max_logit = totals.max_logit;
        copy_logprob_totals(totals, result);
        result.stop_token = totals.top;
        result.stop_logit = totals.max_logit;
    }
}

}  // namespace

}  // namespace ds::cuda

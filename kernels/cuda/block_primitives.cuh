// Block-wide building blocks of the sampling kernel, all on integers or with a fixed reduction
// tree, so their results do not depend on scheduling. A block has kBlockThreads threads; every
// function must be called by all of them (they synchronise).
#pragma once

#include <cstdint>

namespace ds::cuda {

constexpr int kBlockThreads = 1024;
constexpr int kWarps = kBlockThreads / 32;
constexpr unsigned kFullMask = 0xFFFFFFFFu;
// Elements each thread loads before using any: keeps enough reads in flight to cover memory
// latency with one block per SM. A thread still visits its indices in ascending order.
constexpr int kUnroll = 8;

// Radix selection over 41-bit masses: one 8-bit digit (bits 33..40) then three 11-bit digits.
constexpr int kRadixBins = 2048;
constexpr int kRadixPasses = 4;

// The few hundred to few thousand tokens that can survive top-k/top-p, gathered and sorted in
// shared memory (see select_cut in chain_kernel.cu); rows with more use the radix passes.
constexpr int kCandidateCapacity = 2048;

struct radix_bins {
    uint32_t count[kRadixBins];
    uint64_t mass[kRadixBins];
};

struct candidate_list {
    uint64_t mass[kCandidateCapacity];
    int32_t token[kCandidateCapacity];
};

struct block_shared {
    uint64_t warp_u64[kWarps];
    float warp_value[kWarps];
    int32_t warp_index[kWarps];
    union {
        radix_bins bins;
        candidate_list candidates;
    } scratch;
    uint64_t broadcast_u64[4];
    int32_t broadcast_i32[4];
    uint32_t counter;
};

__device__ __forceinline__ uint64_t warp_sum(uint64_t v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
    return v;
}

__device__ __forceinline__ uint64_t warp_inclusive_scan(uint64_t v) {
    const int lane = threadIdx.x & 31;
    for (int offset = 1; offset < 32; offset <<= 1) {
        const uint64_t other = __shfl_up_sync(kFullMask, v, offset);
        if (lane >= offset) v += other;
    }
    return v;
}

// Adds one token (digit >= 0, its mass) per lane to the histogram sh.scratch.bins. The lanes of a
// warp that share a digit (most share the lowest one) make one pair of atomics together, so
// crowded bins do not serialise the block. Every lane of the warp must call it.
__device__ inline void warp_aggregated_add(int digit, uint64_t mass, block_shared& sh) {
    const int lane = threadIdx.x & 31;
    unsigned remaining = __ballot_sync(kFullMask, digit >= 0);
    while (remaining != 0) {
        const int leader = __ffs(remaining) - 1;
        const int group_digit = __shfl_sync(kFullMask, digit, leader);
        const bool member = digit == group_digit;
        const unsigned group = __ballot_sync(kFullMask, member);
        const uint64_t group_mass = warp_sum(member ? mass : 0);
        if (lane == leader) {
            atomicAdd(&sh.scratch.bins.count[group_digit], static_cast<unsigned>(__popc(group)));
            atomicAdd(reinterpret_cast<unsigned long long*>(&sh.scratch.bins.mass[group_digit]),
                      static_cast<unsigned long long>(group_mass));
        }
        remaining &= ~group;
    }
}

// (value, index) with the larger value winning and ties to the lower index; index -1 is empty.
__device__ __forceinline__ bool argmax_better(float value, int32_t index, float best_value, int32_t best_index) {
    if (index < 0) return false;
    if (best_index < 0) return true;
    return value > best_value || (value == best_value && index < best_index);
}

// Combines each thread's (best, best_index) into the block's argmax, returned to every thread.
__device__ inline int32_t block_argmax_finish(float best, int32_t best_index, block_shared& sh) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float other = __shfl_xor_sync(kFullMask, best, offset);
        const int32_t other_index = __shfl_xor_sync(kFullMask, best_index, offset);
        if (argmax_better(other, other_index, best, best_index)) {
            best = other;
            best_index = other_index;
        }
    }
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) {
        sh.warp_value[warp] = best;
        sh.warp_index[warp] = best_index;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float value = -HUGE_VALF;
        int32_t index = -1;
        for (int w = 0; w < kWarps; ++w) {
            if (argmax_better(sh.warp_value[w], sh.warp_index[w], value, index)) {
                value = sh.warp_value[w];
                index = sh.warp_index[w];
            }
        }
        sh.broadcast_i32[0] = index;
    }
    __syncthreads();
    const int32_t result = sh.broadcast_i32[0];
    __syncthreads();
    return result;
}

// Greedy argmax of logit(i) over [0, vocab): NaN and -inf never win, ties go to the lowest index.
// Returns the index (-1 when nothing is allowed) to every thread.
template <class Logit>
__device__ int32_t block_argmax(const Logit& logit, int32_t vocab, block_shared& sh) {
    float best = -HUGE_VALF;
    int32_t best_index = -1;
    for (int32_t base = threadIdx.x; base < vocab; base += kBlockThreads * kUnroll) {
        float values[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
            const int32_t i = base + k * kBlockThreads;
            values[k] = i < vocab ? logit(i) : -HUGE_VALF;
        }
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
            if (values[k] > best) {  // strict: keeps this thread's lowest index on ties, skips NaN and -inf
                best = values[k];
                best_index = base + k * kBlockThreads;
            }
        }
    }
    return block_argmax_finish(best, best_index, sh);
}

// block_argmax for unmodified fp32 rows that are 16-byte aligned with vocab % 4 == 0: float4
// loads keep four times as many bytes in flight. Same result (each thread still visits its
// indices in ascending order).
__device__ inline int32_t block_argmax_f32x4(const float* row, int32_t vocab, block_shared& sh) {
    const auto* row4 = reinterpret_cast<const float4*>(row);
    const int32_t quads = vocab / 4;
    float best = -HUGE_VALF;
    int32_t best_index = -1;
    for (int32_t base = threadIdx.x; base < quads; base += kBlockThreads * kUnroll) {
        float4 values[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
            const int32_t q = base + k * kBlockThreads;
            values[k] = q < quads ? row4[q] : make_float4(-HUGE_VALF, -HUGE_VALF, -HUGE_VALF, -HUGE_VALF);
        }
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
            const int32_t i = 4 * (base + k * kBlockThreads);
            if (values[k].x > best) { best = values[k].x; best_index = i; }
            if (values[k].y > best) { best = values[k].y; best_index = i + 1; }
            if (values[k].z > best) { best = values[k].z; best_index = i + 2; }
            if (values[k].w > best) { best = values[k].w; best_index = i + 3; }
        }
    }
    return block_argmax_finish(best, best_index, sh);
}

// Sum of f(i) over [0, vocab), returned to every thread: exact for uint64_t, a fixed reduction
// tree (deterministic for a given block size) for double.
template <class T, class F>
__device__ T block_sum(const F& f, int32_t vocab, block_shared& sh) {
    static_assert(sizeof(T) == sizeof(uint64_t), "partials share the 8-byte warp slots");
    T s = 0;
    for (int32_t base = threadIdx.x; base < vocab; base += kBlockThreads * kUnroll) {
        T values[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
            const int32_t i = base + k * kBlockThreads;
            values[k] = i < vocab ? f(i) : T{0};
        }
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) s += values[k];
    }
    for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(kFullMask, s, offset);
    T* partial = reinterpret_cast<T*>(sh.warp_u64);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        T total = 0;
        for (int w = 0; w < kWarps; ++w) total += partial[w];
        partial[0] = total;
    }
    __syncthreads();
    const T result = partial[0];
    __syncthreads();
    return result;
}

// The first i in index order whose inclusive prefix sum of f exceeds `target`, or -1.
// Narrowing rounds: every warp sums one contiguous slice of the range (coalesced), the slice that
// crosses the target becomes the range, until it is short enough for one warp to scan. For
// V = 128k that is one full pass, one pass over 1/32 of the row, and a 4-step warp scan.
template <class F>
__device__ int32_t block_find_prefix(const F& f, int32_t vocab, uint64_t target, block_shared& sh) {
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    int32_t lo = 0;
    int32_t hi = vocab;
    uint64_t remaining = target;  // target relative to the prefix before lo
    while (hi - lo > 32 * kUnroll) {
        const int32_t slice = (hi - lo + kWarps - 1) / kWarps;
        const int32_t begin = min(hi, lo + warp * slice);
        const int32_t end = min(hi, begin + slice);
        uint64_t s = 0;
        for (int32_t base = begin + lane; base < end; base += 32 * kUnroll) {
            uint64_t values[kUnroll];
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
                const int32_t i = base + 32 * k;
                values[k] = i < end ? f(i) : 0;
            }
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) s += values[k];
        }
        s = warp_sum(s);
        if (lane == 0) sh.warp_u64[warp] = s;
        __syncthreads();
        if (threadIdx.x == 0) {
            uint64_t before = 0;
            int owner = -1;
            for (int w = 0; w < kWarps; ++w) {
                if (before + sh.warp_u64[w] > remaining) {
                    owner = w;
                    break;
                }
                before += sh.warp_u64[w];
            }
            sh.broadcast_i32[1] = owner;
            sh.broadcast_u64[1] = before;
        }
        __syncthreads();
        const int owner = sh.broadcast_i32[1];
        const uint64_t before = sh.broadcast_u64[1];
        __syncthreads();
        if (owner < 0) return -1;  // the whole range holds no more than the target
        lo = min(hi, lo + owner * slice);
        hi = min(hi, lo + slice);
        remaining -= before;
    }
    if (threadIdx.x == 0) sh.broadcast_i32[2] = -1;
    __syncthreads();
    if (warp == 0) {
        uint64_t running = 0;
        for (int32_t base = lo; base < hi; base += 32) {
            const int32_t i = base + lane;
            const uint64_t inclusive = warp_inclusive_scan(i < hi ? f(i) : 0);
            const unsigned crossed = __ballot_sync(kFullMask, running + inclusive > remaining);
            if (crossed != 0) {
                if (lane == __ffs(crossed) - 1) sh.broadcast_i32[2] = i;
                break;
            }
            running += __shfl_sync(kFullMask, inclusive, 31);
        }
    }
    __syncthreads();
    const int32_t result = sh.broadcast_i32[2];
    __syncthreads();
    return result;
}

// Exclusive prefix of `value` over the block's threads in thread order; `total` gets the sum.
__device__ inline uint64_t block_exclusive_scan(uint64_t value, uint64_t& total, block_shared& sh) {
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const uint64_t inclusive = warp_inclusive_scan(value);
    if (lane == 31) sh.warp_u64[warp] = inclusive;
    __syncthreads();
    if (threadIdx.x == 0) {
        uint64_t run = 0;
        for (int w = 0; w < kWarps; ++w) {
            const uint64_t t = sh.warp_u64[w];
            sh.warp_u64[w] = run;
            run += t;
        }
        sh.broadcast_u64[0] = run;
    }
    __syncthreads();
    const uint64_t result = sh.warp_u64[warp] + inclusive - value;
    total = sh.broadcast_u64[0];
    __syncthreads();
    return result;
}

struct radix_result {
    uint64_t value = 0;        // the selected mass value
    uint64_t count_above = 0;  // tokens with a larger mass
    uint64_t mass_above = 0;   // their total mass
};

// Exact radix selection over the positive masses q(i), walking down from the largest: finds the
// value at which the running count (by_mass == false) or running mass (by_mass == true) first
// reaches `target`. Histograms hold exact integer counts and masses (the AIR top-p idea), so the
// result is independent of thread scheduling. Requires target <= total count / mass.
template <class Mass>
__device__ radix_result block_radix_select(const Mass& q_of, int32_t vocab, bool by_mass, uint64_t target,
                                           block_shared& sh) {
    uint64_t prefix = 0;
    uint64_t count_above = 0;
    uint64_t mass_above = 0;
    for (int pass = 0; pass < kRadixPasses; ++pass) {
        const int shift = 33 - 11 * pass;  // 33, 22, 11, 0
        const uint64_t high_mask = pass == 0 ? 0 : (~uint64_t{0} << (shift + 11));
        for (int b = threadIdx.x; b < kRadixBins; b += kBlockThreads) {
            sh.scratch.bins.count[b] = 0;
            sh.scratch.bins.mass[b] = 0;
        }
        __syncthreads();
        for (int32_t start = 0; start < vocab; start += kBlockThreads * kUnroll) {
            uint64_t masses[kUnroll];
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
                const int32_t i = start + k * kBlockThreads + static_cast<int32_t>(threadIdx.x);
                masses[k] = i < vocab ? q_of(i) : 0;
            }
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
            const uint64_t q = masses[k];
            const bool take = q != 0 && (q & high_mask) == prefix;
            const int digit = take ? static_cast<int>((q >> shift) & (kRadixBins - 1)) : -1;
            warp_aggregated_add(digit, q, sh);
            }
        }
        __syncthreads();
        // Walk bins from the top: thread t holds reversed bins 2t and 2t+1.
        constexpr int kBinsPerThread = kRadixBins / kBlockThreads;
        static_assert(kBinsPerThread == 2, "two bins per thread");
        const int top_bin = kRadixBins - 1 - kBinsPerThread * static_cast<int>(threadIdx.x);
        const uint64_t c0 = sh.scratch.bins.count[top_bin];
        const uint64_t c1 = sh.scratch.bins.count[top_bin - 1];
        const uint64_t m0 = sh.scratch.bins.mass[top_bin];
        const uint64_t m1 = sh.scratch.bins.mass[top_bin - 1];
        const uint64_t metric0 = by_mass ? m0 : c0;
        const uint64_t metric1 = by_mass ? m1 : c1;
        // Exclusive prefixes over threads (thread t holds the reversed bins 2t, 2t+1).
        uint64_t unused_total = 0;
        const uint64_t metric_before = block_exclusive_scan(metric0 + metric1, unused_total, sh);
        const uint64_t count_before = block_exclusive_scan(c0 + c1, unused_total, sh);
        const uint64_t mass_before = block_exclusive_scan(m0 + m1, unused_total, sh);
        const uint64_t already = by_mass ? mass_above : count_above;
        const uint64_t need = target - already;
        if (metric_before < need && metric_before + metric0 >= need) {
            sh.broadcast_i32[3] = top_bin;
            sh.broadcast_u64[2] = count_before;
            sh.broadcast_u64[3] = mass_before;
        } else if (metric_before + metric0 < need && metric_before + metric0 + metric1 >= need) {
            sh.broadcast_i32[3] = top_bin - 1;
            sh.broadcast_u64[2] = count_before + c0;
            sh.broadcast_u64[3] = mass_before + m0;
        }
        __syncthreads();
        prefix |= static_cast<uint64_t>(sh.broadcast_i32[3]) << shift;
        count_above += sh.broadcast_u64[2];
        mass_above += sh.broadcast_u64[3];
        __syncthreads();
    }
    return radix_result{prefix, count_above, mass_above};
}


// Counts and masses per digit into sh.scratch.bins (first `bins` entries): digit_mass(i, digit,
// mass) sets digit = -1 to skip token i. Warp-aggregated like the radix passes.
template <class DigitMass>
__device__ void block_histogram(const DigitMass& digit_mass, int32_t vocab, int bins, block_shared& sh) {
    for (int b = threadIdx.x; b < bins; b += kBlockThreads) {
        sh.scratch.bins.count[b] = 0;
        sh.scratch.bins.mass[b] = 0;
    }
    __syncthreads();
    for (int32_t start = 0; start < vocab; start += kBlockThreads) {
        const int32_t i = start + static_cast<int32_t>(threadIdx.x);
        int digit = -1;
        uint64_t mass = 0;
        if (i < vocab) digit_mass(i, digit, mass);
        warp_aggregated_add(digit, mass, sh);
    }
    __syncthreads();
}

// Sorts sh.scratch.candidates[0, count) by (mass desc, token asc), count <= kCandidateCapacity,
// with a bitonic network over the next power of two (padding sorts last).
__device__ inline void block_sort_candidates(int32_t count, block_shared& sh) {
    int32_t size = 2;
    while (size < count) size <<= 1;
    candidate_list& c = sh.scratch.candidates;
    for (int32_t i = count + static_cast<int32_t>(threadIdx.x); i < size; i += kBlockThreads) {
        c.mass[i] = 0;
        c.token[i] = INT32_MAX;
    }
    __syncthreads();
    auto before = [&](int32_t a, int32_t b) {  // a sorts before b
        return c.mass[a] > c.mass[b] || (c.mass[a] == c.mass[b] && c.token[a] < c.token[b]);
    };
    for (int32_t k = 2; k <= size; k <<= 1) {
        for (int32_t j = k >> 1; j > 0; j >>= 1) {
            for (int32_t i = threadIdx.x; i < size; i += kBlockThreads) {
                const int32_t partner = i ^ j;
                if (partner > i) {
                    const bool ascending = (i & k) == 0;  // "ascending" = in our sort order
                    if (ascending ? before(partner, i) : before(i, partner)) {
                        const uint64_t m = c.mass[i];
                        c.mass[i] = c.mass[partner];
                        c.mass[partner] = m;
                        const int32_t t = c.token[i];
                        c.token[i] = c.token[partner];
                        c.token[partner] = t;
                    }
                }
            }
            __syncthreads();
        }
    }
}

}  // namespace ds::cuda

// Block-wide building blocks of the sampling kernel, on integers or with a fixed reduction tree,
// so their results do not depend on scheduling. A block has kBlockThreads threads; every function
// must be called by all of them (they synchronise) with the same arguments.
#pragma once

#include <cstdint>

namespace ds::cuda {

constexpr int kBlockThreads = 256;
constexpr int kWarps = kBlockThreads / 32;
constexpr unsigned kFullMask = 0xFFFFFFFFu;

// The scratch the primitives share (a member of the kernel's shared memory).
struct block_scratch {
    uint64_t warp_u64[kWarps];
    double warp_f64[kWarps];
    float warp_value[kWarps];
    int32_t warp_index[kWarps];
    uint64_t broadcast_u64;
    int32_t broadcast_i32;
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

// Sum over the block's threads, returned to every thread; exact (integers).
__device__ inline uint64_t block_sum(uint64_t value, block_scratch& sh) {
    value = warp_sum(value);
    if ((threadIdx.x & 31) == 0) sh.warp_u64[threadIdx.x >> 5] = value;
    __syncthreads();
    uint64_t total = 0;
    for (int w = 0; w < kWarps; ++w) total += sh.warp_u64[w];
    __syncthreads();
    return total;
}

// Sum over the block's threads in a fixed tree (the same bits for the same inputs).
__device__ inline double block_sum(double value, block_scratch& sh) {
    for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(kFullMask, value, offset);
    if ((threadIdx.x & 31) == 0) sh.warp_f64[threadIdx.x >> 5] = value;
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < kWarps; ++w) total += sh.warp_f64[w];
    __syncthreads();
    return total;
}

// Exclusive prefix of `value` over the block's threads in thread order; `total` gets the sum.
__device__ inline uint64_t block_exclusive_scan(uint64_t value, uint64_t& total, block_scratch& sh) {
    const int warp = threadIdx.x >> 5;
    const uint64_t inclusive = warp_inclusive_scan(value);
    if ((threadIdx.x & 31) == 31) sh.warp_u64[warp] = inclusive;
    __syncthreads();
    uint64_t before = 0;
    total = 0;
    for (int w = 0; w < kWarps; ++w) {
        if (w == warp) before = total;
        total += sh.warp_u64[w];
    }
    __syncthreads();
    return before + inclusive - value;
}

// (value, index) with the larger value winning and ties to the lower index; index -1 is empty.
__device__ __forceinline__ bool argmax_better(float value, int32_t index, float best_value, int32_t best_index) {
    if (index < 0) return false;
    if (best_index < 0) return true;
    return value > best_value || (value == best_value && index < best_index);
}

// Combines the lanes' (best, best_index) in place: every lane ends with the warp's.
__device__ __forceinline__ void warp_argmax(float& best, int32_t& best_index) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float other = __shfl_xor_sync(kFullMask, best, offset);
        const int32_t other_index = __shfl_xor_sync(kFullMask, best_index, offset);
        if (argmax_better(other, other_index, best, best_index)) {
            best = other;
            best_index = other_index;
        }
    }
}

// Combines each thread's (best, best_index) into the block's; every thread gets the index and
// `value` its value.
__device__ inline int32_t block_argmax(float best, int32_t best_index, float& value, block_scratch& sh) {
    warp_argmax(best, best_index);
    if ((threadIdx.x & 31) == 0) {
        sh.warp_value[threadIdx.x >> 5] = best;
        sh.warp_index[threadIdx.x >> 5] = best_index;
    }
    __syncthreads();
    float result = 0.0f;
    int32_t index = -1;
    for (int w = 0; w < kWarps; ++w) {
        if (argmax_better(sh.warp_value[w], sh.warp_index[w], result, index)) {
            result = sh.warp_value[w];
            index = sh.warp_index[w];
        }
    }
    __syncthreads();
    value = result;
    return index;
}

// The contiguous range [begin, end) of [0, count) that this thread's warp owns: regions in warp
// order, whole multiples of 32 but the last. A warp walks its region 32 items at a time, lane l
// taking item begin + 32 * step + l, so the lanes read consecutive words (no shared-memory bank
// conflicts, coalesced global loads) and the region's items are still visited in order. (A
// contiguous range per thread instead puts every lane of a warp on the same bank.)
struct warp_region {
    int32_t begin;
    int32_t end;
};

__device__ __forceinline__ warp_region region_of_warp(int32_t count, int warp = static_cast<int>(threadIdx.x >> 5)) {
    const int32_t per_warp = ((count + kWarps - 1) / kWarps + 31) / 32 * 32;
    const int32_t begin = min(count, warp * per_warp);
    return {begin, min(count, begin + per_warp)};
}

// The lanes below this one, as a ballot mask.
__device__ __forceinline__ unsigned lanes_below() { return (1u << (threadIdx.x & 31)) - 1u; }

// Sum of f(i) over [0, count), to every thread; exact.
template <class F>
__device__ uint64_t block_sum_over(const F& f, int32_t count, block_scratch& sh) {
    uint64_t sum = 0;
#pragma unroll 8  // several loads in flight
    for (int32_t i = static_cast<int32_t>(threadIdx.x); i < count; i += kBlockThreads) sum += f(i);
    return block_sum(sum, sh);
}

// The first i in [0, count) whose inclusive prefix sum of f exceeds `target`, or -1; to every
// thread. Each warp sums its region, the warps' totals find the region that crosses the target,
// and its warp walks it 32 items at a time with a warp scan.
template <class F>
__device__ int32_t block_find_prefix(const F& f, int32_t count, uint64_t target, block_scratch& sh) {
    const warp_region region = region_of_warp(count);
    const int warp = static_cast<int>(threadIdx.x >> 5);
    const int lane = static_cast<int>(threadIdx.x & 31);
    uint64_t sum = 0;
#pragma unroll 8  // several loads in flight
    for (int32_t i = region.begin + lane; i < region.end; i += 32) sum += f(i);
    const uint64_t region_total = warp_sum(sum);
    if (lane == 0) sh.warp_u64[warp] = region_total;
    if (threadIdx.x == 0) sh.broadcast_i32 = -1;
    __syncthreads();
    uint64_t running = 0;  // before this warp's region
    for (int w = 0; w < warp; ++w) running += sh.warp_u64[w];
    if (running <= target && running + region_total > target) {  // the same for every lane of the warp
        for (int32_t first = region.begin; first < region.end; first += 32) {
            const int32_t i = first + lane;
            const uint64_t inclusive = warp_inclusive_scan(i < region.end ? f(i) : 0);
            const unsigned crossed = __ballot_sync(kFullMask, running + inclusive > target);
            if (crossed != 0) {
                if (lane == 0) sh.broadcast_i32 = first + __ffs(crossed) - 1;
                break;
            }
            running += __shfl_sync(kFullMask, inclusive, 31);
        }
    }
    __syncthreads();
    const int32_t result = sh.broadcast_i32;
    __syncthreads();
    return result;
}

// Sorts keys[0, count) in descending order (count <= capacity, a power of two) with a bitonic
// network over the next power of two; the padding (zero keys) sorts last.
__device__ inline void block_sort_descending(uint64_t* keys, int32_t count) {
    int32_t size = 1;
    while (size < count) size <<= 1;
    for (int32_t i = count + static_cast<int32_t>(threadIdx.x); i < size; i += kBlockThreads) keys[i] = 0;
    __syncthreads();
    for (int32_t k = 2; k <= size; k <<= 1) {
        for (int32_t j = k >> 1; j > 0; j >>= 1) {
            for (int32_t i = threadIdx.x; i < size; i += kBlockThreads) {
                const int32_t partner = i ^ j;
                if (partner > i) {
                    const bool descending = (i & k) == 0;
                    const uint64_t a = keys[i];
                    const uint64_t b = keys[partner];
                    if (descending ? a < b : a > b) {
                        keys[i] = b;
                        keys[partner] = a;
                    }
                }
            }
            __syncthreads();
        }
    }
}

}  // namespace ds::cuda

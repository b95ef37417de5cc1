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

// The contiguous range [begin, end) of [0, count) that this thread owns: segments in thread
// order, so a thread's running sum is a prefix of the block's.
struct thread_segment {
    int32_t begin;
    int32_t end;
};

__device__ __forceinline__ thread_segment segment_of(int32_t count) {
    const int32_t per_thread = (count + kBlockThreads - 1) / kBlockThreads;
    const int32_t begin = min(count, static_cast<int32_t>(threadIdx.x) * per_thread);
    return {begin, min(count, begin + per_thread)};
}

// Sum of f(i) over [0, count), to every thread; exact.
template <class F>
__device__ uint64_t block_sum_over(const F& f, int32_t count, block_scratch& sh) {
    const thread_segment seg = segment_of(count);
    uint64_t sum = 0;
#pragma unroll 8  // loads of several tokens in flight: a long segment is latency-bound
    for (int32_t i = seg.begin; i < seg.end; ++i) sum += f(i);
    return block_sum(sum, sh);
}

// The first i in [0, count) whose inclusive prefix sum of f exceeds `target`, or -1; to every
// thread. Each thread sums its segment, a block scan finds the segment that crosses the target,
// and its thread walks it.
template <class F>
__device__ int32_t block_find_prefix(const F& f, int32_t count, uint64_t target, block_scratch& sh) {
    const thread_segment seg = segment_of(count);
    uint64_t sum = 0;
#pragma unroll 8  // loads of several tokens in flight: a long segment is latency-bound
    for (int32_t i = seg.begin; i < seg.end; ++i) sum += f(i);
    uint64_t total = 0;
    const uint64_t before = block_exclusive_scan(sum, total, sh);
    if (threadIdx.x == 0) sh.broadcast_i32 = -1;
    __syncthreads();
    if (before <= target && before + sum > target) {
        uint64_t running = before;
#pragma unroll 8
        for (int32_t i = seg.begin; i < seg.end; ++i) {
            running += f(i);
            if (running > target) {
                sh.broadcast_i32 = i;
                break;
            }
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

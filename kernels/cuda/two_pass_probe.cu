// A design probe (floor_probes.h, probe_two_pass_rows): temperature-only rows sampled without
// holding a chunk in shared memory across the row's barrier. Each block streams its chunk of a row
// once for the chunk's maximum, meets the row's other blocks at a global barrier for the row
// maximum, then reads its chunk again (from L2, where it just was) for the masses, one sum per
// chunk. A waiting block holds only its registers, so more blocks fit an SM and keep loading while
// others wait: the chain kernel's blocks hold 64 KB of shared memory each across the barrier (three
// per SM). Variants: the chunk kept in registers instead of read again, and no barrier at all
// (each block takes its own chunk's maximum), which bounds what the barrier costs. No draw: the
// owner's search reads an eighth of one chunk.

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "kernels/cuda/block_primitives.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/floor_probes.h"
#include "kernels/exact_rules.h"

namespace ds::cuda {

namespace {

constexpr uint64_t kProbeBarrierTimeoutNs = 1'000'000'000;

struct two_pass_params {
    const float* logits = nullptr;
    int32_t vocab = 0;
    int32_t chunks_per_row = 0;
    float scale = exact::kUnitScale;
    uint32_t* ticket = nullptr;      // blocks take (row, chunk) in the order they start
    uint32_t* arrived = nullptr;     // per row: blocks past their first pass
    float* chunk_max = nullptr;      // per (row, chunk)
    uint64_t* chunk_mass = nullptr;  // per (row, chunk)
    uint32_t* fault = nullptr;       // a barrier that timed out
};

__device__ __forceinline__ uint64_t probe_nanoseconds() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

template <int Vectors>
__device__ __forceinline__ void load_vectors(const float4* source, int32_t vectors, float4 (&v)[Vectors]) {
#pragma unroll
    for (int i = 0; i < Vectors; ++i) {
        const int32_t q = static_cast<int32_t>(threadIdx.x) + i * kBlockThreads;
        v[i] = q < vectors ? __ldcg(source + q) : make_float4(-HUGE_VALF, -HUGE_VALF, -HUGE_VALF, -HUGE_VALF);
    }
}

// Thread 0 publishes the chunk's maximum, waits for the row's other chunks and returns the row's.
__device__ float row_maximum(const two_pass_params& p, uint32_t ticket, int64_t row, float chunk_best) {
    const int64_t first_of_row = row * p.chunks_per_row;
    p.chunk_max[ticket] = chunk_best;
    __threadfence();
    atomicAdd(&p.arrived[row], 1u);
    const uint64_t start = probe_nanoseconds();
    while (*static_cast<volatile uint32_t*>(&p.arrived[row]) < static_cast<uint32_t>(p.chunks_per_row)) {
        if (probe_nanoseconds() - start > kProbeBarrierTimeoutNs) {
            atomicExch(p.fault, 1u);
            break;
        }
        __nanosleep(32);
    }
    __threadfence();
    float best = -HUGE_VALF;
    for (int32_t c = 0; c < p.chunks_per_row; ++c) best = fmaxf(best, __ldcg(p.chunk_max + first_of_row + c));
    return best;
}

template <int ChunkTokens, bool KeepInRegisters, bool RowBarrier>
__global__ void __launch_bounds__(kBlockThreads) two_pass_probe_kernel(two_pass_params p) {
    constexpr int kVectors = ChunkTokens / 4 / kBlockThreads;
    static_assert(kVectors * 4 * kBlockThreads == ChunkTokens, "whole vectors per thread");
    __shared__ block_scratch scratch;
    __shared__ uint32_t ticket;
    __shared__ float row_max;
    if (threadIdx.x == 0) ticket = atomicAdd(p.ticket, 1u);
    __syncthreads();
    const uint32_t mine = ticket;
    const int64_t row = mine / static_cast<uint32_t>(p.chunks_per_row);
    const int32_t first = static_cast<int32_t>(mine % static_cast<uint32_t>(p.chunks_per_row)) * ChunkTokens;
    const int32_t vectors = min(ChunkTokens, p.vocab - first) / 4;
    const auto* source = reinterpret_cast<const float4*>(p.logits + row * p.vocab + first);
    float4 v[kVectors];
    load_vectors(source, vectors, v);
    float best = -HUGE_VALF;
#pragma unroll
    for (int i = 0; i < kVectors; ++i) best = fmaxf(best, fmaxf(fmaxf(v[i].x, v[i].y), fmaxf(v[i].z, v[i].w)));
    float chunk_best = 0.0f;
    block_argmax(best, static_cast<int32_t>(threadIdx.x), chunk_best, scratch);
    if (threadIdx.x == 0) row_max = RowBarrier ? row_maximum(p, mine, row, chunk_best) : chunk_best;
    __syncthreads();
    const float m = row_max;
    if (!KeepInRegisters) load_vectors(source, vectors, v);
    uint64_t mass = 0;
#pragma unroll
    for (int i = 0; i < kVectors; ++i) {
        mass += exact::token_mass_under_finite_max(v[i].x, m, p.scale);
        mass += exact::token_mass_under_finite_max(v[i].y, m, p.scale);
        mass += exact::token_mass_under_finite_max(v[i].z, m, p.scale);
        mass += exact::token_mass_under_finite_max(v[i].w, m, p.scale);
    }
    const uint64_t total = block_sum(mass, scratch);
    if (threadIdx.x == 0) p.chunk_mass[mine] = total;
}

template <int ChunkTokens, bool KeepInRegisters, bool RowBarrier>
status time_two_pass(two_pass_params p, int64_t rows, int iterations, cudaStream_t stream, double& microseconds) {
    p.chunks_per_row = (p.vocab + ChunkTokens - 1) / ChunkTokens;
    const int64_t blocks = rows * p.chunks_per_row;
    if (blocks > INT_MAX) return status::invalid(fmt::format("probe_two_pass_rows: {} blocks", blocks));
    captured_graph graph;
    status s = graph.capture(stream, [&]() -> status {
        CUDA_TRY(cudaMemsetAsync(p.ticket, 0, sizeof(uint32_t), stream));
        CUDA_TRY(cudaMemsetAsync(p.arrived, 0, static_cast<size_t>(rows) * sizeof(uint32_t), stream));
        two_pass_probe_kernel<ChunkTokens, KeepInRegisters, RowBarrier>
            <<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(p);
        CUDA_TRY(cudaGetLastError());
        return status::success();
    });
    if (s.is_ok()) s = graph.time_replays(stream, iterations, microseconds);
    return s;
}

}  // namespace

status probe_two_pass_rows(const float* logits, int64_t rows, int32_t vocab, float temperature, int iterations,
                           two_pass_probe_result& result) {
    if (logits == nullptr || reinterpret_cast<uintptr_t>(logits) % alignof(float4) != 0 || vocab % 4 != 0 || rows < 1 ||
        vocab < 4 || iterations < 1 || !(temperature > 0.0f))
        return status::invalid(fmt::format(
            "probe_two_pass_rows: logits 16-byte aligned, rows = {} >= 1, vocab = {} a multiple of 4, iterations = {} "
            ">= 1 and temperature = {} > 0 expected",
            rows, vocab, iterations, temperature));
    constexpr int kLargestChunkCount = 128256 / 2048 + 1;
    const int64_t most_blocks = rows * std::max<int64_t>(kLargestChunkCount, (vocab + 2047) / 2048);
    device_buffer counters, maxima, masses, fault;
    cuda_stream stream;
    status s = counters.allocate(static_cast<size_t>(rows + 1) * sizeof(uint32_t));
    if (s.is_ok()) s = maxima.allocate(static_cast<size_t>(most_blocks) * sizeof(float));
    if (s.is_ok()) s = masses.allocate(static_cast<size_t>(most_blocks) * sizeof(uint64_t));
    if (s.is_ok()) s = fault.allocate(sizeof(uint32_t));
    if (s.is_ok()) s = stream.create();
    if (!s.is_ok()) return s;
    CUDA_TRY(cudaMemset(fault.get(), 0, sizeof(uint32_t)));
    two_pass_params p;
    p.logits = logits;
    p.vocab = vocab;
    p.scale = exact::mass_scale(temperature);
    p.ticket = static_cast<uint32_t*>(counters.get());
    p.arrived = p.ticket + 1;
    p.chunk_max = static_cast<float*>(maxima.get());
    p.chunk_mass = static_cast<uint64_t*>(masses.get());
    p.fault = static_cast<uint32_t*>(fault.get());
    const cudaStream_t on = stream.get();
    s = time_two_pass<2048, false, true>(p, rows, iterations, on, result.reread_2048_us);
    if (s.is_ok()) s = time_two_pass<4096, false, true>(p, rows, iterations, on, result.reread_4096_us);
    if (s.is_ok()) s = time_two_pass<8192, false, true>(p, rows, iterations, on, result.reread_8192_us);
    if (s.is_ok()) s = time_two_pass<8192, true, true>(p, rows, iterations, on, result.registers_8192_us);
    if (s.is_ok()) s = time_two_pass<4096, false, false>(p, rows, iterations, on, result.no_barrier_4096_us);
    if (!s.is_ok()) return s;
    uint32_t faulted = 0;
    CUDA_TRY(cudaMemcpy(&faulted, fault.get(), sizeof faulted, cudaMemcpyDeviceToHost));
    if (faulted != 0) return {status_code::internal, "probe_two_pass_rows: a row barrier timed out"};
    return status::success();
}

}  // namespace ds::cuda

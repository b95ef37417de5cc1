#include "kernels/cuda/floor_probes.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "kernels/cuda/block_primitives.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/token_math.cuh"
#include "kernels/exact_rules.h"

namespace ds::cuda {

namespace {

constexpr int kMaxGridMultiple = 4;  // read probe grids: 1..4 times the resident blocks

status launch_status() {
    CUDA_TRY(cudaGetLastError());
    return status::success();
}

// ---- Read floor ----------------------------------------------------------------------------------
// Loads float4s i, i + stride, ... (Loads of them; past the end they read as -inf) with streaming
// loads, as the streaming greedy kernel's.
template <int Loads>
__device__ __forceinline__ void load_group(const float4* data, int64_t i, int64_t stride, int64_t vectors,
                                           float4 (&group)[Loads]) {
#pragma unroll
    for (int u = 0; u < Loads; ++u) {
        const int64_t at = i + u * stride;
        group[u] = at < vectors ? __ldcs(data + at) : make_float4(-HUGE_VALF, -HUGE_VALF, -HUGE_VALF, -HUGE_VALF);
    }
}

// Grid-stride over the float4s in groups of `Loads`, reduced to one maximum per block so the
// loads stay. Software-pipelined: the next group is loaded before this one is reduced, so each
// thread has a whole group in flight (left to itself the compiler consumes each load early and
// keeps about four in flight whatever `Loads` is).
template <int Loads>
__global__ void __launch_bounds__(kBlockThreads)
    read_probe_kernel(const float4* data, int64_t vectors, float* block_max) {
    __shared__ block_scratch scratch;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kBlockThreads;
    float best = -HUGE_VALF;
    float4 group[Loads];
    int64_t i = static_cast<int64_t>(blockIdx.x) * kBlockThreads + threadIdx.x;
    load_group(data, i, stride, vectors, group);
    for (; i < vectors; i += Loads * stride) {
        float4 next[Loads];
        load_group(data, i + Loads * stride, stride, vectors, next);
#pragma unroll
        for (int u = 0; u < Loads; ++u) {
            best = fmaxf(best, fmaxf(fmaxf(group[u].x, group[u].y), fmaxf(group[u].z, group[u].w)));
            group[u] = next[u];
        }
    }
    float block_best = 0.0f;
    block_argmax(best, static_cast<int32_t>(threadIdx.x), block_best, scratch);
    if (threadIdx.x == 0) block_max[blockIdx.x] = block_best;
}

// Times read_probe_kernel<Loads> on grids of 1..kMaxGridMultiple times its resident blocks and
// keeps the fastest in `best`.
template <int Loads>
status time_read_grids(const float4* data, int64_t vectors, float* block_max, int sms, int iterations,
                       cudaStream_t stream, read_probe_result& best) {
    int per_sm = 0;
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, read_probe_kernel<Loads>, kBlockThreads, 0));
    for (int multiple = 1; multiple <= kMaxGridMultiple; ++multiple) {
        const auto blocks = static_cast<unsigned>(multiple * sms * per_sm);
        captured_graph graph;
        status s = graph.capture(stream, [&] {
            read_probe_kernel<Loads><<<blocks, kBlockThreads, 0, stream>>>(data, vectors, block_max);
            return launch_status();
        });
        double microseconds = 0.0;
        if (s.is_ok()) s = graph.time_replays(stream, iterations, microseconds);
        if (!s.is_ok()) return s;
        if (best.loads_in_flight == 0 || microseconds < best.microseconds) {
            best.microseconds = microseconds;
            best.loads_in_flight = Loads;
            best.blocks = blocks;
        }
    }
    return status::success();
}

// ---- Step overhead -------------------------------------------------------------------------------
// The step's kernels write the outputs into mapped pinned host memory: one word of it.
__global__ void empty_kernel(int32_t* output) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *output = 0;
}

// ---- Exactness arithmetic ------------------------------------------------------------------------
struct arithmetic_probe_params {
    int32_t vocab = 0;
    float max_logit = 0.0f;             // every row's maximum: the made logit of token 0
    float logit_step = 0.0f;            // made logit of token t: max_logit - t * logit_step
    float scale = exact::kUnitScale;    // exact::mass_scale(temperature)
    uint64_t min_mass = 1;              // as the chain kernel's for min_p = 0
    uint64_t* block_results = nullptr;  // one per block, so nothing is optimised away
};

// Calls visit(first token, values) for this thread's tokens of the chunk [first, first + count)
// in the rounds and slices of the chain kernel's for_each_slice, with logits made from the token
// index (one addition per token) instead of read from shared memory; tokens past `count` are
// -inf as there.
template <class Visit>
__device__ __forceinline__ void for_each_made_slice(const arithmetic_probe_params& p, int32_t first, int32_t count,
                                                    const Visit& visit) {
    const int32_t thread_first = static_cast<int32_t>(threadIdx.x) * kSliceTokens;
    const float round_step = p.logit_step * static_cast<float>(kBlockThreads * kSliceTokens);
    float offsets[kSliceTokens];
#pragma unroll
    for (int k = 0; k < kSliceTokens; ++k) offsets[k] = p.logit_step * static_cast<float>(k);
    float slice_logit = p.max_logit - p.logit_step * static_cast<float>(first + thread_first);
#pragma unroll 4
    for (int round = 0; round < kSlices; ++round) {
        const int32_t at = round * kBlockThreads * kSliceTokens + thread_first;
        float values[kSliceTokens];
        if (at + kSliceTokens <= count) {
#pragma unroll
            for (int k = 0; k < kSliceTokens; ++k) values[k] = slice_logit - offsets[k];
        } else {
#pragma unroll
            for (int k = 0; k < kSliceTokens; ++k) values[k] = at + k < count ? slice_logit - offsets[k] : -HUGE_VALF;
        }
        visit(first + at, values);
        slice_logit -= round_step;
    }
}

// Block b does chunk b % chunks_per_row(vocab) of a row, as the chain kernel's blocks do.
__device__ __forceinline__ int32_t probe_chunk_first(const arithmetic_probe_params& p) {
    return static_cast<int32_t>(blockIdx.x % static_cast<unsigned>(chunks_per_row(p.vocab))) * kChunkTokens;
}

// "2. Masses" of chain_kernel for a temperature-only row (no cut, so no histogram).
__global__ void __launch_bounds__(kBlockThreads) mass_pass_probe_kernel(arithmetic_probe_params p) {
    __shared__ block_scratch scratch;
    const int32_t first = probe_chunk_first(p);
    mass_sums sums;
    for_each_made_slice(p, first, min(kChunkTokens, p.vocab - first), [&](int32_t, const float(&values)[kSliceTokens]) {
#pragma unroll
        for (int k = 0; k < kSliceTokens; ++k) {
            sums.add(exact::token_mass(values[k], p.max_logit, p.scale), p.min_mass);
        }
    });
    const uint64_t nonzero = block_sum(sums.nonzero, scratch);
    const uint64_t total = block_sum(sums.total, scratch);
    const uint64_t min_p = block_sum(sums.min_p, scratch);
    if (threadIdx.x == 0) p.block_results[blockIdx.x] = nonzero + total + min_p;
}

// The argmax of chain_kernel's "1. Load, argmax" without the load.
__global__ void __launch_bounds__(kBlockThreads) argmax_pass_probe_kernel(arithmetic_probe_params p) {
    __shared__ block_scratch scratch;
    const int32_t first = probe_chunk_first(p);
    float best = -HUGE_VALF;
    int32_t best_index = -1;
    for_each_made_slice(p, first, min(kChunkTokens, p.vocab - first),
                        [&](int32_t at_token, const float(&values)[kSliceTokens]) {
#pragma unroll
                            for (int k = 0; k < kSliceTokens; ++k)
                                keep_if_larger(values[k], at_token + k, best, best_index);
                        });
    float chunk_max = 0.0f;
    const int32_t index = block_argmax(best, best_index, chunk_max, scratch);
    if (threadIdx.x == 0) p.block_results[blockIdx.x] = static_cast<uint64_t>(index);
}

template <class Kernel>
status time_arithmetic_kernel(Kernel kernel, unsigned blocks, const arithmetic_probe_params& params, int iterations,
                              cudaStream_t stream, double& microseconds) {
    captured_graph graph;
    status s = graph.capture(stream, [&] {
        kernel<<<blocks, kBlockThreads, 0, stream>>>(params);
        return launch_status();
    });
    if (s.is_ok()) s = graph.time_replays(stream, iterations, microseconds);
    return s;
}

status check_iterations(const char* probe, int iterations) {
    if (iterations < 1) return status::invalid(fmt::format("{}: iterations = {} must be >= 1", probe, iterations));
    return status::success();
}

status check_shape(const char* probe, int64_t rows, int32_t vocab, int iterations) {
    if (rows < 1) return status::invalid(fmt::format("{}: rows = {} must be >= 1", probe, rows));
    if (vocab < 1) return status::invalid(fmt::format("{}: vocab = {} must be >= 1", probe, vocab));
    return check_iterations(probe, iterations);
}

}  // namespace

status probe_read_floor(const void* logits, int64_t rows, int32_t vocab, int iterations, read_probe_result& best) {
    if (status s = check_shape("probe_read_floor", rows, vocab, iterations); !s.is_ok()) return s;
    if (logits == nullptr || reinterpret_cast<uintptr_t>(logits) % alignof(float4) != 0) {
        return status::invalid(
            "probe_read_floor: logits must be a non-null device address aligned to 16 bytes (float4 loads)");
    }
    const int64_t elements = rows * vocab;
    if (elements % 4 != 0) {
        return status::invalid(
            fmt::format("probe_read_floor: rows * vocab = {} must be a multiple of 4 (float4 loads)", elements));
    }
    int device = 0;
    int sms = 0;
    int threads_per_sm = 0;
    CUDA_TRY(cudaGetDevice(&device));
    CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    CUDA_TRY(cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device));
    device_buffer block_max;
    cuda_stream stream;
    status s = block_max.allocate(static_cast<size_t>(kMaxGridMultiple) * sms * (threads_per_sm / kBlockThreads) *
                                  sizeof(float));
    if (s.is_ok()) s = stream.create();
    const auto* data = static_cast<const float4*>(logits);
    auto* maxima = static_cast<float*>(block_max.get());
    best = read_probe_result{};
    if (s.is_ok()) s = time_read_grids<4>(data, elements / 4, maxima, sms, iterations, stream.get(), best);
    if (s.is_ok()) s = time_read_grids<8>(data, elements / 4, maxima, sms, iterations, stream.get(), best);
    if (s.is_ok()) s = time_read_grids<16>(data, elements / 4, maxima, sms, iterations, stream.get(), best);
    if (!s.is_ok()) return s;
    best.terabytes_per_second = static_cast<double>(elements) * sizeof(float) / (best.microseconds * 1e-6) / 1e12;
    return status::success();
}

status probe_step_overhead(const graph_shape& shape, int iterations, double& microseconds) {
    if (shape.output_bytes == 0 || shape.kernel_blocks == 0) {
        return status::invalid(
            fmt::format("probe_step_overhead: shape.output_bytes = {}, shape.kernel_blocks = {}: each must be >= 1",
                        shape.output_bytes, shape.kernel_blocks));
    }
    if (status s = check_iterations("probe_step_overhead", iterations); !s.is_ok()) return s;
    pinned_buffer staging_host;
    device_buffer staging_device;
    pinned_buffer outputs_host;
    cuda_stream stream;
    status s = staging_host.allocate(shape.staged_bytes);
    if (s.is_ok()) s = staging_device.allocate(shape.staged_bytes);
    if (s.is_ok()) s = outputs_host.allocate(shape.output_bytes);
    if (s.is_ok()) s = stream.create();
    if (!s.is_ok()) return s;
    const cudaStream_t on = stream.get();
    captured_graph graph;
    s = graph.capture(on, [&]() -> status {
        if (shape.staged_bytes > 0) {
            CUDA_TRY(cudaMemcpyAsync(staging_device.get(), staging_host.get(), shape.staged_bytes,
                                     cudaMemcpyHostToDevice, on));
        }
        empty_kernel<<<shape.kernel_blocks, kBlockThreads, 0, on>>>(static_cast<int32_t*>(outputs_host.get()));
        return launch_status();
    });
    if (s.is_ok()) s = graph.time_replays(on, iterations, microseconds);
    return s;
}

status probe_exact_arithmetic(int64_t rows, int32_t vocab, float temperature, int iterations,
                              arithmetic_probe_result& result) {
    if (status s = check_shape("probe_exact_arithmetic", rows, vocab, iterations); !s.is_ok()) return s;
    if (!(temperature > 0.0f) || !std::isfinite(temperature)) {
        return status::invalid(
            fmt::format("probe_exact_arithmetic: temperature = {} must be finite and > 0", temperature));
    }
    const int64_t blocks = rows * chunks_per_row(vocab);
    if (blocks > INT_MAX) {
        return status::invalid(
            fmt::format("probe_exact_arithmetic: rows * chunks = {} blocks must be <= {}", blocks, INT_MAX));
    }
    device_buffer block_results;
    cuda_stream stream;
    status s = block_results.allocate(static_cast<size_t>(blocks) * sizeof(uint64_t));
    if (s.is_ok()) s = stream.create();
    if (!s.is_ok()) return s;
    arithmetic_probe_params params;
    params.vocab = vocab;
    params.max_logit = 20.0f;
    params.logit_step = 40.0f / static_cast<float>(vocab);  // a row spans 40 nats, like an LLM's
    params.scale = exact::mass_scale(temperature);
    params.min_mass = exact::min_p_mass_threshold(0.0f);
    params.block_results = static_cast<uint64_t*>(block_results.get());
    const auto grid = static_cast<unsigned>(blocks);
    s = time_arithmetic_kernel(mass_pass_probe_kernel, grid, params, iterations, stream.get(), result.mass_pass_us);
    if (s.is_ok())
        s = time_arithmetic_kernel(argmax_pass_probe_kernel, grid, params, iterations, stream.get(),
                                   result.argmax_pass_us);
    return s;
}

}  // namespace ds::cuda

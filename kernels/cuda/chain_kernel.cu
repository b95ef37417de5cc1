// The CUDA twin of cpu::row_sampler + cpu_backend::run_request. Every decision is made on the
// integer masses of kernels/det_math.h, so the tokens equal the CPU backend's bit for bit.
//
// Layout: a row of V logits is split into chunks of kChunkTokens; one thread block per chunk
// loads it into shared memory once (applying mask, penalties and bias), then:
//   greedy rows: each block publishes its chunk's argmax (and softmax sum, for logprobs); the
//     last block of the row to arrive combines them. No waiting.
//   sampled rows: the blocks of a row meet at a barrier for the row maximum, then compute their
//     chunk's masses. Without a top-k/top-p cut the last block to arrive finds the chunk that
//     holds the target mass and, by the masses each warp summed, the eighth of it that does,
//     loads that again and draws. With a cut, the blocks also histogram their weights' float
//     exponents, meet again, list the tokens that can survive the cut (in token order), and the
//     last block selects the exact cut on that list (a sort, or radix selection with integer
//     histograms when it is long) and draws.
//   top-k rows (1 < top_k <= kLogitTopKLimit) and min-p-only rows: one barrier, no mass pass.
//     After the row maximum, each block lists the tokens near the row's top on the logits (a
//     superset of the kept tokens, ties included); the last block to arrive computes masses for
//     the listed tokens alone, selects the exact cut among them and draws.
//   top-p-alone rows: the blocks sum their masses by bin, meet, and list only the tokens of the
//     bin where the top-p target is reached; the last block selects the cut among those.
// Each row draws the token it would emit if the request's chain stopped there, so the last block
// of a request to finish walks the chain from the rows' results alone (docs/semantics.md, Verify).
// Every decision goes through kernels/exact_rules.h, as the CPU backend's do.
//
// Blocks take their (row, chunk) from a ticket counter in the order they start. The blocks of a
// row hold consecutive tickets, so when every resident block waits at a barrier, all rows but the
// newest have all their blocks running; the barriers cannot deadlock while a row's chunks
// (at most 16) fit on the GPU at once.
//
// The kernel's parts, in the order they build on each other: chain_block.cuh (shared memory,
// barriers, loading a chunk), cut_selection.cuh, chain_walk.cuh, row_combine.cuh, row_draws.cuh,
// listed_rows.cuh, top_p_rows.cuh, streaming_greedy.cuh; this file holds the chain kernel and the
// launches.

#include <cuda_runtime.h>

#include "kernels/cuda/chain_kernel.h"
#include "kernels/cuda/streaming_greedy.cuh"
#include "kernels/cuda/top_p_rows.cuh"

namespace ds::cuda {

namespace {

// A chunk's largest value (NaN ignored), its token, and the sum of its unit-temperature weights
// below it; and this thread's own largest value, which a top-k row's reach starts from.
struct chunk_summary {
    float max_logit = 0.0f;  // 0 when nothing in the chunk is above -inf
    int32_t index = -1;      // -1 then
    double weight_sum = 0.0;
    float thread_max = -HUGE_VALF;
};

// The block's maximum from the threads' (thread_max, best_index), and the sum when asked.
__device__ chunk_summary finish_summary(const float* chunk_logits, int32_t count, float thread_max, int32_t best_index,
                                        kernel_shared& sh, bool with_sum) {
    chunk_summary out;
    out.thread_max = thread_max;
    out.index = block_argmax(thread_max, best_index, out.max_logit, sh.scratch);
    if (with_sum && out.index >= 0) {
        uint64_t mass = 0;
        for_each_slice(chunk_logits, count, [&](int, int32_t, const float(&values)[kSliceTokens]) {
#pragma unroll
            for (int k = 0; k < kSliceTokens; ++k)
                mass += exact::token_mass(values[k], out.max_logit, exact::kUnitScale);
        });
        out.weight_sum = exact::mass_weight(block_sum(mass, sh.scratch));
    }
    return out;
}

// Summarises the chunk from the slices `each_slice(visit)` hands this thread.
template <class EachSlice>
__device__ chunk_summary summarise_slices(const EachSlice& each_slice, const float* chunk_logits, int32_t count,
                                          int32_t first, kernel_shared& sh, bool with_sum) {
    float thread_max = -HUGE_VALF;
    int32_t best_index = -1;
    each_slice([&](int, int32_t at_token, const float(&values)[kSliceTokens]) {
        keep_vector_if_larger(values, first + at_token, thread_max, best_index);
    });
    return finish_summary(chunk_logits, count, thread_max, best_index, sh, with_sum);
}

// A chunk already in shared memory.
__device__ chunk_summary summarise_chunk(const float* chunk_logits, int32_t count, int32_t first, kernel_shared& sh,
                                         bool with_sum) {
    return summarise_slices([&](const auto& visit) { for_each_slice(chunk_logits, count, visit); }, chunk_logits, count,
                            first, sh, with_sum);
}

// A chunk that needs no processing, summarised as it lands.
__device__ chunk_summary load_and_summarise(const float4* source, int32_t count, int32_t first, float* chunk_logits,
                                            kernel_shared& sh, bool with_sum) {
    return summarise_slices([&](const auto& visit) { for_each_landing_slice(source, count, chunk_logits, visit); },
                            chunk_logits, count, first, sh, with_sum);
}

// Phase 2 of a sampled row with a cut or min_p: the chunk's masses at the row's maximum, summed
// (and histogrammed when a top-k/top-p cut is possible: kHistogram), published for the row.
template <bool kHistogram>
__device__ void publish_masses(const row_context& ctx, const float* chunk_logits, int32_t count, chunk_partial& mine,
                               kernel_shared& sh) {
    if (kHistogram) {
        for (int i = threadIdx.x; i < kMassHistogramBins; i += kBlockThreads) sh.histogram[i] = 0;
        __syncthreads();
    }
    mass_sums sums;
    // The maximum in a register: the histogram's atomics would reload it.
    with_row_mass(sh.totals.max_logit, ctx.scale, [&](auto mass) {
        for_each_slice(chunk_logits, count, [&](int, int32_t, const float(&values)[kSliceTokens]) {
#pragma unroll
            for (int k = 0; k < kSliceTokens; ++k) {
                const uint64_t q = mass(values[k]);
                sums.add(q, ctx.min_mass);
                if (kHistogram && q > 0) atomicAdd(&sh.histogram[mass_bin(q)], 1u);
            }
        });
    });
    const uint64_t mass_total = block_sum(sums.total, sh.scratch);
    const uint64_t nonzero = block_sum(sums.nonzero, sh.scratch);
    const uint64_t min_p_mass = block_sum(sums.min_p, sh.scratch);
    if (threadIdx.x == 0) {
        mine.nonzero = nonzero;
        mine.mass_total = mass_total;
        mine.min_p_mass = min_p_mass;
    }
    if (kHistogram) {
        uint32_t* row_histogram = ctx.p.workspace.mass_histograms + ctx.row * kMassHistogramBins;
        for (int i = threadIdx.x; i < kMassHistogramBins; i += kBlockThreads) {
            if (sh.histogram[i] != 0) atomicAdd(&row_histogram[i], sh.histogram[i]);
        }
    }
}

// Phase 2 of a row without a cut and without min_p, which needs only the total (every token with
// mass passes min_p): the chunk's masses summed by the warps' regions (region_of_warp), each warp
// its own, so the row's draw loads and walks only the region that holds it.
__device__ void publish_region_masses(const row_context& ctx, const float* chunk_logits, int32_t count,
                                      chunk_partial& mine, kernel_shared& sh) {
    const warp_region region = region_of_warp(count);
    uint64_t sum = 0;
    with_row_mass(sh.totals.max_logit, ctx.scale, [&](auto mass) {
#pragma unroll 4
        for (int32_t i = region.begin + 4 * static_cast<int32_t>(threadIdx.x & 31); i < region.end; i += 128) {
            if (i + 4 <= region.end) {
                const float4 v = *reinterpret_cast<const float4*>(chunk_logits + i);
                sum += mass(v.x) + mass(v.y) + mass(v.z) + mass(v.w);
            } else {
                for (int32_t k = i; k < region.end; ++k) sum += mass(chunk_logits[k]);
            }
        }
    });
    const uint64_t region_mass = warp_sum(sum);
    if ((threadIdx.x & 31) == 0) {
        mine.region_mass[threadIdx.x >> 5] = region_mass;
        __threadfence();
    }
    const uint64_t mass_total = block_sum(sum, sh.scratch);
    if (threadIdx.x == 0) {
        mine.nonzero = 0;
        mine.mass_total = mass_total;
        mine.min_p_mass = mass_total;
    }
}

// A sampled row after its maximum is known: masses, then the draw with or without a cut.
// Inlined by force: outlined (the compiler did so once the finite-maximum passes made it larger),
// it takes the row's context through local memory with a copy of the kernel's parameters, and
// every case of the chain kernel took 77-97 us longer on an H100.
__device__ __forceinline__ void sample_row(const row_context& ctx, int32_t first, int32_t count, kernel_shared& sh) {
    const request_view& r = ctx.r;
    const int32_t chunk = first / kChunkTokens;
    row_sync& sync = ctx.p.workspace.sync[ctx.row];
    chunk_partial* row_partials = ctx.p.workspace.partials + ctx.row * ctx.chunks;
    if (cuts_top_p_alone(r, ctx.min_mass)) {
        sample_top_p_row(ctx, first, count, sh);
        return;
    }
    const bool maybe_cut = r.top_k >= 0 || r.top_p < 1.0f;
    if (maybe_cut) {
        publish_masses<true>(ctx, sh.data.chunk, count, row_partials[chunk], sh);
    } else if (ctx.min_mass > 1) {
        publish_masses<false>(ctx, sh.data.chunk, count, row_partials[chunk], sh);
    } else {
        publish_region_masses(ctx, sh.data.chunk, count, row_partials[chunk], sh);
    }
    if (!maybe_cut) {
        // Kept: every token that passes min_p. The last block to arrive draws.
        if (arrive_last(&sync.partials_arrived, static_cast<uint32_t>(ctx.chunks), sh.flag)) {
            combine_masses(row_partials, ctx.chunks, sh);
            draw_from_chunks(ctx, cut{ctx.min_mass, false, 0, -1}, sh, ctx.min_mass <= 1);
        }
        return;
    }
    arrive(&sync.partials_arrived, static_cast<uint32_t>(ctx.chunks), ctx.p);
    combine_masses(row_partials, ctx.chunks, sh);
    const bool top_k_active = r.top_k >= 0 && static_cast<uint64_t>(r.top_k) < sh.totals.nonzero;
    if (!top_k_active && r.top_p >= 1.0f) {
        // No cut after all (top_k reaches every token with mass).
        if (arrive_last(&sync.counts_arrived, static_cast<uint32_t>(ctx.chunks), sh.flag))
            draw_from_chunks(ctx, cut{ctx.min_mass, false, 0, -1}, sh);
    } else {
        draw_with_cut(ctx, top_k_active, first, count, sh);
    }
}

// Three blocks per SM (their chunks fill shared memory): about 50 rows of 128k fp32 logits are
// resident at once, so the rows' barrier latencies overlap.
__global__ void __launch_bounds__(kBlockThreads, 3) chain_kernel(chain_kernel_params p) {
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    kernel_shared& sh = *reinterpret_cast<kernel_shared*>(shared_bytes);
    const chain_workspace& ws = p.workspace;
    wait_for_the_prepare_kernel();  // it clears the ticket counter
    if (threadIdx.x == 0) sh.ticket = atomicAdd(&ws.control->next_ticket, 1u);
    __syncthreads();
    const int32_t chunks = chunks_per_row(p.vocab);
    const int64_t row = sh.ticket / static_cast<uint32_t>(chunks);
    const int32_t chunk = static_cast<int32_t>(sh.ticket % static_cast<uint32_t>(chunks));
    const int32_t n = p.tokens_per_req;
    const int32_t b = static_cast<int32_t>(row / n);
    const int32_t j = static_cast<int32_t>(row % n);
    const int64_t base = static_cast<int64_t>(b) * n;
    const request_view r = ws.requests[b];
    const logprob_needs needs = needs_of(p, r);
    const int32_t first = chunk * kChunkTokens;
    const int32_t count = min(kChunkTokens, p.vocab - first);
    const int32_t draft = j + 1 < n ? p.candidates[base + j + 1] : -1;
    row_sync& sync = ws.sync[row];
    chunk_partial& mine = ws.partials[row * chunks + chunk];
    float* chunk_logits = sh.data.chunk;

    // ---- 1. Load, argmax, and the chunk's softmax sums (relative to the chunk's maxima) --------
    const float4* vectors = vector_source(p, row, first, count);
    const bool as_given = !needs.raw && mask_of(p, row) == nullptr && !r.penalties.active() && r.bias_count == 0;
    chunk_summary summary;
    if (as_given && vectors != nullptr) {
        summary = load_and_summarise(vectors, count, first, chunk_logits, sh, needs.softmax);
    } else {
        load_raw_chunk(p, row, first, count, chunk_logits);
        if (needs.raw) {
            const chunk_summary raw = summarise_chunk(chunk_logits, count, first, sh, true);
            if (threadIdx.x == 0) {
                mine.raw_max = raw.index >= 0 ? raw.max_logit : -HUGE_VALF;
                mine.raw_sum = raw.weight_sum;
            }
        }
        process_chunk(mask_of(p, row), r, drafts_of(p, b, j), first, count, chunk_logits);
        summary = summarise_chunk(chunk_logits, count, first, sh, needs.softmax);
    }
    if (draft >= first && draft < first + count && threadIdx.x == 0) sync.draft_logit = chunk_logits[draft - first];
    if (threadIdx.x == 0) {
        mine.max_logit = summary.max_logit;
        mine.max_index = summary.index;
        mine.softmax_sum = summary.weight_sum;
    }
    const float chunk_max = summary.index >= 0 ? summary.max_logit : -HUGE_VALF;
    const chunk_partial* row_partials = ws.partials + row * chunks;
    if (r.greedy()) {
        // Greedy rows need no barrier: the last block of the row to arrive combines the chunks.
        combine_greedy_row(row_partials, chunks, needs, sync, ws.results[row], sh.totals, sh.flag);
    } else {
        const float scale = exact::mass_scale(r.temperature);
        if (lists_top_k(r)) {
            const float reach =
                chunk_max > -HUGE_VALF && chunk_max < HUGE_VALF
                    ? chunk_top_k_reach(chunk_logits, count, chunk_max, summary.thread_max, scale, r.top_k, sh)
                    : 0.0f;
            if (threadIdx.x == 0) mine.top_k_reach = reach;
        }
        arrive(&sync.maxima_arrived, static_cast<uint32_t>(chunks), p);
        combine_maxima(row_partials, chunks, needs, sh.totals);
        if (sh.totals.top < 0) {
            if (chunk == 0 && threadIdx.x == 0) ws.results[row].top = -1;
        } else {
            const row_context ctx{p, r, scale, row, b, j, chunks, draft, exact::min_p_mass_threshold(r.min_p)};
            if (lists_top_k(r) || lists_min_p(r)) {
                sample_listed_row(ctx, first, count, sh);
            } else {
                sample_row(ctx, first, count, sh);
            }
        }
    }

    // ---- 3. The last block of the request walks its chain --------------------------------------
    if (arrive_last(&ws.request_blocks_done[b], static_cast<uint32_t>(n * chunks), sh.flag))
        walk_chain(p, r, b, sh.data.drafts);
}

// Clears the workspace's counters and resolves every request of the call, its values checked,
// for the chain kernels to read: one launch before the step's kernel.
__global__ void prepare_step_kernel(sampling_call call, chain_workspace workspace) {
    let_the_sampling_kernel_start();
    const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
    auto* counters = reinterpret_cast<uint4*>(workspace.control);  // 256-byte aligned, whole uint4s
    const auto words = static_cast<int64_t>(workspace.counter_bytes / sizeof(uint4));
    for (int64_t i = thread; i < words; i += threads) counters[i] = make_uint4(0, 0, 0, 0);
    if (thread < call.batch_size) workspace.requests[thread] = resolve_request(call, static_cast<int32_t>(thread));
}

}  // namespace

cudaError_t query_kernel_capacity(int device, kernel_capacity& out) {
    int sms = 0;
    int streaming_per_sm = 0;
    int chain_per_sm = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&streaming_per_sm, streaming_greedy_kernel<logits_dtype::f32>,
                                                          kBlockThreads, 0);
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&chain_per_sm, chain_kernel, kBlockThreads,
                                                          sizeof(kernel_shared));
    out.streaming_blocks = sms * streaming_per_sm;
    out.chain_blocks = sms * chain_per_sm;
    return e;
}

cudaError_t prepare_chain_kernel() {
    return cudaFuncSetAttribute(chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(sizeof(kernel_shared)));
}

size_t chain_kernel_workspace_bytes(int64_t max_rows, int32_t max_batch, int32_t vocab, bool cut_lists) {
    chain_workspace unused;
    return chain_workspace::layout(nullptr, max_rows, max_batch, vocab, cut_lists, unused);
}

unsigned chain_kernel_blocks(const chain_kernel_params& params) {
    const auto rows = static_cast<unsigned>(params.batch_size) * static_cast<unsigned>(params.tokens_per_req);
    return rows *
           static_cast<unsigned>(params.stream_segments > 0 ? params.stream_segments : chunks_per_row(params.vocab));
}

cudaError_t launch_step(const sampling_call& call, const chain_kernel_params& params, cudaStream_t stream) {
    constexpr int64_t kPrepareThreads = 256;
    constexpr int64_t kWordsPerThread = 8;  // counters cleared per thread
    const int64_t words = static_cast<int64_t>(params.workspace.counter_bytes / 16);
    const int64_t threads = std::max<int64_t>(params.batch_size, (words + kWordsPerThread - 1) / kWordsPerThread);
    prepare_step_kernel<<<static_cast<unsigned>((threads + kPrepareThreads - 1) / kPrepareThreads), kPrepareThreads, 0,
                          stream>>>(call, params.workspace);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    const unsigned blocks = chain_kernel_blocks(params);
    // Launched to overlap the prepare kernel (chain_block.cuh, let_the_sampling_kernel_start).
    cudaLaunchAttribute overlap{};
    overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    overlap.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t launch{};
    launch.gridDim = dim3(blocks);
    launch.blockDim = dim3(kBlockThreads);
    launch.stream = stream;
    launch.attrs = &overlap;
    launch.numAttrs = 1;
    if (params.stream_segments > 0) {
        switch (params.dtype) {
            case logits_dtype::f32:
                return cudaLaunchKernelEx(&launch, streaming_greedy_kernel<logits_dtype::f32>, params);
            case logits_dtype::bf16:
                return cudaLaunchKernelEx(&launch, streaming_greedy_kernel<logits_dtype::bf16>, params);
            default: return cudaLaunchKernelEx(&launch, streaming_greedy_kernel<logits_dtype::f16>, params);
        }
    }
    launch.dynamicSmemBytes = sizeof(kernel_shared);
    return cudaLaunchKernelEx(&launch, chain_kernel, params);
}

}  // namespace ds::cuda

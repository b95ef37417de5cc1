// The streaming sampled kernel: steps where no request can have a top-k, top-p or min-p cut,
// penalties or bias, and no bitmask applies (temperature sampling, greedy rows among them). Its
// blocks hold no chunk in shared memory. An item is one row's chunk of kSampledChunkTokens tokens:
//   1. stream it through registers for its argmax (as the streaming greedy kernel does) and
//      publish that; a greedy row's last block combines the argmaxes, and the row is done;
//   2. after the row's barrier (every chunk's maximum published), read the chunk again, from L2
//      where it just was, for its masses at the row's maximum, summed by the warps' regions; the
//      row's last block finds the chunk and region that hold the draw's target and walks that
//      region, read a third time.
// The blocks are persistent (as many as the GPU holds at once) and take items by ticket, in
// order; a block streams its next item (step 1) before it waits at its current item's barrier,
// so the memory stays busy while rows meet. Every item's maximum is published before its block
// waits for anything, so the barriers cannot deadlock.
// The same decisions as the chain kernel's, through kernels/exact_rules.h (docs/semantics.md).
#pragma once

#include "kernels/cuda/row_draws.cuh"
#include "kernels/cuda/streaming_greedy.cuh"

namespace ds::cuda {

namespace {

struct streaming_sampled_shared {
    block_scratch scratch;
    row_totals totals;
    draw_place place;
    int32_t drafts[kMaxDrafts];  // the request's, for the chain walk
    uint32_t ticket;
    bool flag;
};

// One row's chunk: the unit of work of the streaming sampled kernel.
struct sampled_item {
    int64_t row;
    int32_t chunk;
    int32_t b;  // request
    int32_t j;  // row within the request
    int32_t first;
    int32_t count;
    int32_t draft;  // judged against this row, -1 if none
};

__device__ sampled_item item_of(const chain_kernel_params& p, uint32_t ticket, int32_t chunks) {
    sampled_item it;
    it.row = ticket / static_cast<uint32_t>(chunks);
    it.chunk = static_cast<int32_t>(ticket % static_cast<uint32_t>(chunks));
    const int32_t n = p.tokens_per_req;
    it.b = static_cast<int32_t>(it.row / n);
    it.j = static_cast<int32_t>(it.row % n);
    it.first = it.chunk * kSampledChunkTokens;
    it.count = min(kSampledChunkTokens, p.vocab - it.first);
    it.draft = it.j + 1 < n ? p.candidates[static_cast<int64_t>(it.b) * n + it.j + 1] : -1;
    return it;
}

// The next ticket, to every thread.
__device__ uint32_t take_ticket(const chain_workspace& ws, streaming_sampled_shared& sh) {
    __syncthreads();  // everyone has read the last one
    if (threadIdx.x == 0) sh.ticket = atomicAdd(&ws.control->next_ticket, 1u);
    __syncthreads();
    return sh.ticket;
}

// Processed logits are the logits as given here; softmax sums only where a logprob needs them.
__device__ __forceinline__ logprob_needs sampled_needs(const chain_kernel_params& p, const request_view& r) {
    const bool any = p.outputs.logprobs != nullptr && p.logprobs != logprob_mode::none;
    return {any && r.greedy(), any && p.logprobs == logprob_mode::raw};
}

// The request's last block to finish an item walks its chain.
__device__ void finish_request_item(const chain_kernel_params& p, const request_view& r, const sampled_item& it,
                                    int32_t chunks, streaming_sampled_shared& sh) {
    if (arrive_last(&p.workspace.request_blocks_done[it.b], static_cast<uint32_t>(p.tokens_per_req * chunks), sh.flag))
        walk_chain(p, r, it.b, sh.drafts);
}

// Step 1 of an item: its argmax published and counted in at the row's barrier; a greedy row's
// item is then finished.
template <logits_dtype Dtype>
__device__ void stream_item(const chain_kernel_params& p, const sampled_item& it, int32_t chunks,
                            streaming_sampled_shared& sh) {
    const chain_workspace& ws = p.workspace;
    const request_view& r = ws.requests[it.b];
    const bool greedy = r.greedy();
    const logprob_needs needs = sampled_needs(p, r);
    row_sync& sync = ws.sync[it.row];
    chunk_partial* row_partials = ws.partials + it.row * chunks;
    stream_state s;
    stream_segment<Dtype>(p, it.row, it.first, it.first + it.count, it.draft, needs.softmax || needs.raw, s);
    if (s.holds_draft) sync.draft_logit = s.draft_logit;
    publish_segment(s, needs.softmax || needs.raw, row_partials[it.chunk], sh.scratch);
    if (it.draft >= it.first && it.draft < it.first + it.count) __threadfence();  // the draft's logit
    if (greedy) {
        combine_greedy_row(row_partials, chunks, needs, sync, ws.results[it.row], sh.totals, sh.flag);
        finish_request_item(p, r, it, chunks, sh);
    } else {
        arrive(&sync.maxima_arrived, 0, p);
    }
}

// The masses of this block's chunk [first, first + count) at the row's maximum, this warp's region
// of it (region_of_warp) read again, summed over the warp. A whole region of 16-byte vectors is
// loaded before any mass is computed, so a lane has all its loads in flight at once.
template <logits_dtype Dtype>
__device__ uint64_t region_mass(const chain_kernel_params& p, int64_t row, int32_t first, int32_t count,
                                float max_logit, float scale) {
    constexpr int Tokens = kVectorTokens<Dtype>;
    constexpr int kWholeRegionVectors = kSampledChunkTokens / kWarps / 32 / Tokens;
    const warp_region region = region_of_warp(count);
    const int32_t begin = first + region.begin + static_cast<int32_t>(threadIdx.x & 31) * Tokens;
    const int32_t end = first + region.end;
    const auto* vectors =
        reinterpret_cast<const uint4*>(static_cast<const char*>(p.logits) + row * p.row_stride * (Tokens == 4 ? 4 : 2));
    const bool aligned = (reinterpret_cast<uintptr_t>(vectors) & (kStreamVectorBytes - 1)) == 0;
    uint64_t sum = 0;
    with_row_mass(max_logit, scale, [&](auto mass) {
        if (aligned && region.end - region.begin == kSampledChunkTokens / kWarps) {
            uint4 raw[kWholeRegionVectors];
#pragma unroll
            for (int u = 0; u < kWholeRegionVectors; ++u) raw[u] = __ldcg(vectors + begin / Tokens + u * 32);
#pragma unroll
            for (int u = 0; u < kWholeRegionVectors; ++u) {
                float v[Tokens];
                widen_vector<Dtype>(raw[u], v);
#pragma unroll
                for (int k = 0; k < Tokens; ++k) sum += mass(v[k]);
            }
            return;
        }
        for (int32_t at = begin; at < end; at += 32 * Tokens) {
            float v[Tokens];
            if (aligned && at + Tokens <= end) {
                widen_vector<Dtype>(__ldcg(vectors + at / Tokens), v);
            } else {
                load_by_token<Dtype>(p, row, at, end, v);
            }
#pragma unroll
            for (int k = 0; k < Tokens; ++k) sum += mass(v[k]);
        }
    });
    return warp_sum(sum);
}

// The masses of the block's chunk, published by region and in total (every token with mass is
// kept: no cut, no min_p).
template <logits_dtype Dtype>
__device__ void publish_chunk_masses(const row_context& ctx, const sampled_item& it, chunk_partial& mine,
                                     streaming_sampled_shared& sh) {
    const uint64_t mass = region_mass<Dtype>(ctx.p, ctx.row, it.first, it.count, sh.totals.max_logit, ctx.scale);
    if ((threadIdx.x & 31) == 0) {
        mine.region_mass[threadIdx.x >> 5] = mass;
        sh.scratch.warp_u64[threadIdx.x >> 5] = mass;
        __threadfence();  // for the row's last block
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        uint64_t total = 0;
        for (int w = 0; w < kWarps; ++w) total += sh.scratch.warp_u64[w];
        mine.nonzero = 0;
        mine.mass_total = total;
        mine.min_p_mass = total;
    }
}

// The row's draw by its last block: the region that holds the target, its logits read again.
__device__ void draw_from_regions(const row_context& ctx, streaming_sampled_shared& sh) {
    const row_totals& totals = sh.totals;
    const row_draw d = plan_draw(ctx, cut{ctx.min_mass, false, 0, -1}, totals.min_p_mass, totals.max_logit);
    locate_draw(ctx, d, kSampledChunkTokens, true, sh.place);
    int32_t token = -1;
    float logit = 0.0f;
    if (sh.place.owner >= 0) {
        int32_t first = 0, count = 0;
        owned_tokens(ctx, sh.place, kSampledChunkTokens, first, count);
        const int32_t at = block_find_prefix(
            [&](int32_t i) -> uint64_t {
                return first + i == d.excluded
                           ? 0
                           : mass_of(given_logit(ctx.p, ctx.row, first + i), totals.max_logit, ctx.scale);
            },
            count, d.target - sh.place.before, sh.scratch);
        if (at >= 0) {
            token = first + at;
            logit = given_logit(ctx.p, ctx.row, token);
        }
    }
    publish_draw(ctx, totals, d, token, logit);
}

// Step 2 of a sampled row's item: after the row's barrier, its masses; the row's last block draws.
template <logits_dtype Dtype>
__device__ void finish_sampled_item(const chain_kernel_params& p, const sampled_item& it, int32_t chunks,
                                    streaming_sampled_shared& sh) {
    const chain_workspace& ws = p.workspace;
    const request_view& r = ws.requests[it.b];
    row_sync& sync = ws.sync[it.row];
    chunk_partial* row_partials = ws.partials + it.row * chunks;
    await_count(&sync.maxima_arrived, static_cast<uint32_t>(chunks), p);
    combine_maxima(row_partials, chunks, sampled_needs(p, r), sh.totals);
    if (sh.totals.top < 0) {
        if (it.chunk == 0 && threadIdx.x == 0) ws.results[it.row].top = -1;
    } else {
        const row_context ctx{p,      r,        exact::mass_scale(r.temperature),    it.row, it.b, it.j,
                              chunks, it.draft, exact::min_p_mass_threshold(r.min_p)};
        publish_chunk_masses<Dtype>(ctx, it, row_partials[it.chunk], sh);
        if (arrive_last(&sync.partials_arrived, static_cast<uint32_t>(chunks), sh.flag)) {
            combine_masses(row_partials, chunks, sh.totals);
            draw_from_regions(ctx, sh);
        }
    }
    finish_request_item(p, r, it, chunks, sh);
}

template <logits_dtype Dtype>
__global__ void __launch_bounds__(kBlockThreads, kStreamBlocksPerSm) streaming_sampled_kernel(chain_kernel_params p) {
    __shared__ streaming_sampled_shared sh;
    const chain_workspace& ws = p.workspace;
    const int32_t chunks = sampled_chunks_per_row(p.vocab);
    const uint32_t items =
        static_cast<uint32_t>(p.batch_size) * static_cast<uint32_t>(p.tokens_per_req) * static_cast<uint32_t>(chunks);
    wait_for_the_prepare_kernel();  // it clears the ticket counter and resolves the requests
    uint32_t current = take_ticket(ws, sh);
    if (current < items) stream_item<Dtype>(p, item_of(p, current, chunks), chunks, sh);
    while (current < items) {
        const uint32_t next = take_ticket(ws, sh);
        if (next < items) stream_item<Dtype>(p, item_of(p, next, chunks), chunks, sh);
        const sampled_item it = item_of(p, current, chunks);
        if (!ws.requests[it.b].greedy()) finish_sampled_item<Dtype>(p, it, chunks, sh);
        current = next;
    }
}

}  // namespace

}  // namespace ds::cuda

// Listed rows (a small top-k, or min-p alone): their candidates found on the logits.
// One of the chain kernel's parts (chain_kernel.cu includes top_p_rows.cuh, which includes the rest
// in order); device code for that one translation unit.
#pragma once

#include "kernels/cuda/row_draws.cuh"

namespace ds::cuda {

namespace {

// ---- Listed rows (top-k, min-p): the candidates found on the logits -----------------------------
// Mass is monotone in the logit, so the tokens a small top-k or a min-p keeps lie near the top of
// the row's logits. With d = (row max - logit) * scale (the log2 of the weight ratio to the row's
// top token): a chunk that holds k tokens with d <= D lets every block list only the tokens with
// d <= D + kListMargin; a token left out has less mass than each of those k (or none), so it is
// neither in the row's top k nor tied with the k-th. Min-p keeps no token with
// d > -log2(min_p) + kListMargin, and no token with d > kMassReach has mass. The row's last block
// computes masses for the listed tokens alone and selects the cut among them; no block computes
// the mass of every token. (docs/semantics.md, "Filtering", states the cut; this computes it.)

// Rows whose kept tokens are found on the logits: a small top-k, or min-p as the only filter.
__device__ __forceinline__ bool lists_top_k(const request_view& r) { return r.top_k > 1 && r.top_k <= kLogitTopKLimit; }
__device__ __forceinline__ bool lists_min_p(const request_view& r) {
    return r.top_k < 0 && r.top_p >= 1.0f && r.min_p > 0.0f;
}

// The far edge (in bins) of the first nearness bin where the count of binned tokens reaches k, or
// kNearnessBins when fewer than k were binned; to every thread.
__device__ int nearness_far_edge(uint64_t k, kernel_shared& sh) {
    constexpr int kBinsPerThread = kNearnessBins / kBlockThreads;
    const int first_bin = static_cast<int>(threadIdx.x) * kBinsPerThread;
    uint64_t mine = 0;
#pragma unroll
    for (int i = 0; i < kBinsPerThread; ++i) mine += sh.nearness[first_bin + i];
    uint64_t total = 0;
    uint64_t before = block_exclusive_scan(mine, total, sh.scratch);
    if (threadIdx.x == 0) sh.scratch.broadcast_u64 = kNearnessBins;
    __syncthreads();
    if (before < k && before + mine >= k) {  // exactly one thread holds the bin where the count reaches k
        int bin = first_bin;
        for (before += sh.nearness[bin]; before < k; before += sh.nearness[++bin]) {
        }
        sh.scratch.broadcast_u64 = static_cast<uint64_t>(bin) + 1;
    }
    __syncthreads();
    const auto far_edge = static_cast<int>(sh.scratch.broadcast_u64);
    __syncthreads();
    return far_edge;
}

__device__ void clear_nearness(kernel_shared& sh) {
    for (int i = threadIdx.x; i < kNearnessBins; i += kBlockThreads) sh.nearness[i] = 0;
    __syncthreads();
}

// Before the row's barrier, top-k rows: D for this chunk, the far edge of the bin (of d relative to
// the chunk's maximum) in which the count of the chunk's tokens reaches k, or past every bin.
// First the threads' own maxima (`thread_max`, each thread's largest value over its tokens of
// for_each_slice) are binned: k of them within an edge E0 are k distinct tokens, so the chunk's
// k-th token lies below E0, and only tokens below E0 need binning to find it (a few times k of the
// chunk's tokens, instead of one shared atomic per token).
__device__ float chunk_top_k_reach(const float* chunk_logits, int32_t count, float chunk_max, float thread_max,
                                   float scale, int32_t top_k, kernel_shared& sh) {
    const auto k = static_cast<uint64_t>(top_k);
    auto bin_of = [&](float logit) { return (chunk_max - logit) * scale * kNearnessPerUnit; };
    clear_nearness(sh);
    const float own_bin = bin_of(thread_max);
    if (own_bin < static_cast<float>(kNearnessBins)) atomicAdd(&sh.nearness[static_cast<int>(own_bin)], 1u);
    __syncthreads();
    const auto bound = static_cast<float>(nearness_far_edge(k, sh));
    clear_nearness(sh);
    for_each_slice(chunk_logits, count, [&](int, int32_t, const float(&values)[kSliceTokens]) {
#pragma unroll
        for (int t = 0; t < kSliceTokens; ++t) {
            const float bin = bin_of(values[t]);
            if (bin < bound) atomicAdd(&sh.nearness[static_cast<int>(bin)], 1u);
        }
    });
    __syncthreads();
    return static_cast<float>(nearness_far_edge(k, sh)) / kNearnessPerUnit;
}

// After the barrier: the largest d a listed token may have.
__device__ float listing_limit(const row_context& ctx, kernel_shared& sh) {
    if (lists_min_p(ctx.r)) return fminf(kListMargin - log2f(ctx.r.min_p), kMassReach);
    if (threadIdx.x == 0) {
        const chunk_partial* partials = ctx.p.workspace.partials + ctx.row * ctx.chunks;
        const float max_logit = sh.totals.max_logit;
        float nearest = kMassReach;  // the smallest D over the chunks, relative to the row's maximum
        for (int32_t c = 0; c < ctx.chunks; ++c) {
            if (__ldcg(&partials[c].max_index) < 0) continue;
            const float d = (max_logit - __ldcg(&partials[c].max_logit)) * ctx.scale + __ldcg(&partials[c].top_k_reach);
            nearest = fminf(nearest, d);
        }
        sh.scratch.broadcast_u64 = __float_as_uint(fminf(nearest + kListMargin, kMassReach));
    }
    __syncthreads();
    const float limit = __uint_as_float(static_cast<uint32_t>(sh.scratch.broadcast_u64));
    __syncthreads();
    return limit;
}

// Every block of a listed row: this chunk's candidates, written in token order at the chunk's
// own place in the row's list (its first token), and their count published for the last block.
__device__ void list_chunk_candidates(const row_context& ctx, int32_t first, int32_t count, kernel_shared& sh) {
    const float* chunk_logits = sh.data.chunk;
    const float max_logit = sh.totals.max_logit;
    chunk_listing listing;
    if (max_logit == HUGE_VALF) {  // only +inf tokens have mass
        listing = mark_candidates(
            chunk_logits, count, [](int32_t, float logit) { return logit == HUGE_VALF; }, sh);
    } else {
        const float limit = listing_limit(ctx, sh);
        listing = mark_candidates(
            chunk_logits, count, [&](int32_t, float logit) { return (max_logit - logit) * ctx.scale <= limit; }, sh);
    }
    write_candidates(listing, chunk_logits, count, first, ctx.p.workspace.candidates + ctx.row * ctx.p.vocab, first);
    if (threadIdx.x == 0)
        ctx.p.workspace.partials[ctx.row * ctx.chunks + first / kChunkTokens].candidates = listing.total;
}

// The row's last block: the chunks' lists moved together into one list in token order. Each
// chunk's list moves down (never up), a tile at a time, read before any thread writes.
__device__ int32_t join_chunk_lists(const row_context& ctx) {
    cut_candidate* list = ctx.p.workspace.candidates + ctx.row * ctx.p.vocab;
    const chunk_partial* partials = ctx.p.workspace.partials + ctx.row * ctx.chunks;
    int32_t joined = 0;
    for (int32_t c = 0; c < ctx.chunks; ++c) {
        const int32_t in_chunk = __ldcg(&partials[c].candidates);
        const int32_t from = c * kChunkTokens;
        for (int32_t tile = 0; tile < in_chunk && joined < from; tile += kBlockThreads) {
            const int32_t i = tile + static_cast<int32_t>(threadIdx.x);
            cut_candidate moved{};
            if (i < in_chunk) moved = cut_candidate{__ldcg(&list[from + i].token), __ldcg(&list[from + i].logit)};
            __syncthreads();
            if (i < in_chunk) list[joined + i] = moved;
            __syncthreads();
        }
        joined += in_chunk;
    }
    __threadfence_block();
    return joined;
}

// A listed row after the row's barrier (sh.totals holds its maximum): list the chunk's
// candidates; the last block of the row joins the lists, counts the candidates' masses and
// selects the cut.
__device__ void sample_listed_row(const row_context& ctx, int32_t first, int32_t count, kernel_shared& sh) {
    list_chunk_candidates(ctx, first, count, sh);
    __threadfence();  // every thread wrote part of the list
    row_sync& sync = ctx.p.workspace.sync[ctx.row];
    if (!arrive_last(&sync.candidates_arrived, static_cast<uint32_t>(ctx.chunks), sh.flag)) return;
    const int32_t listed = join_chunk_lists(ctx);
    const cut_candidate* list = ctx.p.workspace.candidates + ctx.row * ctx.p.vocab;
    const float max_logit = sh.totals.max_logit;
    uint64_t mass = 0;
    uint64_t with_mass = 0;
#pragma unroll 8
    for (int32_t i = static_cast<int32_t>(threadIdx.x); i < listed; i += kBlockThreads) {
        const uint64_t q = mass_of(__ldcg(&list[i].logit), max_logit, ctx.scale);
        mass += q;
        with_mass += q > 0 ? 1 : 0;
    }
    const uint64_t mass_total = block_sum(mass, sh.scratch);
    const uint64_t nonzero = block_sum(with_mass, sh.scratch);
    if (threadIdx.x == 0) {
        sh.list_count = listed;
        sh.totals.mass_total = mass_total;
        sh.totals.nonzero = nonzero;
    }
    __syncthreads();
    // Fewer than k listed tokens with mass: the list holds every token with mass, and no top-k cut
    // applies. Otherwise the top-k cut is selected on the list, also when exactly k have mass (the
    // same kept set as no cut; its boundary keeps out a draft that was not listed).
    select_and_draw(ctx, lists_top_k(ctx.r) && static_cast<uint64_t>(ctx.r.top_k) <= nonzero, sh);
}

}  // namespace

}  // namespace ds::cuda

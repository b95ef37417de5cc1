// A sampled row's draw: without a cut (the chunk that holds the target), and with a top-k/top-p
// cut selected on the tokens listed above the row's mass bound.
// One of the chain kernel's parts (chain_kernel.cu includes top_p_rows.cuh, which includes the rest
// in order); device code for that one translation unit.
#pragma once

#include "kernels/cuda/row_combine.cuh"

namespace ds::cuda {

namespace {

// The kept mass and draft of a row and the draw: the token of the target mass in token order.
struct row_draw {
    uint64_t draft_mass;  // the draft's kept mass
    uint64_t mass;        // the mass drawn from (the residual without the draft when it has any)
    int32_t excluded;     // the draft when it is left out of the residual, else -1
    uint64_t target;
};

__device__ row_draw plan_draw(const row_context& ctx, const cut& kept, uint64_t kept_mass, float max_logit) {
    row_draw d{};
    if (ctx.draft >= 0) {
        const uint64_t q = mass_of(__ldcg(&ctx.p.workspace.sync[ctx.row].draft_logit), max_logit, ctx.scale);
        d.draft_mass = kept.keeps(ctx.draft, q) ? q : 0;
    }
    const exact::residual rest = exact::residual_after(kept_mass, d.draft_mass);
    d.mass = rest.mass;
    d.excluded = rest.excludes_draft ? ctx.draft : -1;
    d.target = exact::draw_target(draw_bits(ctx.p, ctx.r, ctx.b, ctx.j), d.mass);
    return d;
}

// The draw by the row's last block when each chunk's kept mass is known (partials' min_p_mass, the
// row's in sh.totals.min_p_mass): find the chunk that holds the target mass, load it again and
// find the token in it. Rows without a top-k/top-p cut keep the tokens that pass min_p. With
// `by_region` (a row without a cut whose chunks published their masses by region), only the
// region of the chunk that holds the target is loaded and walked.
__device__ void draw_from_chunks(const row_context& ctx, const cut& kept, kernel_shared& sh, bool by_region = false) {
    const row_totals& totals = sh.totals;
    const row_draw d = plan_draw(ctx, kept, totals.min_p_mass, totals.max_logit);
    const chunk_partial* partials = ctx.p.workspace.partials + ctx.row * ctx.chunks;
    if (threadIdx.x < 32) {  // warp 0 scans the chunks' kept masses, 32 chunks at a time
        const int lane = static_cast<int>(threadIdx.x);
        uint64_t before = 0;
        int32_t owner = -1;
        for (int32_t round = 0; round < ctx.chunks && owner < 0; round += 32) {
            const int32_t c = round + lane;
            uint64_t in_chunk = c < ctx.chunks ? __ldcg(&partials[c].min_p_mass) : 0;
            if (d.excluded >= c * kChunkTokens && d.excluded < (c + 1) * kChunkTokens) in_chunk -= d.draft_mass;
            const uint64_t inclusive = warp_inclusive_scan(in_chunk);
            const unsigned crossed = __ballot_sync(kFullMask, before + inclusive > d.target);
            if (crossed != 0) {
                const int at = __ffs(crossed) - 1;
                owner = round + at;
                before += __shfl_sync(kFullMask, inclusive - in_chunk, at);
            } else {
                before += __shfl_sync(kFullMask, inclusive, 31);
            }
        }
        int32_t region = -1;
        if (by_region && owner >= 0) {
            const int32_t chunk_first = owner * kChunkTokens;
            const warp_region span = region_of_warp(min(kChunkTokens, ctx.p.vocab - chunk_first), lane);
            uint64_t in_region = lane < kMassRegions ? __ldcg(&partials[owner].region_mass[lane]) : 0;
            if (lane < kMassRegions && d.excluded >= chunk_first + span.begin && d.excluded < chunk_first + span.end)
                in_region -= d.draft_mass;
            const uint64_t inclusive = warp_inclusive_scan(in_region);
            const unsigned crossed = __ballot_sync(kFullMask, lane < kMassRegions && before + inclusive > d.target);
            if (crossed != 0) {
                region = __ffs(crossed) - 1;
                before += __shfl_sync(kFullMask, inclusive - in_region, region);
            }
        }
        if (lane == 0) {
            sh.owner = owner;
            sh.owner_before = before;
            sh.owner_region = region;
        }
    }
    __syncthreads();
    const int32_t owner = sh.owner;
    int32_t token = -1;
    float logit = 0.0f;
    if (owner >= 0) {
        int32_t first = owner * kChunkTokens;
        int32_t count = min(kChunkTokens, ctx.p.vocab - first);
        if (sh.owner_region >= 0) {
            const warp_region span = region_of_warp(count, sh.owner_region);
            first += span.begin;
            count = span.end - span.begin;
        }
        const uint64_t remaining = d.target - sh.owner_before;
        load_raw_chunk(ctx.p, ctx.row, first, count, sh.data.chunk);
        process_chunk(mask_of(ctx.p, ctx.row), ctx.r, drafts_of(ctx.p, ctx.b, ctx.j), first, count, sh.data.chunk);
        const float* chunk = sh.data.chunk;
        const int32_t at = block_find_prefix(
            [&](int32_t i) -> uint64_t {
                if (first + i == d.excluded) return 0;
                const uint64_t q = mass_of(chunk[i], totals.max_logit, ctx.scale);
                return kept.keeps(first + i, q) ? q : 0;
            },
            count, remaining, sh.scratch);
        if (at >= 0) {
            token = first + at;
            logit = chunk[at];
        }
    }
    if (threadIdx.x == 0) {
        row_result& result = ctx.p.workspace.results[ctx.row];
        result.top = totals.top;
        result.max_logit = totals.max_logit;
        result.kept_mass = totals.min_p_mass;
        result.draft_mass = d.draft_mass;
        copy_logprob_totals(totals, result);
        result.stop_token = token;
        result.stop_logit = logit;
    }
}

// A cut's first phase: every token whose mass can survive the cut is at or above this bound.
// Walks the row's histogram down until its bins hold k tokens (top-k) or, counting each token at
// its bin's least mass, the top-p target.
__device__ uint64_t cut_bound(const row_context& ctx, bool top_k_active, kernel_shared& sh) {
    const request_view& r = ctx.r;
    const row_totals& totals = sh.totals;
    const chain_workspace& ws = ctx.p.workspace;
    if (threadIdx.x == 0) {
        const uint32_t* row_histogram = ws.mass_histograms + ctx.row * kMassHistogramBins;
        const uint64_t target =
            top_k_active ? static_cast<uint64_t>(r.top_k) : exact::top_p_mass_target(r.top_p, totals.mass_total);
        uint64_t reached = 0;
        int bin = kMassHistogramBins - 1;
        for (; bin > 0; --bin) {
            const uint64_t tokens = __ldcg(&row_histogram[bin]);
            const uint64_t least_mass = least_mass_of_bin(bin);
            reached += top_k_active ? tokens : tokens * least_mass;
            if (reached >= target) break;
        }
        sh.scratch.broadcast_u64 = least_mass_of_bin(bin);
    }
    __syncthreads();
    const uint64_t bound = sh.scratch.broadcast_u64;
    __syncthreads();
    return bound;
}

// This thread's tokens of a chunk that pass a predicate keep(place in the chunk, logit), and their
// places in the chunk's token order. Candidates per round are counted four rounds per 64-bit word
// in 16-bit fields (a field sums at most kBlockThreads * 4 tokens), so four block scans give every
// thread its places.
struct chunk_listing {
    uint64_t is_candidate = 0;                 // bit 4 * round + k
    uint64_t rounds_before[kSlices / 4] = {};  // this thread's place within each round (fields)
    uint64_t round_totals[kSlices / 4] = {};
    int32_t total = 0;  // the chunk's candidates
};

template <class Keep>
__device__ chunk_listing mark_candidates(const float* chunk_logits, int32_t count, const Keep& keep,
                                         kernel_shared& sh) {
    chunk_listing listing;
    uint64_t round_counts[kSlices / 4] = {};
    for_each_slice(chunk_logits, count, [&](int round, int32_t at_token, const float(&values)[kSliceTokens]) {
#pragma unroll
        for (int k = 0; k < kSliceTokens; ++k) {
            if (keep(at_token + k, values[k])) {
                listing.is_candidate |= uint64_t{1} << (kSliceTokens * round + k);
                round_counts[round / 4] += uint64_t{1} << (16 * (round % 4));
            }
        }
    });
#pragma unroll
    for (int g = 0; g < kSlices / 4; ++g)
        listing.rounds_before[g] = block_exclusive_scan(round_counts[g], listing.round_totals[g], sh.scratch);
    uint64_t total = 0;
#pragma unroll
    for (int g = 0; g < kSlices / 4; ++g) {
        for (int f = 0; f < 4; ++f) total += (listing.round_totals[g] >> (16 * f)) & 0xFFFF;
    }
    listing.total = static_cast<int32_t>(total);
    return listing;
}

// Writes the marked tokens of the chunk starting at token `first` to list[start...] in token order.
__device__ void write_candidates(const chunk_listing& listing, const float* chunk_logits, int32_t count, int32_t first,
                                 cut_candidate* list, int32_t start) {
    int32_t round_start = start;  // the list position of this round's first candidate
    for_each_slice(chunk_logits, count, [&](int round, int32_t at_token, const float(&values)[kSliceTokens]) {
        const int field = 16 * (round % 4);
        int32_t at = round_start + static_cast<int32_t>((listing.rounds_before[round / 4] >> field) & 0xFFFF);
#pragma unroll
        for (int k = 0; k < kSliceTokens; ++k) {
            if ((listing.is_candidate >> (kSliceTokens * round + k)) & 1u)
                list[at++] = cut_candidate{first + at_token + k, values[k]};
        }
        round_start += static_cast<int32_t>((listing.round_totals[round / 4] >> field) & 0xFFFF);
    });
}

// A cut's second phase: this block's tokens at or above `bound`, written into the row's candidate
// list at their place in token order (after the candidates of earlier chunks).
__device__ void list_candidates(const row_context& ctx, int32_t first, int32_t count, uint64_t bound,
                                kernel_shared& sh) {
    const chain_kernel_params& p = ctx.p;
    const chain_workspace& ws = p.workspace;
    chunk_partial* partials = ws.partials + ctx.row * ctx.chunks;
    const int32_t chunk = first / kChunkTokens;
    const float max_logit = sh.totals.max_logit;
    const chunk_listing listing = mark_candidates(
        sh.data.chunk, count, [&](int32_t, float logit) { return mass_of(logit, max_logit, ctx.scale) >= bound; }, sh);
    if (threadIdx.x == 0) partials[chunk].candidates = listing.total;
    arrive(&ws.sync[ctx.row].counts_arrived, static_cast<uint32_t>(ctx.chunks), p);
    if (threadIdx.x < 32) {  // candidates of earlier chunks come first: the list stays in token order
        uint64_t offset = 0;
        uint64_t total = 0;
        for (int32_t c = static_cast<int32_t>(threadIdx.x); c < ctx.chunks; c += 32) {
            const auto in_chunk = static_cast<uint64_t>(__ldcg(&partials[c].candidates));
            if (c < chunk) offset += in_chunk;
            total += in_chunk;
        }
        offset = warp_sum(offset);
        total = warp_sum(total);
        if (threadIdx.x == 0) {
            sh.list_offset = static_cast<int32_t>(offset);
            sh.list_count = static_cast<int32_t>(total);
        }
    }
    __syncthreads();
    write_candidates(listing, sh.data.chunk, count, first, ws.candidates + ctx.row * p.vocab, sh.list_offset);
}

// A cut's last phase, in the row's last block: the cut selected on the listed candidates, and the
// draw among the tokens it keeps. Without a top-k or top-p cut (listed rows only) the list holds
// every token that passes min_p, and the draw is among those.
__device__ void select_and_draw(const row_context& ctx, bool top_k_active, kernel_shared& sh) {
    const request_view& r = ctx.r;
    const row_totals& totals = sh.totals;
    const chain_workspace& ws = ctx.p.workspace;
    const int32_t list_count = sh.list_count;
    const cut_candidate* list = ws.candidates + ctx.row * ctx.p.vocab;
    auto mass_at = [&](int32_t i) { return mass_of(__ldcg(&list[i].logit), totals.max_logit, ctx.scale); };
    const bool has_cut = top_k_active || r.top_p < 1.0f;
    const selected_cut selection =
        has_cut ? select_cut(mass_at, list, list_count, r, top_k_active, totals.mass_total, ctx.min_mass, sh)
                : selected_cut{cut{ctx.min_mass, false, 0, -1}, block_sum_over(
                                                                    [&](int32_t i) -> uint64_t {
                                                                        const uint64_t q = mass_at(i);
                                                                        return q >= ctx.min_mass ? q : 0;
                                                                    },
                                                                    list_count, sh.scratch)};
    const cut& kept = selection.kept_cut;
    const row_draw d = plan_draw(ctx, kept, selection.kept_mass, totals.max_logit);
    const int32_t drawn = block_find_prefix(
        [&](int32_t i) -> uint64_t {
            const int32_t token = __ldcg(&list[i].token);
            if (token == d.excluded) return 0;
            const uint64_t q = mass_at(i);
            return kept.keeps(token, q) ? q : 0;
        },
        list_count, d.target, sh.scratch);
    if (threadIdx.x == 0) {
        row_result& result = ws.results[ctx.row];
        result.top = totals.top;
        result.max_logit = totals.max_logit;
        result.kept_mass = selection.kept_mass;
        result.draft_mass = d.draft_mass;
        copy_logprob_totals(totals, result);
        result.stop_token = drawn >= 0 ? __ldcg(&list[drawn].token) : -1;
        result.stop_logit = drawn >= 0 ? __ldcg(&list[drawn].logit) : 0.0f;
    }
}

// Rows with a top-k/top-p cut, run by every block of the row after the masses barrier: the
// blocks list the tokens that can survive the cut in token order, and the last one selects the
// cut and draws.
__device__ void draw_with_cut(const row_context& ctx, bool top_k_active, int32_t first, int32_t count,
                              kernel_shared& sh) {
    list_candidates(ctx, first, count, cut_bound(ctx, top_k_active, sh), sh);
    __threadfence();  // every thread wrote part of the list
    if (!arrive_last(&ctx.p.workspace.sync[ctx.row].candidates_arrived, static_cast<uint32_t>(ctx.chunks), sh.flag))
        return;
    select_and_draw(ctx, top_k_active, sh);
}

}  // namespace

}  // namespace ds::cuda

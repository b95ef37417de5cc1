// Top-p rows (top-p alone): only the boundary bin's tokens listed.
// One of the chain kernel's parts (chain_kernel.cu includes top_p_rows.cuh, which includes the rest
// in order); device code for that one translation unit.
//
// Under top-p alone a row keeps every token of the mass bins (kernels/cuda/chain_kernel_params.h,
// mass_bin) above the bin b* where the mass summed from the top first reaches the target, and a
// prefix of b*'s tokens in (mass desc, token asc) order: a bin's masses all exceed the next
// lower bin's. The blocks sum their chunk's masses by bin; after the row's barrier each finds b*
// and lists its chunk's tokens in b* alone; the row's last block selects the cut among those,
// counts each chunk's kept mass and draws as rows without a cut do. The listed tokens are one bin
// of the row, not every token that may be kept.
#pragma once

#include "kernels/cuda/listed_rows.cuh"

namespace ds::cuda {

namespace {

__device__ __forceinline__ bool cuts_top_p_alone(const request_view& r, uint64_t min_mass) {
    return r.top_k < 0 && r.top_p < 1.0f && min_mass <= 1;  // min_p = 0: every token with mass passes it
}

__device__ __forceinline__ uint64_t* chunk_bin_masses_of(const row_context& ctx, int32_t chunk) {
    return ctx.p.workspace.chunk_bin_masses + (ctx.row * ctx.chunks + chunk) * kMassHistogramBins;
}

// Before the row's second barrier: this chunk's masses by bin (per-warp bins, then summed, so a
// flat row's tokens do not all meet on one shared word) and its total.
__device__ void publish_bin_masses(const row_context& ctx, int32_t chunk, int32_t count, chunk_partial& mine,
                                   kernel_shared& sh) {
    for (int i = threadIdx.x; i < kWarps * kMassHistogramBins; i += kBlockThreads) (&sh.bin_mass[0][0])[i] = 0;
    __syncthreads();
    uint64_t* warp_bins = sh.bin_mass[threadIdx.x / 32];
    const float max_logit = sh.totals.max_logit;
    uint64_t total = 0;
    for_each_slice(sh.data.chunk, count, [&](int, int32_t, const float(&values)[kSliceTokens]) {
#pragma unroll
        for (int k = 0; k < kSliceTokens; ++k) {
            const uint64_t q = mass_of(values[k], max_logit, ctx.scale);
            total += q;
            if (q > 0) atomicAdd(reinterpret_cast<unsigned long long*>(&warp_bins[mass_bin(q)]), q);
        }
    });
    const uint64_t chunk_total = block_sum(total, sh.scratch);  // also orders the bins' atomics
    uint64_t* published = chunk_bin_masses_of(ctx, chunk);
    for (int b = threadIdx.x; b < kMassHistogramBins; b += kBlockThreads) {
        uint64_t sum = 0;
        for (int w = 0; w < kWarps; ++w) sum += sh.bin_mass[w][b];
        published[b] = sum;
    }
    if (threadIdx.x == 0) mine.mass_total = chunk_total;
    __threadfence();
}

// After the barrier, in every block: the boundary bin b* and the mass of the bins above it, from
// the chunks' bins (sh.totals.mass_total: the row's mass).
struct boundary_bin {
    int bin;
    uint64_t mass_above;
};

__device__ boundary_bin find_boundary_bin(const row_context& ctx, kernel_shared& sh) {
    uint64_t* row_bins = sh.bin_mass[0];
    __syncthreads();
    for (int b = threadIdx.x; b < kMassHistogramBins; b += kBlockThreads) {
        uint64_t sum = 0;
        for (int32_t c = 0; c < ctx.chunks; ++c) sum += __ldcg(&chunk_bin_masses_of(ctx, c)[b]);
        row_bins[b] = sum;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        uint64_t total = 0;
        for (int b = 0; b < kMassHistogramBins; ++b) total += row_bins[b];
        const uint64_t target = exact::top_p_mass_target(ctx.r.top_p, total);
        uint64_t above = 0;
        int bin = kMassHistogramBins - 1;
        for (; bin > 0 && above + row_bins[bin] < target; --bin) above += row_bins[bin];
        sh.totals.mass_total = total;
        sh.scratch.broadcast_i32 = bin;
        sh.scratch.broadcast_u64 = above;
    }
    __syncthreads();
    const boundary_bin found{sh.scratch.broadcast_i32, sh.scratch.broadcast_u64};
    __syncthreads();
    return found;
}

// The last block, after selecting the cut: each chunk's kept mass into its partials' min_p_mass
// (its bins above b*, then its listed tokens the cut keeps), the row's into sh.totals.min_p_mass.
__device__ void count_chunks_kept_mass(const row_context& ctx, const cut& kept, uint64_t kept_mass, int bin,
                                       int32_t listed, kernel_shared& sh) {
    chunk_partial* partials = ctx.p.workspace.partials + ctx.row * ctx.chunks;
    for (int32_t c = threadIdx.x; c < ctx.chunks; c += kBlockThreads) {
        uint64_t above = 0;
        for (int b = bin + 1; b < kMassHistogramBins; ++b) above += __ldcg(&chunk_bin_masses_of(ctx, c)[b]);
        partials[c].min_p_mass = above;
    }
    __threadfence();
    __syncthreads();
    const cut_candidate* list = ctx.p.workspace.candidates + ctx.row * ctx.p.vocab;
    const float max_logit = sh.totals.max_logit;
    for (int32_t i = threadIdx.x; i < listed; i += kBlockThreads) {
        const int32_t token = __ldcg(&list[i].token);
        const uint64_t q = mass_of(__ldcg(&list[i].logit), max_logit, ctx.scale);
        if (kept.keeps(token, q)) {
            atomicAdd(reinterpret_cast<unsigned long long*>(&partials[token / kChunkTokens].min_p_mass), q);
        }
    }
    __threadfence();
    if (threadIdx.x == 0) sh.totals.min_p_mass = kept_mass;
    __syncthreads();
}

// A top-p row after the row maximum: bins, the barrier, the boundary bin's tokens listed; the
// row's last block selects the cut among them and draws.
__device__ void sample_top_p_row(const row_context& ctx, int32_t first, int32_t count, kernel_shared& sh) {
    const int32_t chunk = first / kChunkTokens;
    row_sync& sync = ctx.p.workspace.sync[ctx.row];
    publish_bin_masses(ctx, chunk, count, ctx.p.workspace.partials[ctx.row * ctx.chunks + chunk], sh);
    arrive(&sync.partials_arrived, static_cast<uint32_t>(ctx.chunks), ctx.p);
    const boundary_bin boundary = find_boundary_bin(ctx, sh);
    const float max_logit = sh.totals.max_logit;
    const chunk_listing listing = mark_candidates(
        sh.data.chunk, count,
        [&](float logit) {
            const uint64_t q = mass_of(logit, max_logit, ctx.scale);
            return q > 0 && mass_bin(q) == boundary.bin;
        },
        sh);
    cut_candidate* list = ctx.p.workspace.candidates + ctx.row * ctx.p.vocab;
    write_candidates(listing, sh.data.chunk, count, first, list, first);
    if (threadIdx.x == 0) ctx.p.workspace.partials[ctx.row * ctx.chunks + chunk].candidates = listing.total;
    __threadfence();  // every thread wrote part of the list
    if (!arrive_last(&sync.candidates_arrived, static_cast<uint32_t>(ctx.chunks), sh.flag)) return;
    const int32_t listed = join_chunk_lists(ctx);
    auto mass_at = [&](int32_t i) { return mass_of(__ldcg(&list[i].logit), max_logit, ctx.scale); };
    const selected_cut selection =
        select_cut(mass_at, list, listed, ctx.r, false, sh.totals.mass_total, ctx.min_mass, sh, boundary.mass_above);
    count_chunks_kept_mass(ctx, selection.kept_cut, selection.kept_mass, boundary.bin, listed, sh);
    draw_from_chunks(ctx, selection.kept_cut, sh);
}

}  // namespace

}  // namespace ds::cuda

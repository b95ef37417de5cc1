// Top-p rows (top-p alone): only the tokens of the boundary bin get masses after the row's
// barrier; they are listed and summed by sub-bin, and the cut is selected among one sub-bin's.
// One of the chain kernel's parts (chain_kernel.cu includes top_p_rows.cuh, which includes the rest
// in order); device code for that one translation unit.
//
// Under top-p alone a row keeps every token of the mass bins (kernels/cuda/chain_kernel_params.h,
// mass_bin) above the bin b* where the mass summed from the top first reaches the target, and a
// prefix of b*'s tokens in (mass desc, token asc) order: a bin's masses all exceed the next
// lower bin's. The blocks sum their chunk's masses by bin and meet; each then finds b*, lists its
// tokens of b* (selected on their mass exponents first, band_of_bin, so only those get masses),
// adds them to the row's masses by sub-bin (mass_sub_bin, ordered as the masses are), counts its
// chunk's mass above b* from its own bins and leaves. The row's last block finds the sub-bin s*
// of b* where the target is reached and selects the cut among s*'s few listed tokens by one sort
// (among all of b*'s by radix selection where s* holds more than a sort does), adds the kept
// ones to their chunks' kept mass and draws as rows without a cut do.
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

__device__ __forceinline__ uint64_t* boundary_sub_masses_of(const row_context& ctx) {
    return ctx.p.workspace.boundary_sub_masses + ctx.row * kBoundarySubBins;
}

// Before the row's barrier: this chunk's masses by bin and its total; the chunk's share of the
// row's sub-bins cleared for after the barrier. Each warp sums its tokens'
// masses in bins of its own as two 32-bit halves: shared-memory atomics on 32 bits are native,
// where 64-bit ones spin on compare-and-swap, and the lanes of a warp often meet on one bin. A
// warp's 2048 tokens keep each half below 2^31.
static_assert(kChunkTokens / kWarps * (uint64_t{1} << (exact::kMassBits - 20)) <= (uint64_t{1} << 31),
              "a warp's halves fit 32 bits");
__device__ void publish_bin_masses(const row_context& ctx, int32_t chunk, int32_t count, chunk_partial& mine,
                                   kernel_shared& sh) {
    uint64_t* row_sub_masses = boundary_sub_masses_of(ctx);
    for (int i = chunk * kBlockThreads + static_cast<int>(threadIdx.x); i < kBoundarySubBins;
         i += kBlockThreads * ctx.chunks)
        row_sub_masses[i] = 0;
    auto& parts = sh.warp_bin_mass;
    for (int i = threadIdx.x; i < kWarps * kMassHistogramBins; i += kBlockThreads) {
        (&parts.high[0][0])[i] = 0;
        (&parts.low[0][0])[i] = 0;
    }
    __syncthreads();
    const int warp = static_cast<int>(threadIdx.x / 32);
    uint64_t total = 0;
    with_row_mass(sh.totals.max_logit, ctx.scale, [&](auto mass) {
        for_each_slice(sh.data.chunk, count, [&](int, int32_t, const float(&values)[kSliceTokens]) {
#pragma unroll
            for (int k = 0; k < kSliceTokens; ++k) {
                const uint64_t q = mass(values[k]);
                total += q;
                if (q > 0) {
                    const int bin = mass_bin(q);
                    atomicAdd(&parts.high[warp][bin], static_cast<uint32_t>(q >> 20));
                    atomicAdd(&parts.low[warp][bin], static_cast<uint32_t>(q & 0xFFFFF));
                }
            }
        });
    });
    const uint64_t chunk_total = block_sum(total, sh.scratch);  // also orders the bins' atomics
    uint64_t* published = chunk_bin_masses_of(ctx, chunk);
    for (int b = threadIdx.x; b < kMassHistogramBins; b += kBlockThreads) {
        uint64_t sum = 0;
        for (int w = 0; w < kWarps; ++w) sum += (uint64_t{parts.high[w][b]} << 20) + parts.low[w][b];
        published[b] = sum;
    }
    if (threadIdx.x == 0) mine.mass_total = chunk_total;
    __threadfence();
}

// After the barrier, in every block: the boundary bin b* and the mass of the bins above it, from
// the chunks' bins (sh.totals.mass_total: the row's mass), and the part of the top-p target left
// for b*'s tokens.
struct boundary_bin {
    int bin;
    uint64_t mass_above;
    uint64_t target_in_bin;
};

__device__ boundary_bin find_boundary_bin(const row_context& ctx, kernel_shared& sh) {
    uint64_t* row_bins = sh.row_bin_mass;
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
        sh.scratch.warp_u64[0] = above;
        sh.scratch.warp_u64[1] = target - above;
    }
    __syncthreads();
    const boundary_bin found{sh.scratch.broadcast_i32, sh.scratch.warp_u64[0], sh.scratch.warp_u64[1]};
    __syncthreads();
    return found;
}

// Calls visit(place, logit) for the chunk's tokens whose mass exponent lies in `band`, 32 at a
// time, so the lanes of a warp compute masses together where b*'s few percent of the tokens would
// leave most lanes idle: each warp stages the places of its tokens in the band (in no particular
// order) in `staged` and visits them whenever 32 wait. Every lane of the warp calls visit together
// (it may use warp collectives), with place -1 where it has no token.
template <class Visit>
__device__ void for_each_token_in_band(const float* chunk_logits, int32_t count, float max_logit, float scale,
                                       exponent_band band, uint16_t* staged, const Visit& visit) {
    const int lane = static_cast<int>(threadIdx.x & 31);
    const unsigned lanes_below = (1u << lane) - 1;
    int waiting = 0;  // the same in every lane
    for_each_slice(chunk_logits, count, [&](int, int32_t at_token, const float(&values)[kSliceTokens]) {
#pragma unroll
        for (int k = 0; k < kSliceTokens; ++k) {
            // The row's maximum has mass 2^40 also where its exponent is not 0 (an infinite maximum).
            const bool in_band =
                band.holds(exact::mass_exponent(values[k], max_logit, scale)) || values[k] == max_logit;
            const unsigned ballot = __ballot_sync(kFullMask, in_band);
            if (in_band) staged[waiting + __popc(ballot & lanes_below)] = static_cast<uint16_t>(at_token + k);
            waiting += __popc(ballot);
        }
        __syncwarp();
        while (waiting >= 32) {
            waiting -= 32;
            const int32_t place = staged[waiting + lane];
            visit(place, chunk_logits[place]);
        }
        __syncwarp();  // read before the next round stages over them
    });
    if (waiting > 0) {
        const int32_t place = lane < waiting ? staged[lane] : -1;
        visit(place, place >= 0 ? chunk_logits[place] : -HUGE_VALF);
    }
}

__device__ __forceinline__ uint16_t* staged_of_warp(kernel_shared& sh) { return sh.band.staged[threadIdx.x / 32]; }

// After the barrier: this chunk's tokens in b* marked for the listing and added to the row's
// sub-bins (one atomic per sub-bin a warp's lanes share), and its mass above b* (its own sums of
// the first pass). Only the tokens in b*'s band of exponents get masses.
__device__ chunk_listing mark_boundary_bin(const row_context& ctx, int32_t chunk, int32_t count, int bin,
                                           uint64_t& chunk_above, kernel_shared& sh) {
    uint32_t* listed = sh.band.listed;
    for (int i = threadIdx.x; i < kChunkTokens / 32; i += kBlockThreads) listed[i] = 0;
    const uint64_t* chunk_bins = chunk_bin_masses_of(ctx, chunk);
    uint64_t above = 0;
    for (int b = bin + 1 + static_cast<int>(threadIdx.x); b < kMassHistogramBins; b += kBlockThreads)
        above += __ldcg(&chunk_bins[b]);
    chunk_above = block_sum(above, sh.scratch);  // also orders the clearing before the marking
    uint64_t* row_sub_masses = boundary_sub_masses_of(ctx);
    const float max_logit = sh.totals.max_logit;
    for_each_token_in_band(sh.data.chunk, count, max_logit, ctx.scale, band_of_bin(bin), staged_of_warp(sh),
                           [&](int32_t place, float logit) {
                               const uint64_t q = place >= 0 ? mass_of(logit, max_logit, ctx.scale) : 0;
                               const bool in_bin = q > 0 && mass_bin(q) == bin;
                               if (in_bin) atomicOr(&listed[place / 32], 1u << (place % 32));
                               if (__any_sync(kFullMask, in_bin))
                                   add_to_radix_bin(in_bin ? mass_sub_bin(q) : -1, q, nullptr, row_sub_masses);
                           });
    __syncthreads();
    return mark_candidates(
        sh.data.chunk, count, [&](int32_t place, float) { return (listed[place / 32] >> (place % 32)) & 1u; }, sh);
}

// The row's last block: the sub-bin s* of b* where b*'s part of the target is reached, and the
// mass of b*'s tokens in the sub-bins above it. Walked from the top sub-bin.
struct boundary_sub_bin {
    int sub_bin;
    uint64_t mass_above;
};

__device__ boundary_sub_bin find_boundary_sub_bin(const row_context& ctx, uint64_t target_in_bin, kernel_shared& sh) {
    const uint64_t* row_sub_masses = boundary_sub_masses_of(ctx);
    auto from_top = [&](int32_t i) { return __ldcg(&row_sub_masses[kBoundarySubBins - 1 - i]); };
    int32_t at = block_find_prefix(from_top, kBoundarySubBins, target_in_bin - 1, sh.scratch);
    if (at < 0) at = kBoundarySubBins - 1;  // never: b*'s tokens hold their part of the target
    return {kBoundarySubBins - 1 - at, block_sum_over(from_top, at, sh.scratch)};
}

// The row's last block: the listed tokens of sub-bin s* as sort keys in sh.data.keys (in no
// order, as many as fit); returns how many there are.
template <class Mass>
__device__ int32_t gather_sub_bin_keys(const Mass& mass_at, const cut_candidate* list, int32_t listed, int sub_bin,
                                       kernel_shared& sh) {
    if (threadIdx.x == 0) sh.gathered = 0;
    __syncthreads();
    for (int32_t i = threadIdx.x; i < listed; i += kBlockThreads) {
        const uint64_t q = mass_at(i);
        if (mass_sub_bin(q) != sub_bin) continue;
        const int32_t slot = atomicAdd(&sh.gathered, 1);
        if (slot < kSortCapacity) sh.data.keys[slot] = sort_key(q, __ldcg(&list[i].token));
    }
    __syncthreads();
    return sh.gathered;
}

// The last block, after selecting the cut: the listed tokens the cut keeps added to their chunks'
// kept mass (each chunk put its mass above b* there), the row's kept mass into sh.totals.
__device__ void add_listed_kept_mass(const row_context& ctx, const cut& kept, uint64_t kept_mass, int32_t listed,
                                     kernel_shared& sh) {
    chunk_partial* partials = ctx.p.workspace.partials + ctx.row * ctx.chunks;
    const cut_candidate* list = ctx.p.workspace.candidates + ctx.row * ctx.p.vocab;
    const float max_logit = sh.totals.max_logit;
    // The list is in token order, so a warp's 32 places mostly share a chunk: one atomic per chunk
    // a warp's lanes share (b*'s kept tokens are thousands, on a few chunks' words).
    for (int32_t start = 0; start < listed; start += kBlockThreads) {
        const int32_t i = start + static_cast<int32_t>(threadIdx.x);
        uint64_t q = 0;
        int chunk = -1;
        if (i < listed) {
            const int32_t token = __ldcg(&list[i].token);
            q = mass_of(__ldcg(&list[i].logit), max_logit, ctx.scale);
            if (kept.keeps(token, q)) chunk = token / kChunkTokens;
        }
        const unsigned peers = __match_any_sync(kFullMask, chunk);
        const unsigned high = __reduce_add_sync(peers, static_cast<unsigned>(q >> 20));
        const unsigned low = __reduce_add_sync(peers, static_cast<unsigned>(q & 0xFFFFF));
        if (chunk >= 0 && static_cast<int>(threadIdx.x & 31) == __ffs(peers) - 1) {
            atomicAdd(reinterpret_cast<unsigned long long*>(&partials[chunk].min_p_mass),
                      (static_cast<unsigned long long>(high) << 20) + low);
        }
    }
    __threadfence();
    if (threadIdx.x == 0) sh.totals.min_p_mass = kept_mass;
    __syncthreads();
}

// A top-p row after the row maximum: bins, the barrier, b*'s tokens listed and summed by sub-bin;
// the row's last block selects the cut among s*'s and draws.
__device__ void sample_top_p_row(const row_context& ctx, int32_t first, int32_t count, kernel_shared& sh) {
    const int32_t chunk = first / kChunkTokens;
    row_sync& sync = ctx.p.workspace.sync[ctx.row];
    chunk_partial& mine = ctx.p.workspace.partials[ctx.row * ctx.chunks + chunk];
    publish_bin_masses(ctx, chunk, count, mine, sh);
    arrive(&sync.partials_arrived, static_cast<uint32_t>(ctx.chunks), ctx.p);
    const boundary_bin boundary = find_boundary_bin(ctx, sh);
    uint64_t chunk_above = 0;
    const chunk_listing listing = mark_boundary_bin(ctx, chunk, count, boundary.bin, chunk_above, sh);
    cut_candidate* list = ctx.p.workspace.candidates + ctx.row * ctx.p.vocab;
    write_candidates(listing, sh.data.chunk, count, first, list, first);
    if (threadIdx.x == 0) {
        mine.candidates = listing.total;
        mine.min_p_mass = chunk_above;  // the last block adds the listed tokens the cut keeps
    }
    __threadfence();  // every thread wrote part of the list
    if (!arrive_last(&sync.candidates_arrived, static_cast<uint32_t>(ctx.chunks), sh.flag)) return;
    const int32_t listed = join_chunk_lists(ctx);
    const float max_logit = sh.totals.max_logit;
    auto mass_at = [&](int32_t i) { return mass_of(__ldcg(&list[i].logit), max_logit, ctx.scale); };
    const boundary_sub_bin sub = find_boundary_sub_bin(ctx, boundary.target_in_bin, sh);
    const int32_t in_sub_bin = gather_sub_bin_keys(mass_at, list, listed, sub.sub_bin, sh);
    const selected_cut selection = in_sub_bin <= kSortCapacity
                                       ? cut_on_keys(in_sub_bin, ctx.r, false, sh.totals.mass_total, ctx.min_mass, sh,
                                                     boundary.mass_above + sub.mass_above)
                                       : select_cut(mass_at, list, listed, ctx.r, false, sh.totals.mass_total,
                                                    ctx.min_mass, sh, boundary.mass_above);
    add_listed_kept_mass(ctx, selection.kept_cut, selection.kept_mass, listed, sh);
    draw_from_chunks(ctx, selection.kept_cut, sh);
}

}  // namespace

}  // namespace ds::cuda

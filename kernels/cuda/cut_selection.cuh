// The exact top-k/top-p cut over a row's listed candidates: sorting, or radix selection on
// integer histograms when the list is long.
// One of the chain kernel's parts (chain_kernel.cu includes top_p_rows.cuh, which includes the rest
// in order); device code for that one translation unit.
#pragma once

#include "kernels/cuda/chain_block.cuh"

namespace ds::cuda {

namespace {

struct selected_cut {
    cut kept_cut;
    uint64_t kept_mass;
};

// Adds (1, q) of every lane to bins[digit] (counts may be null: masses alone), one atomic per
// group of a warp's lanes with the same digit (digit -1: nothing to add): the candidates of a
// flat row share their leading digits, and an atomic per lane would serialise on one bin. The
// bins may be in shared or global memory. Masses are at most 2^40, so each 20-bit half sums over
// 32 lanes without overflow.
static_assert(exact::kMassBits - 20 + 5 < 32, "a 20-bit half of a mass, summed over 32 lanes, fits 32 bits");
__device__ __forceinline__ void add_to_radix_bin(int digit, uint64_t q, uint32_t* counts, uint64_t* masses) {
    const unsigned peers = __match_any_sync(kFullMask, digit);
    const unsigned high = __reduce_add_sync(peers, static_cast<unsigned>(q >> 20));
    const unsigned low = __reduce_add_sync(peers, static_cast<unsigned>(q & 0xFFFFF));
    if (digit >= 0 && static_cast<int>(threadIdx.x & 31) == __ffs(peers) - 1) {
        if (counts != nullptr) atomicAdd(&counts[digit], static_cast<unsigned>(__popc(peers)));
        atomicAdd(reinterpret_cast<unsigned long long*>(&masses[digit]),
                  (static_cast<unsigned long long>(high) << 20) + low);
    }
}

// Exact radix selection over the candidates' masses, walking down from the largest: the value at
// which the running count (by_mass == false) or mass first reaches `target`, with the count and
// mass of the larger ones. Integer histograms, so scheduling cannot change the result.
struct radix_result {
    uint64_t value = 0;
    uint64_t count_above = 0;
    uint64_t mass_above = 0;
};

template <class Mass>
__device__ radix_result radix_select(const Mass& mass_at, int32_t count, bool by_mass, uint64_t target,
                                     kernel_shared& sh) {
    auto& bins = sh.data.radix;
    radix_result result;
    uint64_t fixed_mask = 0;  // bits of the value decided so far
    for (int high = kMassBitsUsed; high > 0;) {
        const int width = min(kRadixDigitBits, high);
        const int shift = high - width;
        for (int b = threadIdx.x; b < kRadixBins; b += kBlockThreads) {
            bins.count[b] = 0;
            bins.mass[b] = 0;
        }
        __syncthreads();
        // Whole warps in every round, kRadixUnroll candidates per thread with their loads in flight
        // together (a long list in global memory is latency-bound).
        for (int32_t start = 0; start < count; start += kBlockThreads * kRadixUnroll) {
            uint64_t q[kRadixUnroll];
#pragma unroll
            for (int u = 0; u < kRadixUnroll; ++u) {
                const int32_t i = start + u * kBlockThreads + static_cast<int32_t>(threadIdx.x);
                q[u] = i < count ? mass_at(i) : 0;
            }
#pragma unroll
            for (int u = 0; u < kRadixUnroll; ++u) {
                const bool counted = q[u] != 0 && (q[u] & fixed_mask) == result.value;
                const int digit = counted ? static_cast<int>((q[u] >> shift) & ((uint64_t{1} << width) - 1)) : -1;
                add_to_radix_bin(digit, counted ? q[u] : 0, bins.count, bins.mass);
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            const uint64_t already = by_mass ? result.mass_above : result.count_above;
            uint64_t count_above = 0;
            uint64_t mass_above = 0;
            int digit = (1 << width) - 1;
            for (; digit > 0; --digit) {
                const uint64_t metric = by_mass ? bins.mass[digit] : bins.count[digit];
                if (already + (by_mass ? mass_above : count_above) + metric >= target) break;
                count_above += bins.count[digit];
                mass_above += bins.mass[digit];
            }
            sh.scratch.broadcast_i32 = digit;
            sh.scratch.warp_u64[0] = count_above;
            sh.scratch.warp_u64[1] = mass_above;
        }
        __syncthreads();
        result.value |= static_cast<uint64_t>(sh.scratch.broadcast_i32) << shift;
        result.count_above += sh.scratch.warp_u64[0];
        result.mass_above += sh.scratch.warp_u64[1];
        fixed_mask |= ((uint64_t{1} << width) - 1) << shift;
        high = shift;
        __syncthreads();
    }
    return result;
}

__device__ __forceinline__ uint64_t sort_key(uint64_t q, int32_t token) {
    return (q << kKeyTokenBits) | (kKeyTokenMask - static_cast<uint64_t>(token));
}

// The cut of select_cut over `count` <= kSortCapacity candidates held as sort keys in
// sh.data.keys, in any order.
__device__ selected_cut cut_on_keys(int32_t count, const request_view& r, bool top_k_active, uint64_t mass_total,
                                    uint64_t min_mass, kernel_shared& sh, uint64_t mass_before) {
    uint64_t* keys = sh.data.keys;
    block_sort_descending(keys, count);
    auto key_mass = [&](int32_t i) { return keys[i] >> kKeyTokenBits; };
    const int32_t top_k_length = top_k_active ? r.top_k : count;
    const uint64_t top_k_mass = top_k_active ? block_sum_over(key_mass, top_k_length, sh.scratch) : mass_total;
    int32_t length = top_k_length;
    if (r.top_p < 1.0f) {
        const uint64_t target = exact::top_p_mass_target(r.top_p, top_k_mass) - mass_before;
        const int32_t last = block_find_prefix(key_mass, top_k_length, target - 1, sh.scratch);
        if (last >= 0) length = last + 1;  // always found: the candidates hold the target
    }
    const uint64_t kept_mass =
        mass_before + block_sum_over([&](int32_t i) -> uint64_t { return key_mass(i) >= min_mass ? key_mass(i) : 0; },
                                     length, sh.scratch);
    const uint64_t boundary = keys[length - 1];
    __syncthreads();
    return {cut{min_mass, true, boundary >> kKeyTokenBits,
                static_cast<int32_t>(kKeyTokenMask - (boundary & kKeyTokenMask))},
            kept_mass};
}

// The exact top-k/top-p cut over the row's `count` candidates (every token that can survive it),
// listed in token order; kept mass after min_p. As cpu::row_sampler on the (mass desc, token asc)
// order. Top-p alone may leave out of the list tokens that are surely kept, all of more mass
// than any listed one: `mass_before` is their mass (with no min_p, so all of it is kept).
template <class Mass>
__device__ selected_cut select_cut(const Mass& mass_at, const cut_candidate* list, int32_t count, const request_view& r,
                                   bool top_k_active, uint64_t mass_total, uint64_t min_mass, kernel_shared& sh,
                                   uint64_t mass_before = 0) {
    if (count <= kSortCapacity) {
        for (int32_t i = threadIdx.x; i < count; i += kBlockThreads)
            sh.data.keys[i] = sort_key(mass_at(i), __ldcg(&list[i].token));
        return cut_on_keys(count, r, top_k_active, mass_total, min_mass, sh, mass_before);
    }
    uint64_t boundary_mass = 0;
    uint64_t ties_needed = 0;
    uint64_t top_k_mass = mass_total;
    if (top_k_active) {
        const radix_result k = radix_select(mass_at, count, false, static_cast<uint64_t>(r.top_k), sh);
        boundary_mass = k.value;
        ties_needed = static_cast<uint64_t>(r.top_k) - k.count_above;
        top_k_mass = k.mass_above + ties_needed * k.value;
    }
    if (r.top_p < 1.0f) {
        // The top-p prefix is never longer than the top-k prefix (its target is at most M_k).
        const uint64_t target = exact::top_p_mass_target(r.top_p, top_k_mass) - mass_before;
        const radix_result t = radix_select(mass_at, count, true, target, sh);
        boundary_mass = t.value;
        ties_needed = (target - t.mass_above + t.value - 1) / t.value;
    }
    // Ties at the boundary are kept in token order: find the last one kept.
    const int32_t boundary = block_find_prefix(
        [&](int32_t i) -> uint64_t { return mass_at(i) == boundary_mass ? 1 : 0; }, count, ties_needed - 1, sh.scratch);
    const cut result{min_mass, true, boundary_mass, __ldcg(&list[boundary].token)};
    const uint64_t kept_mass = block_sum_over(
        [&](int32_t i) -> uint64_t {
            const uint64_t q = mass_at(i);
            return result.keeps(__ldcg(&list[i].token), q) ? q : 0;
        },
        count, sh.scratch);
    return {result, mass_before + kept_mass};
}

}  // namespace

}  // namespace ds::cuda

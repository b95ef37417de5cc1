// The CUDA twin of cpu::row_sampler + cpu_backend::run_request. Every decision is made on the
// integer masses of kernels/det_math.h, so the tokens equal the CPU backend's bit for bit.
//
// Layout: a row of V logits is split into chunks of kChunkTokens; one thread block per chunk
// loads it into shared memory once (applying mask, penalties and bias), then:
//   greedy rows: each block publishes its chunk's argmax (and softmax sum, for logprobs); the
//     last block of the row to arrive combines them. No waiting.
//   sampled rows: the blocks of a row meet at a barrier for the row maximum, then compute their
//     chunk's masses. Without a top-k/top-p cut the last block to arrive finds the chunk that
//     holds the target mass, loads it again and draws. With a cut, the blocks also histogram
//     their weights' float exponents, meet again, list the tokens that can survive the cut (in
//     token order), and the last block selects the exact cut on that list (a sort, or radix
//     selection with integer histograms when it is long) and draws.
// Each row draws the token it would emit if the request's chain stopped there, so the last block
// of a request to finish walks the chain from the rows' results alone (docs/semantics.md, Verify).
// Every decision goes through kernels/exact_rules.h, as the CPU backend's do.
//
// Blocks take their (row, chunk) from a ticket counter in the order they start. The blocks of a
// row hold consecutive tickets, so when every resident block waits at a barrier, all rows but the
// newest have all their blocks running; the barriers cannot deadlock while a row's chunks
// (at most 16) fit on the GPU at once.
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/block_primitives.cuh"
#include "kernels/cuda/chain_kernel.h"
#include "kernels/cuda/token_math.cuh"
#include "kernels/det_math.h"
#include "kernels/exact_rules.h"

namespace ds::cuda {

namespace dm = ds::detmath;

namespace {

constexpr int32_t kSortCapacity = 2048;  // candidates cut by sorting; more use radix selection
constexpr int kRadixDigitBits = 10;
constexpr int kRadixBins = 1 << kRadixDigitBits;
constexpr int kMassBitsUsed = exact::kMassBits + 1;  // masses are at most 2^40
constexpr uint64_t kBarrierTimeoutNs = 2'000'000'000;
// Sort key of a candidate: (mass desc, token asc) as one descending integer.
constexpr int kKeyTokenBits = 22;
constexpr uint64_t kKeyTokenMask = (uint64_t{1} << kKeyTokenBits) - 1;
static_assert(kMassBitsUsed + kKeyTokenBits <= 64, "keys fit 64 bits");

// The row as every block of it sees it after the barriers.
struct row_totals {
    int32_t top;
    float max_logit;
    uint64_t nonzero;
    uint64_t mass_total;
    uint64_t min_p_mass;
    double softmax_sum;
    float raw_max;
    double raw_sum;
};

struct kernel_shared {
    union alignas(16) {
        float chunk[kChunkTokens];     // this block's processed logits
        uint64_t keys[kSortCapacity];  // the row's candidates as sort keys (the cut's block)
        struct {
            uint32_t count[kRadixBins];
            uint64_t mass[kRadixBins];
        } radix;  // the cut's block, many candidates
    } data;
    uint32_t histogram[kMassHistogramBins];
    block_scratch scratch;
    row_totals totals;      // the row's combined maxima and masses (thread 0 combines)
    uint64_t owner_before;  // no-cut rows: kept mass before the chunk that holds the draw
    int32_t owner;
    int32_t list_offset;  // cut rows: this chunk's first place in the row's candidate list
    int32_t list_count;
    uint32_t ticket;
    bool flag;
};

using cut = exact::filter_cut;

__device__ __forceinline__ uint64_t mass_of(float logit, float max_logit, float scale) {
    return exact::token_mass(logit, max_logit, scale);
}

// The unit-temperature weight of a token relative to `max_logit` (logprob normalisers).
__device__ __forceinline__ double unit_weight(float logit, float max_logit) {
    return exact::mass_weight(exact::token_mass(logit, max_logit, exact::kUnitScale));
}

__device__ __forceinline__ uint64_t global_nanoseconds() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Publishes thread 0's writes (threads that wrote global memory fence themselves first) and
// counts the block in; with `expected`, waits until that many blocks have. A wait past
// kBarrierTimeoutNs raises the launch's fault flag instead of hanging.
__device__ void arrive(uint32_t* counter, uint32_t expected, const chain_kernel_params& p) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(counter, 1u);
        if (expected > 0) {
            const uint64_t start = global_nanoseconds();
            while (*static_cast<volatile uint32_t*>(counter) < expected) {
                if (global_nanoseconds() - start > kBarrierTimeoutNs) {
                    atomicExch(&p.workspace.control->fault, 1u);
                    break;
                }
                __nanosleep(64);
            }
            __threadfence();
        }
    }
    __syncthreads();
}

// Loads tokens [first, first + count) of `row` into shared memory as the logits are given.
__device__ void load_raw_chunk(const chain_kernel_params& p, int64_t row, int32_t first, int32_t count, float* chunk) {
    const int64_t offset = row * p.row_stride + first;
    if (p.dtype == logits_dtype::f32) {
        const float* source = static_cast<const float*>(p.logits) + offset;
        if ((reinterpret_cast<uintptr_t>(source) & 15) == 0 && count % 4 == 0) {
            // Asynchronous copies straight into shared memory: the whole chunk in flight at once.
            for (int32_t q = threadIdx.x; q < count / 4; q += kBlockThreads) {
                __pipeline_memcpy_async(reinterpret_cast<float4*>(chunk) + q,
                                        reinterpret_cast<const float4*>(source) + q, 16);
            }
            __pipeline_commit();
            __pipeline_wait_prior(0);
        } else {
            for (int32_t i = threadIdx.x; i < count; i += kBlockThreads) chunk[i] = source[i];
        }
    } else {
        const uint16_t* source = static_cast<const uint16_t*>(p.logits) + offset;
        const bool bf16 = p.dtype == logits_dtype::bf16;
        auto widen = [bf16](uint16_t bits) {
            return bf16 ? dm::bf16_bits_to_float(bits) : dm::fp16_bits_to_float(bits);
        };
        if ((reinterpret_cast<uintptr_t>(source) & 15) == 0 && count % 8 == 0) {
            // Eight halves per 16-byte load, widened into two float4s.
            for (int32_t q = threadIdx.x; q < count / 8; q += kBlockThreads) {
                const uint4 v = __ldg(reinterpret_cast<const uint4*>(source) + q);
                const uint32_t words[4] = {v.x, v.y, v.z, v.w};
                float wide[8];
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    wide[2 * k] = widen(static_cast<uint16_t>(words[k]));
                    wide[2 * k + 1] = widen(static_cast<uint16_t>(words[k] >> 16));
                }
                reinterpret_cast<float4*>(chunk)[2 * q] = make_float4(wide[0], wide[1], wide[2], wide[3]);
                reinterpret_cast<float4*>(chunk)[2 * q + 1] = make_float4(wide[4], wide[5], wide[6], wide[7]);
            }
        } else {
            for (int32_t i = threadIdx.x; i < count; i += kBlockThreads) chunk[i] = widen(source[i]);
        }
    }
    __syncthreads();  // the vector paths stored other threads' elements
}

// The drafts row j of request b counts as emitted before it: drafts 1..j.
struct row_drafts {
    const int32_t* tokens;
    int32_t count;
};

__device__ __forceinline__ row_drafts drafts_of(const chain_kernel_params& p, int32_t b, int32_t j) {
    const int64_t base = static_cast<int64_t>(b) * p.tokens_per_req;
    return {p.candidates != nullptr ? p.candidates + base + 1 : nullptr, p.candidates != nullptr ? j : 0};
}

// Turns a loaded chunk into processed logits: mask, then penalties (each penalised token once,
// with its count before the step plus its occurrences among the drafts before the row), then
// bias, as cpu::row_sampler; masking first is equivalent because -inf stays -inf.
__device__ void process_chunk(const chain_kernel_params& p, const request_view& r, row_drafts drafts, int64_t row,
                              int32_t first, int32_t count, float* chunk) {
    if (p.bitmask != nullptr) {
        const uint32_t* mask = p.bitmask + row * ((p.vocab + 31) / 32);
        for (int32_t i = threadIdx.x; i < count; i += kBlockThreads) {
            const int32_t token = first + i;
            if (((mask[token >> 5] >> (token & 31)) & 1u) == 0) chunk[i] = -HUGE_VALF;
        }
        __syncthreads();
    }
    auto in_chunk = [&](int32_t token) { return token >= first && token < first + count; };
    if (r.penalties.active()) {
        for (int32_t k = threadIdx.x; k < r.seen_count; k += kBlockThreads) {  // distinct tokens
            const int32_t token = r.seen_tokens[k];
            if (!in_chunk(token)) continue;
            const int32_t times = r.seen_counts[k] + exact::occurrences(drafts.tokens, drafts.count, token);
            chunk[token - first] = exact::penalised_logit(chunk[token - first], times, r.penalties);
        }
        for (int32_t i = threadIdx.x; i < drafts.count; i += kBlockThreads) {  // drafts not seen before
            const int32_t token = drafts.tokens[i];
            if (!in_chunk(token) || !exact::first_occurrence(drafts.tokens, i)) continue;
            bool seen = false;
            for (int32_t k = 0; k < r.seen_count && !seen; ++k) seen = r.seen_tokens[k] == token;
            if (seen) continue;
            const int32_t times = exact::occurrences(drafts.tokens, drafts.count, token);
            chunk[token - first] = exact::penalised_logit(chunk[token - first], times, r.penalties);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {  // in order: ids may repeat
        for (int32_t k = 0; k < r.bias_count; ++k) {
            const int32_t token = r.bias_tokens[k];
            if (in_chunk(token)) chunk[token - first] = chunk[token - first] + r.bias_values[k];
        }
    }
    __syncthreads();
}

// Calls visit(round, first, values) for this thread's tokens round by round (increasing token
// order): `first` is the index in the chunk of values[0]; tokens past `count` read as -inf,
// which has no mass and never wins.
template <class Visit>
__device__ __forceinline__ void for_each_slice(const float* chunk, int32_t count, const Visit& visit) {
#pragma unroll 4
    for (int round = 0; round < kSlices; ++round) {
        const int32_t first = (round * kBlockThreads + static_cast<int32_t>(threadIdx.x)) * kSliceTokens;
        float values[kSliceTokens];
        if (first + kSliceTokens <= count) {
            const float4 q = *reinterpret_cast<const float4*>(chunk + first);
            values[0] = q.x;
            values[1] = q.y;
            values[2] = q.z;
            values[3] = q.w;
        } else {
#pragma unroll
            for (int k = 0; k < kSliceTokens; ++k) values[k] = first + k < count ? chunk[first + k] : -HUGE_VALF;
        }
        visit(round, first, values);
    }
}

struct selected_cut {
    cut kept_cut;
    uint64_t kept_mass;
};

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
        for (int32_t i = threadIdx.x; i < count; i += kBlockThreads) {
            const uint64_t q = mass_at(i);
            if (q != 0 && (q & fixed_mask) == result.value) {
                const int digit = static_cast<int>((q >> shift) & ((uint64_t{1} << width) - 1));
                atomicAdd(&bins.count[digit], 1u);
                atomicAdd(reinterpret_cast<unsigned long long*>(&bins.mass[digit]), static_cast<unsigned long long>(q));
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

// The exact top-k/top-p cut over the row's `count` candidates (every token that can survive it),
// listed in token order; kept mass after min_p. As cpu::row_sampler on the (mass desc, token asc)
// order.
template <class Mass>
__device__ selected_cut select_cut(const Mass& mass_at, const cut_candidate* list, int32_t count, const request_view& r,
                                   bool top_k_active, uint64_t mass_total, uint64_t min_mass, kernel_shared& sh) {
    if (count <= kSortCapacity) {
        uint64_t* keys = sh.data.keys;
        for (int32_t i = threadIdx.x; i < count; i += kBlockThreads) {
            keys[i] = (mass_at(i) << kKeyTokenBits) | (kKeyTokenMask - static_cast<uint64_t>(__ldcg(&list[i].token)));
        }
        block_sort_descending(keys, count);
        auto key_mass = [&](int32_t i) { return keys[i] >> kKeyTokenBits; };
        const int32_t top_k_length = top_k_active ? r.top_k : count;
        const uint64_t top_k_mass = top_k_active ? block_sum_over(key_mass, top_k_length, sh.scratch) : mass_total;
        int32_t length = top_k_length;
        if (r.top_p < 1.0f) {
            const uint64_t target = exact::top_p_mass_target(r.top_p, top_k_mass);
            const int32_t last = block_find_prefix(key_mass, top_k_length, target - 1, sh.scratch);
            if (last >= 0) length = last + 1;  // always found: the candidates hold the target
        }
        const uint64_t kept_mass = block_sum_over(
            [&](int32_t i) -> uint64_t { return key_mass(i) >= min_mass ? key_mass(i) : 0; }, length, sh.scratch);
        const uint64_t boundary = keys[length - 1];
        __syncthreads();
        return {cut{min_mass, true, boundary >> kKeyTokenBits,
                    static_cast<int32_t>(kKeyTokenMask - (boundary & kKeyTokenMask))},
                kept_mass};
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
        const uint64_t target = exact::top_p_mass_target(r.top_p, top_k_mass);
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
    return {result, kept_mass};
}

// The random bits that pick the token drawn at row k of request b.
__device__ uint64_t draw_bits(const chain_kernel_params& p, const request_view& r, int32_t b, int32_t k) {
    return p.final_coins != nullptr
               ? dm::unit_double_to_bits(p.final_coins[b])
               : dm::random_bits64(r.seed, r.position, static_cast<uint32_t>(k), dm::draw_purpose::token);
}

// The logit of `token` in `row` as given (raw logprobs).
__device__ float given_logit(const chain_kernel_params& p, int64_t row, int32_t token) {
    const int64_t at = row * p.row_stride + token;
    if (p.dtype == logits_dtype::f32) return static_cast<const float*>(p.logits)[at];
    const uint16_t bits = static_cast<const uint16_t*>(p.logits)[at];
    return p.dtype == logits_dtype::bf16 ? dm::bf16_bits_to_float(bits) : dm::fp16_bits_to_float(bits);
}

// The log-probability of the token emitted at row k of request b (docs/semantics.md,
// "Log-probabilities"); `logit` is its processed logit there.
__device__ float emitted_logprob(const chain_kernel_params& p, const request_view& r, int64_t row, int32_t token,
                                 float logit) {
    const row_result& s = p.workspace.results[row];
    if (p.logprobs == logprob_mode::raw) {
        return static_cast<float>(exact::log_probability(
            exact::shifted_logit(given_logit(p, row, token), __ldcg(&s.raw_max)), 1.0f, __ldcg(&s.raw_sum)));
    }
    const double shifted = exact::shifted_logit(logit, __ldcg(&s.max_logit));
    if (r.greedy()) return static_cast<float>(exact::log_probability(shifted, 1.0f, __ldcg(&s.softmax_sum)));
    return static_cast<float>(exact::log_probability(shifted, r.temperature, exact::mass_weight(__ldcg(&s.kept_mass))));
}

// The last block of request b to finish: walk the chain from the rows' results and write the
// outputs. A request with invalid parameters, or one whose rows' blocks did not meet in time,
// emits nothing and is flagged.
__device__ void walk_chain(const chain_kernel_params& p, const request_view& r, int32_t b) {
    if (threadIdx.x != 0) return;
    const int32_t n = p.tokens_per_req;
    const int64_t base = static_cast<int64_t>(b) * n;
    const chain_workspace& ws = p.workspace;
    const uint8_t error = r.error != kRowOk                                           ? r.error
                          : *static_cast<volatile uint32_t*>(&ws.control->fault) != 0 ? kRowErrorKernelFault
                                                                                      : kRowOk;
    int32_t accepted = 0;
    int32_t final_token = -1;
    for (int32_t k = 0; error == kRowOk && k < n; ++k) {
        const row_result& s = ws.results[base + k];
        const int32_t top = __ldcg(&s.top);
        if (top < 0) break;  // nothing allowed: the chain ends with an error flag
        const bool has_next_draft = k + 1 < n;
        const int32_t next_draft = has_next_draft ? p.candidates[base + k + 1] : -1;
        bool draft_accepted = false;
        if (r.greedy()) {
            draft_accepted = has_next_draft && next_draft == top;
        } else if (has_next_draft) {
            const double coin = p.coins != nullptr
                                    ? p.coins[static_cast<int64_t>(b) * (n - 1) + k]
                                    : dm::bits_to_unit_double(dm::random_bits64(
                                          r.seed, r.position, static_cast<uint32_t>(k + 1), dm::draw_purpose::coin));
            draft_accepted = exact::accepts_draft(__ldcg(&s.draft_mass), __ldcg(&s.kept_mass), coin,
                                                  p.thresholds.single, p.thresholds.acc);
        }
        if (!draft_accepted) {
            final_token = __ldcg(&s.stop_token);
            break;
        }
        ++accepted;
    }
    const sampling_outputs& out = p.outputs;
    for (int32_t k = 0; k < n; ++k) {
        const bool emitted = error == kRowOk && k <= accepted;
        const int32_t token = k < accepted ? p.candidates[base + k + 1] : (k == accepted ? final_token : -1);
        out.predict[base + k] = emitted ? token : -1;
        out.accept_index[base + k] = emitted || k == 0 ? static_cast<int32_t>(base + k) : -1;
        if (out.logprobs != nullptr) {
            float logprob = __int_as_float(0x7fc00000);  // NaN
            if (emitted && token >= 0) {
                // An accepted draft is the next row's draft: its logit was published there.
                const float l =
                    k < accepted ? __ldcg(&ws.sync[base + k].draft_logit) : __ldcg(&ws.results[base + k].stop_logit);
                logprob = emitted_logprob(p, r, base + k, token, l);
            }
            out.logprobs[base + k] = logprob;
        }
    }
    out.accept_length[b] = error == kRowOk ? accepted + 1 : 1;
    if (out.row_error != nullptr) {
        out.row_error[b] = error != kRowOk ? error : (final_token < 0 ? kRowErrorNothingAllowed : kRowOk);
    }
}

// What the helpers of a sampled row need to know about it.
struct row_context {
    const chain_kernel_params& p;
    const request_view& r;
    float scale;  // exact::mass_scale(r.temperature)
    int64_t row;
    int32_t b;  // request
    int32_t j;  // row within the request (its draft index)
    int32_t chunks;
    int32_t draft;  // the draft judged against this row, -1 if none
    uint64_t min_mass;
};

// Counts this block in (after publishing thread 0's writes, as arrive); true, to every thread,
// for the last of `total` blocks, which then sees every other block's writes.
__device__ bool arrive_last(uint32_t* counter, uint32_t total, bool& shared_flag) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        shared_flag = atomicAdd(counter, 1u) == total - 1;
        if (shared_flag) __threadfence();
    }
    __syncthreads();
    return shared_flag;
}

// What a row's logprobs need from its chunks: the processed softmax sum (greedy rows of the
// processed mode) and the raw maximum and sum (raw mode).
struct logprob_needs {
    bool softmax;
    bool raw;
};

__device__ __forceinline__ logprob_needs needs_of(const chain_kernel_params& p, const request_view& r) {
    const bool any = p.outputs.logprobs != nullptr;
    return {any && p.logprobs == logprob_mode::processed && r.greedy(), any && p.logprobs == logprob_mode::raw};
}

// Sum over a warp's lanes of each chunk's weight sum rescaled from the chunk's maximum to `best`
// (a float result, within 1e-7 of a direct sum); lane c reads chunks c, c + 32, ...
template <class Max, class Sum>
__device__ double rescaled_sum(int32_t chunks, float best, const Max& chunk_max, const Sum& chunk_sum) {
    double sum = 0.0;
    for (int32_t c = static_cast<int32_t>(threadIdx.x); c < chunks; c += 32) {
        const float m = chunk_max(c);
        if (!(m > -HUGE_VALF)) continue;  // nothing allowed there
        sum += chunk_sum(c) * (m == best ? 1.0 : exp(static_cast<double>(m) - best));
    }
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(kFullMask, sum, offset);
    return sum;
}

// sh.totals.top / max_logit / softmax_sum / raw_max / raw_sum from the chunks' partials. Warp 0
// combines, in a fixed order for a given chunk count.
__device__ void combine_maxima(const chunk_partial* partials, int32_t chunks, logprob_needs needs, row_totals& totals) {
    if (threadIdx.x < 32) {
        float best = 0.0f;
        int32_t top = -1;
        float raw_best = -HUGE_VALF;
        for (int32_t c = static_cast<int32_t>(threadIdx.x); c < chunks; c += 32) {
            const float value = __ldcg(&partials[c].max_logit);
            const int32_t index = __ldcg(&partials[c].max_index);
            if (argmax_better(value, index, best, top)) {
                best = value;
                top = index;
            }
            raw_best = fmaxf(raw_best, __ldcg(&partials[c].raw_max));
        }
        warp_argmax(best, top);
        double softmax = 0.0;
        if (needs.softmax && top >= 0) {
            softmax = rescaled_sum(
                chunks, best,
                [&](int32_t c) {
                    return __ldcg(&partials[c].max_index) < 0 ? -HUGE_VALF : __ldcg(&partials[c].max_logit);
                },
                [&](int32_t c) { return __ldcg(&partials[c].softmax_sum); });
        }
        double raw = 0.0;
        if (needs.raw) {
            for (int offset = 16; offset > 0; offset >>= 1)
                raw_best = fmaxf(raw_best, __shfl_xor_sync(kFullMask, raw_best, offset));
            raw = rescaled_sum(
                chunks, raw_best, [&](int32_t c) { return __ldcg(&partials[c].raw_max); },
                [&](int32_t c) { return __ldcg(&partials[c].raw_sum); });
        }
        if (threadIdx.x == 0) totals = row_totals{top, top >= 0 ? best : 0.0f, 0, 0, 0, softmax, raw_best, raw};
    }
    __syncthreads();
}

// The logprob fields every writer of a row_result copies from the row's totals.
__device__ __forceinline__ void copy_logprob_totals(const row_totals& totals, row_result& result) {
    result.softmax_sum = totals.softmax_sum;
    result.raw_max = totals.raw_max;
    result.raw_sum = totals.raw_sum;
}

// sh.totals' nonzero, mass_total and min_p_mass from the chunks' (exact integer sums).
__device__ void combine_masses(const chunk_partial* partials, int32_t chunks, kernel_shared& sh) {
    if (threadIdx.x < 32) {
        uint64_t nonzero = 0, mass_total = 0, min_p_mass = 0;
        for (int32_t c = static_cast<int32_t>(threadIdx.x); c < chunks; c += 32) {
            nonzero += __ldcg(&partials[c].nonzero);
            mass_total += __ldcg(&partials[c].mass_total);
            min_p_mass += __ldcg(&partials[c].min_p_mass);
        }
        nonzero = warp_sum(nonzero);
        mass_total = warp_sum(mass_total);
        min_p_mass = warp_sum(min_p_mass);
        if (threadIdx.x == 0) {
            sh.totals.nonzero = nonzero;
            sh.totals.mass_total = mass_total;
            sh.totals.min_p_mass = min_p_mass;
        }
    }
    __syncthreads();
}

// A greedy row's last block to arrive combines the chunks' maxima: the row's argmax is also the
// token its request emits if the chain stops there.
__device__ void combine_greedy_row(const chunk_partial* partials, int32_t chunks, logprob_needs needs, row_sync& sync,
                                   row_result& result, row_totals& totals, bool& shared_flag) {
    if (!arrive_last(&sync.maxima_arrived, static_cast<uint32_t>(chunks), shared_flag)) return;
    combine_maxima(partials, chunks, needs, totals);
    if (threadIdx.x == 0) {
        result.top = totals.top;
        result.max_logit = totals.max_logit;
        copy_logprob_totals(totals, result);
        result.stop_token = totals.top;
        result.stop_logit = totals.max_logit;
    }
}

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

// Rows without a top-k/top-p cut (kept: the tokens that pass min_p), run by the row's last block:
// find the chunk that holds the target mass, load it again and find the token in it.
__device__ void draw_without_cut(const row_context& ctx, kernel_shared& sh) {
    const row_totals& totals = sh.totals;
    const cut kept{ctx.min_mass, false, 0, -1};
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
        if (lane == 0) {
            sh.owner = owner;
            sh.owner_before = before;
        }
    }
    __syncthreads();
    const int32_t owner = sh.owner;
    int32_t token = -1;
    float logit = 0.0f;
    if (owner >= 0) {
        const int32_t first = owner * kChunkTokens;
        const int32_t count = min(kChunkTokens, ctx.p.vocab - first);
        const uint64_t remaining = d.target - sh.owner_before;
        load_raw_chunk(ctx.p, ctx.row, first, count, sh.data.chunk);
        process_chunk(ctx.p, ctx.r, drafts_of(ctx.p, ctx.b, ctx.j), ctx.row, first, count, sh.data.chunk);
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

// Rows with a top-k/top-p cut, run by every block of the row after the masses barrier. Every
// token whose mass can survive the cut is at or above a bound read off the row's histogram;
// the blocks list those tokens in token order and the last one selects the cut and draws.
__device__ void draw_with_cut(const row_context& ctx, bool top_k_active, int32_t first, int32_t count,
                              kernel_shared& sh) {
    const chain_kernel_params& p = ctx.p;
    const request_view& r = ctx.r;
    const row_totals& totals = sh.totals;
    const chain_workspace& ws = p.workspace;
    chunk_partial* partials = ws.partials + ctx.row * ctx.chunks;
    const int32_t chunk = first / kChunkTokens;
    // Walk the histogram down until its bins hold k tokens (top-k) or, counting each token at
    // its bin's least mass, the top-p target.
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
    const float* chunk_logits = sh.data.chunk;
    // Candidates per round, four rounds per 64-bit word in 16-bit fields (a field sums at most
    // kBlockThreads * 4 tokens), so four block scans give every thread its place in token order.
    uint64_t is_candidate = 0;  // bit 4 * round + k
    uint64_t round_counts[kSlices / 4] = {};
    const float max_logit = totals.max_logit;
    for_each_slice(chunk_logits, count, [&](int round, int32_t, const float(&values)[kSliceTokens]) {
#pragma unroll
        for (int k = 0; k < kSliceTokens; ++k) {
            if (mass_of(values[k], max_logit, ctx.scale) >= bound) {
                is_candidate |= uint64_t{1} << (kSliceTokens * round + k);
                round_counts[round / 4] += uint64_t{1} << (16 * (round % 4));
            }
        }
    });
    uint64_t rounds_before[kSlices / 4];  // this thread's place within each round (fields)
    uint64_t round_totals[kSlices / 4];
#pragma unroll
    for (int g = 0; g < kSlices / 4; ++g)
        rounds_before[g] = block_exclusive_scan(round_counts[g], round_totals[g], sh.scratch);
    uint64_t chunk_candidates = 0;
#pragma unroll
    for (int g = 0; g < kSlices / 4; ++g) {
        for (int f = 0; f < 4; ++f) chunk_candidates += (round_totals[g] >> (16 * f)) & 0xFFFF;
    }
    if (threadIdx.x == 0) partials[chunk].candidates = static_cast<int32_t>(chunk_candidates);
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
    const int32_t list_count = sh.list_count;
    cut_candidate* list = ws.candidates + ctx.row * p.vocab;
    int32_t round_start = sh.list_offset;  // the list position of this round's first candidate
    for_each_slice(chunk_logits, count, [&](int round, int32_t at_token, const float(&values)[kSliceTokens]) {
        const int field = 16 * (round % 4);
        int32_t at = round_start + static_cast<int32_t>((rounds_before[round / 4] >> field) & 0xFFFF);
#pragma unroll
        for (int k = 0; k < kSliceTokens; ++k) {
            if ((is_candidate >> (kSliceTokens * round + k)) & 1u)
                list[at++] = cut_candidate{first + at_token + k, values[k]};
        }
        round_start += static_cast<int32_t>((round_totals[round / 4] >> field) & 0xFFFF);
    });
    __threadfence();  // every thread wrote part of the list
    if (!arrive_last(&ws.sync[ctx.row].candidates_arrived, static_cast<uint32_t>(ctx.chunks), sh.flag)) return;

    auto mass_at = [&](int32_t i) { return mass_of(__ldcg(&list[i].logit), totals.max_logit, ctx.scale); };
    const selected_cut selection =
        select_cut(mass_at, list, list_count, r, top_k_active, totals.mass_total, ctx.min_mass, sh);
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

// Three blocks per SM (their chunks fill shared memory): about 50 rows of 128k fp32 logits are
// resident at once, so the rows' barrier latencies overlap.
// A chunk's largest value (NaN ignored) and the sum of its unit-temperature weights below it.
__device__ void chunk_softmax(const float* chunk_logits, int32_t count, int32_t first, kernel_shared& sh,
                              float& chunk_max, int32_t& index, double& weight_sum, bool with_sum) {
    float best = -HUGE_VALF;
    int32_t best_index = -1;
    for_each_slice(chunk_logits, count, [&](int, int32_t at_token, const float(&values)[kSliceTokens]) {
#pragma unroll
        for (int k = 0; k < kSliceTokens; ++k) keep_if_larger(values[k], first + at_token + k, best, best_index);
    });
    chunk_max = 0.0f;
    index = block_argmax(best, best_index, chunk_max, sh.scratch);
    weight_sum = 0.0;
    if (with_sum && index >= 0) {
        uint64_t mass = 0;
        for_each_slice(chunk_logits, count, [&](int, int32_t, const float(&values)[kSliceTokens]) {
#pragma unroll
            for (int k = 0; k < kSliceTokens; ++k) mass += exact::token_mass(values[k], chunk_max, exact::kUnitScale);
        });
        weight_sum = exact::mass_weight(block_sum(mass, sh.scratch));
    }
}

// Phase 2 of a sampled row: the chunk's masses at the row's maximum, summed (and histogrammed
// when a top-k/top-p cut is possible: kHistogram), published for the row. A row with no cut and
// no min_p needs only the total (every token with mass passes min_p): !kAllSums.
template <bool kAllSums, bool kHistogram>
__device__ void publish_masses(const row_context& ctx, const float* chunk_logits, int32_t count, chunk_partial& mine,
                               kernel_shared& sh) {
    if (kHistogram) {
        for (int i = threadIdx.x; i < kMassHistogramBins; i += kBlockThreads) sh.histogram[i] = 0;
        __syncthreads();
    }
    mass_sums sums;
    const float max_logit = sh.totals.max_logit;  // in a register: the histogram's atomics would reload it
    for_each_slice(chunk_logits, count, [&](int, int32_t, const float(&values)[kSliceTokens]) {
#pragma unroll
        for (int k = 0; k < kSliceTokens; ++k) {
            const uint64_t q = mass_of(values[k], max_logit, ctx.scale);
            if constexpr (kAllSums) {
                sums.add(q, ctx.min_mass);
                if (kHistogram && q > 0) atomicAdd(&sh.histogram[mass_bin(q)], 1u);
            } else {
                sums.total += q;
            }
        }
    });
    const uint64_t mass_total = block_sum(sums.total, sh.scratch);
    const uint64_t nonzero = kAllSums ? block_sum(sums.nonzero, sh.scratch) : 0;
    const uint64_t min_p_mass = kAllSums ? block_sum(sums.min_p, sh.scratch) : mass_total;
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

// A sampled row after its maximum is known: masses, then the draw with or without a cut.
__device__ void sample_row(const row_context& ctx, int32_t first, int32_t count, kernel_shared& sh) {
    const request_view& r = ctx.r;
    const int32_t chunk = first / kChunkTokens;
    row_sync& sync = ctx.p.workspace.sync[ctx.row];
    chunk_partial* row_partials = ctx.p.workspace.partials + ctx.row * ctx.chunks;
    const bool maybe_cut = r.top_k >= 0 || r.top_p < 1.0f;
    if (maybe_cut) {
        publish_masses<true, true>(ctx, sh.data.chunk, count, row_partials[chunk], sh);
    } else if (ctx.min_mass > 1) {
        publish_masses<true, false>(ctx, sh.data.chunk, count, row_partials[chunk], sh);
    } else {
        publish_masses<false, false>(ctx, sh.data.chunk, count, row_partials[chunk], sh);
    }
    if (!maybe_cut) {
        // Kept: every token that passes min_p. The last block to arrive draws.
        if (arrive_last(&sync.partials_arrived, static_cast<uint32_t>(ctx.chunks), sh.flag)) {
            combine_masses(row_partials, ctx.chunks, sh);
            draw_without_cut(ctx, sh);
        }
        return;
    }
    arrive(&sync.partials_arrived, static_cast<uint32_t>(ctx.chunks), ctx.p);
    combine_masses(row_partials, ctx.chunks, sh);
    const bool top_k_active = r.top_k >= 0 && static_cast<uint64_t>(r.top_k) < sh.totals.nonzero;
    if (!top_k_active && r.top_p >= 1.0f) {
        // No cut after all (top_k reaches every token with mass).
        if (arrive_last(&sync.counts_arrived, static_cast<uint32_t>(ctx.chunks), sh.flag)) draw_without_cut(ctx, sh);
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
    load_raw_chunk(p, row, first, count, chunk_logits);
    if (needs.raw) {
        float raw_max = 0.0f;
        int32_t raw_index = -1;
        double raw_sum = 0.0;
        chunk_softmax(chunk_logits, count, first, sh, raw_max, raw_index, raw_sum, true);
        if (threadIdx.x == 0) {
            mine.raw_max = raw_index >= 0 ? raw_max : -HUGE_VALF;
            mine.raw_sum = raw_sum;
        }
    }
    process_chunk(p, r, drafts_of(p, b, j), row, first, count, chunk_logits);
    if (draft >= first && draft < first + count && threadIdx.x == 0) sync.draft_logit = chunk_logits[draft - first];
    {
        float chunk_max = 0.0f;
        int32_t index = -1;
        double softmax = 0.0;
        chunk_softmax(chunk_logits, count, first, sh, chunk_max, index, softmax, needs.softmax);
        if (threadIdx.x == 0) {
            mine.max_logit = chunk_max;
            mine.max_index = index;
            mine.softmax_sum = softmax;
        }
    }
    const chunk_partial* row_partials = ws.partials + row * chunks;
    if (r.greedy()) {
        // Greedy rows need no barrier: the last block of the row to arrive combines the chunks.
        combine_greedy_row(row_partials, chunks, needs, sync, ws.results[row], sh.totals, sh.flag);
    } else {
        arrive(&sync.maxima_arrived, static_cast<uint32_t>(chunks), p);
        combine_maxima(row_partials, chunks, needs, sh.totals);
        if (sh.totals.top < 0) {
            if (chunk == 0 && threadIdx.x == 0) ws.results[row].top = -1;
        } else {
            const row_context ctx{p,      r,     exact::mass_scale(r.temperature),    row, b, j,
                                  chunks, draft, exact::min_p_mass_threshold(r.min_p)};
            sample_row(ctx, first, count, sh);
        }
    }

    // ---- 3. The last block of the request walks its chain --------------------------------------
    if (arrive_last(&ws.request_blocks_done[b], static_cast<uint32_t>(n * chunks), sh.flag)) walk_chain(p, r, b);
}

// ---- The streaming kernel: greedy requests without penalties or bias ------------------------------
// A thread reads 4-token vectors kStreamStride apart, kStreamUnroll of them in flight, keeping its
// running argmax (and, for logprobs, a running softmax sum) in registers; one block reduction at
// the end of the segment.
constexpr int32_t kStreamStride = kBlockThreads * kSliceTokens;
constexpr int kStreamUnroll = 8;
static_assert(kStreamSegmentQuantum == kStreamStride, "segments start on a whole block round");

struct streaming_shared {
    block_scratch scratch;
    row_totals totals;
    bool flag;
};

// Tokens [at, at + 4) of `row` as floats, masked (bitmask); tokens at or past `end` read as -inf.
// `at` is a multiple of 4, so the four share one bitmask word.
__device__ __forceinline__ void stream_slice(const chain_kernel_params& p, int64_t row, int32_t at, int32_t end,
                                             float (&v)[kSliceTokens]) {
    const int64_t offset = row * p.row_stride + at;
    const bool whole = at + kSliceTokens <= end;
    if (p.dtype == logits_dtype::f32) {
        const float* source = static_cast<const float*>(p.logits) + offset;
        if (whole && (reinterpret_cast<uintptr_t>(source) & 15) == 0) {
            const float4 q = __ldcs(reinterpret_cast<const float4*>(source));
            v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
        } else {
#pragma unroll
            for (int k = 0; k < kSliceTokens; ++k) v[k] = at + k < end ? source[k] : -HUGE_VALF;
        }
    } else {
        const uint16_t* source = static_cast<const uint16_t*>(p.logits) + offset;
        uint16_t halves[kSliceTokens];
        if (whole && (reinterpret_cast<uintptr_t>(source) & 7) == 0) {
            const uint2 q = __ldcs(reinterpret_cast<const uint2*>(source));
            halves[0] = static_cast<uint16_t>(q.x), halves[1] = static_cast<uint16_t>(q.x >> 16);
            halves[2] = static_cast<uint16_t>(q.y), halves[3] = static_cast<uint16_t>(q.y >> 16);
        } else {
#pragma unroll
            for (int k = 0; k < kSliceTokens; ++k) halves[k] = at + k < end ? source[k] : 0;
        }
        const bool bf16 = p.dtype == logits_dtype::bf16;
#pragma unroll
        for (int k = 0; k < kSliceTokens; ++k) {
            v[k] = at + k >= end ? -HUGE_VALF
                   : bf16        ? dm::bf16_bits_to_float(halves[k])
                                 : dm::fp16_bits_to_float(halves[k]);
        }
    }
    if (p.bitmask != nullptr && at < end) {
        const uint32_t word = p.bitmask[row * ((p.vocab + 31) / 32) + (at >> 5)];
#pragma unroll
        for (int k = 0; k < kSliceTokens; ++k) {
            if (((word >> ((at + k) & 31)) & 1u) == 0) v[k] = -HUGE_VALF;
        }
    }
}

__global__ void __launch_bounds__(kBlockThreads) streaming_greedy_kernel(chain_kernel_params p) {
    __shared__ streaming_shared sh;
    const chain_workspace& ws = p.workspace;
    const int32_t segments = p.stream_segments;
    const int64_t row = blockIdx.x / static_cast<uint32_t>(segments);
    const int32_t segment = static_cast<int32_t>(blockIdx.x % static_cast<uint32_t>(segments));
    const int32_t n = p.tokens_per_req;
    const int32_t b = static_cast<int32_t>(row / n);
    const int32_t j = static_cast<int32_t>(row % n);
    const int32_t segment_tokens = stream_segment_tokens(p.vocab, segments);
    const int32_t first = min(p.vocab, segment * segment_tokens);
    const int32_t end = min(p.vocab, first + segment_tokens);
    const int32_t draft = j + 1 < n ? p.candidates[static_cast<int64_t>(b) * n + j + 1] : -1;
    row_sync& sync = ws.sync[row];
    chunk_partial* row_partials = ws.partials + row * segments;
    const request_view& r = ws.requests[b];
    // Rows here have no penalties, no bias and (in raw mode) no mask: processed == raw logits.
    const logprob_needs needs{p.outputs.logprobs != nullptr && p.logprobs != logprob_mode::none,
                              p.logprobs == logprob_mode::raw};
    const bool with_logprobs = needs.softmax;

    float best = -HUGE_VALF;
    int32_t best_index = -1;
    float softmax_max = -HUGE_VALF;  // the running softmax sum is relative to this
    double softmax = 0.0;
    for (int32_t at = first + static_cast<int32_t>(threadIdx.x) * kSliceTokens; at < end;
         at += kStreamStride * kStreamUnroll) {
        float values[kStreamUnroll][kSliceTokens];
#pragma unroll
        for (int u = 0; u < kStreamUnroll; ++u) stream_slice(p, row, at + u * kStreamStride, end, values[u]);
#pragma unroll
        for (int u = 0; u < kStreamUnroll; ++u) {
#pragma unroll
            for (int k = 0; k < kSliceTokens; ++k) {
                const float value = values[u][k];
                const int32_t token = at + u * kStreamStride + k;
                keep_if_larger(value, token, best, best_index);
                if (token == draft && token < end) sync.draft_logit = value;  // past `end`: the next segment's
                if (with_logprobs) {
                    if (value > softmax_max) {
                        softmax = softmax * exp(static_cast<double>(softmax_max) - value) + 1.0;
                        softmax_max = value;
                    } else {
                        softmax += unit_weight(value, softmax_max);
                    }
                }
            }
        }
    }
    float segment_max = 0.0f;
    const int32_t index = block_argmax(best, best_index, segment_max, sh.scratch);
    if (with_logprobs && index >= 0) {
        const double rescaled =
            softmax_max > -HUGE_VALF ? softmax * exp(static_cast<double>(softmax_max) - segment_max) : 0.0;
        softmax = block_sum(rescaled, sh.scratch);
    }
    if (threadIdx.x == 0) {
        row_partials[segment].max_logit = segment_max;
        row_partials[segment].max_index = index;
        row_partials[segment].softmax_sum = index >= 0 ? softmax : 0.0;
        row_partials[segment].raw_max = index >= 0 ? segment_max : -HUGE_VALF;
        row_partials[segment].raw_sum = index >= 0 ? softmax : 0.0;
    }
    if (draft >= first && draft < end) __threadfence();  // the draft's logit, for the chain walk
    combine_greedy_row(row_partials, segments, needs, sync, ws.results[row], sh.totals, sh.flag);
    if (arrive_last(&ws.request_blocks_done[b], static_cast<uint32_t>(n * segments), sh.flag)) walk_chain(p, r, b);
}

// Clears the workspace's counters and resolves every request of the call, its values checked,
// for the chain kernels to read: one launch before the step's kernel.
__global__ void prepare_step_kernel(sampling_call call, chain_workspace workspace) {
    const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
    auto* counters = reinterpret_cast<uint4*>(workspace.control);  // 256-byte aligned, whole uint4s
    const auto words = static_cast<int64_t>(workspace.counter_bytes / sizeof(uint4));
    for (int64_t i = thread; i < words; i += threads) counters[i] = make_uint4(0, 0, 0, 0);
    if (thread < call.batch_size) workspace.requests[thread] = resolve_request(call, static_cast<int32_t>(thread));
}

}  // namespace

cudaError_t streaming_kernel_capacity(int device, int& resident_blocks) {
    int sms = 0;
    int per_sm = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, streaming_greedy_kernel, kBlockThreads, 0);
    resident_blocks = sms * per_sm;
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
    const unsigned blocks = chain_kernel_blocks(params);
    if (params.stream_segments > 0) {
        streaming_greedy_kernel<<<blocks, kBlockThreads, 0, stream>>>(params);
    } else {
        chain_kernel<<<blocks, kBlockThreads, sizeof(kernel_shared), stream>>>(params);
    }
    return cudaGetLastError();
}

}  // namespace ds::cuda

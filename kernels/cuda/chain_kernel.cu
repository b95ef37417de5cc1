// The CUDA twin of cpu::row_sampler + cpu_backend::run_request: one thread block per request
// walks its verify chain (plain sampling is the chain with N = 1). Every decision is made on the
// integer masses of kernels/det_math.h, so the tokens equal the CPU backend's bit for bit.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/block_primitives.cuh"
#include "kernels/cuda/chain_kernel.h"
#include "kernels/det_math.h"

namespace ds::cuda {

namespace dm = ds::detmath;

namespace {

struct f32_logits {
    using raw = float;
    __device__ static float load(const raw* row, int32_t i) { return row[i]; }
};
struct bf16_logits {
    using raw = uint16_t;
    __device__ static float load(const raw* row, int32_t i) { return dm::bf16_bits_to_float(row[i]); }
};
struct f16_logits {
    using raw = uint16_t;
    __device__ static float load(const raw* row, int32_t i) { return dm::fp16_bits_to_float(row[i]); }
};

// Filter cut, as cpu::filter_cut.
struct cut {
    uint64_t min_mass;
    bool has_boundary;
    uint64_t boundary_mass;
    int32_t boundary_token;

    __device__ bool keeps(int32_t token, uint64_t mass) const {
        if (mass < min_mass) return false;
        if (!has_boundary) return true;
        return mass > boundary_mass || (mass == boundary_mass && token <= boundary_token);
    }
};

// Writes the processed row (penalties, bias, mask; DESIGN.md §3) into `out`. Same operations and
// order as cpu::row_sampler::prepare_logits; masking first is equivalent because -inf stays -inf.
template <class Dtype>
__device__ void materialize_row(const typename Dtype::raw* row, const uint32_t* mask_row, const request_params& r,
                                const chain_kernel_params& p, float* out) {
    for (int32_t i = threadIdx.x; i < p.vocab; i += kBlockThreads) {
        float l = Dtype::load(row, i);
        if (mask_row != nullptr && ((mask_row[i >> 5] >> (i & 31)) & 1u) == 0) l = -HUGE_VALF;
        out[i] = l;
    }
    __syncthreads();
    const bool penalised =
        r.presence_penalty != 0.0f || r.frequency_penalty != 0.0f || r.repetition_penalty != 1.0f;
    if (penalised) {
        for (int32_t k = threadIdx.x; k < r.seen_count; k += kBlockThreads) {  // distinct tokens
            const token_count seen = p.seen[r.seen_offset + k];
            float l = out[seen.token];
            if (r.repetition_penalty != 1.0f) l = l > 0.0f ? l / r.repetition_penalty : l * r.repetition_penalty;
            const float frequency = r.frequency_penalty * static_cast<float>(seen.count);
            l = l - frequency;
            l = l - r.presence_penalty;
            out[seen.token] = l;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {  // in order: ids may repeat
        for (int32_t k = 0; k < r.bias_count; ++k) {
            const logit_bias_entry e = p.bias[r.bias_offset + k];
            out[e.token] = out[e.token] + e.bias;
        }
    }
    __syncthreads();
}

struct cut_selection {
    cut kept_cut;
    uint64_t kept_mass;
};

// Top-k / top-p cut on the (mass desc, index asc) order, exactly as cpu::row_sampler.
//
// Fast path: a histogram of the weights' float exponents bounds the masses that can survive; if
// at most kCandidateCapacity tokens reach that bound they are gathered into shared memory, sorted,
// and the cut is read off the sorted list. Otherwise: exact radix selection over the whole row.
template <class Mass>
__device__ cut_selection select_cut(const Mass& q_of, const float* weights, int32_t vocab, const request_params& r,
                                    bool top_k_active, uint64_t mass_total, uint64_t min_mass, block_shared& sh) {
    // Tokens with weight >= 2^(e-127) all have mass >= mass(2^(e-127)); walk exponents down until
    // they hold k tokens (top-k) or the top-p target mass (top-p alone).
    block_histogram(
        [&](int32_t i, int& digit, uint64_t& mass) {
            const float w = weights[i];
            mass = dm::weight_to_mass(w);
            if (mass > 0) digit = static_cast<int>(dm::float_as_bits(w) >> 23);
        },
        vocab, 128, sh);
    if (threadIdx.x == 0) {
        const uint64_t target = top_k_active ? static_cast<uint64_t>(r.top_k) : dm::top_p_mass_target(r.top_p, mass_total);
        uint64_t reached = 0;
        int exponent = 127;
        for (; exponent > 0; --exponent) {
            reached += top_k_active ? sh.scratch.bins.count[exponent] : sh.scratch.bins.mass[exponent];
            if (reached >= target) break;
        }
        sh.broadcast_u64[0] = max(uint64_t{1}, dm::weight_to_mass(dm::bits_as_float(static_cast<uint32_t>(exponent) << 23)));
        sh.counter = 0;
    }
    __syncthreads();
    const uint64_t bound = sh.broadcast_u64[0];
    candidate_list& list = sh.scratch.candidates;
    for (int32_t i = threadIdx.x; i < vocab; i += kBlockThreads) {
        const uint64_t q = q_of(i);
        if (q >= bound) {
            const uint32_t slot = atomicAdd(&sh.counter, 1u);
            if (slot < kCandidateCapacity) {
                list.mass[slot] = q;
                list.token[slot] = i;
            }
        }
    }
    __syncthreads();
    const auto count = static_cast<int32_t>(sh.counter);
    __syncthreads();
    if (count <= kCandidateCapacity) {
        block_sort_candidates(count, sh);
        // Thread t holds sorted positions 2t and 2t+1.
        static_assert(kCandidateCapacity == 2 * kBlockThreads, "two candidates per thread");
        const int32_t p0 = 2 * static_cast<int32_t>(threadIdx.x);
        const uint64_t m0 = p0 < count ? list.mass[p0] : 0;
        const uint64_t m1 = p0 + 1 < count ? list.mass[p0 + 1] : 0;
        const int32_t top_k_length = top_k_active ? r.top_k : count;
        const uint64_t k0 = p0 < top_k_length ? m0 : 0;
        const uint64_t k1 = p0 + 1 < top_k_length ? m1 : 0;
        uint64_t top_k_mass = 0;
        const uint64_t before = block_exclusive_scan(k0 + k1, top_k_mass, sh);
        if (!top_k_active) top_k_mass = mass_total;
        int32_t length = top_k_length;
        if (r.top_p < 1.0f) {
            const uint64_t target = dm::top_p_mass_target(r.top_p, top_k_mass);
            if (before < target && before + k0 >= target) sh.broadcast_i32[0] = p0 + 1;
            if (before + k0 < target && before + k0 + k1 >= target) sh.broadcast_i32[0] = p0 + 2;
            __syncthreads();
            length = sh.broadcast_i32[0];
        }
        const uint64_t kept0 = p0 < length && m0 >= min_mass ? m0 : 0;
        const uint64_t kept1 = p0 + 1 < length && m1 >= min_mass ? m1 : 0;
        uint64_t kept_mass = 0;
        block_exclusive_scan(kept0 + kept1, kept_mass, sh);
        const cut result{min_mass, true, list.mass[length - 1], list.token[length - 1]};
        __syncthreads();
        return cut_selection{result, kept_mass};
    }

    uint64_t boundary_mass = 0;
    uint64_t ties_needed = 0;
    uint64_t top_k_mass = mass_total;
    if (top_k_active) {
        const radix_result k = block_radix_select(q_of, vocab, false, static_cast<uint64_t>(r.top_k), sh);
        boundary_mass = k.value;
        ties_needed = static_cast<uint64_t>(r.top_k) - k.count_above;
        top_k_mass = k.mass_above + ties_needed * k.value;
    }
    if (r.top_p < 1.0f) {
        // The top-p prefix is never longer than the top-k prefix (its target is at most M_k), so
        // selecting over all tokens lands inside the top-k set.
        const uint64_t target = dm::top_p_mass_target(r.top_p, top_k_mass);
        const radix_result t = block_radix_select(q_of, vocab, true, target, sh);
        boundary_mass = t.value;
        ties_needed = (target - t.mass_above + t.value - 1) / t.value;
    }
    // Ties at the boundary are kept in index order: find the last one kept.
    const int32_t boundary = block_find_prefix([&](int32_t i) -> uint64_t { return q_of(i) == boundary_mass ? 1 : 0; },
                                               vocab, ties_needed - 1, sh);
    const cut result{min_mass, true, boundary_mass, boundary};
    const uint64_t kept_mass = block_sum<uint64_t>(
        [&](int32_t i) -> uint64_t {
            const uint64_t q = q_of(i);
            return result.keeps(i, q) ? q : 0;
        },
        vocab, sh);
    return cut_selection{result, kept_mass};
}

// What the analysis of one row leaves for the request's chain walk.
struct row_summary {
    int32_t top;             // argmax, -1 when nothing is allowed
    float max_logit;
    cut kept_cut;            // stochastic rows only
    uint64_t kept_mass;      // M
    uint64_t draft_mass;     // kept mass of the draft judged against this row (0 if none)
    double softmax_sum;      // sum of exp(l - max) at temperature 1, for logprobs
};

static_assert(sizeof(row_summary) % 8 == 0, "row summaries are read back as 8-byte words");

// Summaries are written by other blocks of this launch: read them from L2, not L1.
__device__ row_summary load_summary(const row_summary* source) {
    row_summary out;
    const auto* words = reinterpret_cast<const unsigned long long*>(source);
    auto* into = reinterpret_cast<unsigned long long*>(&out);
    for (size_t w = 0; w < sizeof(row_summary) / 8; ++w) into[w] = __ldcg(words + w);
    return out;
}

// One thread block per logits row: every row of every request is analysed in parallel (argmax,
// weights, cut, kept mass, the draft's mass). The last block of a request to finish then walks
// the request's chain from the row summaries and draws the final token (DESIGN.md §3), so the
// result is the CPU backend's, which walks the same chain row by row.
template <class Dtype>
__global__ void __launch_bounds__(kBlockThreads) chain_kernel(chain_kernel_params p) {
    constexpr bool kIsF32 = std::is_same<typename Dtype::raw, float>::value;
    __shared__ block_shared sh;
    __shared__ bool last_of_request;
    const int32_t n = p.tokens_per_req;
    const int64_t row_index = blockIdx.x;
    const int32_t b = static_cast<int32_t>(row_index / n);
    const int32_t j = static_cast<int32_t>(row_index % n);
    const int64_t base = static_cast<int64_t>(b) * n;
    const request_params r = p.requests[b];
    const int32_t words = (p.vocab + 31) / 32;
    const bool penalised = (r.presence_penalty != 0.0f || r.frequency_penalty != 0.0f || r.repetition_penalty != 1.0f) &&
                           r.seen_count > 0;
    const bool modified = penalised || r.bias_count > 0 || p.bitmask != nullptr;
    float* processed = p.processed + row_index * p.vocab;
    float* weights = p.weights + row_index * p.vocab;
    const auto* row = static_cast<const typename Dtype::raw*>(p.logits) + row_index * p.row_stride;

    // ---- Analysis of this row ------------------------------------------------------------------
    if (modified) {
        materialize_row<Dtype>(row, p.bitmask != nullptr ? p.bitmask + row_index * words : nullptr, r, p, processed);
    }
    auto logit = [&](int32_t i) { return modified ? processed[i] : Dtype::load(row, i); };
    // Unmodified, aligned fp32 rows are streamed with float4 loads.
    const bool vectorized = kIsF32 && !modified && (reinterpret_cast<uintptr_t>(row) & 15) == 0 && (p.vocab & 3) == 0;
    row_summary summary{};
    summary.top = vectorized ? block_argmax_f32x4(reinterpret_cast<const float*>(row), p.vocab, sh)
                             : block_argmax(logit, p.vocab, sh);
    summary.max_logit = summary.top >= 0 ? logit(summary.top) : 0.0f;
    const bool has_draft = j + 1 < n;
    const int32_t draft = has_draft ? p.candidates[base + j + 1] : -1;
    if (summary.top >= 0 && !r.greedy) {
        // Weights once per row (the only exp); later passes read them back. The same pass totals
        // the tokens with mass, their mass, and the mass that passes min_p.
        const float max_logit = summary.max_logit;
        const uint64_t min_mass = max(uint64_t{1}, dm::min_p_mass_threshold(r.min_p));
        uint64_t nonzero = 0;
        uint64_t mass_total = 0;
        uint64_t min_p_total = 0;
        auto weigh = [&](float l) {
            float w = 0.0f;
            if (l == max_logit) {
                w = 1.0f;
            } else if (l > -HUGE_VALF) {
                w = dm::det_exp((l - max_logit) / r.temperature);
            }
            const uint64_t q = dm::weight_to_mass(w);
            nonzero += q > 0 ? 1 : 0;
            mass_total += q;
            min_p_total += q >= min_mass ? q : 0;
            return w;
        };
        if (vectorized) {
            const auto* row4 = reinterpret_cast<const float4*>(row);
            auto* weights4 = reinterpret_cast<float4*>(weights);
            const int32_t quads = p.vocab / 4;
            constexpr int kQuadUnroll = kUnroll / 2;
            for (int32_t start = threadIdx.x; start < quads; start += kBlockThreads * kQuadUnroll) {
                float4 values[kQuadUnroll];
#pragma unroll
                for (int k = 0; k < kQuadUnroll; ++k) {
                    const int32_t q = start + k * kBlockThreads;
                    values[k] = q < quads ? row4[q] : make_float4(-HUGE_VALF, -HUGE_VALF, -HUGE_VALF, -HUGE_VALF);
                }
#pragma unroll
                for (int k = 0; k < kQuadUnroll; ++k) {
                    const int32_t q = start + k * kBlockThreads;
                    const float4 w = make_float4(weigh(values[k].x), weigh(values[k].y), weigh(values[k].z), weigh(values[k].w));
                    if (q < quads) weights4[q] = w;
                }
            }
        } else {
            for (int32_t start = threadIdx.x; start < p.vocab; start += kBlockThreads * kUnroll) {
                float values[kUnroll];
#pragma unroll
                for (int k = 0; k < kUnroll; ++k) {
                    const int32_t i = start + k * kBlockThreads;
                    values[k] = i < p.vocab ? logit(i) : -HUGE_VALF;
                }
#pragma unroll
                for (int k = 0; k < kUnroll; ++k) {
                    const int32_t i = start + k * kBlockThreads;
                    const float w = weigh(values[k]);
                    if (i < p.vocab) weights[i] = w;
                }
            }
        }
        block_exclusive_scan(nonzero, nonzero, sh);
        block_exclusive_scan(mass_total, mass_total, sh);
        block_exclusive_scan(min_p_total, min_p_total, sh);
        auto q_of = [&](int32_t i) -> uint64_t { return dm::weight_to_mass(weights[i]); };
        const bool top_k_active = r.top_k >= 0 && static_cast<uint64_t>(r.top_k) < nonzero;
        const cut_selection selection =
            top_k_active || r.top_p < 1.0f ? select_cut(q_of, weights, p.vocab, r, top_k_active, mass_total, min_mass, sh)
                                           : cut_selection{cut{min_mass, false, 0, -1}, min_p_total};
        summary.kept_cut = selection.kept_cut;
        summary.kept_mass = selection.kept_mass;
        if (has_draft) {
            const uint64_t q = q_of(draft);
            summary.draft_mass = summary.kept_cut.keeps(draft, q) ? q : 0;
        }
    }
    if (p.logprobs != nullptr && summary.top >= 0) {
        const float max_logit = summary.max_logit;
        summary.softmax_sum = block_sum<double>(
            [&](int32_t i) -> double {
                const float l = logit(i);
                if (l == max_logit) return 1.0;
                return l > -HUGE_VALF ? static_cast<double>(dm::det_exp(l - max_logit)) : 0.0;
            },
            p.vocab, sh);
    }
    __threadfence();  // every thread's weights and processed logits are visible device-wide
    __syncthreads();
    if (threadIdx.x == 0) {
        static_cast<row_summary*>(p.summaries)[row_index] = summary;
        __threadfence();  // and the summary, before this row counts in
        last_of_request = atomicAdd(&p.row_counters[b], 1) == n - 1;
    }
    __syncthreads();
    if (!last_of_request) return;

    // ---- The last block of request b walks its chain -----------------------------------------
    __threadfence();
    const auto* summaries = static_cast<const row_summary*>(p.summaries) + base;
    int32_t accepted = 0;
    int32_t final_token = -1;
    for (int32_t k = 0; k < n; ++k) {
        const row_summary s = load_summary(summaries + k);
        const bool has_next_draft = k + 1 < n;
        const int32_t next_draft = has_next_draft ? p.candidates[base + k + 1] : -1;
        if (s.top < 0) break;  // nothing allowed: the chain ends with an error flag
        bool draft_accepted = false;
        if (r.greedy) {
            draft_accepted = has_next_draft && next_draft == s.top;
            if (!draft_accepted) final_token = s.top;
        } else {
            if (has_next_draft) {
                const double prob = static_cast<double>(s.draft_mass) / static_cast<double>(s.kept_mass);
                const double coin = p.coins != nullptr
                                        ? p.coins[static_cast<int64_t>(b) * (n - 1) + k]
                                        : dm::bits_to_unit_double(dm::random_bits64(
                                              r.seed, static_cast<uint64_t>(r.position), static_cast<uint32_t>(k + 1),
                                              dm::draw_purpose::coin));
                draft_accepted = prob >= p.thresholds.single || (s.draft_mass > 0 && coin <= prob / p.thresholds.acc);
            }
            if (!draft_accepted) {
                const uint64_t bits = p.final_coins != nullptr
                                          ? dm::unit_double_to_bits(p.final_coins[b])
                                          : dm::random_bits64(r.seed, static_cast<uint64_t>(r.position),
                                                              static_cast<uint32_t>(k), dm::draw_purpose::token);
                const uint64_t excluded_mass = has_next_draft ? s.draft_mass : 0;
                const bool residual = s.kept_mass > excluded_mass;
                const uint64_t mass = residual ? s.kept_mass - excluded_mass : s.kept_mass;
                const int32_t excluded = residual && has_next_draft ? next_draft : -1;
                const float* row_weights = p.weights + (base + k) * p.vocab;
                const cut c = s.kept_cut;
                final_token = block_find_prefix(
                    [&](int32_t i) -> uint64_t {
                        if (i == excluded) return 0;
                        const uint64_t q = dm::weight_to_mass(__ldcg(row_weights + i));
                        return c.keeps(i, q) ? q : 0;
                    },
                    p.vocab, dm::mul_high64(bits, mass), sh);
            }
        }
        if (!draft_accepted) break;
        ++accepted;
    }
    if (threadIdx.x == 0) {
        for (int32_t k = 0; k < n; ++k) {
            const bool emitted = k <= accepted;
            const int32_t token = k < accepted ? p.candidates[base + k + 1] : (k == accepted ? final_token : -1);
            p.packed[base + k] = emitted ? token : -1;
            p.accept_index[base + k] = emitted ? static_cast<int32_t>(base + k) : -1;
            if (p.logprobs != nullptr) {
                float logprob = __int_as_float(0x7fc00000);  // NaN
                if (emitted && token >= 0) {
                    const row_summary s = load_summary(summaries + k);
                    const int64_t row_k = base + k;
                    const float l = modified ? __ldcg(p.processed + row_k * p.vocab + token)
                                             : Dtype::load(static_cast<const typename Dtype::raw*>(p.logits) + row_k * p.row_stride, token);
                    const double shifted = l == s.max_logit ? 0.0 : static_cast<double>(l) - s.max_logit;
                    logprob = static_cast<float>(shifted - log(s.softmax_sum));
                }
                p.logprobs[base + k] = logprob;
            }
        }
        p.packed[static_cast<int64_t>(p.batch_size) * n + b] = accepted + 1;
        p.row_error[b] = final_token < 0 ? 1 : 0;
        p.row_counters[b] = 0;  // ready for the next step (and graph replays)
    }
}

}  // namespace

size_t chain_kernel_summary_bytes() { return sizeof(row_summary); }

cudaError_t launch_chain_kernel(const chain_kernel_params& params, cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>(params.batch_size) * static_cast<unsigned>(params.tokens_per_req));
    switch (params.dtype) {
        case logits_dtype::f32: chain_kernel<f32_logits><<<grid, kBlockThreads, 0, stream>>>(params); break;
        case logits_dtype::bf16: chain_kernel<bf16_logits><<<grid, kBlockThreads, 0, stream>>>(params); break;
        case logits_dtype::f16: chain_kernel<f16_logits><<<grid, kBlockThreads, 0, stream>>>(params); break;
    }
    return cudaGetLastError();
}

}  // namespace ds::cuda

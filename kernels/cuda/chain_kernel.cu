// The CUDA twin of cpu::row_sampler + cpu_backend::run_request: one thread block per request
// walks its verify chain (plain sampling is the chain with N = 1). Every decision is made on the
// integer masses of kernels/det_math.h, so the tokens equal the CPU backend's bit for bit.
#include <cuda_runtime.h>

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

template <class Dtype>
__global__ void __launch_bounds__(kBlockThreads) chain_kernel(chain_kernel_params p) {
    __shared__ block_shared sh;
    const int32_t b = blockIdx.x;
    const int32_t n = p.tokens_per_req;
    const int64_t base = static_cast<int64_t>(b) * n;
    const request_params r = p.requests[b];
    const int32_t words = (p.vocab + 31) / 32;
    const bool penalised = (r.presence_penalty != 0.0f || r.frequency_penalty != 0.0f || r.repetition_penalty != 1.0f) &&
                           r.seen_count > 0;
    const bool modified = penalised || r.bias_count > 0 || p.bitmask != nullptr;
    float* processed = p.processed + static_cast<int64_t>(b) * p.vocab;
    float* weights = p.weights + static_cast<int64_t>(b) * p.vocab;

    for (int32_t j = threadIdx.x; j < n; j += kBlockThreads) {
        p.packed[base + j] = -1;
        p.accept_index[base + j] = -1;
        if (p.logprobs != nullptr) p.logprobs[base + j] = __int_as_float(0x7fc00000);  // NaN
    }
    __syncthreads();

    int32_t accepted = 0;
    for (int32_t j = 0; j < n; ++j) {
        const int64_t row_index = base + j;
        const auto* row = static_cast<const typename Dtype::raw*>(p.logits) + row_index * p.row_stride;
        if (modified) {
            materialize_row<Dtype>(row, p.bitmask != nullptr ? p.bitmask + row_index * words : nullptr, r, p, processed);
        }
        auto logit = [&](int32_t i) { return modified ? processed[i] : Dtype::load(row, i); };
        const int32_t top = block_argmax(logit, p.vocab, sh);
        const bool has_draft = j + 1 < n;
        const int32_t draft = has_draft ? p.candidates[base + j + 1] : -1;
        int32_t emitted = -1;
        bool draft_accepted = false;
        if (top >= 0 && r.greedy) {
            draft_accepted = has_draft && draft == top;
            emitted = top;
        } else if (top >= 0) {
            // Weights once per row (the only exp); every later pass reads them back.
            const float max_logit = logit(top);
            for (int32_t base = threadIdx.x; base < p.vocab; base += kBlockThreads * kUnroll) {
                float values[kUnroll];
#pragma unroll
                for (int k = 0; k < kUnroll; ++k) {
                    const int32_t i = base + k * kBlockThreads;
                    values[k] = i < p.vocab ? logit(i) : -HUGE_VALF;
                }
#pragma unroll
                for (int k = 0; k < kUnroll; ++k) {
                    const int32_t i = base + k * kBlockThreads;
                    const float l = values[k];
                    float w = 0.0f;
                    if (l == max_logit) {
                        w = 1.0f;
                    } else if (l > -HUGE_VALF) {
                        w = dm::det_exp((l - max_logit) / r.temperature);
                    }
                    if (i < p.vocab) weights[i] = w;
                }
            }
            __syncthreads();
            auto q_of = [&](int32_t i) -> uint64_t { return dm::weight_to_mass(weights[i]); };
            cut c{};
            c.min_mass = max(uint64_t{1}, dm::min_p_mass_threshold(r.min_p));
            c.has_boundary = false;
            const bool top_k_active =
                r.top_k >= 0 &&
                static_cast<uint64_t>(r.top_k) <
                    block_sum([&](int32_t i) -> uint64_t { return q_of(i) > 0 ? 1 : 0; }, p.vocab, sh);
            if (top_k_active || r.top_p < 1.0f) {
                uint64_t boundary_mass = 0;
                uint64_t ties_needed = 0;
                uint64_t top_k_mass = 0;
                if (top_k_active) {
                    const radix_result k = block_radix_select(q_of, p.vocab, false, static_cast<uint64_t>(r.top_k), sh);
                    boundary_mass = k.value;
                    ties_needed = static_cast<uint64_t>(r.top_k) - k.count_above;
                    top_k_mass = k.mass_above + ties_needed * k.value;
                } else {
                    top_k_mass = block_sum(q_of, p.vocab, sh);
                }
                if (r.top_p < 1.0f) {
                    // The top-p prefix is never longer than the top-k prefix (its target is at most
                    // M_k), so selecting over all tokens lands inside the top-k set.
                    const uint64_t target = dm::top_p_mass_target(r.top_p, top_k_mass);
                    const radix_result t = block_radix_select(q_of, p.vocab, true, target, sh);
                    boundary_mass = t.value;
                    ties_needed = (target - t.mass_above + t.value - 1) / t.value;
                }
                // Ties at the boundary are kept in index order: find the last one kept.
                const int32_t boundary = block_find_prefix(
                    [&](int32_t i) -> uint64_t { return q_of(i) == boundary_mass ? 1 : 0; }, p.vocab, ties_needed - 1, sh);
                c.has_boundary = true;
                c.boundary_mass = boundary_mass;
                c.boundary_token = boundary;
            }
            auto kept_q = [&](int32_t i) -> uint64_t {
                const uint64_t q = q_of(i);
                return c.keeps(i, q) ? q : 0;
            };
            const uint64_t kept = block_sum(kept_q, p.vocab, sh);
            uint64_t excluded_mass = 0;
            if (has_draft) {
                const uint64_t draft_mass = kept_q(draft);
                const double prob = static_cast<double>(draft_mass) / static_cast<double>(kept);
                const double coin = p.coins != nullptr
                                        ? p.coins[static_cast<int64_t>(b) * (n - 1) + j]
                                        : dm::bits_to_unit_double(dm::random_bits64(
                                              r.seed, static_cast<uint64_t>(r.position), static_cast<uint32_t>(j + 1),
                                              dm::draw_purpose::coin));
                draft_accepted = prob >= p.thresholds.single || (draft_mass > 0 && coin <= prob / p.thresholds.acc);
                excluded_mass = draft_mass;
            }
            if (draft_accepted) {
                emitted = draft;
            } else {
                const uint64_t bits = p.final_coins != nullptr
                                          ? dm::unit_double_to_bits(p.final_coins[b])
                                          : dm::random_bits64(r.seed, static_cast<uint64_t>(r.position),
                                                              static_cast<uint32_t>(j), dm::draw_purpose::token);
                const bool residual = kept > excluded_mass;
                const uint64_t mass = residual ? kept - excluded_mass : kept;
                const int32_t excluded = residual && has_draft ? draft : -1;
                emitted = block_find_prefix([&](int32_t i) -> uint64_t { return i == excluded ? 0 : kept_q(i); }, p.vocab,
                                            dm::mul_high64(bits, mass), sh);
            }
        }
        const int32_t chosen = draft_accepted ? draft : emitted;
        if (p.logprobs != nullptr && chosen >= 0) {
            const float max_logit = logit(top);
            const double sum = block_sum_f64(
                [&](int32_t i) -> double {
                    const float l = logit(i);
                    if (l == max_logit) return 1.0;
                    return l > -HUGE_VALF ? static_cast<double>(dm::det_exp(l - max_logit)) : 0.0;
                },
                p.vocab, sh);
            if (threadIdx.x == 0) {
                const float l = logit(chosen);
                const double shifted = l == max_logit ? 0.0 : static_cast<double>(l) - max_logit;
                p.logprobs[row_index] = static_cast<float>(shifted - log(sum));
            }
        }
        if (threadIdx.x == 0) {
            p.packed[base + j] = chosen;
            p.accept_index[base + j] = static_cast<int32_t>(row_index);
        }
        if (!draft_accepted) break;
        ++accepted;
        __syncthreads();  // the next row reuses `processed`
    }
    if (threadIdx.x == 0) {
        p.packed[static_cast<int64_t>(p.batch_size) * n + b] = accepted + 1;
        // predict[accepted] is written by this thread above, so it is visible here.
        p.row_error[b] = p.packed[base + accepted] < 0 ? 1 : 0;
    }
}

}  // namespace

cudaError_t launch_chain_kernel(const chain_kernel_params& params, cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>(params.batch_size));
    switch (params.dtype) {
        case logits_dtype::f32: chain_kernel<f32_logits><<<grid, kBlockThreads, 0, stream>>>(params); break;
        case logits_dtype::bf16: chain_kernel<bf16_logits><<<grid, kBlockThreads, 0, stream>>>(params); break;
        case logits_dtype::f16: chain_kernel<f16_logits><<<grid, kBlockThreads, 0, stream>>>(params); break;
    }
    return cudaGetLastError();
}

}  // namespace ds::cuda

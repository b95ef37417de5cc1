// The streaming kernel: steps whose requests are all greedy without penalties or bias (plain
// decoding). Each row is split into a few segments, one block each; a thread reads 16-byte
// vectors (4 fp32 or 8 bf16/fp16 tokens) a block round apart, up to 2 * kStreamUnroll in flight,
// and keeps its running argmax (and, for logprobs, a running softmax sum) in registers; one block
// reduction at the end of the segment, and the row's last block combines the segments.
//
// A vector is reduced with a float maximum first (keep_vector_if_larger), so the common vector
// costs a few instructions and the kernel reads at memory speed; the lowest index still wins
// ties (docs/semantics.md, Greedy).
#pragma once

#include "kernels/cuda/row_combine.cuh"

namespace ds::cuda {

namespace {

constexpr int kStreamUnroll = 4;  // vectors per group; two groups in flight
// Both dtypes' kernels at 64 registers: the same residency (so the same segments), 4 blocks per
// SM to hide the loads' latency.
constexpr int kStreamBlocksPerSm = 4;
constexpr int kStreamVectorBytes = 16;
static_assert(kStreamSegmentQuantum % (kStreamVectorBytes / 2) == 0, "segments start on a whole vector");

struct streaming_shared {
    block_scratch scratch;
    row_totals totals;
    int32_t drafts[kMaxDrafts];  // the request's, for the chain walk
    bool flag;
};

// Tokens in one 16-byte vector of the dtype: 4 fp32, or 8 bf16/fp16 halves.
template <logits_dtype Dtype>
constexpr int kVectorTokens = Dtype == logits_dtype::f32 ? 4 : 8;

// One token's logit from its bits; the dtype is known at compile time, so a half-precision
// kernel pays only its own conversion.
template <logits_dtype Dtype>
__device__ __forceinline__ float widen_token(uint32_t bits) {
    if constexpr (Dtype == logits_dtype::f32) return __uint_as_float(bits);
    if constexpr (Dtype == logits_dtype::bf16) return dm::bf16_bits_to_float(static_cast<uint16_t>(bits));
    return dm::fp16_bits_to_float(static_cast<uint16_t>(bits));
}

template <logits_dtype Dtype, int Tokens = kVectorTokens<Dtype>>
__device__ __forceinline__ void widen_vector(const uint4& raw, float (&v)[Tokens]) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
    if constexpr (Tokens == 4) {
#pragma unroll
        for (int k = 0; k < 4; ++k) v[k] = widen_token<Dtype>(words[k]);
    } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = widen_token<Dtype>(words[k / 2] >> (16 * (k % 2)));
    }
}

// Tokens [at, at + Tokens) of `row` one at a time (a row not 16-byte aligned, or the segment's
// end); tokens at or past `end` read as -inf.
template <logits_dtype Dtype, int Tokens = kVectorTokens<Dtype>>
__device__ __forceinline__ void load_by_token(const chain_kernel_params& p, int64_t row, int32_t at, int32_t end,
                                              float (&v)[Tokens]) {
    const int64_t offset = row * p.row_stride + at;
#pragma unroll
    for (int k = 0; k < Tokens; ++k) {
        if (at + k >= end) {
            v[k] = -HUGE_VALF;
        } else if constexpr (Tokens == 4) {
            v[k] = static_cast<const float*>(p.logits)[offset + k];
        } else {
            v[k] = widen_token<Dtype>(static_cast<const uint16_t*>(p.logits)[offset + k]);
        }
    }
}

// Masked tokens (bitmask bit 0) read as -inf. `at` is a multiple of Tokens (at most 8), so the
// vector's tokens share one bitmask word.
template <int Tokens>
__device__ __forceinline__ void apply_bitmask(const chain_kernel_params& p, int64_t row, int32_t at, int32_t end,
                                              float (&v)[Tokens]) {
    if (p.bitmask == nullptr || at >= end) return;
    const uint32_t word = p.bitmask[row * ((p.vocab + 31) / 32) + (at >> 5)];
#pragma unroll
    for (int k = 0; k < Tokens; ++k) {
        if (((word >> ((at + k) & 31)) & 1u) == 0) v[k] = -HUGE_VALF;
    }
}

// What a thread keeps while it streams its tokens.
struct stream_state {
    float best = -HUGE_VALF;
    int32_t best_index = -1;
    float softmax_max = -HUGE_VALF;  // the running softmax sum is relative to this
    double softmax = 0.0;
    bool holds_draft = false;  // the thread read the draft's logit (written after the prepare kernel)
    float draft_logit = 0.0f;
};

template <int Tokens>
__device__ __forceinline__ void visit_vector(const float (&v)[Tokens], int32_t at, int32_t end, int32_t draft,
                                             bool with_softmax, stream_state& s) {
    keep_vector_if_larger(v, at, s.best, s.best_index);
    if (static_cast<uint32_t>(draft - at) < static_cast<uint32_t>(Tokens) && draft < end) {
#pragma unroll
        for (int k = 0; k < Tokens; ++k) {
            if (at + k == draft) s.holds_draft = true, s.draft_logit = v[k];  // past `end`: the next segment's
        }
    }
    if (!with_softmax) return;
#pragma unroll
    for (int k = 0; k < Tokens; ++k) {
        if (v[k] > s.softmax_max) {
            s.softmax = s.softmax * exp(static_cast<double>(s.softmax_max) - v[k]) + 1.0;
            s.softmax_max = v[k];
        } else {
            s.softmax += unit_weight(v[k], s.softmax_max);
        }
    }
}

// Streams tokens [first, end) of `row` through the thread's registers: whole groups of
// kStreamUnroll vectors are loaded before any is looked at, so a thread keeps that many loads in
// flight.
template <logits_dtype Dtype>
__device__ void stream_segment(const chain_kernel_params& p, int64_t row, int32_t first, int32_t end, int32_t draft,
                               bool with_softmax, stream_state& s) {
    constexpr int Tokens = kVectorTokens<Dtype>;
    constexpr int32_t stride = kBlockThreads * Tokens;
    const auto* bytes = static_cast<const char*>(p.logits) + row * p.row_stride * (Tokens == 4 ? 4 : 2);
    const bool aligned = (reinterpret_cast<uintptr_t>(bytes) & (kStreamVectorBytes - 1)) == 0;
    constexpr int32_t group = stride * kStreamUnroll;
    auto consume = [&](int32_t at, float(&v)[Tokens]) {
        apply_bitmask<Tokens>(p, row, at, end, v);
        visit_vector<Tokens>(v, at, end, draft, with_softmax, s);
    };
    auto whole_group = [&](int32_t at) { return aligned && at + (kStreamUnroll - 1) * stride + Tokens <= end; };
    auto load_group = [&](int32_t at, uint4(&raw)[kStreamUnroll]) {
#pragma unroll
        for (int u = 0; u < kStreamUnroll; ++u)
            raw[u] = __ldcs(reinterpret_cast<const uint4*>(bytes) + (at + u * stride) / Tokens);
    };
    int32_t at = first + static_cast<int32_t>(threadIdx.x) * Tokens;
    // Whole groups, software-pipelined: the next group is loaded before this one is looked at, so
    // a thread keeps up to two groups of loads in flight (left to itself the compiler consumes
    // each load as soon as it can, and the loads wait on one another).
    if (whole_group(at)) {
        uint4 current[kStreamUnroll];
        load_group(at, current);
        for (bool more = true; more; at += group) {
            more = whole_group(at + group);
            uint4 next[kStreamUnroll];
            if (more) load_group(at + group, next);
#pragma unroll
            for (int u = 0; u < kStreamUnroll; ++u) {
                float v[Tokens];
                widen_vector<Dtype>(current[u], v);
                consume(at + u * stride, v);
                current[u] = next[u];
            }
        }
    }
    // The segment's last, partial group (or every group of a row that is not 16-byte aligned):
    // its whole vectors are loaded together too, before any is looked at.
    for (; at < end; at += group) {
        uint4 raw[kStreamUnroll];
        bool whole[kStreamUnroll];
#pragma unroll
        for (int u = 0; u < kStreamUnroll; ++u) {
            whole[u] = aligned && at + u * stride + Tokens <= end;
            if (whole[u]) raw[u] = __ldcs(reinterpret_cast<const uint4*>(bytes) + (at + u * stride) / Tokens);
        }
#pragma unroll
        for (int u = 0; u < kStreamUnroll; ++u) {
            float v[Tokens];
            if (whole[u]) {
                widen_vector<Dtype>(raw[u], v);
            } else {
                load_by_token<Dtype>(p, row, at + u * stride, end, v);
            }
            consume(at + u * stride, v);
        }
    }
}

template <logits_dtype Dtype>
__global__ void __launch_bounds__(kBlockThreads, kStreamBlocksPerSm) streaming_greedy_kernel(chain_kernel_params p) {
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

    stream_state s;
    stream_segment<Dtype>(p, row, first, end, draft, needs.softmax, s);
    wait_for_the_prepare_kernel();  // it clears the row's counters (and resolves the requests)
    if (s.holds_draft) sync.draft_logit = s.draft_logit;
    float segment_max = 0.0f;
    const int32_t index = block_argmax(s.best, s.best_index, segment_max, sh.scratch);
    double softmax = 0.0;
    if (needs.softmax && index >= 0) {
        // Equal maxima are not rescaled: two infinite ones would give exp(inf - inf) = NaN.
        const double rescaled = s.softmax_max == segment_max ? s.softmax
                                : s.softmax_max > -HUGE_VALF
                                    ? s.softmax * exp(static_cast<double>(s.softmax_max) - segment_max)
                                    : 0.0;
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
    if (arrive_last(&ws.request_blocks_done[b], static_cast<uint32_t>(n * segments), sh.flag))
        walk_chain(p, r, b, sh.drafts);
}

}  // namespace

}  // namespace ds::cuda

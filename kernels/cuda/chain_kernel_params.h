// Parameters of the one CUDA kernel that runs a sampling or verification step (one params struct
// per kernel, with documented shapes). Plain C++: no CUDA types.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/det_math.h"
#include "kernels/exact_rules.h"
#include "kernels/request_view.h"
#include "kernels/sampling_types.h"

namespace ds::cuda {

// How the kernel lays a row out: kChunkTokens consecutive tokens per thread block, so a row of V
// tokens is chunks_per_row(V) blocks that hold their chunk in shared memory, meet at in-row
// barriers (row maximum, then masses) and read the row from memory once.
constexpr int32_t kChunkTokens = 16384;
constexpr int32_t kMassHistogramBins = 82;  // 2 * floor(log2 Q) + the bit below the leading one

// The histogram bin of a mass q > 0 and the least mass that falls into a bin.
DS_HD int mass_bin(uint64_t q) {
    const int log2 = 63 - ds::detmath::leading_zeros64(q);
    return 2 * log2 + (log2 > 0 ? static_cast<int>((q >> (log2 - 1)) & 1u) : 0);
}
DS_HD uint64_t least_mass_of_bin(int bin) {
    const int log2 = bin / 2;
    return log2 > 0 ? static_cast<uint64_t>(2 + (bin & 1)) << (log2 - 1) : 1;
}

// The mass exponents (exact::mass_exponent) of the tokens whose masses fall into a bin lie in
// band_of_bin(bin), which is wider by kBandMargin than the bin needs: kernels select tokens on it
// before they compute masses, and a token's mass still decides. The row's maximum has mass 2^40
// whatever its exponent (an infinite maximum) and is not covered.
struct exponent_band {
    float low;
    float high;
    DS_HD bool holds(float x) const { return x >= low && x <= high; }
};

DS_HD exponent_band band_of_bin(int bin) {
    constexpr double kBandMargin = 1e-3;
    // Bin 1 holds no mass (q = 1 is bin 0, q = 2 and 3 bins 2 and 3): the lowest bins take every
    // exponent that can have mass (above -41), not the lowest itself (NaN, -inf, and a chunk's
    // tokens past its end).
    if (bin < 2) return {ds::exact::kLowestExponent + 1.0f, 1.0f};
    const double low = log2(static_cast<double>(least_mass_of_bin(bin))) - ds::exact::kMassBits - kBandMargin;
    const double high = log2(static_cast<double>(least_mass_of_bin(bin + 1))) - ds::exact::kMassBits + kBandMargin;
    return {static_cast<float>(low), static_cast<float>(high)};
}

// Top-p rows refine the bin where their target is reached: its masses by the kBoundarySubBits
// bits below their two leading ones (mass_sub_bin), summed over the row, so the cut is selected
// among one sub-bin's tokens.
constexpr int kBoundarySubBits = 11;
constexpr int kBoundarySubBins = 1 << kBoundarySubBits;

// A mass's sub-bin within its bin: within one bin a larger mass never has a lower sub-bin, and
// masses below 2^(kBoundarySubBits + 1) have a sub-bin of their own value.
DS_HD int mass_sub_bin(uint64_t q) {
    const int shift = 63 - ds::detmath::leading_zeros64(q) - 1 - kBoundarySubBits;
    return static_cast<int>((shift >= 0 ? q >> shift : q << -shift) & (kBoundarySubBins - 1));
}

DS_HD int32_t chunks_per_row(int32_t vocab) { return (vocab + kChunkTokens - 1) / kChunkTokens; }

// Steps whose requests are all greedy without penalties or bias (plain decoding) run the
// streaming kernel instead: each row is split into a few segments, one block each, as many as
// keep the whole step resident on the GPU at once; threads stream their tokens through registers
// with several loads in flight, with no shared-memory copy and no barrier.
// Segments are whole multiples of kStreamSegmentQuantum tokens and at least kMinStreamSegmentTokens.
constexpr int32_t kStreamSegmentQuantum = 1024;  // one 4-token vector per thread of a block
constexpr int32_t kMinStreamSegmentTokens = 4096;

DS_HD int32_t max_stream_segments(int32_t vocab) {
    return (vocab + kMinStreamSegmentTokens - 1) / kMinStreamSegmentTokens;
}

// Tokens per segment when a row of `vocab` tokens is split into `segments` (the last may be short
// or, after rounding, empty).
DS_HD int32_t stream_segment_tokens(int32_t vocab, int32_t segments) {
    const int32_t even = (vocab + segments - 1) / segments;
    return (even + kStreamSegmentQuantum - 1) / kStreamSegmentQuantum * kStreamSegmentQuantum;
}

// Per-row arrival counters and the draft's processed logit. Zeroed before every launch.
struct row_sync {
    uint32_t maxima_arrived = 0;      // blocks that published their chunk's argmax
    uint32_t partials_arrived = 0;    // ... their chunk's masses
    uint32_t counts_arrived = 0;      // ... their number of cut candidates
    uint32_t candidates_arrived = 0;  // ... their candidates (the last one selects the cut)
    float draft_logit = 0.0f;         // processed logit of the draft judged against this row
    uint32_t padding = 0;
};

// Rows without a cut sum their chunk's masses by this many regions (one per warp of the block).
constexpr int kMassRegions = 8;

// What one block publishes about its chunk.
struct chunk_partial {
    float max_logit = 0.0f;
    int32_t max_index = -1;  // -1: nothing allowed in the chunk
    uint64_t nonzero = 0;    // tokens with mass > 0
    uint64_t mass_total = 0;
    uint64_t min_p_mass = 0;   // mass of the tokens that pass min_p
    double softmax_sum = 0.0;  // sum of the unit-temperature weights relative to max_logit (logprobs)
    float raw_max = 0.0f;      // the chunk's largest logit as given (raw logprobs)
    int32_t candidates = 0;    // tokens at or above the row's candidate bound
    float top_k_reach = 0.0f;  // top-k rows: k of the chunk's tokens lie within this log2 weight ratio of its maximum
    double raw_sum = 0.0;      // sum of the unit-temperature weights of the logits as given, relative to raw_max
    uint64_t region_mass[kMassRegions] = {};  // rows without a cut: masses by the warps' regions (region_of_warp)
};

// What a row leaves for its request's chain walk.
struct row_result {
    int32_t top = -1;  // argmax, -1 when nothing is allowed
    float max_logit = 0.0f;
    uint64_t kept_mass = 0;   // M after the cut
    uint64_t draft_mass = 0;  // kept mass of the draft judged against this row
    int32_t stop_token = -1;  // the token drawn here if the chain stops at this row
    float stop_logit = 0.0f;  // its processed logit
    double softmax_sum = 0.0;
    float raw_max = 0.0f;  // raw logprobs: the row's largest logit as given and the weight sum below it
    double raw_sum = 0.0;
};

// A token that can survive the row's top-k/top-p cut, with its processed logit.
struct cut_candidate {
    int32_t token;
    float logit;
};

// Launch-wide counters, zeroed before every launch.
struct launch_control {
    uint32_t next_ticket = 0;  // blocks take row chunks in the order they start (no deadlock)
    uint32_t fault = 0;        // set when an in-row barrier timed out: the rows' outputs are flagged
};

// The kernel's workspace, carved from one allocation sized for the step. The counters come
// first, so one memset before the launch clears them all.
struct chain_workspace {
    launch_control* control = nullptr;
    row_sync* sync = nullptr;                 // [rows]
    uint32_t* request_blocks_done = nullptr;  // [batch]
    uint32_t* mass_histograms = nullptr;      // [rows, kMassHistogramBins]
    size_t counter_bytes = 0;                 // the bytes from `control` to the end of the histograms
    request_view* requests = nullptr;         // [batch] resolved from the call before the launch
    chunk_partial* partials = nullptr;        // [rows, max(chunks_per_row, max_stream_segments)]
    row_result* results = nullptr;            // [rows]
    cut_candidate* candidates = nullptr;      // [rows, vocab]
    uint64_t* chunk_bin_masses = nullptr;     // [rows, chunks_per_row, kMassHistogramBins] (top-p rows)
    uint64_t* boundary_sub_masses = nullptr;  // [rows, kBoundarySubBins] (top-p rows; cleared by the row's blocks)

    // Bytes for `rows` rows of `vocab` tokens and `batch` requests; with base != null, also points
    // every member into [base, base + bytes). Without `cut_lists` (no request can have a top-k,
    // top-p or min-p filter) the candidate lists, 8 bytes per token of every row, and the masses
    // by bin and sub-bin are left out.
    static size_t layout(void* base, int64_t rows, int32_t batch, int32_t vocab, bool cut_lists, chain_workspace& out) {
        size_t at = 0;
        auto carve = [&](auto*& member, size_t count) {
            using element = std::remove_reference_t<decltype(*member)>;
            at = (at + 255) / 256 * 256;
            if (base != nullptr) member = reinterpret_cast<element*>(static_cast<char*>(base) + at);
            at += count * sizeof(element);
        };
        const auto row_count = static_cast<size_t>(rows);
        carve(out.control, 1);
        carve(out.sync, row_count);
        carve(out.request_blocks_done, static_cast<size_t>(batch));
        carve(out.mass_histograms, row_count * kMassHistogramBins);
        out.counter_bytes = (at + 15) / 16 * 16;  // whole 16-byte words (the next member starts later)
        carve(out.requests, static_cast<size_t>(batch));
        const int32_t partials_per_row =
            chunks_per_row(vocab) > max_stream_segments(vocab) ? chunks_per_row(vocab) : max_stream_segments(vocab);
        carve(out.partials, row_count * static_cast<size_t>(partials_per_row));
        carve(out.results, row_count);
        carve(out.candidates, cut_lists ? row_count * static_cast<size_t>(vocab) : 0);
        carve(out.chunk_bin_masses,
              cut_lists ? row_count * static_cast<size_t>(chunks_per_row(vocab)) * kMassHistogramBins : 0);
        carve(out.boundary_sub_masses, cut_lists ? row_count * kBoundarySubBins : 0);
        return at;
    }
};

// The one kernel of a sampling or verification step.
struct chain_kernel_params {
    // Inputs (device memory).
    const void* logits = nullptr;  // [batch * tokens_per_req rows, row_stride]
    logits_dtype dtype = logits_dtype::f32;
    int64_t row_stride = 0;
    int32_t vocab = 0;
    int32_t batch_size = 0;
    int32_t tokens_per_req = 1;
    const int32_t* candidates = nullptr;  // [batch * N] or null for sample
    const double* coins = nullptr;        // [batch * (N-1)] or null (Philox)
    const double* final_coins = nullptr;  // [batch] or null (Philox)
    const uint32_t* bitmask = nullptr;    // [rows * ceil(V/32)] or null
    verify_thresholds thresholds;
    logprob_mode logprobs = logprob_mode::none;
    chain_workspace workspace;  // workspace.requests resolved before the launch
    sampling_outputs outputs;   // device memory; logprobs and row_error may be null
    // Every request greedy, none with penalties or bias: the streaming kernel runs with this many
    // segments per row, in [1, max_stream_segments(vocab)] (same tokens). 0: the chain kernel.
    int32_t stream_segments = 0;

    // Empty when launchable, else what is wrong.
    const char* check() const {
        if (batch_size <= 0) return "batch_size must be positive";
        if (logits == nullptr || outputs.predict == nullptr || outputs.accept_index == nullptr ||
            outputs.accept_length == nullptr || workspace.control == nullptr) {
            return "a required pointer is null";
        }
        if (tokens_per_req > 1 && candidates == nullptr) return "verify needs candidates";
        if (row_stride < vocab || vocab <= 0) return "row_stride must be >= vocab > 0";
        return nullptr;
    }
};

}  // namespace ds::cuda

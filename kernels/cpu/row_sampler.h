// One logits row through the exact sampling pipeline of docs/semantics.md, on the CPU:
//   processed logits (penalties, bias, bitmask) -> argmax -> integer masses Q -> filter cut
//   (top-k, top-p, min-p on (Q desc, index asc)) -> inverse CDF in token-index order.
// Every decision goes through kernels/exact_rules.h, as the CUDA kernels' do.
// A row_sampler owns (or borrows) the scratch of one worker, sized once for the vocabulary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/exact_rules.h"
#include "kernels/request_view.h"
#include "kernels/sampling_types.h"

namespace ds::cpu {

using exact::filter_cut;

// The drafts a verify row counts as emitted before it (drafts 1..j for row j): penalties apply
// to them as to the request's earlier tokens.
struct drafts_before {
    const int32_t* tokens = nullptr;
    int32_t count = 0;
};

// ---------------------------------------------------------------------------------------------
// Shard-level primitives: the same steps over one rank's slice [vocab_offset, vocab_offset + count)
// of a row, on caller-owned arrays, for exact sharded sampling (docs/semantics.md, "Sharded").
// Token indices are local to the slice unless a name says "global"; penalties, bias and bitmask
// use global ids.
// ---------------------------------------------------------------------------------------------

// Loads row `row` of `shard` (vocab = count) into `out` as floats and applies the penalties (with
// `drafts`), logit bias and bitmask entries that fall into the slice. `bitmask_row` covers the
// full vocab.
void prepare_shard_logits(const logits_view& shard, int64_t row, const request_view& request, drafts_before drafts,
                          const uint32_t* bitmask_row, int32_t vocab_offset, float* out);

// The lowest index of the largest value, NaN and -inf ignored; -1 when none.
int32_t argmax_of(const float* logits, int32_t count);

// mass[i] = exact::token_mass(logits[i], max_logit, scale).
void masses_of(const float* logits, int32_t count, float max_logit, float scale, uint64_t* mass);

// Sum of exact::token_mass(logits[i], max_logit, kUnitScale): the log-softmax normaliser at
// temperature 1, in mass units.
uint64_t unit_mass_sum(const float* logits, int32_t count, float max_logit);

// The cut of a whole row seen from the slice at vocab_offset: the boundary token made local
// (-1 when it lies before the slice, `count` when after).
filter_cut localize_cut(const filter_cut& global, int32_t vocab_offset, int32_t count);

// For tokens with nonzero mass kept by `domain` whose mass >> (shift + 8) equals `prefix`: adds
// one to counts[d] and the mass to masses[d], d = (mass >> shift) & 255 (one radix-select round).
void mass_histogram(const uint64_t* mass, int32_t count, const filter_cut& domain, uint64_t prefix, int shift,
                    uint64_t* counts, uint64_t* masses);

// Tokens kept by `domain` whose mass is exactly q (q > 0).
int64_t count_with_mass(const uint64_t* mass, int32_t count, const filter_cut& domain, uint64_t q);
// The nth (0-based, index order) of them, or -1.
int32_t nth_with_mass(const uint64_t* mass, int32_t count, const filter_cut& domain, uint64_t q, int64_t nth);

// Sum of the masses `cut` keeps.
uint64_t kept_mass(const uint64_t* mass, int32_t count, const filter_cut& cut);

// The first token, in index order, whose inclusive prefix of kept mass exceeds `target`;
// `excluded` (or -1) contributes no mass. -1 when the kept mass is <= target.
int32_t token_at_mass(const uint64_t* mass, int32_t count, const filter_cut& cut, uint64_t target, int32_t excluded);

// log_softmax at temperature 1 of the row as given (before penalties, bias and mask) at `token`.
double raw_logprob(const logits_view& logits, int64_t row, int32_t token);

class row_sampler {
   public:
    // Owns its scratch.
    explicit row_sampler(int32_t vocab);
    // Borrows `scratch_bytes(vocab)` bytes at `scratch` (8-byte aligned).
    row_sampler(int32_t vocab, void* scratch);
    static std::size_t scratch_bytes(int32_t vocab);

    // Returns the row's logits as floats with penalties (counting `drafts` as emitted), logit
    // bias and the bitmask row applied (masked tokens become -inf). Reads fp32 rows in place when
    // nothing modifies them.
    const float* prepare_logits(const logits_view& logits, int64_t row, const request_view& request,
                                drafts_before drafts, const uint32_t* bitmask_row);

    // Greedy choice: the largest logit, NaN and -inf ignored, ties to the lowest index; -1 when
    // no token is allowed.
    int32_t argmax(const float* logits) const;

    // Builds the masses and the filter cut for a stochastic row whose argmax is `top_token`
    // (>= 0). Returns the kept mass M (>= 2^40).
    uint64_t build_distribution(const float* logits, int32_t top_token, const request_view& request);

    // Mass of `token` after filtering (0 when filtered out). Valid after build_distribution.
    uint64_t kept_mass_of(int32_t token) const;

    // The first token, in index order, whose inclusive prefix of kept mass exceeds `target`;
    // `excluded` (or -1) contributes no mass. Valid after build_distribution.
    int32_t token_at(uint64_t target, int32_t excluded) const;

    // log_softmax of the processed logits at `token` at temperature 1 (greedy rows); NaN for -1.
    double greedy_logprob(const float* logits, int32_t top_token, int32_t token) const;
    // Log of the probability of `token` under the row's filtered distribution at `temperature`
    // with kept mass `kept` (stochastic rows, after build_distribution); NaN for -1.
    double filtered_logprob(const float* logits, int32_t top_token, int32_t token, float temperature,
                            uint64_t kept) const;

    const filter_cut& cut() const { return cut_; }

   private:
    int32_t vocab_;
    std::vector<unsigned char> owned_;
    float* logits_;
    uint64_t* mass_;
    int32_t* order_;
    filter_cut cut_;
};

}  // namespace ds::cpu

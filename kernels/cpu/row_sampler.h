// One logits row through the exact sampling pipeline of docs/semantics.md, on the CPU:
//   processed logits (penalties, bias, bitmask) -> argmax -> integer masses Q -> filter cut
//   (top-k, top-p, min-p on (Q desc, index asc)) -> inverse CDF in token-index order.
// A row_sampler owns the scratch of one worker thread, sized once for the vocabulary.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/param_pool.h"
#include "kernels/sampling_types.h"

namespace ds::cpu {

// Which tokens survive filtering: mass >= min_mass, and when has_boundary, no later than the
// boundary token in (mass desc, index asc) order.
struct filter_cut {
    uint64_t min_mass = 1;
    bool has_boundary = false;
    uint64_t boundary_mass = 0;
    int32_t boundary_token = -1;

    bool keeps(int32_t token, uint64_t mass) const {
        if (mass < min_mass) return false;
        if (!has_boundary) return true;
        return mass > boundary_mass || (mass == boundary_mass && token <= boundary_token);
    }
};

// ---------------------------------------------------------------------------------------------
// Shard-level primitives: the same steps over one rank's slice [vocab_offset, vocab_offset + count)
// of a row, on caller-owned arrays, for exact sharded sampling (docs/architecture.md, Modes). Token indices
// are local to the slice unless a name says "global"; penalties, bias and bitmask use global ids.
// ---------------------------------------------------------------------------------------------

// Loads row `row` of `shard` (vocab = count) into `out` as floats and applies the penalties,
// logit bias and bitmask entries that fall into the slice. `bitmask_row` covers the full vocab.
void prepare_shard_logits(const logits_view& shard, int64_t row, const sampling_params& params, token_count_span seen,
                          const uint32_t* bitmask_row, int32_t vocab_offset, float* out);

// The lowest index of the largest value, NaN and -inf ignored; -1 when none.
int32_t argmax_of(const float* logits, int32_t count);

// Q = floor(det_exp((l - max_logit) / T) * 2^40), and 2^40 for l == max_logit (docs/semantics.md, Integer mass).
void masses_of(const float* logits, int32_t count, float max_logit, float temperature, uint64_t* mass);

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

// Sum over the slice of exp(l - max_logit) (1 for l == max_logit, 0 for -inf and NaN), in double:
// the normaliser of log_softmax at temperature 1.
double exp_sum(const float* logits, int32_t count, float max_logit);

class row_sampler {
   public:
    explicit row_sampler(int32_t vocab);

    // Returns the row's logits as floats with penalties, logit bias and the bitmask row applied
    // (masked tokens become -inf). Reads fp32 rows in place when nothing modifies them.
    const float* prepare_logits(const logits_view& logits, int64_t row, const sampling_params& params,
                                token_count_span seen, const uint32_t* bitmask_row);

    // Greedy choice: the largest logit, NaN and -inf ignored, ties to the lowest index; -1 when
    // no token is allowed.
    int32_t argmax(const float* logits) const;

    // Builds the masses and the filter cut for a stochastic row whose argmax is `top_token`
    // (>= 0). Returns the kept mass M (>= 2^40).
    uint64_t build_distribution(const float* logits, int32_t top_token, const sampling_params& params);

    // Mass of `token` after filtering (0 when filtered out). Valid after build_distribution.
    uint64_t kept_mass_of(int32_t token) const;

    // The first token, in index order, whose inclusive prefix of kept mass exceeds `target`;
    // `excluded` (or -1) contributes no mass. Valid after build_distribution.
    int32_t token_at(uint64_t target, int32_t excluded) const;

    // log_softmax of the processed logits at `token`, at temperature 1, given the row's argmax;
    // NaN for token -1.
    double logprob(const float* logits, int32_t top_token, int32_t token) const;

    const filter_cut& cut() const { return cut_; }

   private:
    int32_t vocab_;
    std::vector<float> logits_;
    std::vector<uint64_t> mass_;
    std::vector<int32_t> order_;
    filter_cut cut_;
};

}  // namespace ds::cpu

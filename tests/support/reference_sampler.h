// Test oracles, written from the definitions in docs/semantics.md as plainly as possible (full sort,
// no partial selection), so the optimised backends can be checked against them.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/sampling_types.h"

namespace ds::testing {

// Integer mass of every token after top-k, top-p and min-p, for processed logits `row` of a
// stochastic request. Tokens filtered out (or with no mass) get 0.
std::vector<uint64_t> reference_kept_mass(const std::vector<float>& row, const sampling_params& params);

// The sampling distribution of that request: the kept masses normalised to sum to 1.
std::vector<double> reference_distribution(const std::vector<float>& row, const sampling_params& params);

// A toy corpus for the n-gram models of the speculative decoding statistics tests: small enough
// that the chi-square tests see every continuation often.
constexpr const char* kToyCorpus =
    "the cat sat on the mat . the cat ate the rat . a dog sat on the log . the dog ate the cat food . "
    "a cat and a dog sat on a mat near the log .";

// Greedy reference: largest logit, NaN/-inf ignored, lowest index on ties, -1 if none.
int32_t reference_argmax(const std::vector<float>& row);

// log_softmax(row)[token] in long double.
long double reference_logprob(const std::vector<float>& row, int32_t token);

// The processed log-probability of `token` for a stochastic request: log of its probability
// under exp((l - max) / T) restricted to the kept tokens, in long double.
long double reference_processed_logprob(const std::vector<float>& row, const sampling_params& params,
                                        int32_t token);

}  // namespace ds::testing

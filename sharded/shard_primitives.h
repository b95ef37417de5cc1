// The work a rank does on its own vocab shard in a sharded step, without talking to its peers
// (docs/architecture.md, Modes: sharded). The sharded sampler (sharded_sampler.h) runs the phases
// and the collectives between them; these primitives are what each phase asks of the shard: the
// seam where a device implementation (one kernel per primitive, over every row of the step at
// once, reading the shard where the model wrote it) plugs in beside the CPU one. Every result
// crosses the seam as host integers in the encodings of shard_encoding.h, so the collectives and
// the decisions stay the sampler's and every implementation gives the same tokens
// (kernels/exact_rules.h is the rule book).
//
// Rows are the step's bs * N rows, in request order. Local tokens are indices into the shard.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "config/group_config.h"
#include "core/status.h"
#include "kernels/cpu/row_sampler.h"
#include "kernels/param_pool.h"
#include "kernels/sampling_types.h"
#include "kernels/shard_queries.h"

namespace ds {

class shard_primitives {
   public:
    virtual ~shard_primitives() = default;

    // Row maximum: processes every row of `in.logits` (this rank's shard: penalties, bias and
    // bitmask, docs/semantics.md) and writes each row's argmax key (argmax_key; 0 when nothing
    // is allowed) to keys[row].
    virtual status row_maxima(const step_input& in, const param_pool& pool, int32_t vocab_offset, uint64_t* keys) = 0;

    // Masses, once the rows' global maxima are known: unit_sums[row] is the row's unit-temperature
    // mass (the log-softmax normaliser's part of this shard; rows without a maximum get 0). Each
    // stochastic row k gets its masses at temperatures[k], and counts_and_masses[2k], [2k + 1]
    // their nonzero count and sum.
    virtual status masses(const std::vector<float>& max_logit, const std::vector<uint8_t>& has_max,
                          const std::vector<size_t>& stochastic_rows, const std::vector<float>& temperatures,
                          uint64_t* unit_sums, uint64_t* counts_and_masses) = 0;

    // Candidates: the summary (kSummaryWords words, shard_encoding.h) of each cut row's largest
    // masses, into summaries[i * kSummaryWords].
    virtual status summarize(const std::vector<size_t>& cut_rows, uint64_t* summaries) = 0;
    // Candidate keys (candidate_key) of each request into `keys`, request after request, each
    // padded with 0 to its room; internal error when a row holds more than its room.
    virtual status candidates(const std::vector<candidate_request>& requests, uint64_t* keys) = 0;
    // Each request's own (mass, global token) pairs at or above its threshold, all of them (room
    // is not read), request after request into `out`; ends[i] is where request i's pairs end.
    virtual status own_candidates(const std::vector<candidate_request>& requests, int32_t vocab_offset,
                                  std::vector<std::pair<uint64_t, int32_t>>& out, std::vector<size_t>& ends) = 0;

    // Cut histograms (radix select): for each of `rows` within its local `domains[i]`, the count
    // and mass of tokens per 8-bit digit at `shift` whose higher digits equal prefixes[i], into
    // histograms[i * 512] (256 counts, then 256 masses).
    virtual status cut_histograms(const std::vector<size_t>& rows, const std::vector<cpu::filter_cut>& domains,
                                  const std::vector<uint64_t>& prefixes, int shift, uint64_t* histograms) = 0;
    // For each query (shard_queries.h): counts[i] tokens of its row within its domain have mass
    // exactly q; tokens[i] is the local index of the nth of them (-1: nth < 0, or none).
    virtual status ties_at_mass(const std::vector<tie_query>& queries, int64_t* counts, int32_t* tokens) = 0;

    // For each request: the mass its row keeps within its local cut and the draft's kept mass
    // (0 when the cut drops it or there is none), into kept[2i], kept[2i + 1].
    virtual status kept_masses(const std::vector<kept_request>& requests, uint64_t* kept) = 0;

    // The owners' draws: tokens[i] = the local token at mass draws[i].target of its row's kept
    // distribution without its excluded token; -1 when the target lies past the shard's kept mass.
    virtual status tokens_at_mass(const std::vector<mass_draw>& draws, int32_t* tokens) = 0;
    // Processed logits of tokens (for their logprobs).
    virtual status processed_logits(const std::vector<row_token>& at, float* logits) = 0;
};

// The CPU implementation: processed rows and masses in host buffers sized once for the group's
// largest step.
std::unique_ptr<shard_primitives> make_cpu_shard_primitives(const group_config& config);

// The CUDA implementation: the shard's rows read where the model wrote them (device memory, or
// host rows copied in), processed rows and masses on the current GPU; only per-row results come
// back. Status unsupported in a build without CUDA.
status make_cuda_shard_primitives(const group_config& config, std::unique_ptr<shard_primitives>& out);

}  // namespace ds

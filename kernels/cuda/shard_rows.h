// One rank's vocab shard of a step's rows on its GPU, for exact sharded sampling
// (docs/architecture.md, Modes: sharded): the device side of sharded/cuda_shard_primitives.cpp.
// The shard is processed (penalties, bias, bitmask: the chain kernel's process_chunk) and its
// masses computed in device memory; each query runs one kernel over every row it names and
// returns per-row integers only, so no logits leave the GPU. Every decision goes through
// kernels/exact_rules.h, so the answers equal the CPU primitives' bit for bit.
// No CUDA types here: the sharded sampler's side includes it in builds with CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/param_pool.h"
#include "kernels/sampling_types.h"
#include "kernels/shard_queries.h"

namespace ds::cuda {

class shard_rows {
   public:
    // Device buffers for `max_rows` rows of `shard_vocab` tokens, on the current GPU, of a
    // vocabulary of `vocab` tokens (a bitmask row covers all of it).
    static status create(int64_t max_rows, int32_t shard_vocab, int32_t vocab, std::unique_ptr<shard_rows>& out);
    ~shard_rows();
    shard_rows(const shard_rows&) = delete;
    shard_rows& operator=(const shard_rows&) = delete;

    // Loads and processes the step's rows of `in.logits` (this shard, on the device or the host)
    // for the requests of `pool`; best_index[row] is the local argmax (-1: nothing allowed) and
    // best_logit[row] its processed logit.
    status prepare(const step_input& in, const param_pool& pool, int32_t vocab_offset, float* best_logit,
                   int32_t* best_index);

    // unit_sums[row]: the row's mass at temperature 1 against max_logit[row] (0 without a max).
    // Stochastic row k (stochastic_rows[k]) keeps its masses at temperatures[k];
    // counts_and_masses[2k], [2k + 1] get their nonzero count and sum.
    status masses(const std::vector<float>& max_logit, const std::vector<uint8_t>& has_max,
                  const std::vector<size_t>& stochastic_rows, const std::vector<float>& temperatures,
                  uint64_t* unit_sums, uint64_t* counts_and_masses);

    // For each of `rows` and each depth d of `depths` (ascending): the mass of its min(d, n)-th
    // largest nonzero mass (0 when n = 0) and the sum of its min(d, n) largest, into
    // out[(i * depths + level) * 2], [+ 1].
    status largest_masses(const std::vector<size_t>& rows, const std::vector<uint64_t>& depths, uint64_t* out);

    // For each request, its tokens with mass >= threshold in token order: the first `room`
    // into masses / tokens at the request's offset (requests after one another), and how many
    // there are in all into counts[i].
    status candidates(const std::vector<candidate_request>& requests, uint64_t* masses, int32_t* tokens,
                      uint64_t* counts);

    // Radix-select histograms: see shard_primitives::cut_histograms.
    status cut_histograms(const std::vector<size_t>& rows, const std::vector<exact::filter_cut>& domains,
                          const std::vector<uint64_t>& prefixes, int shift, uint64_t* histograms);
    // Ties at a mass: see shard_primitives::ties_at_mass.
    status ties_at_mass(const std::vector<tie_query>& queries, int64_t* counts, int32_t* tokens);

    status kept_masses(const std::vector<kept_request>& requests, uint64_t* kept);
    status tokens_at_mass(const std::vector<mass_draw>& draws, int32_t* tokens);
    status processed_logits(const std::vector<row_token>& at, float* logits);

   private:
    struct buffers;
    explicit shard_rows(std::unique_ptr<buffers> b);
    std::unique_ptr<buffers> b_;
};

}  // namespace ds::cuda

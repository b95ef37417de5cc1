// Exact sharded sampling (DESIGN.md §2, §4.2): the logits never move. Rank r only reads its vocab
// shard; the ranks agree on each row's distribution through integer collectives:
//   1. all_reduce(max) of an order-preserving (logit, -index) key: the global max m and argmax;
//   2. masses Q with the global m on every shard; all_reduce(sum) of nonzero counts;
//   3. top-k / top-p cut points by radix select on Q (8-bit digits, per-rank count and mass
//      histograms all-reduced), ties at the cut broken by global index through per-rank counts;
//   4. kept mass per rank (all_gather) -> each rank's exclusive prefix; the draft's mass from its
//      owner (all_reduce sum); every rank makes the same accept decisions;
//   5. the rank whose prefix range holds r = mul_high64(bits, M) finds the token (all_reduce max);
//   6. logprobs from per-rank partial sums (all_gather).
// Every rank ends with the same outputs, equal to the CPU backend on the full rows (logprobs to
// within float rounding of the summation order: they are the one float output, DESIGN.md §2).
#pragma once

#include <cstdint>
#include <vector>

#include "actors/dist_step.h"
#include "config/group_config.h"
#include "kernels/param_pool.h"
#include "transport/transport.h"

namespace ds {

class sharded_sampler {
   public:
    sharded_sampler(const group_config& config, int32_t rank);

    status run(const dist_step& step, const param_pool& pool, transport& endpoint, step_outputs& out);

   private:
    struct selection;
    status select_cut(const dist_step& step, transport& endpoint, bool by_mass, bool within_top_k);

    group_config config_;
    int32_t rank_;
    int32_t shard_vocab_;
    int32_t vocab_offset_;
    std::vector<float> logits_;     // [rows, shard_vocab] processed logits
    std::vector<uint64_t> masses_;  // [rows, shard_vocab]
};

}  // namespace ds

// Exact sharded sampling (DESIGN.md §2, §4.2): the logits never move. Rank r only reads its vocab
// shard; the ranks agree on each row's distribution through integer collectives, all rows of a
// step at once:
//   1. all_reduce(max) of an order-preserving (logit, -index) key: the global max m and argmax;
//   2. masses Q with the global m on every shard; all_reduce(sum) of nonzero counts and masses;
//   3. top-k, then top-p, cut points by radix select on Q (8-bit digits, per-rank count and mass
//      histograms all-reduced); ties at the cut go to the lower global index through per-rank
//      counts (all_gather) and the owner's announcement (all_reduce max);
//   4. kept mass per rank and the draft's kept mass (all_gather): every rank makes the same
//      accept decisions and knows every rank's slice of the inverse CDF;
//   5. the rank whose slice holds r = mul_high64(bits, M) finds the token (all_reduce max);
//   6. logprobs from per-rank partial sums (all_gather).
// Every rank ends with the same outputs, equal to the CPU backend on the full rows; logprobs
// agree to float rounding of the summation order (the one float output, DESIGN.md §2).
#pragma once

#include <cstdint>
#include <vector>

#include "actors/dist_step.h"
#include "config/group_config.h"
#include "kernels/cpu/row_sampler.h"
#include "kernels/param_pool.h"
#include "transport/transport.h"

namespace ds {

class sharded_sampler {
   public:
    sharded_sampler(const group_config& config, int32_t rank);

    status run(const dist_step& step, const param_pool& pool, transport& endpoint, step_outputs& out);

   private:
    // Per row: find the boundary of the shortest prefix of the order (Q desc, index asc) over
    // `domains[row]` whose count (or mass) reaches goals[row]; rows with goal 0 are skipped.
    // On return domains[row] holds that boundary (as a cut) and selected[row] the prefix's mass.
    status select_cut(transport& endpoint, const std::vector<uint64_t>& goals, bool by_mass,
                      std::vector<cpu::filter_cut>& cuts, std::vector<uint64_t>& selected);

    const float* row_logits(int64_t row) const { return logits_.data() + row * shard_vocab_; }
    const uint64_t* row_masses(int64_t row) const { return masses_.data() + row * shard_vocab_; }

    // A request's final draw: the target in the row's inverse CDF, without `excluded`.
    struct draw {
        size_t row = 0;
        uint64_t target = 0;
        int32_t excluded = -1;  // global token id or -1
    };

    // Per-step scratch, kept between steps so that a step reuses its memory.
    struct scratch {
        std::vector<uint64_t> keys, totals, goals, top_k_mass, top_p_mass, kept, all_kept, found;
        std::vector<int32_t> top;
        std::vector<float> max_logit;
        std::vector<uint8_t> stochastic, drawing;
        std::vector<cpu::filter_cut> cuts, local_cuts;
        std::vector<draw> draws;
        std::vector<double> partial, all_partials;
        // select_cut
        std::vector<size_t> active;
        std::vector<uint64_t> prefix, above_count, above_mass, histograms, needed, tie_counts, all_tie_counts, announced;
        std::vector<cpu::filter_cut> local_domains;
    };

    int32_t rank_;
    int32_t world_;
    int32_t shard_vocab_;
    int32_t vocab_offset_;
    std::vector<float> logits_;     // [max rows, shard_vocab] processed logits
    std::vector<uint64_t> masses_;  // [max rows, shard_vocab]
    scratch scratch_;
};

}  // namespace ds

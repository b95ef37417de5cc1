// Exact sharded sampling (docs/semantics.md, Sharded; docs/architecture.md, Modes): the logits
// never move. Rank r only reads its vocab shard; the ranks agree on each row's distribution through
// integer collectives, all rows of a step at once:
//   1. all_reduce(max) of an order-preserving (logit, -index) key: the global max m and argmax;
//   2. masses Q with the global m on every shard; all_gather of each rank's log_softmax partial
//      normaliser per row (unit-temperature mass), nonzero count and mass per stochastic row and, for rows with a top-k
//      or top-p cut, a summary of its largest masses (the Q of its 1st, 4th, 16th, 64th, 256th
//      and 1024th largest and the mass above each, rounded down, in one word per depth);
//   3. the top-k-then-top-p boundary of each cut row, from bounded candidates: the summaries give
//      every rank the same threshold q that the boundary's prefix provably reaches and how many
//      tokens with Q >= q each rank holds; every rank but the one holding the most (the decider)
//      all-gathers those tokens as uint64 (Q, index) keys; the decider merges them with its own,
//      finds the boundary and announces it (all_reduce max). A row whose bound needs more than
//      255 tokens from a rank other than the decider (a flat distribution spread over ranks)
//      falls back to a radix select on Q (8-bit digits, per-rank count and mass histograms
//      all-reduced; ties at the cut go to the lower global index through per-rank counts and the
//      owner's announcement);
//   4. kept mass per rank and the draft's kept mass (all_gather): every rank makes the same
//      accept decisions and knows every rank's slice of the inverse CDF;
//   5. the rank whose slice holds r = mul_high64(bits, M) finds the token, and the owner of
//      every emitted token sends its shifted logit (one all_reduce max);
//   6. processed logprobs from those, the kept masses and the normalisers gathered in 2.
// Every rank ends with the same outputs, equal to the CPU backend on the full rows; logprobs
// agree within float rounding (the one float output: docs/semantics.md, Log-probabilities).
#pragma once

#include <cstdint>
#include <utility>
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

    // Samples `step` with `shard` as this rank's vocab shard of its rows.
    status run(const dist_step& step, const logits_view& shard, const param_pool& pool, transport& endpoint,
               step_outputs& out);

   private:
    // Per row: find the boundary of the shortest prefix of the order (Q desc, index asc) over
    // `domains[row]` whose count (or mass) reaches goals[row]; rows with goal 0 are skipped.
    // On return domains[row] holds that boundary (as a cut) and selected[row] the prefix's mass.
    status select_cut(transport& endpoint, const std::vector<uint64_t>& goals, bool by_mass,
                      std::vector<cpu::filter_cut>& cuts, std::vector<uint64_t>& selected);

    // A cut row settled from candidates: the top_k count (top_p then applies inside those
    // tokens) or the top-p mass that the boundary's prefix reaches, and the threshold q that the
    // whole prefix reaches (every token in it has Q >= q).
    struct cut_plan {
        size_t row = 0;
        bool by_count = false;
        uint64_t goal = 0;
        uint64_t threshold = 0;
        int32_t decider = 0;
        float top_p = 1.0f;
    };

    // This rank's summary of `row` (kSummaryWords words, see the .cpp).
    void summarize(size_t row, uint64_t* summary);
    // Plans `row` from every rank's summary and nonzero count; false when some rank other than
    // the decider would have to send too many candidates (the row falls back to radix select).
    bool plan_cut(size_t row, bool by_count, uint64_t goal, const std::vector<const uint64_t*>& summaries,
                  const std::vector<uint64_t>& counts, cut_plan& plan, uint64_t* slots);
    // Candidate exchange and the deciders' announcements for scratch_.plans: sets their cuts.
    status settle_planned_cuts(transport& endpoint, std::vector<cpu::filter_cut>& cuts);

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
        // cut planning and the candidate exchange
        std::vector<size_t> cut_rows;
        std::vector<uint64_t> shared, all_shared, sorted_masses, slots, candidates, all_candidates, announced_cuts;
        std::vector<cut_plan> plans;
        std::vector<std::pair<uint64_t, int32_t>> merged;  // (Q, global token)
        std::vector<int32_t> top;
        std::vector<float> max_logit;
        std::vector<uint8_t> stochastic, drawing, by_radix;
        std::vector<cpu::filter_cut> cuts, local_cuts;
        std::vector<draw> draws;
        std::vector<uint64_t> normaliser;  // per row: the unit-temperature mass summed over ranks
        std::vector<size_t> stochastic_rows, kept_at;
        std::vector<uint64_t> rank_counts;
        // select_cut
        std::vector<size_t> active;
        std::vector<uint64_t> prefix, above_count, above_mass, histograms, needed, tie_counts, all_tie_counts,
            announced;
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

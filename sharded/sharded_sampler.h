// Exact sharded sampling (docs/semantics.md; docs/architecture.md, Modes: sharded): the logits
// never move. Rank r only reads its vocab shard; the ranks agree on each row's distribution through
// integer collectives, all rows of a step at once, in phases:
//   1. row maxima: all_reduce(max) of an order-preserving (logit, -index) key: the global max m
//      and argmax;
//   2. masses: Q with the global m on every shard; all_gather of each rank's log_softmax partial
//      normaliser per row (unit-temperature mass), nonzero count and mass per stochastic row and,
//      for rows with a top-k or top-p cut, a summary of its largest masses (the Q of its 1st, 4th,
//      16th, 64th, 256th and 1024th largest and the mass above each, rounded down, in one word
//      per depth);
//   3. cuts: the top-k-then-top-p boundary of each cut row, from bounded candidates: the
//      summaries give every rank the same threshold q that the boundary's prefix provably reaches
//      and how many tokens with Q >= q each rank holds; every rank but the one holding the most
//      (the decider) all-gathers those tokens as uint64 (Q, index) keys; the decider merges them
//      with its own, finds the boundary and announces it (all_reduce max). A row whose bound
//      needs more than 255 tokens from a rank other than the decider (a flat distribution spread
//      over ranks) falls back to a radix select on Q (8-bit digits, per-rank count and mass
//      histograms all-reduced; ties at the cut go to the lower global index through per-rank
//      counts and the owner's announcement); then min-p;
//   4. kept masses per rank and the draft's kept mass (all_gather): every rank makes the same
//      accept decisions and knows every rank's slice of the inverse CDF;
//   5. the chains: the same accept decisions on every rank, at most one final draw per request;
//   6. the owner's draw: the rank whose slice holds r = mul_high64(bits, M) finds the token, and
//      the owner of every emitted token sends its shifted logit (one all_reduce max);
//   7. processed logprobs from those, the kept masses and the normalisers gathered in 2.
// What each phase computes on the shard is a shard_primitives call (shard_primitives.h: CPU now,
// a device implementation later); the collectives and decisions are here. Every rank ends with
// the same outputs, equal to the CPU backend on the full rows; logprobs agree within float
// rounding (the one float output: docs/semantics.md, Log-probabilities).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "config/group_config.h"
#include "kernels/cpu/row_sampler.h"
#include "kernels/param_pool.h"
#include "kernels/sampling_types.h"
#include "sharded/shard_primitives.h"
#include "transport/transport.h"

namespace ds {

class sharded_sampler {
   public:
    sharded_sampler(const group_config& config, int32_t rank, std::unique_ptr<shard_primitives> primitives);

    // Samples or verifies the step `in` (in.logits: this rank's shard of its bs * N rows) into
    // `out`, sized for bs requests of N tokens.
    status run(const step_input& in, const param_pool& pool, transport& endpoint, const step_output& out);

   private:
    // The phases of run(), in order; each leaves its results in scratch_ for the next.
    status find_row_maxima(const step_input& in, const param_pool& pool, transport& endpoint);
    status share_masses(transport& endpoint);
    status settle_cuts(transport& endpoint);
    status share_kept_masses(transport& endpoint);
    void walk_chains(const step_input& in, const step_output& out);
    status find_drawn_tokens(transport& endpoint, const step_output& out);
    void write_logprobs(const step_output& out);

    // Per row: find the boundary of the shortest prefix of the order (Q desc, index asc) over
    // `cuts[row]` whose count (or mass) reaches goals[row]; rows with goal 0 are skipped.
    // On return cuts[row] holds that boundary and selected[row] the prefix's mass.
    status select_cut(transport& endpoint, const std::vector<uint64_t>& goals, bool by_mass,
                      std::vector<cpu::filter_cut>& cuts, std::vector<uint64_t>& selected);
    // select_cut's digits: the boundary's mass of each active row, and what lies above it.
    status find_boundary_masses(transport& endpoint, const std::vector<uint64_t>& goals, bool by_mass);

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

    // Plans every cut row from every rank's summary; the rows that cannot be planned are marked
    // for radix select.
    void plan_cuts();
    // Plans `row` from every rank's summary and nonzero count; false when some rank other than
    // the decider would have to send too many candidates (the row falls back to radix select).
    bool plan_cut(size_t row, bool by_count, uint64_t goal, const std::vector<const uint64_t*>& summaries,
                  const std::vector<uint64_t>& counts, cut_plan& plan, uint64_t* slots);
    // Candidate exchange and the deciders' announcements for scratch_.plans: sets their cuts.
    status settle_planned_cuts(transport& endpoint, std::vector<cpu::filter_cut>& cuts);
    // The decider's boundary of `plan` from the merged candidates: (Q, global token + 1), or
    // kBrokenBound when they do not reach it.
    std::pair<uint64_t, uint64_t> decide_cut(const cut_plan& plan);

    // A request's final draw: the target in the row's inverse CDF, without `excluded`.
    struct draw {
        size_t row = 0;
        uint64_t target = 0;
        int32_t excluded = -1;  // global token id or -1
    };

    // The kept mass of `row` on rank r, and the draft's kept mass summed over the ranks.
    uint64_t kept_on(int32_t r, size_t row) const;
    uint64_t draft_mass_of(size_t row) const;
    uint64_t kept_in_all(size_t row) const;

    // Per-step state, kept between steps so that a step reuses its memory.
    struct scratch {
        size_t rows = 0;
        int32_t n = 1;
        std::vector<const sampling_params*> params;  // per row
        std::vector<uint64_t> keys, totals, goals, top_k_mass, top_p_mass, kept, all_kept, found;
        // cut planning and the candidate exchange
        std::vector<size_t> cut_rows;
        std::vector<uint64_t> shared, all_shared, slots, candidates, all_candidates, announced_cuts;
        size_t totals_at = 0, summaries_at = 0, stride = 0;  // the layout of a rank's shared block
        std::vector<cut_plan> plans;
        std::vector<candidate_request> requests;
        std::vector<std::pair<uint64_t, int32_t>> merged, own;  // (Q, global token)
        std::vector<size_t> own_ends;
        std::vector<int32_t> top, candidates_of_rows;
        std::vector<float> max_logit, temperatures;
        std::vector<uint8_t> stochastic, has_max, drawing, by_radix;
        std::vector<cpu::filter_cut> cuts, local_cuts;
        std::vector<draw> draws;
        std::vector<kept_request> kept_requests;
        std::vector<mass_draw> owned_draws;  // the draws whose target lies in this rank's slice
        std::vector<size_t> owned_requests;  // their requests
        std::vector<int32_t> drawn;
        std::vector<row_token> emitted;  // emitted tokens this rank owns
        std::vector<float> emitted_logits;
        std::vector<uint64_t> normaliser;  // per row: the unit-temperature mass summed over ranks
        std::vector<size_t> stochastic_rows, kept_at;
        std::vector<uint64_t> rank_counts;
        // select_cut
        std::vector<size_t> active;
        std::vector<uint64_t> prefix, above_count, above_mass, histograms, needed, announced;
        std::vector<tie_query> ties, ties_owned;
        std::vector<int64_t> tie_counts, all_tie_counts, owned_counts;
        std::vector<int32_t> tie_tokens;
        std::vector<size_t> owned_boundaries;
        std::vector<cpu::filter_cut> local_domains;
    };

    int32_t rank_;
    int32_t world_;
    int32_t shard_vocab_;
    int32_t vocab_offset_;
    std::unique_ptr<shard_primitives> primitives_;
    scratch scratch_;
};

}  // namespace ds

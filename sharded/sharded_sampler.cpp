// The phases of a sharded step (sharded_sampler.h) but the cuts (cut_selection.cpp).
#include "sharded/sharded_sampler.h"

#include <algorithm>
#include <limits>

#include "kernels/det_math.h"
#include "kernels/exact_rules.h"
#include "sharded/shard_encoding.h"

namespace ds {

namespace dm = ds::detmath;
using namespace shard_encoding;

sharded_sampler::sharded_sampler(const group_config& config, int32_t rank, std::unique_ptr<shard_primitives> primitives)
    : rank_(rank),
      world_(config.distribution.tp),
      shard_vocab_(config.limits.vocab_size / config.distribution.tp),
      vocab_offset_(rank * shard_vocab_),
      primitives_(std::move(primitives)) {}

status sharded_sampler::run(const step_input& in, const param_pool& pool, transport& endpoint, const step_output& out) {
    DS_TRY(find_row_maxima(in, pool, endpoint));
    DS_TRY(share_masses(endpoint));
    DS_TRY(settle_cuts(endpoint));
    DS_TRY(share_kept_masses(endpoint));
    walk_chains(in, out);
    DS_TRY(find_drawn_tokens(endpoint, out));
    write_logprobs(out);
    return status::success();
}

// 1. Processed shard rows and the global argmax of each.
status sharded_sampler::find_row_maxima(const step_input& in, const param_pool& pool, transport& endpoint) {
    scratch& s = scratch_;
    s.n = in.tokens_per_req;
    s.rows = static_cast<size_t>(in.batch_size) * static_cast<size_t>(s.n);
    s.params.resize(s.rows);
    for (size_t row = 0; row < s.rows; ++row) s.params[row] = &pool.params(in.slots[row / static_cast<size_t>(s.n)]);
    s.candidates_of_rows.assign(in.candidates == nullptr ? 0 : s.rows, 0);
    if (in.candidates != nullptr) std::copy_n(in.candidates, s.rows, s.candidates_of_rows.begin());
    s.keys.assign(s.rows, 0);
    DS_TRY(primitives_->row_maxima(in, pool, vocab_offset_, s.keys.data()));
    DS_TRY(endpoint.all_reduce(s.keys.data(), s.rows, reduce_op::max));
    s.top.assign(s.rows, -1);
    s.max_logit.assign(s.rows, 0.0f);
    s.stochastic.assign(s.rows, 0);
    s.has_max.assign(s.rows, 0);
    for (size_t row = 0; row < s.rows; ++row) {
        if (s.keys[row] == 0) continue;
        s.top[row] = argmax_token(s.keys[row]);
        s.max_logit[row] = argmax_logit(s.keys[row]);
        s.has_max[row] = 1;
        s.stochastic[row] = is_greedy(*s.params[row]) ? 0 : 1;
    }
    return status::success();
}

// 2. Masses with the global max. Every rank's block: its unit-temperature mass of each row (the
// log-softmax normaliser's partial sum), its nonzero count and mass of each stochastic row, and
// its summary of each row with a top-k or top-p cut.
status sharded_sampler::share_masses(transport& endpoint) {
    scratch& s = scratch_;
    const size_t rows = s.rows;
    s.stochastic_rows.clear();
    s.cut_rows.clear();
    s.temperatures.clear();
    for (size_t row = 0; row < rows; ++row) {
        const sampling_params& p = *s.params[row];
        if (!s.stochastic[row]) continue;
        s.stochastic_rows.push_back(row);
        s.temperatures.push_back(p.temperature);
        if (p.top_k >= 0 || p.top_p < 1.0f) s.cut_rows.push_back(row);
    }
    s.totals_at = rows;
    s.summaries_at = s.totals_at + 2 * s.stochastic_rows.size();
    s.stride = s.summaries_at + kSummaryWords * s.cut_rows.size();
    s.shared.assign(s.stride, 0);
    s.all_shared.resize(s.stride * static_cast<size_t>(world_));
    DS_TRY(primitives_->masses(s.max_logit, s.has_max, s.stochastic_rows, s.temperatures, s.shared.data(),
                               s.shared.data() + s.totals_at));
    DS_TRY(primitives_->summarize(s.cut_rows, s.shared.data() + s.summaries_at));
    DS_TRY(endpoint.all_gather(s.shared.data(), s.stride * sizeof(uint64_t), s.all_shared.data()));
    s.totals.assign(2 * rows, 0);  // [count, mass] per row
    s.normaliser.assign(rows, 0);
    s.rank_counts.assign(static_cast<size_t>(world_) * rows, 0);  // [rank, row]
    for (int32_t r = 0; r < world_; ++r) {
        const uint64_t* rank_block = s.all_shared.data() + static_cast<size_t>(r) * s.stride;
        for (size_t row = 0; row < rows; ++row) s.normaliser[row] += rank_block[row];
        for (size_t k = 0; k < s.stochastic_rows.size(); ++k) {
            const size_t row = s.stochastic_rows[k];
            s.rank_counts[static_cast<size_t>(r) * rows + row] = rank_block[s.totals_at + 2 * k];
            s.totals[2 * row] += rank_block[s.totals_at + 2 * k];
            s.totals[2 * row + 1] += rank_block[s.totals_at + 2 * k + 1];
        }
    }
    return status::success();
}

// 4. Every rank's kept mass and the draft's kept mass (from its owner), per stochastic row.
status sharded_sampler::share_kept_masses(transport& endpoint) {
    scratch& s = scratch_;
    const size_t kept_words = 2 * s.stochastic_rows.size();
    s.kept.assign(kept_words, 0);
    s.all_kept.resize(kept_words * static_cast<size_t>(world_));
    s.local_cuts.assign(s.rows, cpu::filter_cut{});
    s.kept_at.assign(s.rows, 0);  // a stochastic row's place in the blocks
    const auto n = static_cast<size_t>(s.n);
    s.kept_requests.clear();
    for (size_t k = 0; k < s.stochastic_rows.size(); ++k) {
        const size_t row = s.stochastic_rows[k];
        s.kept_at[row] = 2 * k;
        s.local_cuts[row] = cpu::localize_cut(s.cuts[row], vocab_offset_, shard_vocab_);
        int32_t draft = -1;
        if (row % n + 1 < n) {
            const int32_t local = s.candidates_of_rows[row + 1] - vocab_offset_;
            if (local >= 0 && local < shard_vocab_) draft = local;
        }
        s.kept_requests.push_back({row, s.local_cuts[row], draft});
    }
    if (kept_words == 0) return status::success();
    DS_TRY(primitives_->kept_masses(s.kept_requests, s.kept.data()));
    return endpoint.all_gather(s.kept.data(), kept_words * sizeof(uint64_t), s.all_kept.data());
}

uint64_t sharded_sampler::kept_on(int32_t r, size_t row) const {
    return scratch_.all_kept[static_cast<size_t>(r) * 2 * scratch_.stochastic_rows.size() + scratch_.kept_at[row]];
}

uint64_t sharded_sampler::draft_mass_of(size_t row) const {
    uint64_t sum = 0;
    for (int32_t r = 0; r < world_; ++r)
        sum +=
            scratch_.all_kept[static_cast<size_t>(r) * 2 * scratch_.stochastic_rows.size() + scratch_.kept_at[row] + 1];
    return sum;
}

uint64_t sharded_sampler::kept_in_all(size_t row) const {
    uint64_t kept = 0;
    for (int32_t r = 0; r < world_; ++r) kept += kept_on(r, row);
    return kept;
}

// 5. The chains: identical decisions on every rank; at most one final draw per request.
void sharded_sampler::walk_chains(const step_input& in, const step_output& out) {
    scratch& s = scratch_;
    const int32_t bs = in.batch_size;
    const int32_t n = s.n;
    s.draws.assign(static_cast<size_t>(bs), draw{});
    s.drawing.assign(static_cast<size_t>(bs), 0);
    int32_t* predict = out.packed;
    int32_t* lengths = out.packed + s.rows;
    std::fill_n(out.packed, s.rows + static_cast<size_t>(bs), -1);
    std::fill_n(out.accept_index, s.rows, -1);
    std::fill_n(out.logprobs, s.rows, std::numeric_limits<float>::quiet_NaN());
    for (int32_t b = 0; b < bs; ++b) {
        const size_t base = static_cast<size_t>(b) * static_cast<size_t>(n);
        const sampling_params& p = *s.params[base];
        const auto position = static_cast<uint64_t>(in.positions[b]);
        int32_t accepted = 0;
        for (int32_t j = 0; j < n; ++j) {
            const size_t row = base + static_cast<size_t>(j);
            const bool has_draft = j + 1 < n;
            const int32_t draft = has_draft ? s.candidates_of_rows[row + 1] : -1;
            bool draft_accepted = false;
            int32_t emitted = -1;
            if (s.top[row] >= 0 && !s.stochastic[row]) {
                draft_accepted = has_draft && draft == s.top[row];
                emitted = s.top[row];
            } else if (s.top[row] >= 0) {
                const uint64_t kept = kept_in_all(row);
                uint64_t draft_mass = 0;
                if (has_draft) {
                    draft_mass = draft_mass_of(row);
                    const double coin =
                        in.coins != nullptr
                            ? in.coins[static_cast<size_t>(b) * static_cast<size_t>(n - 1) + static_cast<size_t>(j)]
                            : dm::bits_to_unit_double(dm::random_bits64(p.seed, position, static_cast<uint32_t>(j + 1),
                                                                        dm::draw_purpose::coin));
                    draft_accepted =
                        exact::accepts_draft(draft_mass, kept, coin, in.thresholds.single, in.thresholds.acc);
                }
                if (!draft_accepted) {
                    const uint64_t bits =
                        in.final_coins != nullptr
                            ? dm::unit_double_to_bits(in.final_coins[b])
                            : dm::random_bits64(p.seed, position, static_cast<uint32_t>(j), dm::draw_purpose::token);
                    const exact::residual rest = exact::residual_after(kept, draft_mass);
                    s.draws[static_cast<size_t>(b)] =
                        draw{row, exact::draw_target(bits, rest.mass), rest.excludes_draft ? draft : -1};
                    s.drawing[static_cast<size_t>(b)] = 1;
                }
            }
            predict[row] = draft_accepted ? draft : emitted;
            out.accept_index[row] = static_cast<int32_t>(row);
            if (!draft_accepted) break;
            ++accepted;
        }
        lengths[b] = accepted + 1;
    }
}

// 6. The owner of each draw's target finds the token: rank slices in rank (= index) order. In
// the same round the owner of every emitted token sends its logit less the row's max (double
// bits, the others send 0) for the logprobs: found = [token + 1 per request | shifted logit per row].
status sharded_sampler::find_drawn_tokens(transport& endpoint, const step_output& out) {
    scratch& s = scratch_;
    const size_t bs = s.draws.size();
    s.found.assign(bs + s.rows, 0);
    // This rank's draws: those whose target lies in its slice.
    s.owned_draws.clear();
    s.owned_requests.clear();
    for (size_t b = 0; b < bs; ++b) {
        if (!s.drawing[b]) continue;
        const draw& d = s.draws[b];
        const int32_t excluded_owner = d.excluded < 0 ? -1 : d.excluded / shard_vocab_;
        uint64_t before = 0;
        for (int32_t r = 0; r < rank_; ++r)
            before += kept_on(r, d.row) - (r == excluded_owner ? draft_mass_of(d.row) : 0);
        const uint64_t own = kept_on(rank_, d.row) - (rank_ == excluded_owner ? draft_mass_of(d.row) : 0);
        if (d.target < before || d.target - before >= own) continue;
        const int32_t excluded_local = rank_ == excluded_owner ? d.excluded - vocab_offset_ : -1;
        s.owned_draws.push_back({d.row, s.local_cuts[d.row], d.target - before, excluded_local});
        s.owned_requests.push_back(b);
    }
    s.drawn.resize(s.owned_draws.size());
    if (!s.owned_draws.empty()) DS_TRY(primitives_->tokens_at_mass(s.owned_draws, s.drawn.data()));
    // The emitted tokens this rank owns, drawn here or accepted, whose logits it sends.
    s.emitted.clear();
    for (size_t i = 0; i < s.owned_draws.size(); ++i) {
        if (s.drawn[i] < 0) continue;
        s.found[s.owned_requests[i]] = static_cast<uint64_t>(vocab_offset_ + s.drawn[i]) + 1;
        s.emitted.push_back({s.owned_draws[i].row, s.drawn[i]});
    }
    const int32_t* predict = out.packed;
    for (size_t row = 0; row < s.rows; ++row) {
        const int32_t token = predict[row] - vocab_offset_;
        if (out.accept_index[row] >= 0 && predict[row] >= 0 && token >= 0 && token < shard_vocab_)
            s.emitted.push_back({row, token});
    }
    s.emitted_logits.resize(s.emitted.size());
    if (!s.emitted.empty()) DS_TRY(primitives_->processed_logits(s.emitted, s.emitted_logits.data()));
    uint64_t* shifted = s.found.data() + bs;
    for (size_t i = 0; i < s.emitted.size(); ++i) {
        const size_t row = s.emitted[i].row;
        shifted[row] = double_bits(exact::shifted_logit(s.emitted_logits[i], s.max_logit[row]));
    }
    DS_TRY(endpoint.all_reduce(s.found.data(), s.found.size(), reduce_op::max));
    for (size_t b = 0; b < bs; ++b) {
        if (s.drawing[b]) out.packed[s.draws[b].row] = static_cast<int32_t>(s.found[b]) - 1;
    }
    return status::success();
}

// 7. Logprobs of the emitted tokens (processed): the owner's shifted logit against the row's
// kept mass at its temperature, or for greedy rows against the whole row at temperature 1.
void sharded_sampler::write_logprobs(const step_output& out) {
    const scratch& s = scratch_;
    const int32_t* predict = out.packed;
    const uint64_t* shifted = s.found.data() + s.draws.size();
    for (size_t row = 0; row < s.rows; ++row) {
        if (out.accept_index[row] < 0 || s.top[row] < 0 || predict[row] < 0) continue;
        const uint64_t mass = s.stochastic[row] ? kept_in_all(row) : s.normaliser[row];
        const float temperature = s.stochastic[row] ? s.params[row]->temperature : 1.0f;
        out.logprobs[row] = static_cast<float>(
            exact::log_probability(from_double_bits(shifted[row]), temperature, exact::mass_weight(mass)));
    }
    const auto bs = static_cast<int32_t>(s.draws.size());
    const int32_t* lengths = out.packed + s.rows;
    for (int32_t b = 0; b < bs; ++b)
        out.row_error[b] = predict[static_cast<size_t>(b) * static_cast<size_t>(s.n) + lengths[b] - 1] < 0 ? 1 : 0;
}

}  // namespace ds

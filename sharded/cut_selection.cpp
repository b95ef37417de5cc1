// Phase 3 of a sharded step (sharded_sampler.h): the top-k and top-p boundaries of the cut rows,
// from bounded candidates where the summaries allow it, else by radix select; then min-p.
#include <algorithm>
#include <limits>

#include "kernels/exact_rules.h"
#include "sharded/shard_encoding.h"
#include "sharded/sharded_sampler.h"

namespace ds {

using namespace shard_encoding;

// top-k, then top-p within the top-k, as in the backend; min_p last. Planned rows settle from
// candidates; the rest by radix select.
status sharded_sampler::settle_cuts(transport& endpoint) {
    scratch& s = scratch_;
    const size_t rows = s.rows;
    s.cuts.assign(rows, cpu::filter_cut{});
    s.goals.assign(rows, 0);
    s.top_k_mass.assign(rows, 0);
    s.by_radix.assign(rows, 0);
    for (size_t row = 0; row < rows; ++row) s.top_k_mass[row] = s.totals[2 * row + 1];
    plan_cuts();
    DS_TRY(settle_planned_cuts(endpoint, s.cuts));
    for (size_t row = 0; row < rows; ++row) {
        const sampling_params& p = *s.params[row];
        if (s.by_radix[row] && p.top_k >= 0 && static_cast<uint64_t>(p.top_k) < s.totals[2 * row])
            s.goals[row] = static_cast<uint64_t>(p.top_k);
    }
    DS_TRY(select_cut(endpoint, s.goals, false, s.cuts, s.top_k_mass));
    for (size_t row = 0; row < rows; ++row) {
        const sampling_params& p = *s.params[row];
        s.goals[row] = s.by_radix[row] && p.top_p < 1.0f ? exact::top_p_mass_target(p.top_p, s.top_k_mass[row]) : 0;
    }
    s.top_p_mass.assign(rows, 0);  // only the cut matters from here on
    DS_TRY(select_cut(endpoint, s.goals, true, s.cuts, s.top_p_mass));
    for (size_t row = 0; row < rows; ++row) s.cuts[row].min_mass = exact::min_p_mass_threshold(s.params[row]->min_p);
    return status::success();
}

void sharded_sampler::plan_cuts() {
    scratch& s = scratch_;
    s.plans.clear();
    s.slots.clear();
    std::vector<const uint64_t*> summaries(static_cast<size_t>(world_));
    std::vector<uint64_t> counts(static_cast<size_t>(world_));
    const auto world = static_cast<size_t>(world_);
    for (size_t i = 0; i < s.cut_rows.size(); ++i) {
        const size_t row = s.cut_rows[i];
        const sampling_params& p = *s.params[row];
        const bool by_count = p.top_k >= 0 && static_cast<uint64_t>(p.top_k) < s.totals[2 * row];
        const uint64_t goal =
            by_count ? static_cast<uint64_t>(p.top_k) : exact::top_p_mass_target(p.top_p, s.totals[2 * row + 1]);
        if (!by_count && goal >= s.totals[2 * row + 1]) continue;  // keeps every token with mass: no boundary
        for (size_t r = 0; r < world; ++r) {
            summaries[r] = s.all_shared.data() + r * s.stride + s.summaries_at + i * kSummaryWords;
            counts[r] = s.rank_counts[r * s.rows + row];
        }
        cut_plan plan;
        plan.top_p = p.top_p;
        s.slots.resize(s.slots.size() + world);
        if (plan_cut(row, by_count, goal, summaries, counts, plan, s.slots.data() + s.slots.size() - world)) {
            s.plans.push_back(plan);
        } else {
            s.slots.resize(s.slots.size() - world);
            s.by_radix[row] = 1;
        }
    }
}

bool sharded_sampler::plan_cut(size_t row, bool by_count, uint64_t goal, const std::vector<const uint64_t*>& summaries,
                               const std::vector<uint64_t>& counts, cut_plan& plan, uint64_t* slots) {
    // A lower bound of the tokens (or mass) with Q >= q over all ranks.
    auto reached = [&](uint64_t q) {
        uint64_t sum = 0;
        for (int32_t r = 0; r < world_; ++r) {
            const uint64_t* summary = summaries[static_cast<size_t>(r)];
            uint64_t best = 0;
            for (int level = 0; level < kLevels && summary_q(summary[level]) >= q; ++level) {
                best =
                    by_count ? std::min(depth_at(level), counts[static_cast<size_t>(r)]) : summary_mass(summary[level]);
            }
            sum += best;
        }
        return sum;
    };
    // The largest summarized Q that the bound shows the boundary's prefix reaches.
    uint64_t threshold = 0;
    for (int32_t r = 0; r < world_; ++r) {
        for (int level = 0; level < kLevels; ++level) {
            const uint64_t q = summary_q(summaries[static_cast<size_t>(r)][level]);
            if (q > threshold && reached(q) >= goal) threshold = q;
        }
    }
    if (threshold == 0) return false;
    // How many tokens with Q >= threshold each rank holds at most; kUnbounded past the summary.
    constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();
    int32_t decider = 0;
    for (int32_t r = 0; r < world_; ++r) {
        const uint64_t* summary = summaries[static_cast<size_t>(r)];
        const uint64_t count = counts[static_cast<size_t>(r)];
        uint64_t most = count <= depth_at(kLevels - 1) ? count : kUnbounded;
        for (int level = 0; level < kLevels; ++level) {
            if (summary_q(summary[level]) < threshold) {
                most = std::min(depth_at(level), count) - (count > 0 ? 1 : 0);
                break;
            }
        }
        slots[r] = most;
        if (most > slots[decider]) decider = r;
    }
    for (int32_t r = 0; r < world_; ++r) {
        if (r != decider && slots[r] > kMaxSent) return false;
    }
    slots[decider] = 0;
    plan.row = row;
    plan.by_count = by_count;
    plan.goal = goal;
    plan.threshold = threshold;
    plan.decider = decider;
    return true;
}

std::pair<uint64_t, uint64_t> sharded_sampler::decide_cut(const cut_plan& plan) {
    std::vector<std::pair<uint64_t, int32_t>>& merged = scratch_.merged;
    std::sort(merged.begin(), merged.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    // top_k, then top_p inside the top_k tokens; or top_p over the row.
    size_t length = merged.size();
    uint64_t goal_mass = plan.goal;
    if (plan.by_count) {
        length = std::min<size_t>(length, plan.goal);
        uint64_t top_k_mass = 0;
        for (size_t i = 0; i < length; ++i) top_k_mass += merged[i].first;
        goal_mass = plan.top_p < 1.0f ? exact::top_p_mass_target(plan.top_p, top_k_mass) : top_k_mass;
    }
    uint64_t prefix = 0;
    for (size_t i = 0; i < length && (!plan.by_count || length == plan.goal); ++i) {
        prefix += merged[i].first;
        if (prefix >= goal_mass) return {merged[i].first, static_cast<uint64_t>(merged[i].second) + 1};
    }
    return {kBrokenBound, 0};
}

status sharded_sampler::settle_planned_cuts(transport& endpoint, std::vector<cpu::filter_cut>& cuts) {
    scratch& s = scratch_;
    const std::vector<cut_plan>& plans = s.plans;
    if (plans.empty()) return status::success();
    const auto world = static_cast<size_t>(world_);
    // Every rank's block holds its candidates for the plans it does not decide, in plan order.
    size_t block = 0;
    for (size_t r = 0; r < world; ++r) {
        size_t sent = 0;
        for (size_t p = 0; p < plans.size(); ++p) sent += s.slots[p * world + r];
        block = std::max(block, sent);
    }
    s.requests.clear();
    for (size_t p = 0; p < plans.size(); ++p)
        s.requests.push_back({plans[p].row, plans[p].threshold, s.slots[p * world + static_cast<size_t>(rank_)]});
    s.candidates.assign(block, 0);
    DS_TRY(primitives_->candidates(s.requests, s.candidates.data()));
    s.all_candidates.resize(block * world);
    if (block > 0) DS_TRY(endpoint.all_gather(s.candidates.data(), block * sizeof(uint64_t), s.all_candidates.data()));
    s.announced_cuts.assign(2 * plans.size(), 0);  // per plan: the boundary's Q and global token + 1
    s.requests.clear();                            // the plans this rank decides, its own candidates in one query
    for (const cut_plan& plan : plans) {
        if (plan.decider == rank_) s.requests.push_back({plan.row, plan.threshold, 0});
    }
    s.own.clear();
    DS_TRY(primitives_->own_candidates(s.requests, vocab_offset_, s.own, s.own_ends));
    std::vector<size_t> read(world, 0);
    size_t decided = 0;
    for (size_t p = 0; p < plans.size(); ++p) {
        if (plans[p].decider == rank_) {
            const size_t begin = decided > 0 ? s.own_ends[decided - 1] : 0;
            s.merged.assign(s.own.begin() + static_cast<std::ptrdiff_t>(begin),
                            s.own.begin() + static_cast<std::ptrdiff_t>(s.own_ends[decided]));
            ++decided;
            for (size_t r = 0; r < world; ++r) {
                const uint64_t* keys = s.all_candidates.data() + r * block + read[r];
                for (size_t k = 0; k < s.slots[p * world + r]; ++k) {
                    if (keys[k] == 0) continue;
                    s.merged.emplace_back(candidate_mass(keys[k]),
                                          static_cast<int32_t>(r) * shard_vocab_ + candidate_token(keys[k]));
                }
            }
            std::tie(s.announced_cuts[2 * p], s.announced_cuts[2 * p + 1]) = decide_cut(plans[p]);
        }
        for (size_t r = 0; r < world; ++r) read[r] += s.slots[p * world + r];
    }
    DS_TRY(endpoint.all_reduce(s.announced_cuts.data(), s.announced_cuts.size(), reduce_op::max));
    for (size_t p = 0; p < plans.size(); ++p) {
        if (s.announced_cuts[2 * p] == kBrokenBound)
            return {status_code::internal, "sharded_sampler: a decider's candidates did not reach its planned cut"};
        cpu::filter_cut& cut = cuts[plans[p].row];
        cut.has_boundary = true;
        cut.boundary_mass = s.announced_cuts[2 * p];
        cut.boundary_token = static_cast<int32_t>(s.announced_cuts[2 * p + 1]) - 1;
    }
    return status::success();
}

// Radix select over Q <= 2^40, six 8-bit digits: prefix[i] ends as the boundary's mass q of
// active row i, above_count[i] and above_mass[i] as what the rows' tokens above q hold.
status sharded_sampler::find_boundary_masses(transport& endpoint, const std::vector<uint64_t>& goals, bool by_mass) {
    scratch& s = scratch_;
    const size_t a = s.active.size();
    s.histograms.resize(a * 2 * kBins);
    for (int shift = 40; shift >= 0; shift -= 8) {
        DS_TRY(primitives_->cut_histograms(s.active, s.local_domains, s.prefix, shift, s.histograms.data()));
        DS_TRY(endpoint.all_reduce(s.histograms.data(), s.histograms.size(), reduce_op::sum));
        for (size_t i = 0; i < a; ++i) {
            const uint64_t* counts = s.histograms.data() + i * 2 * kBins;
            const uint64_t* masses = counts + kBins;
            const uint64_t goal = goals[s.active[i]];
            int digit = 0;
            for (int d = kBins - 1; d >= 0; --d) {
                const uint64_t have = by_mass ? s.above_mass[i] : s.above_count[i];
                if (have + (by_mass ? masses[d] : counts[d]) >= goal) {
                    digit = d;
                    break;
                }
                s.above_count[i] += counts[d];
                s.above_mass[i] += masses[d];
            }
            s.prefix[i] = (s.prefix[i] << 8) | static_cast<uint64_t>(digit);
        }
    }
    return status::success();
}

status sharded_sampler::select_cut(transport& endpoint, const std::vector<uint64_t>& goals, bool by_mass,
                                   std::vector<cpu::filter_cut>& cuts, std::vector<uint64_t>& selected) {
    scratch& s = scratch_;
    s.active.clear();  // the same on every rank: goals are
    for (size_t row = 0; row < goals.size(); ++row) {
        if (goals[row] > 0) s.active.push_back(row);
    }
    if (s.active.empty()) return status::success();
    const size_t a = s.active.size();
    s.prefix.assign(a, 0);
    s.above_count.assign(a, 0);
    s.above_mass.assign(a, 0);
    s.local_domains.assign(a, cpu::filter_cut{});
    for (size_t i = 0; i < a; ++i)
        s.local_domains[i] = cpu::localize_cut(cuts[s.active[i]], vocab_offset_, shard_vocab_);
    DS_TRY(find_boundary_masses(endpoint, goals, by_mass));
    // The boundary is the j-th token of mass q (index order): its owner announces it.
    s.needed.assign(a, 0);
    s.ties.clear();
    for (size_t i = 0; i < a; ++i) {
        const uint64_t q = s.prefix[i];
        const uint64_t goal = goals[s.active[i]];
        s.needed[i] = by_mass ? (goal - s.above_mass[i] + q - 1) / q : goal - s.above_count[i];
        s.ties.push_back({s.active[i], s.local_domains[i], q, -1});
    }
    s.tie_counts.assign(a, 0);
    s.tie_tokens.assign(a, -1);
    DS_TRY(primitives_->ties_at_mass(s.ties, s.tie_counts.data(), s.tie_tokens.data()));
    s.all_tie_counts.resize(a * static_cast<size_t>(world_));
    DS_TRY(endpoint.all_gather(s.tie_counts.data(), a * sizeof(int64_t), s.all_tie_counts.data()));
    // The boundaries that lie among this rank's ties: their owner finds them, in one query.
    std::vector<size_t>& owned = s.owned_boundaries;
    owned.clear();
    s.ties_owned.clear();
    for (size_t i = 0; i < a; ++i) {
        uint64_t before = 0;
        for (int32_t r = 0; r < rank_; ++r)
            before += static_cast<uint64_t>(s.all_tie_counts[static_cast<size_t>(r) * a + i]);
        if (s.needed[i] > before && s.needed[i] <= before + static_cast<uint64_t>(s.tie_counts[i])) {
            tie_query t = s.ties[i];
            t.nth = static_cast<int64_t>(s.needed[i] - before - 1);
            s.ties_owned.push_back(t);
            owned.push_back(i);
        }
    }
    s.owned_counts.assign(owned.size(), 0);
    s.tie_tokens.assign(owned.size(), -1);
    if (!owned.empty()) DS_TRY(primitives_->ties_at_mass(s.ties_owned, s.owned_counts.data(), s.tie_tokens.data()));
    s.announced.assign(a, 0);  // the boundary's global index + 1, from its owner
    for (size_t k = 0; k < owned.size(); ++k)
        s.announced[owned[k]] = static_cast<uint64_t>(vocab_offset_ + s.tie_tokens[k]) + 1;
    DS_TRY(endpoint.all_reduce(s.announced.data(), a, reduce_op::max));
    for (size_t i = 0; i < a; ++i) {
        cpu::filter_cut& cut = cuts[s.active[i]];
        cut.has_boundary = true;
        cut.boundary_mass = s.prefix[i];
        cut.boundary_token = static_cast<int32_t>(s.announced[i]) - 1;
        selected[s.active[i]] = s.above_mass[i] + s.needed[i] * s.prefix[i];
    }
    return status::success();
}

}  // namespace ds

#include "actors/sharded_sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "kernels/det_math.h"
#include "kernels/exact_rules.h"

namespace ds {

namespace dm = ds::detmath;

namespace {

// Monotone map of a float to uint32 (larger float, larger key). -0.0 counts as +0.0, as the
// backend's `>` comparison does.
uint32_t ordered_bits(float f) {
    const uint32_t u = dm::float_as_bits(f == 0.0f ? 0.0f : f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

float from_ordered_bits(uint32_t o) { return dm::bits_as_float((o & 0x80000000u) ? (o & 0x7FFFFFFFu) : ~o); }

// (logit, -index) packed so that all_reduce(max) yields the max logit at the lowest index; 0 = none.
uint64_t argmax_key(float logit, int32_t global_token) {
    return (uint64_t{ordered_bits(logit)} << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(global_token));
}

constexpr int kBins = 256;

uint64_t double_bits(double d) {
    uint64_t u = 0;
    std::memcpy(&u, &d, sizeof(u));
    return u;
}

double from_double_bits(uint64_t u) {
    double d = 0.0;
    std::memcpy(&d, &u, sizeof(d));
    return d;
}

// A rank's summary of a cut row: for each depth d in 1, 4, 16, 64, 256, 1024, with n its tokens of
// nonzero mass, the Q of its min(d, n)-th largest mass (0 when n = 0) and the sum of its
// min(d, n) largest masses, rounded down. Lower bounds of how many tokens (and how much mass)
// have Q >= q follow for any q, and upper bounds of how many tokens of the rank do. One word per
// depth: Q (<= 2^40, 41 bits) above the rounded mass (23 bits).
constexpr int kLevels = 6;
constexpr size_t kSummaryWords = kLevels;
constexpr uint64_t depth_at(int level) { return uint64_t{1} << (2 * level); }

// A mass (< 2^64) rounded down to 17 significant bits as (6-bit shift, 17-bit mantissa): still a
// lower bound, 2^-16 relative at worst.
constexpr int kMantissaBits = 17;
constexpr int kRoundedMassBits = 23;
constexpr uint64_t kRoundedMassMask = (uint64_t{1} << kRoundedMassBits) - 1;

uint64_t round_down_mass(uint64_t mass) {
    int shift = 0;
    while ((mass >> shift) >= (uint64_t{1} << kMantissaBits)) ++shift;
    return (static_cast<uint64_t>(shift) << kMantissaBits) | (mass >> shift);
}

uint64_t rounded_mass_value(uint64_t code) {
    return (code & ((uint64_t{1} << kMantissaBits) - 1)) << (code >> kMantissaBits);
}

uint64_t summary_word(uint64_t q, uint64_t mass_above) { return (q << kRoundedMassBits) | round_down_mass(mass_above); }
uint64_t summary_q(uint64_t word) { return word >> kRoundedMassBits; }
uint64_t summary_mass(uint64_t word) { return rounded_mass_value(word & kRoundedMassMask); }
// The most candidates a rank other than the decider sends for one row (bounds the exchange by
// 255 words per row, within the transport's buffers).
constexpr uint64_t kMaxSent = 255;

// A candidate on the wire: Q (<= 2^40) above the complemented index local to its shard, so that
// a larger key comes first in (Q desc, index asc); 0 is padding (Q >= 1). Shards of ranks that
// send candidates (TP >= 2) hold at most 2^24 / 2 tokens (config: V <= 2^24).
constexpr int kIndexBits = 23;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
uint64_t candidate_key(uint64_t q, int32_t local_token) {
    return (q << kIndexBits) | (kIndexMask - static_cast<uint64_t>(local_token));
}

// What a decider announces when its candidates did not reach the bound it was promised (a bug):
// every rank then fails the step instead of sampling from different cuts.
constexpr uint64_t kBrokenBound = std::numeric_limits<uint64_t>::max();

}  // namespace

sharded_sampler::sharded_sampler(const group_config& config, int32_t rank)
    : rank_(rank),
      world_(config.tp),
      shard_vocab_(config.vocab_size / config.tp),
      vocab_offset_(rank * shard_vocab_),
      logits_(static_cast<size_t>(config.max_batch) * static_cast<size_t>(config.max_tokens_per_req) *
              static_cast<size_t>(shard_vocab_)),
      masses_(logits_.size()) {}

status sharded_sampler::select_cut(transport& endpoint, const std::vector<uint64_t>& goals, bool by_mass,
                                   std::vector<cpu::filter_cut>& cuts, std::vector<uint64_t>& selected) {
    std::vector<size_t>& active = scratch_.active;  // the same on every rank: goals are
    active.clear();
    for (size_t row = 0; row < goals.size(); ++row) {
        if (goals[row] > 0) active.push_back(row);
    }
    if (active.empty()) return status::success();
    const size_t a = active.size();
    std::vector<uint64_t>& prefix = scratch_.prefix;
    std::vector<uint64_t>& above_count = scratch_.above_count;
    std::vector<uint64_t>& above_mass = scratch_.above_mass;
    std::vector<cpu::filter_cut>& local = scratch_.local_domains;
    prefix.assign(a, 0);
    above_count.assign(a, 0);
    above_mass.assign(a, 0);
    local.assign(a, cpu::filter_cut{});
    for (size_t i = 0; i < a; ++i) local[i] = cpu::localize_cut(cuts[active[i]], vocab_offset_, shard_vocab_);
    std::vector<uint64_t>& histograms = scratch_.histograms;
    histograms.resize(a * 2 * kBins);
    // Q <= 2^40 fits in six 8-bit digits.
    for (int shift = 40; shift >= 0; shift -= 8) {
        std::fill(histograms.begin(), histograms.end(), 0);
        for (size_t i = 0; i < a; ++i) {
            uint64_t* counts = histograms.data() + i * 2 * kBins;
            cpu::mass_histogram(row_masses(static_cast<int64_t>(active[i])), shard_vocab_, local[i], prefix[i], shift,
                                counts, counts + kBins);
        }
        if (status s = endpoint.all_reduce(histograms.data(), histograms.size(), reduce_op::sum); !s.is_ok()) return s;
        for (size_t i = 0; i < a; ++i) {
            const uint64_t* counts = histograms.data() + i * 2 * kBins;
            const uint64_t* masses = counts + kBins;
            const uint64_t goal = goals[active[i]];
            int digit = 0;
            for (int d = kBins - 1; d >= 0; --d) {
                const uint64_t have = by_mass ? above_mass[i] : above_count[i];
                if (have + (by_mass ? masses[d] : counts[d]) >= goal) {
                    digit = d;
                    break;
                }
                above_count[i] += counts[d];
                above_mass[i] += masses[d];
            }
            prefix[i] = (prefix[i] << 8) | static_cast<uint64_t>(digit);
        }
    }
    // prefix is now the boundary's mass q; the boundary is the j-th token of mass q (index order).
    std::vector<uint64_t>& needed = scratch_.needed;
    std::vector<uint64_t>& mine = scratch_.tie_counts;
    std::vector<uint64_t>& every = scratch_.all_tie_counts;
    needed.assign(a, 0);
    mine.assign(a, 0);
    every.resize(a * static_cast<size_t>(world_));
    for (size_t i = 0; i < a; ++i) {
        const uint64_t q = prefix[i];
        const uint64_t goal = goals[active[i]];
        needed[i] = by_mass ? (goal - above_mass[i] + q - 1) / q : goal - above_count[i];
        mine[i] = static_cast<uint64_t>(
            cpu::count_with_mass(row_masses(static_cast<int64_t>(active[i])), shard_vocab_, local[i], q));
    }
    if (status s = endpoint.all_gather(mine.data(), a * sizeof(uint64_t), every.data()); !s.is_ok()) return s;
    std::vector<uint64_t>& announced = scratch_.announced;  // boundary's global index + 1, from its owner
    announced.assign(a, 0);
    for (size_t i = 0; i < a; ++i) {
        uint64_t before = 0;
        for (int32_t r = 0; r < rank_; ++r) before += every[static_cast<size_t>(r) * a + i];
        if (needed[i] > before && needed[i] <= before + mine[i]) {
            const int32_t token = cpu::nth_with_mass(row_masses(static_cast<int64_t>(active[i])), shard_vocab_,
                                                     local[i], prefix[i], static_cast<int64_t>(needed[i] - before - 1));
            announced[i] = static_cast<uint64_t>(vocab_offset_ + token) + 1;
        }
    }
    if (status s = endpoint.all_reduce(announced.data(), a, reduce_op::max); !s.is_ok()) return s;
    for (size_t i = 0; i < a; ++i) {
        cpu::filter_cut& cut = cuts[active[i]];
        cut.has_boundary = true;
        cut.boundary_mass = prefix[i];
        cut.boundary_token = static_cast<int32_t>(announced[i]) - 1;
        selected[active[i]] = above_mass[i] + needed[i] * prefix[i];
    }
    return status::success();
}

void sharded_sampler::summarize(size_t row, uint64_t* summary) {
    const uint64_t* mass = row_masses(static_cast<int64_t>(row));
    std::vector<uint64_t>& sorted = scratch_.sorted_masses;
    sorted.clear();
    for (int32_t i = 0; i < shard_vocab_; ++i) {
        if (mass[i] > 0) sorted.push_back(mass[i]);
    }
    const size_t largest = std::min<size_t>(sorted.size(), depth_at(kLevels - 1));
    std::partial_sort(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(largest), sorted.end(),
                      std::greater<>());
    uint64_t above = 0;
    size_t summed = 0;
    for (int level = 0; level < kLevels; ++level) {
        const size_t covered = std::min<size_t>(largest, depth_at(level));
        for (; summed < covered; ++summed) above += sorted[summed];
        summary[level] = summary_word(covered > 0 ? sorted[covered - 1] : 0, above);
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

status sharded_sampler::settle_planned_cuts(transport& endpoint, std::vector<cpu::filter_cut>& cuts) {
    const std::vector<cut_plan>& plans = scratch_.plans;
    if (plans.empty()) return status::success();
    const size_t world = static_cast<size_t>(world_);
    const std::vector<uint64_t>& slots = scratch_.slots;  // [plan, rank]
    // Every rank's block holds its candidates for the plans it does not decide, in plan order.
    size_t block = 0;
    for (size_t r = 0; r < world; ++r) {
        size_t sent = 0;
        for (size_t p = 0; p < plans.size(); ++p) sent += slots[p * world + r];
        block = std::max(block, sent);
    }
    std::vector<uint64_t>& candidates = scratch_.candidates;
    candidates.assign(block, 0);
    size_t at = 0;
    for (size_t p = 0; p < plans.size(); ++p) {
        const size_t room = slots[p * world + static_cast<size_t>(rank_)];
        const uint64_t* mass = row_masses(static_cast<int64_t>(plans[p].row));
        size_t written = 0;
        for (int32_t i = 0; i < shard_vocab_ && room > 0; ++i) {
            if (mass[i] < plans[p].threshold) continue;
            if (written == room)
                return {status_code::internal, "sharded_sampler: a rank holds more candidates than its summary bound"};
            candidates[at + written++] = candidate_key(mass[i], i);
        }
        at += room;
    }
    std::vector<uint64_t>& every = scratch_.all_candidates;
    every.resize(block * world);
    if (block > 0) {
        if (status s = endpoint.all_gather(candidates.data(), block * sizeof(uint64_t), every.data()); !s.is_ok())
            return s;
    }
    std::vector<uint64_t>& announced = scratch_.announced_cuts;  // per plan: the boundary's Q and global token + 1
    announced.assign(2 * plans.size(), 0);
    std::vector<size_t> read(world, 0);
    std::vector<std::pair<uint64_t, int32_t>>& merged = scratch_.merged;
    auto earlier = [](const std::pair<uint64_t, int32_t>& a, const std::pair<uint64_t, int32_t>& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
    };
    for (size_t p = 0; p < plans.size(); ++p) {
        const cut_plan& plan = plans[p];
        if (plan.decider == rank_) {
            merged.clear();
            const uint64_t* mass = row_masses(static_cast<int64_t>(plan.row));
            for (int32_t i = 0; i < shard_vocab_; ++i) {
                if (mass[i] >= plan.threshold) merged.emplace_back(mass[i], vocab_offset_ + i);
            }
            for (size_t r = 0; r < world; ++r) {
                const uint64_t* keys = every.data() + r * block + read[r];
                for (size_t k = 0; k < slots[p * world + r]; ++k) {
                    if (keys[k] == 0) continue;
                    const int32_t local = static_cast<int32_t>(kIndexMask - (keys[k] & kIndexMask));
                    merged.emplace_back(keys[k] >> kIndexBits, static_cast<int32_t>(r) * shard_vocab_ + local);
                }
            }
            std::sort(merged.begin(), merged.end(), earlier);
            // top_k, then top_p inside the top_k tokens; or top_p over the row.
            size_t length = merged.size();
            uint64_t goal_mass = plan.goal;
            if (plan.by_count) {
                length = std::min<size_t>(length, plan.goal);
                uint64_t top_k_mass = 0;
                for (size_t i = 0; i < length; ++i) top_k_mass += merged[i].first;
                goal_mass = plan.top_p < 1.0f ? exact::top_p_mass_target(plan.top_p, top_k_mass) : top_k_mass;
            }
            announced[2 * p] = kBrokenBound;
            uint64_t prefix = 0;
            for (size_t i = 0; i < length && (!plan.by_count || length == plan.goal); ++i) {
                prefix += merged[i].first;
                if (prefix >= goal_mass) {
                    announced[2 * p] = merged[i].first;
                    announced[2 * p + 1] = static_cast<uint64_t>(merged[i].second) + 1;
                    break;
                }
            }
        }
        for (size_t r = 0; r < world; ++r) read[r] += slots[p * world + r];
    }
    if (status s = endpoint.all_reduce(announced.data(), announced.size(), reduce_op::max); !s.is_ok()) return s;
    for (size_t p = 0; p < plans.size(); ++p) {
        if (announced[2 * p] == kBrokenBound)
            return {status_code::internal, "sharded_sampler: a decider's candidates did not reach its planned cut"};
        cpu::filter_cut& cut = cuts[plans[p].row];
        cut.has_boundary = true;
        cut.boundary_mass = announced[2 * p];
        cut.boundary_token = static_cast<int32_t>(announced[2 * p + 1]) - 1;
    }
    return status::success();
}

status sharded_sampler::run(const dist_step& step, const logits_view& shard, const param_pool& pool,
                            transport& endpoint, step_outputs& out) {
    const int32_t bs = step.plan.bs;
    const int32_t n = step.plan.tokens_per_req;
    const size_t rows = static_cast<size_t>(bs) * static_cast<size_t>(n);
    const int32_t words = bitmask_words(shard_vocab_ * world_);
    auto params_of = [&](size_t row) -> const sampling_params& {
        return pool.params(step.slots[row / static_cast<size_t>(n)]);
    };

    // 1. Processed shard rows and the global argmax of each.
    std::vector<uint64_t>& keys = scratch_.keys;
    keys.assign(rows, 0);
    for (size_t row = 0; row < rows; ++row) {
        const int32_t slot = step.slots[row / static_cast<size_t>(n)];
        const uint32_t* mask = step.bitmask.empty() ? nullptr : step.bitmask.data() + row * static_cast<size_t>(words);
        float* l = logits_.data() + row * static_cast<size_t>(shard_vocab_);
        const size_t j = row % static_cast<size_t>(n);
        const cpu::drafts_before drafts{step.candidates.empty() ? nullptr : step.candidates.data() + row - j + 1,
                                        static_cast<int32_t>(j)};
        cpu::prepare_shard_logits(shard, static_cast<int64_t>(row),
                                  pool.request(slot, step.positions[row / static_cast<size_t>(n)]), drafts, mask,
                                  vocab_offset_, l);
        const int32_t best = cpu::argmax_of(l, shard_vocab_);
        if (best >= 0) keys[row] = argmax_key(l[best], vocab_offset_ + best);
    }
    if (status s = endpoint.all_reduce(keys.data(), rows, reduce_op::max); !s.is_ok()) return s;
    std::vector<int32_t>& top = scratch_.top;
    std::vector<float>& max_logit = scratch_.max_logit;
    std::vector<uint8_t>& stochastic = scratch_.stochastic;
    top.assign(rows, -1);
    max_logit.assign(rows, 0.0f);
    stochastic.assign(rows, 0);
    for (size_t row = 0; row < rows; ++row) {
        if (keys[row] == 0) continue;
        top[row] = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(keys[row]));
        max_logit[row] = from_ordered_bits(static_cast<uint32_t>(keys[row] >> 32));
        stochastic[row] = is_greedy(params_of(row)) ? 0 : 1;
    }

    // 2. Masses with the global max. Every rank's block: its unit-temperature mass of each row (the
    // log-softmax normaliser's partial sum), its nonzero count and mass of each stochastic row, and its
    // summary of each row with a top-k or top-p cut.
    std::vector<size_t>& stochastic_rows = scratch_.stochastic_rows;
    std::vector<size_t>& cut_rows = scratch_.cut_rows;
    stochastic_rows.clear();
    cut_rows.clear();
    for (size_t row = 0; row < rows; ++row) {
        const sampling_params& p = params_of(row);
        if (stochastic[row]) stochastic_rows.push_back(row);
        if (stochastic[row] && (p.top_k >= 0 || p.top_p < 1.0f)) cut_rows.push_back(row);
    }
    const size_t totals_at = rows;
    const size_t summaries_at = totals_at + 2 * stochastic_rows.size();
    const size_t stride = summaries_at + kSummaryWords * cut_rows.size();
    std::vector<uint64_t>& shared = scratch_.shared;
    std::vector<uint64_t>& all_shared = scratch_.all_shared;
    shared.assign(stride, 0);
    all_shared.resize(stride * static_cast<size_t>(world_));
    for (size_t row = 0; row < rows; ++row) {
        if (top[row] >= 0)
            shared[row] = cpu::unit_mass_sum(row_logits(static_cast<int64_t>(row)), shard_vocab_, max_logit[row]);
    }
    for (size_t k = 0; k < stochastic_rows.size(); ++k) {
        const size_t row = stochastic_rows[k];
        uint64_t* mass = masses_.data() + row * static_cast<size_t>(shard_vocab_);
        cpu::masses_of(row_logits(static_cast<int64_t>(row)), shard_vocab_, max_logit[row],
                       exact::mass_scale(params_of(row).temperature), mass);
        for (int32_t i = 0; i < shard_vocab_; ++i) {
            shared[totals_at + 2 * k] += mass[i] > 0 ? 1 : 0;
            shared[totals_at + 2 * k + 1] += mass[i];
        }
    }
    for (size_t i = 0; i < cut_rows.size(); ++i)
        summarize(cut_rows[i], shared.data() + summaries_at + i * kSummaryWords);
    if (status s = endpoint.all_gather(shared.data(), stride * sizeof(uint64_t), all_shared.data()); !s.is_ok())
        return s;
    std::vector<uint64_t>& totals = scratch_.totals;  // [count, mass] per row
    std::vector<uint64_t>& normaliser = scratch_.normaliser;
    std::vector<uint64_t>& rank_counts = scratch_.rank_counts;  // [rank, row]
    totals.assign(2 * rows, 0);
    normaliser.assign(rows, 0);
    rank_counts.assign(static_cast<size_t>(world_) * rows, 0);
    for (int32_t r = 0; r < world_; ++r) {
        const uint64_t* rank_block = all_shared.data() + static_cast<size_t>(r) * stride;
        for (size_t row = 0; row < rows; ++row) normaliser[row] += rank_block[row];
        for (size_t k = 0; k < stochastic_rows.size(); ++k) {
            const size_t row = stochastic_rows[k];
            rank_counts[static_cast<size_t>(r) * rows + row] = rank_block[totals_at + 2 * k];
            totals[2 * row] += rank_block[totals_at + 2 * k];
            totals[2 * row + 1] += rank_block[totals_at + 2 * k + 1];
        }
    }

    // 3. top-k, then top-p within the top-k, as in the backend; min_p last. Planned rows settle
    // from candidates; the rest by radix select.
    std::vector<cpu::filter_cut>& cuts = scratch_.cuts;
    std::vector<uint64_t>& goals = scratch_.goals;
    std::vector<uint64_t>& top_k_mass = scratch_.top_k_mass;
    std::vector<uint8_t>& by_radix = scratch_.by_radix;
    cuts.assign(rows, cpu::filter_cut{});
    goals.assign(rows, 0);
    top_k_mass.assign(rows, 0);
    by_radix.assign(rows, 0);
    for (size_t row = 0; row < rows; ++row) top_k_mass[row] = totals[2 * row + 1];
    std::vector<cut_plan>& plans = scratch_.plans;
    std::vector<uint64_t>& slots = scratch_.slots;
    plans.clear();
    slots.clear();
    std::vector<const uint64_t*> summaries(static_cast<size_t>(world_));
    std::vector<uint64_t> counts(static_cast<size_t>(world_));
    for (size_t i = 0; i < cut_rows.size(); ++i) {
        const size_t row = cut_rows[i];
        const sampling_params& p = params_of(row);
        const bool by_count = p.top_k >= 0 && static_cast<uint64_t>(p.top_k) < totals[2 * row];
        const uint64_t goal =
            by_count ? static_cast<uint64_t>(p.top_k) : exact::top_p_mass_target(p.top_p, totals[2 * row + 1]);
        if (!by_count && goal >= totals[2 * row + 1]) continue;  // keeps every token with mass: no boundary
        for (int32_t r = 0; r < world_; ++r) {
            summaries[static_cast<size_t>(r)] =
                all_shared.data() + static_cast<size_t>(r) * stride + summaries_at + i * kSummaryWords;
            counts[static_cast<size_t>(r)] = rank_counts[static_cast<size_t>(r) * rows + row];
        }
        cut_plan plan;
        plan.top_p = p.top_p;
        slots.resize(slots.size() + static_cast<size_t>(world_));
        if (plan_cut(row, by_count, goal, summaries, counts, plan,
                     slots.data() + slots.size() - static_cast<size_t>(world_))) {
            plans.push_back(plan);
        } else {
            slots.resize(slots.size() - static_cast<size_t>(world_));
            by_radix[row] = 1;
        }
    }
    if (status s = settle_planned_cuts(endpoint, cuts); !s.is_ok()) return s;
    for (size_t row = 0; row < rows; ++row) {
        const sampling_params& p = params_of(row);
        if (by_radix[row] && p.top_k >= 0 && static_cast<uint64_t>(p.top_k) < totals[2 * row])
            goals[row] = static_cast<uint64_t>(p.top_k);
    }
    if (status s = select_cut(endpoint, goals, false, cuts, top_k_mass); !s.is_ok()) return s;
    for (size_t row = 0; row < rows; ++row) {
        const sampling_params& p = params_of(row);
        goals[row] = by_radix[row] && p.top_p < 1.0f ? exact::top_p_mass_target(p.top_p, top_k_mass[row]) : 0;
    }
    std::vector<uint64_t>& top_p_mass = scratch_.top_p_mass;  // only the cut matters from here on
    top_p_mass.assign(rows, 0);
    if (status s = select_cut(endpoint, goals, true, cuts, top_p_mass); !s.is_ok()) return s;
    for (size_t row = 0; row < rows; ++row) cuts[row].min_mass = exact::min_p_mass_threshold(params_of(row).min_p);

    // 4. Every rank's kept mass and the draft's kept mass (from its owner), per stochastic row.
    std::vector<uint64_t>& mine = scratch_.kept;
    std::vector<uint64_t>& every = scratch_.all_kept;
    std::vector<cpu::filter_cut>& local_cuts = scratch_.local_cuts;
    std::vector<size_t>& kept_at = scratch_.kept_at;  // a stochastic row's place in the blocks
    const size_t kept_words = 2 * stochastic_rows.size();
    mine.assign(kept_words, 0);
    every.resize(kept_words * static_cast<size_t>(world_));
    local_cuts.assign(rows, cpu::filter_cut{});
    kept_at.assign(rows, 0);
    for (size_t k = 0; k < stochastic_rows.size(); ++k) {
        const size_t row = stochastic_rows[k];
        kept_at[row] = 2 * k;
        local_cuts[row] = cpu::localize_cut(cuts[row], vocab_offset_, shard_vocab_);
        const uint64_t* mass = row_masses(static_cast<int64_t>(row));
        mine[2 * k] = cpu::kept_mass(mass, shard_vocab_, local_cuts[row]);
        const size_t b = row / static_cast<size_t>(n);
        const size_t j = row % static_cast<size_t>(n);
        if (j + 1 < static_cast<size_t>(n)) {
            const int32_t draft = step.candidates[b * static_cast<size_t>(n) + j + 1] - vocab_offset_;
            if (draft >= 0 && draft < shard_vocab_ && local_cuts[row].keeps(draft, mass[draft]))
                mine[2 * k + 1] = mass[draft];
        }
    }
    if (kept_words > 0) {
        if (status s = endpoint.all_gather(mine.data(), kept_words * sizeof(uint64_t), every.data()); !s.is_ok())
            return s;
    }
    auto kept_on = [&](int32_t r, size_t row) { return every[static_cast<size_t>(r) * kept_words + kept_at[row]]; };
    auto draft_mass_of = [&](size_t row) {
        uint64_t sum = 0;
        for (int32_t r = 0; r < world_; ++r) sum += every[static_cast<size_t>(r) * kept_words + kept_at[row] + 1];
        return sum;
    };

    // 5. The chains: identical decisions on every rank; at most one final draw per request.
    std::vector<draw>& draws = scratch_.draws;
    std::vector<uint8_t>& drawing = scratch_.drawing;
    draws.assign(static_cast<size_t>(bs), draw{});
    drawing.assign(static_cast<size_t>(bs), 0);
    int32_t* predict = out.packed.data();
    int32_t* lengths = out.packed.data() + rows;
    std::fill(out.packed.begin(), out.packed.end(), -1);
    std::fill(out.accept_index.begin(), out.accept_index.end(), -1);
    std::fill(out.logprobs.begin(), out.logprobs.end(), std::numeric_limits<float>::quiet_NaN());
    for (int32_t b = 0; b < bs; ++b) {
        const sampling_params& p = pool.params(step.slots[static_cast<size_t>(b)]);
        const uint64_t position = static_cast<uint64_t>(step.positions[static_cast<size_t>(b)]);
        const size_t base = static_cast<size_t>(b) * static_cast<size_t>(n);
        int32_t accepted = 0;
        for (int32_t j = 0; j < n; ++j) {
            const size_t row = base + static_cast<size_t>(j);
            const bool has_draft = j + 1 < n;
            const int32_t draft = has_draft ? step.candidates[row + 1] : -1;
            bool draft_accepted = false;
            int32_t emitted = -1;
            if (top[row] < 0) {
                emitted = -1;
            } else if (!stochastic[row]) {
                draft_accepted = has_draft && draft == top[row];
                emitted = top[row];
            } else {
                uint64_t kept = 0;
                for (int32_t r = 0; r < world_; ++r) kept += kept_on(r, row);
                uint64_t draft_mass = 0;
                if (has_draft) {
                    draft_mass = draft_mass_of(row);
                    const double coin =
                        !step.coins.empty()
                            ? step.coins[static_cast<size_t>(b) * static_cast<size_t>(n - 1) + static_cast<size_t>(j)]
                            : dm::bits_to_unit_double(dm::random_bits64(p.seed, position, static_cast<uint32_t>(j + 1),
                                                                        dm::draw_purpose::coin));
                    draft_accepted =
                        exact::accepts_draft(draft_mass, kept, coin, step.thresholds.single, step.thresholds.acc);
                }
                if (!draft_accepted) {
                    const uint64_t bits =
                        !step.final_coins.empty()
                            ? dm::unit_double_to_bits(step.final_coins[static_cast<size_t>(b)])
                            : dm::random_bits64(p.seed, position, static_cast<uint32_t>(j), dm::draw_purpose::token);
                    const exact::residual rest = exact::residual_after(kept, draft_mass);
                    draws[static_cast<size_t>(b)] =
                        draw{row, exact::draw_target(bits, rest.mass), rest.excludes_draft ? draft : -1};
                    drawing[static_cast<size_t>(b)] = 1;
                }
            }
            predict[row] = draft_accepted ? draft : emitted;
            out.accept_index[row] = static_cast<int32_t>(row);
            if (!draft_accepted) break;
            ++accepted;
        }
        lengths[b] = accepted + 1;
    }

    // The owner of each draw's target finds the token: rank slices in rank (= index) order. In the
    // same round the owner of every emitted token sends its logit less the row's max (double bits,
    // the others send 0) for the logprobs: found = [token + 1 per request | shifted logit per row].
    std::vector<uint64_t>& found = scratch_.found;
    found.assign(static_cast<size_t>(bs) + rows, 0);
    uint64_t* shifted = found.data() + bs;
    auto shifted_logit = [&](size_t row, int32_t local_token) {
        const float l = row_logits(static_cast<int64_t>(row))[local_token];
        return double_bits(exact::shifted_logit(l, max_logit[row]));
    };
    for (int32_t b = 0; b < bs; ++b) {
        if (!drawing[static_cast<size_t>(b)]) continue;
        const draw& d = draws[static_cast<size_t>(b)];
        const int32_t excluded_owner = d.excluded < 0 ? -1 : d.excluded / shard_vocab_;
        uint64_t before = 0;
        for (int32_t r = 0; r < rank_; ++r)
            before += kept_on(r, d.row) - (r == excluded_owner ? draft_mass_of(d.row) : 0);
        const uint64_t own = kept_on(rank_, d.row) - (rank_ == excluded_owner ? draft_mass_of(d.row) : 0);
        if (d.target >= before && d.target - before < own) {
            const int32_t excluded_local = rank_ == excluded_owner ? d.excluded - vocab_offset_ : -1;
            const int32_t token = cpu::token_at_mass(row_masses(static_cast<int64_t>(d.row)), shard_vocab_,
                                                     local_cuts[d.row], d.target - before, excluded_local);
            if (token >= 0) {
                found[static_cast<size_t>(b)] = static_cast<uint64_t>(vocab_offset_ + token) + 1;
                shifted[d.row] = shifted_logit(d.row, token);
            }
        }
    }
    for (size_t row = 0; row < rows; ++row) {
        const int32_t token = predict[row] - vocab_offset_;
        if (out.accept_index[row] >= 0 && predict[row] >= 0 && token >= 0 && token < shard_vocab_)
            shifted[row] = shifted_logit(row, token);
    }
    if (status s = endpoint.all_reduce(found.data(), found.size(), reduce_op::max); !s.is_ok()) return s;
    for (int32_t b = 0; b < bs; ++b) {
        if (drawing[static_cast<size_t>(b)])
            predict[draws[static_cast<size_t>(b)].row] = static_cast<int32_t>(found[static_cast<size_t>(b)]) - 1;
    }

    // 6. Logprobs of the emitted tokens (processed): the owner's shifted logit against the row's
    // kept mass at its temperature, or for greedy rows against the whole row at temperature 1.
    for (size_t row = 0; row < rows; ++row) {
        if (out.accept_index[row] < 0 || top[row] < 0 || predict[row] < 0) continue;
        uint64_t kept = 0;
        if (stochastic[row]) {
            for (int32_t r = 0; r < world_; ++r) kept += kept_on(r, row);
        }
        const float temperature = stochastic[row] ? params_of(row).temperature : 1.0f;
        out.logprobs[row] = static_cast<float>(exact::log_probability(
            from_double_bits(shifted[row]), temperature, exact::mass_weight(stochastic[row] ? kept : normaliser[row])));
    }
    for (int32_t b = 0; b < bs; ++b)
        out.row_error[static_cast<size_t>(b)] = predict[static_cast<size_t>(b) * n + lengths[b] - 1] < 0 ? 1 : 0;
    return status::success();
}

}  // namespace ds

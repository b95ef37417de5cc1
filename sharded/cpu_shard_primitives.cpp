// The shard primitives on the CPU (shard_primitives.h), over the row sampler's per-row functions
// (kernels/cpu/row_sampler.h), the same ones the CPU backend uses on full rows.
#include <algorithm>
#include <functional>

#include "kernels/exact_rules.h"
#include "sharded/shard_encoding.h"
#include "sharded/shard_primitives.h"

namespace ds {

namespace {

using namespace shard_encoding;

class cpu_shard_primitives final : public shard_primitives {
   public:
    explicit cpu_shard_primitives(const group_config& config)
        : mask_words_(static_cast<size_t>(bitmask_words(config.limits.vocab_size))),
          shard_vocab_(config.limits.vocab_size / config.distribution.tp),
          logits_(static_cast<size_t>(config.limits.max_batch) * static_cast<size_t>(config.limits.max_tokens_per_req) *
                  static_cast<size_t>(shard_vocab_)),
          masses_(logits_.size()) {}

    status row_maxima(const step_input& in, const param_pool& pool, int32_t vocab_offset, uint64_t* keys) override {
        const int32_t n = in.tokens_per_req;
        const size_t rows = static_cast<size_t>(in.batch_size) * static_cast<size_t>(n);
        for (size_t row = 0; row < rows; ++row) {
            const size_t b = row / static_cast<size_t>(n);
            const size_t j = row % static_cast<size_t>(n);
            const uint32_t* mask = in.bitmask == nullptr ? nullptr : in.bitmask + row * mask_words_;
            const cpu::drafts_before drafts{in.candidates == nullptr ? nullptr : in.candidates + row - j + 1,
                                            static_cast<int32_t>(j)};
            float* l = logits_.data() + row * static_cast<size_t>(shard_vocab_);
            cpu::prepare_shard_logits(in.logits, static_cast<int64_t>(row), pool.request(in.slots[b], in.positions[b]),
                                      drafts, mask, vocab_offset, l);
            const int32_t best = cpu::argmax_of(l, shard_vocab_);
            keys[row] = best >= 0 ? argmax_key(l[best], vocab_offset + best) : 0;
        }
        return status::success();
    }

    status masses(const std::vector<float>& max_logit, const std::vector<uint8_t>& has_max,
                  const std::vector<size_t>& stochastic_rows, const std::vector<float>& temperatures,
                  uint64_t* unit_sums, uint64_t* counts_and_masses) override {
        for (size_t row = 0; row < max_logit.size(); ++row)
            unit_sums[row] = has_max[row] ? cpu::unit_mass_sum(row_logits(row), shard_vocab_, max_logit[row]) : 0;
        for (size_t k = 0; k < stochastic_rows.size(); ++k) {
            const size_t row = stochastic_rows[k];
            uint64_t* mass = row_masses(row);
            cpu::masses_of(row_logits(row), shard_vocab_, max_logit[row], exact::mass_scale(temperatures[k]), mass);
            uint64_t count = 0;
            uint64_t sum = 0;
            for (int32_t i = 0; i < shard_vocab_; ++i) {
                count += mass[i] > 0 ? 1 : 0;
                sum += mass[i];
            }
            counts_and_masses[2 * k] = count;
            counts_and_masses[2 * k + 1] = sum;
        }
        return status::success();
    }

    status summarize(const std::vector<size_t>& cut_rows, uint64_t* summaries) override {
        for (size_t i = 0; i < cut_rows.size(); ++i) summarize_row(cut_rows[i], summaries + i * kSummaryWords);
        return status::success();
    }

    status candidates(const std::vector<candidate_request>& requests, uint64_t* keys) override {
        size_t at = 0;
        for (const candidate_request& request : requests) {
            const uint64_t* mass = row_masses(request.row);
            std::fill_n(keys + at, request.room, 0);
            size_t written = 0;
            for (int32_t i = 0; i < shard_vocab_ && request.room > 0; ++i) {
                if (mass[i] < request.threshold) continue;
                if (written == request.room)
                    return {status_code::internal,
                            "sharded_sampler: a rank holds more candidates than its summary bound"};
                keys[at + written++] = candidate_key(mass[i], i);
            }
            at += request.room;
        }
        return status::success();
    }

    status own_candidates(const std::vector<candidate_request>& requests, int32_t vocab_offset,
                          std::vector<std::pair<uint64_t, int32_t>>& out, std::vector<size_t>& ends) override {
        ends.clear();
        for (const candidate_request& request : requests) {
            const uint64_t* mass = row_masses(request.row);
            for (int32_t i = 0; i < shard_vocab_; ++i) {
                if (mass[i] >= request.threshold) out.emplace_back(mass[i], vocab_offset + i);
            }
            ends.push_back(out.size());
        }
        return status::success();
    }

    status cut_histograms(const std::vector<size_t>& rows, const std::vector<cpu::filter_cut>& domains,
                          const std::vector<uint64_t>& prefixes, int shift, uint64_t* histograms) override {
        for (size_t i = 0; i < rows.size(); ++i) {
            uint64_t* counts = histograms + i * 2 * kBins;
            std::fill_n(counts, 2 * kBins, 0);
            cpu::mass_histogram(row_masses(rows[i]), shard_vocab_, domains[i], prefixes[i], shift, counts,
                                counts + kBins);
        }
        return status::success();
    }

    status ties_at_mass(const std::vector<tie_query>& queries, int64_t* counts, int32_t* tokens) override {
        for (size_t i = 0; i < queries.size(); ++i) {
            const tie_query& t = queries[i];
            counts[i] = cpu::count_with_mass(row_masses(t.row), shard_vocab_, t.domain, t.q);
            tokens[i] = t.nth >= 0 ? cpu::nth_with_mass(row_masses(t.row), shard_vocab_, t.domain, t.q, t.nth) : -1;
        }
        return status::success();
    }
    status kept_masses(const std::vector<kept_request>& requests, uint64_t* kept) override {
        for (size_t i = 0; i < requests.size(); ++i) {
            const kept_request& k = requests[i];
            const uint64_t* mass = row_masses(k.row);
            kept[2 * i] = cpu::kept_mass(mass, shard_vocab_, k.cut);
            kept[2 * i + 1] = k.draft >= 0 && k.cut.keeps(k.draft, mass[k.draft]) ? mass[k.draft] : 0;
        }
        return status::success();
    }
    status tokens_at_mass(const std::vector<mass_draw>& draws, int32_t* tokens) override {
        for (size_t i = 0; i < draws.size(); ++i) {
            const mass_draw& d = draws[i];
            tokens[i] = cpu::token_at_mass(row_masses(d.row), shard_vocab_, d.cut, d.target, d.excluded);
        }
        return status::success();
    }
    status processed_logits(const std::vector<row_token>& at, float* logits) override {
        for (size_t i = 0; i < at.size(); ++i) logits[i] = row_logits(at[i].row)[at[i].token];
        return status::success();
    }

   private:
    const float* row_logits(size_t row) const { return logits_.data() + row * static_cast<size_t>(shard_vocab_); }
    uint64_t* row_masses(size_t row) { return masses_.data() + row * static_cast<size_t>(shard_vocab_); }

    void summarize_row(size_t row, uint64_t* summary) {
        const uint64_t* mass = row_masses(row);
        sorted_.clear();
        for (int32_t i = 0; i < shard_vocab_; ++i) {
            if (mass[i] > 0) sorted_.push_back(mass[i]);
        }
        const size_t largest = std::min<size_t>(sorted_.size(), depth_at(kLevels - 1));
        std::partial_sort(sorted_.begin(), sorted_.begin() + static_cast<std::ptrdiff_t>(largest), sorted_.end(),
                          std::greater<>());
        uint64_t above = 0;
        size_t summed = 0;
        for (int level = 0; level < kLevels; ++level) {
            const size_t covered = std::min<size_t>(largest, depth_at(level));
            for (; summed < covered; ++summed) above += sorted_[summed];
            summary[level] = summary_word(covered > 0 ? sorted_[covered - 1] : 0, above);
        }
    }

    size_t mask_words_;  // a bitmask row covers the whole vocab
    int32_t shard_vocab_;
    std::vector<float> logits_;     // [max rows, shard_vocab] processed logits
    std::vector<uint64_t> masses_;  // [max rows, shard_vocab]
    std::vector<uint64_t> sorted_;  // one row's nonzero masses, for its summary
};

}  // namespace

std::unique_ptr<shard_primitives> make_cpu_shard_primitives(const group_config& config) {
    return std::make_unique<cpu_shard_primitives>(config);
}

}  // namespace ds

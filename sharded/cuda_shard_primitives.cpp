// The shard primitives on the GPU (shard_primitives.h): kernels/cuda/shard_rows.h does the work
// on the device; this side turns its per-row answers into the encodings of shard_encoding.h,
// exactly as the CPU implementation writes them.
#include <fmt/format.h>

#include "kernels/cuda/shard_rows.h"
#include "sharded/shard_encoding.h"
#include "sharded/shard_primitives.h"

namespace ds {

namespace {

using namespace shard_encoding;

class cuda_shard_primitives final : public shard_primitives {
   public:
    cuda_shard_primitives(std::unique_ptr<cuda::shard_rows> rows, int32_t shard_vocab)
        : rows_(std::move(rows)), shard_vocab_(shard_vocab) {
        for (int level = 0; level < kLevels; ++level) depths_.push_back(depth_at(level));
    }

    status row_maxima(const step_input& in, const param_pool& pool, int32_t vocab_offset, uint64_t* keys) override {
        const auto rows = static_cast<size_t>(in.batch_size) * static_cast<size_t>(in.tokens_per_req);
        best_logit_.resize(rows);
        best_index_.resize(rows);
        DS_TRY(rows_->prepare(in, pool, vocab_offset, best_logit_.data(), best_index_.data()));
        for (size_t row = 0; row < rows; ++row)
            keys[row] = best_index_[row] >= 0 ? argmax_key(best_logit_[row], vocab_offset + best_index_[row]) : 0;
        return status::success();
    }

    status masses(const std::vector<float>& max_logit, const std::vector<uint8_t>& has_max,
                  const std::vector<size_t>& stochastic_rows, const std::vector<float>& temperatures,
                  uint64_t* unit_sums, uint64_t* counts_and_masses) override {
        return rows_->masses(max_logit, has_max, stochastic_rows, temperatures, unit_sums, counts_and_masses);
    }

    status summarize(const std::vector<size_t>& cut_rows, uint64_t* summaries) override {
        levels_.resize(cut_rows.size() * kSummaryWords * 2);
        DS_TRY(rows_->largest_masses(cut_rows, depths_, levels_.data()));
        for (size_t i = 0; i < cut_rows.size() * kSummaryWords; ++i)
            summaries[i] = summary_word(levels_[2 * i], levels_[2 * i + 1]);
        return status::success();
    }

    status candidates(const std::vector<candidate_request>& requests, uint64_t* keys) override {
        size_t room = 0;
        for (const candidate_request& r : requests) room += r.room;
        found_masses_.resize(room);
        found_tokens_.resize(room);
        counts_.resize(requests.size());
        DS_TRY(rows_->candidates(requests, found_masses_.data(), found_tokens_.data(), counts_.data()));
        size_t at = 0;
        for (size_t i = 0; i < requests.size(); ++i) {
            if (requests[i].room > 0 && counts_[i] > requests[i].room)  // as the CPU primitives
                return {status_code::internal, "sharded_sampler: a rank holds more candidates than its summary bound"};
            for (size_t k = 0; k < requests[i].room; ++k)
                keys[at + k] = k < counts_[i] ? candidate_key(found_masses_[at + k], found_tokens_[at + k]) : 0;
            at += requests[i].room;
        }
        return status::success();
    }

    // Two queries: how many each request has, then all of them.
    status own_candidates(const std::vector<candidate_request>& requests, int32_t vocab_offset,
                          std::vector<std::pair<uint64_t, int32_t>>& out, std::vector<size_t>& ends) override {
        ends.clear();
        if (requests.empty()) return status::success();
        counts_.resize(requests.size());
        DS_TRY(rows_->candidates(requests, nullptr, nullptr, counts_.data()));
        own_requests_ = requests;
        size_t room = 0;
        for (size_t i = 0; i < requests.size(); ++i) {
            own_requests_[i].room = counts_[i];
            room += counts_[i];
        }
        found_masses_.resize(room);
        found_tokens_.resize(room);
        DS_TRY(rows_->candidates(own_requests_, found_masses_.data(), found_tokens_.data(), counts_.data()));
        for (size_t k = 0; k < room; ++k) out.emplace_back(found_masses_[k], vocab_offset + found_tokens_[k]);
        size_t end = out.size() - room;
        for (const candidate_request& r : own_requests_) ends.push_back(end += r.room);
        return status::success();
    }

    status cut_histograms(const std::vector<size_t>& rows, const std::vector<cpu::filter_cut>& domains,
                          const std::vector<uint64_t>& prefixes, int shift, uint64_t* histograms) override {
        return rows_->cut_histograms(rows, domains, prefixes, shift, histograms);
    }
    status ties_at_mass(const std::vector<tie_query>& queries, int64_t* counts, int32_t* tokens) override {
        return rows_->ties_at_mass(queries, counts, tokens);
    }
    status kept_masses(const std::vector<kept_request>& requests, uint64_t* kept) override {
        return rows_->kept_masses(requests, kept);
    }
    status tokens_at_mass(const std::vector<mass_draw>& draws, int32_t* tokens) override {
        return rows_->tokens_at_mass(draws, tokens);
    }
    status processed_logits(const std::vector<row_token>& at, float* logits) override {
        return rows_->processed_logits(at, logits);
    }

   private:
    std::unique_ptr<cuda::shard_rows> rows_;
    int32_t shard_vocab_;
    std::vector<uint64_t> depths_;  // the summary's depths
    std::vector<float> best_logit_;
    std::vector<int32_t> best_index_;
    std::vector<uint64_t> levels_, found_masses_, counts_;
    std::vector<int32_t> found_tokens_;
    std::vector<candidate_request> own_requests_;
};

}  // namespace

status make_cuda_shard_primitives(const group_config& config, std::unique_ptr<shard_primitives>& out) {
    const int32_t shard_vocab = config.limits.vocab_size / config.distribution.tp;
    const int64_t max_rows = int64_t{config.limits.max_batch} * config.limits.max_tokens_per_req;
    std::unique_ptr<cuda::shard_rows> rows;
    const status s = cuda::shard_rows::create(max_rows, shard_vocab, config.limits.vocab_size, rows);
    if (s.code == status_code::unsupported) return s;
    if (!s.is_ok())
        return {s.code, fmt::format("the sharded sampler's device buffers ({} rows of {} tokens): {}", max_rows,
                                    shard_vocab, s.message)};
    out = std::make_unique<cuda_shard_primitives>(std::move(rows), shard_vocab);
    return status::success();
}

}  // namespace ds

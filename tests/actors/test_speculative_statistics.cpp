// End to end with a real model: speculative decoding through the coordinator (TP 2, sharded and
// swap modes) with the n-gram target and its bigram draft, thresholds 1.0. The first emitted token
// must follow the target's distribution exactly (chi-square over 4,000 seeded requests), whatever
// the draft proposed, as plain sampling would.
#include <distsample/group.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include "sources/ngram_lm.h"
#include "support/chi_square.h"
#include "support/reference_sampler.h"

namespace ds {
namespace {

constexpr int32_t kBatch = 200;
constexpr int32_t kRequests = 4000;

class SpeculativeNgram : public ::testing::TestWithParam<dist_mode> {};

TEST_P(SpeculativeNgram, FirstTokenFollowsTheTargetWhateverTheDraft) {
    ngram_lm target;
    ngram_lm draft;
    ASSERT_TRUE(ngram_lm::train(testing::kToyCorpus, 3, target).is_ok());
    ASSERT_TRUE(ngram_lm::train(testing::kToyCorpus, 2, draft).is_ok());
    const int32_t vocab = target.vocab_size();
    group_config config;
    config.distribution.tp = 2;
    config.limits.vocab_size = vocab;
    config.limits.max_batch = kBatch;
    config.limits.max_tokens_per_req = 2;
    config.limits.max_slots = kBatch + 1;
    config.distribution.mode = GetParam();
    config.distribution.step_timeout = std::chrono::milliseconds(20000);
    config.transport.timeout = std::chrono::milliseconds(20000);
    std::unique_ptr<group> ranks;
    ASSERT_TRUE(group::create(config, ranks).is_ok());

    // Context "the cat": the target (trigram) says sat / ate; the bigram draft proposes its argmax.
    const uint64_t context = ngram_lm::context_of(target.token_id("the"), target.token_id("cat"));
    std::vector<float> row0(static_cast<size_t>(vocab));
    std::vector<float> draft_row(static_cast<size_t>(vocab));
    target.logits(context, row0.data());
    draft.logits(context, draft_row.data());
    const auto proposal =
        static_cast<int32_t>(std::max_element(draft_row.begin(), draft_row.end()) - draft_row.begin());
    std::vector<float> row1(static_cast<size_t>(vocab));
    target.logits(logits_source::next_context(context, proposal), row1.data());
    std::vector<float> logits;
    for (int32_t b = 0; b < kBatch; ++b) {
        logits.insert(logits.end(), row0.begin(), row0.end());
        logits.insert(logits.end(), row1.begin(), row1.end());
    }

    std::vector<int64_t> counts(static_cast<size_t>(vocab), 0);
    for (int32_t round = 0; round < kRequests / kBatch; ++round) {
        step_request step;
        step.kind = step_kind::verify;
        step.tokens_per_req = 2;
        for (int32_t b = 0; b < kBatch; ++b) {
            sampling_params p;
            p.seed = static_cast<uint64_t>(round) * kBatch + static_cast<uint64_t>(b) + 1;
            ASSERT_TRUE(ranks->register_request(b + 1, p).is_ok());
            step.slots.push_back(b + 1);
            step.positions.push_back(30);
            step.candidates.push_back(target.token_id("cat"));
            step.candidates.push_back(proposal);
        }
        step.shards = split_vocab(logits_view{logits.data(), logits_dtype::f32, int64_t{kBatch} * 2, vocab, vocab},
                                  config.distribution.tp);
        const step_reply reply = ranks->step(std::move(step));
        ASSERT_TRUE(reply.result.is_ok()) << reply.result.message;
        for (int32_t b = 0; b < kBatch; ++b)
            ++counts[static_cast<size_t>(reply.outputs.packed[static_cast<size_t>(b) * 2])];
    }
    const testing::chi_square_result r =
        testing::chi_square_test(counts, testing::reference_distribution(row0, sampling_params{}));
    EXPECT_EQ(r.unexpected, 0);
    EXPECT_GT(r.p_value, 0.001) << "chi2=" << r.statistic << " dof=" << r.dof;
}

INSTANTIATE_TEST_SUITE_P(Modes, SpeculativeNgram, ::testing::Values(dist_mode::sharded, dist_mode::swap));

}  // namespace
}  // namespace ds

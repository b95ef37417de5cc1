// Speculative decoding through the gateway with the server's n-gram model (TP 2, thresholds 1.0):
// the first token a request emits follows the target's distribution (chi-square over 4,000
// seeded requests), whatever the bigram draft proposed, as plain sampling would. The rows come
// from the server's model and each slot's registered history, not from the frames.
#include <gtest/gtest.h>

#include <algorithm>

#include "gateway_harness.h"
#include "sources/ngram_lm.h"
#include "support/chi_square.h"
#include "support/reference_sampler.h"

namespace ds::gateway {
namespace {

constexpr int32_t kBatch = 200;
constexpr int32_t kRequests = 4000;

TEST(GatewayStatistics, FirstTokenFollowsTheTargetWhateverTheDraft) {
    ngram_lm target;
    ngram_lm draft;
    ASSERT_TRUE(ngram_lm::train(ds::testing::kToyCorpus, 3, target).is_ok());
    ASSERT_TRUE(ngram_lm::train(ds::testing::kToyCorpus, 2, draft).is_ok());
    group_config config = testing::small_group_config();
    config.limits.vocab_size = target.vocab_size();
    config.limits.max_batch = kBatch;
    config.limits.max_tokens_per_req = 2;
    config.limits.max_slots = kBatch + 1;
    std::unique_ptr<group> ranks;
    ASSERT_TRUE(group::create(config, ranks).is_ok());
    gateway_config gw;
    gw.port = 0;
    gw.metrics_port = -1;
    server gateway(gw, *ranks, &target);
    ASSERT_TRUE(gateway.start().is_ok());
    std::unique_ptr<client::gateway_client> c;
    ASSERT_TRUE(client::gateway_client::connect("127.0.0.1:" + std::to_string(gateway.tcp_port()), "", c).is_ok());

    // History "the cat": the target (trigram) says sat / ate; the draft proposes its argmax.
    const int32_t the = target.token_id("the");
    const int32_t cat = target.token_id("cat");
    std::vector<float> row0(static_cast<size_t>(config.limits.vocab_size));
    std::vector<float> draft_row(row0.size());
    target.logits(ngram_lm::context_of(the, cat), row0.data());
    draft.logits(ngram_lm::context_of(the, cat), draft_row.data());
    const auto proposal =
        static_cast<int32_t>(std::max_element(draft_row.begin(), draft_row.end()) - draft_row.begin());

    std::vector<int64_t> counts(row0.size(), 0);
    for (int32_t round = 0; round < kRequests / kBatch; ++round) {
        // Registering again resets each slot's context to its history (pipelined).
        for (int32_t b = 0; b < kBatch; ++b) {
            wire::Request r;
            wire::Register& m = *r.mutable_register_();
            m.set_slot(b + 1);
            m.mutable_params()->set_seed(static_cast<uint64_t>(round) * kBatch + static_cast<uint64_t>(b) + 1);
            m.add_history(the);
            m.add_history(cat);
            uint64_t id = 0;
            ASSERT_TRUE(c->send(r, id).is_ok());
        }
        for (int32_t b = 0; b < kBatch; ++b) {
            wire::Reply reply;
            ASSERT_TRUE(c->receive(reply).is_ok());
            ASSERT_TRUE(reply.has_registered()) << reply.DebugString();
        }
        wire::Step step;
        step.set_tokens_per_req(2);
        for (int32_t b = 0; b < kBatch; ++b) {
            step.add_slots(b + 1);
            step.add_positions(30);
            step.add_candidates(cat);
            step.add_candidates(proposal);
        }
        wire::StepReply reply;
        const status s = c->step(step, true, reply);
        ASSERT_TRUE(s.is_ok()) << s.message;
        for (int32_t b = 0; b < kBatch; ++b) ++counts[static_cast<size_t>(reply.predict(b * 2))];
    }
    const ds::testing::chi_square_result r =
        ds::testing::chi_square_test(counts, ds::testing::reference_distribution(row0, sampling_params{}));
    EXPECT_GT(counts[static_cast<size_t>(target.token_id("sat"))], 0);
    EXPECT_GT(counts[static_cast<size_t>(target.token_id("ate"))], 0);
    EXPECT_EQ(r.unexpected, 0);
    EXPECT_GT(r.p_value, 0.001) << "chi2=" << r.statistic << " dof=" << r.dof;
}

}  // namespace
}  // namespace ds::gateway

// The rank API's meeting point of a rank and its model worker (actors/worker_handoff.h), without
// processes: steps announced in order, a shard checked when it is handed in, a withheld shard
// timed out, outputs of committed and of failed steps, and every wait ended by a rank that left.
#include "actors/worker_handoff.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

namespace ds {
namespace {

using std::chrono::milliseconds;

constexpr int32_t kRank = 1;

dist_step a_step(uint64_t id, int32_t bs, int32_t n) {
    dist_step step;
    step.id = id;
    step.kind = n > 1 ? step_kind::verify : step_kind::sample;
    step.plan = step_plan{bs, 2, bs, bs / 2, n, 8};
    step.slots.assign(static_cast<size_t>(bs), 3);
    step.positions.assign(static_cast<size_t>(bs), 5);
    step.candidates.assign(static_cast<size_t>(bs * n), 7);
    return step;
}

// The rank's side of `step` on a thread of its own: the status and the shard's data pointer.
std::future<std::pair<status, const void*>> supply_async(worker_handoff& handoff, const dist_step& step) {
    return std::async(std::launch::async, [&handoff, &step] {
        logits_view shard;
        const status s = handoff.supply(step, shard);
        return std::make_pair(s, shard.data);
    });
}

// A rank that polls for the shard (tuning.rank_spin_us) takes it as a sleeping one does, whether it
// comes while the rank polls or after it stopped; a shard that never comes still times out.
TEST(WorkerHandoff, APollingRankTakesTheShardInsideAndAfterItsPollAndTimesOutWithout) {
    std::vector<float> rows(2 * 8, 1.0f);
    for (const auto spin : {std::chrono::microseconds(2'000'000), std::chrono::microseconds(1'000)}) {
        worker_handoff handoff(kRank, milliseconds(5000), spin);
        const dist_step step = a_step(3, 2, 1);
        auto rank_side = supply_async(handoff, step);
        worker_step seen;
        ASSERT_TRUE(handoff.next_step(milliseconds(5000), seen).is_ok());
        std::this_thread::sleep_for(milliseconds(20));
        ASSERT_TRUE(handoff.provide(3, logits_view{rows.data(), logits_dtype::f32, 2, 8, 8, false}).is_ok());
        const auto [s, data] = rank_side.get();
        ASSERT_TRUE(s.is_ok()) << s.message;
        EXPECT_EQ(data, rows.data()) << "spin " << spin.count() << " us";
    }
    worker_handoff withheld(kRank, milliseconds(50), std::chrono::microseconds(20'000));
    logits_view shard;
    EXPECT_EQ(withheld.supply(a_step(4, 2, 1), shard).code, status_code::timeout);
}

TEST(WorkerHandoff, TheWorkerSeesTheStepAndItsShardReachesTheRank) {
    worker_handoff handoff(kRank, milliseconds(5000));
    const dist_step step = a_step(4, 2, 3);
    std::vector<float> rows(6 * 8, 1.0f);
    auto rank_side = supply_async(handoff, step);
    worker_step seen;
    ASSERT_TRUE(handoff.next_step(milliseconds(5000), seen).is_ok());
    EXPECT_EQ(seen.id, 4u);
    EXPECT_EQ(seen.kind, step_kind::verify);
    EXPECT_EQ(seen.batch_size, 2);
    EXPECT_EQ(seen.tokens_per_req, 3);
    EXPECT_EQ(seen.candidates.size(), 6u);
    EXPECT_EQ(seen.vocab_begin, 8);  // rank 1 of shards of 8
    EXPECT_EQ(seen.shard_vocab, 8);

    const status wrong = handoff.provide(4, logits_view{rows.data(), logits_dtype::f32, 5, 8, 8, false});
    EXPECT_EQ(wrong.code, status_code::invalid_argument);
    EXPECT_NE(wrong.message.find("5 rows of 8 (row_stride 8): expected 6 rows of shard_vocab = 8"), std::string::npos)
        << wrong.message;
    EXPECT_EQ(handoff.provide(9, logits_view{rows.data(), logits_dtype::f32, 6, 8, 8, false}).code,
              status_code::invalid_argument);  // not the step waited for
    ASSERT_TRUE(handoff.provide(4, logits_view{rows.data(), logits_dtype::f32, 6, 8, 8, false}).is_ok());
    const auto [s, data] = rank_side.get();
    ASSERT_TRUE(s.is_ok()) << s.message;
    EXPECT_EQ(data, rows.data());

    step_outputs out;
    out.resize(2, 3);
    out.packed[0] = 42;
    handoff.on_commit(step, out);
    step_outputs read;
    ASSERT_TRUE(handoff.outputs(4, milliseconds(10), read).is_ok());
    EXPECT_EQ(read.packed[0], 42);
}

TEST(WorkerHandoff, AWithheldShardTimesOutNamingTheStepAndALaterStepSettlesTheFailedOne) {
    worker_handoff handoff(kRank, milliseconds(50));
    logits_view shard;
    const status s = handoff.supply(a_step(7, 2, 1), shard);
    EXPECT_EQ(s.code, status_code::timeout);
    EXPECT_NE(s.message.find("did not hand in the logits of step 7 within logits_timeout = 50 ms"), std::string::npos)
        << s.message;
    worker_step seen;
    EXPECT_EQ(handoff.next_step(milliseconds(10), seen).code, status_code::timeout);  // the failed step was withdrawn

    std::vector<float> rows(2 * 8);
    auto rank_side = std::async(std::launch::async, [&] {
        logits_view next;
        return handoff.supply(a_step(8, 2, 1), next);
    });
    ASSERT_TRUE(handoff.next_step(milliseconds(5000), seen).is_ok());
    step_outputs out;
    EXPECT_EQ(handoff.outputs(7, milliseconds(10), out).code, status_code::aborted);  // step 7 never committed
    ASSERT_TRUE(handoff.provide(8, logits_view{rows.data(), logits_dtype::f32, 2, 8, 8, false}).is_ok());
    EXPECT_TRUE(rank_side.get().is_ok());
    EXPECT_EQ(handoff.outputs(8, milliseconds(10), out).code, status_code::timeout);  // not committed yet
}

TEST(WorkerHandoff, ARankThatLeftEndsEveryWait) {
    worker_handoff handoff(kRank, milliseconds(5000));
    auto waiting = std::async(std::launch::async, [&] {
        worker_step seen;
        return handoff.next_step(milliseconds(5000), seen);
    });
    std::this_thread::sleep_for(milliseconds(20));
    handoff.close(status{status_code::aborted, "rank 1: evicted"});
    const status s = waiting.get();
    EXPECT_EQ(s.code, status_code::aborted);
    EXPECT_EQ(s.message, "rank 1: evicted");
    logits_view shard;
    EXPECT_EQ(handoff.supply(a_step(2, 2, 1), shard).code, status_code::aborted);
    step_outputs out;
    EXPECT_EQ(handoff.outputs(2, milliseconds(5000), out).code, status_code::aborted);
}

}  // namespace
}  // namespace ds

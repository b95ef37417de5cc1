// The rank API's meeting point of a rank and its model worker (actors/worker_handoff.h), without
// processes: steps announced in order, a shard checked when it is handed in and worked on by the
// thread that hands it in, a withheld shard timed out, outputs of committed and of failed steps,
// and every wait ended by a rank that left.
#include "actors/worker_handoff.h"

#include <gtest/gtest.h>

#include <atomic>
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

// What the rank's part of a step saw: the shard's data and the thread that worked on it.
struct worked {
    status result;
    const void* data = nullptr;
    std::thread::id thread;
};

std::atomic<int> works_done{0};  // works that ran to their end, in this test binary

// The rank's side of `step` on a thread of its own, its work recording what it saw and answering
// `work_result`.
std::future<worked> work_async(worker_handoff& handoff, const dist_step& step, status work_result = status::success()) {
    return std::async(std::launch::async, [&handoff, &step, work_result] {
        worked w;
        w.result = handoff.with_shard(step, [&](const logits_view& shard) {
            w.data = shard.data;
            w.thread = std::this_thread::get_id();
            works_done.fetch_add(1);
            return work_result;
        });
        return w;
    });
}

// A rank that polls (tuning.rank_spin_us) gets its step worked on as a sleeping one does, whether
// the shard comes while the rank polls or after it stopped; a shard that never comes still times out.
TEST(WorkerHandoff, APollingRankGetsItsStepWorkedInsideAndAfterItsPollAndTimesOutWithout) {
    std::vector<float> rows(2 * 8, 1.0f);
    for (const auto spin : {std::chrono::microseconds(2'000'000), std::chrono::microseconds(1'000)}) {
        worker_handoff handoff(kRank, milliseconds(5000), spin);
        const dist_step step = a_step(3, 2, 1);
        auto rank_side = work_async(handoff, step);
        worker_step seen;
        ASSERT_TRUE(handoff.next_step(milliseconds(5000), seen).is_ok());
        std::this_thread::sleep_for(milliseconds(20));
        ASSERT_TRUE(handoff.provide(3, logits_view{rows.data(), logits_dtype::f32, 2, 8, 8, false}).is_ok());
        const worked w = rank_side.get();
        ASSERT_TRUE(w.result.is_ok()) << w.result.message;
        EXPECT_EQ(w.data, rows.data()) << "spin " << spin.count() << " us";
    }
    worker_handoff withheld(kRank, milliseconds(50), std::chrono::microseconds(20'000));
    const status s = withheld.with_shard(a_step(4, 2, 1), [](const logits_view&) { return status::success(); });
    EXPECT_EQ(s.code, status_code::timeout);
}

// The thread that hands the shard in works on it (no thread wakes between the shard and the
// rank's answer): provide returns after the work, the rank gets the work's status, and provide
// itself says only that the shard was taken.
TEST(WorkerHandoff, TheWorkersOwnThreadWorksOnTheShardAndTheRankGetsTheWorksStatus) {
    worker_handoff handoff(kRank, milliseconds(5000));
    std::vector<float> rows(2 * 8, 1.0f);
    const dist_step step = a_step(5, 2, 1);
    auto rank_side = work_async(handoff, step, status{status_code::timeout, "rank 1: a peer did not answer"});
    worker_step seen;
    ASSERT_TRUE(handoff.next_step(milliseconds(5000), seen).is_ok());
    const int done_before = works_done.load();
    ASSERT_TRUE(handoff.provide(5, logits_view{rows.data(), logits_dtype::f32, 2, 8, 8, false}).is_ok());
    EXPECT_EQ(works_done.load(), done_before + 1) << "provide returned before the rank's work was done";
    const worked w = rank_side.get();
    EXPECT_EQ(w.thread, std::this_thread::get_id());
    EXPECT_EQ(w.data, rows.data());
    EXPECT_EQ(w.result.code, status_code::timeout);
    EXPECT_EQ(w.result.message, "rank 1: a peer did not answer");
    EXPECT_EQ(handoff.provide(5, logits_view{rows.data(), logits_dtype::f32, 2, 8, 8, false}).code,
              status_code::invalid_argument);  // taken once
}

TEST(WorkerHandoff, TheWorkerSeesTheStepAndItsShardReachesTheRank) {
    worker_handoff handoff(kRank, milliseconds(5000));
    const dist_step step = a_step(4, 2, 3);
    std::vector<float> rows(6 * 8, 1.0f);
    auto rank_side = work_async(handoff, step);
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
    const worked w = rank_side.get();
    ASSERT_TRUE(w.result.is_ok()) << w.result.message;
    EXPECT_EQ(w.data, rows.data());

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
    const status s = handoff.with_shard(a_step(7, 2, 1), [](const logits_view&) { return status::success(); });
    EXPECT_EQ(s.code, status_code::timeout);
    EXPECT_NE(s.message.find("did not hand in the logits of step 7 within logits_timeout = 50 ms"), std::string::npos)
        << s.message;
    worker_step seen;
    EXPECT_EQ(handoff.next_step(milliseconds(10), seen).code, status_code::timeout);  // the failed step was withdrawn

    std::vector<float> rows(2 * 8);
    const dist_step next = a_step(8, 2, 1);
    auto rank_side = work_async(handoff, next);
    ASSERT_TRUE(handoff.next_step(milliseconds(5000), seen).is_ok());
    step_outputs out;
    EXPECT_EQ(handoff.outputs(7, milliseconds(10), out).code, status_code::aborted);  // step 7 never committed
    ASSERT_TRUE(handoff.provide(8, logits_view{rows.data(), logits_dtype::f32, 2, 8, 8, false}).is_ok());
    EXPECT_TRUE(rank_side.get().result.is_ok());
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
    EXPECT_EQ(handoff.with_shard(a_step(2, 2, 1), [](const logits_view&) { return status::success(); }).code,
              status_code::aborted);
    step_outputs out;
    EXPECT_EQ(handoff.outputs(2, milliseconds(5000), out).code, status_code::aborted);
}

}  // namespace
}  // namespace ds

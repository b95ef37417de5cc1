// step_board (actors/step_board.h): the rank-0 policy over filed results, one answer per step
// whichever of the last filing and the coordinator's failure comes first, filings from many
// threads, and the desync journal's bound.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "actors/step_board.h"

namespace ds {
namespace {

constexpr int32_t kRanks = 4;
constexpr int32_t kBatch = 3;

std::shared_ptr<const dist_step> make_step(uint64_t id) {
    auto step = std::make_shared<dist_step>();
    step->id = id;
    step->plan.bs = kBatch;
    step->plan.tp = kRanks;
    step->plan.pad_bs = 4;
    step->plan.tokens_per_req = 1;
    return step;
}

// Rank `rank`'s result; `token` goes to request 1's predict entry.
rank_result result_of(int32_t rank, uint64_t step_id, int32_t token = 7) {
    auto outputs = std::make_shared<step_outputs>();
    outputs->resize(kBatch, 1);
    for (int32_t b = 0; b < kBatch; ++b) outputs->packed[static_cast<size_t>(b)] = 10 + b;
    outputs->packed[1] = token;
    rank_result r;
    r.rank = rank;
    r.step_id = step_id;
    r.digest = outputs->digest();
    r.outputs = outputs;
    r.timing.rank_step_ns = 100 + rank;
    return r;
}

struct board_under_test {
    std::shared_ptr<step_reply_sink> caller = std::make_shared<step_reply_sink>();
    std::future<step_reply> reply = caller->future();
    std::shared_ptr<desync_journal> journal = std::make_shared<desync_journal>();
    step_board board;

    board_under_test(uint64_t id, rank0_policy policy)
        : board(make_step(id), kRanks, policy, caller, journal, step_timeline{}) {}
    bool answered() { return reply.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }
};

TEST(StepBoard, TheLastFilingAnswersTheCallerWithRankZerosOutputs) {
    board_under_test t(5, rank0_policy::on_mismatch);
    for (int32_t r = kRanks - 1; r > 0; --r) {
        t.board.file(result_of(r, 5));
        EXPECT_FALSE(t.answered()) << "answered before every rank filed";
        EXPECT_FALSE(t.board.complete());
    }
    t.board.file(result_of(1, 5));  // a second filing for a rank counts once
    EXPECT_FALSE(t.answered());
    t.board.file(result_of(0, 5));
    ASSERT_TRUE(t.answered());
    EXPECT_TRUE(t.board.complete());
    const step_reply reply = t.reply.get();
    ASSERT_TRUE(reply.result.is_ok()) << reply.result.message;
    EXPECT_EQ(reply.step_id, 5u);
    EXPECT_EQ(reply.outputs.packed, result_of(0, 5).outputs->packed);
    EXPECT_EQ(reply.rank_timing.size(), static_cast<size_t>(kRanks));
    EXPECT_EQ(reply.timing.rank_step_ns, 100 + kRanks - 1);
    EXPECT_TRUE(reply.desyncs.empty());
    EXPECT_FALSE(t.board.claim_for_failure()) << "a settled step cannot be failed";
}

// The reply's timeline says when the latest of the filed results reached the process (the answer
// lane's arrival stamp), whichever rank filed last, and when the set was complete; each rank's
// timing says when its result arrived and when it was filed.
TEST(StepBoard, TheTimelineHoldsTheLatestArrivalOfAResult) {
    board_under_test t(9, rank0_policy::on_mismatch);
    const int64_t arrivals[kRanks] = {1'000, 4'000, 2'000, 3'000};
    for (int32_t r = 0; r < kRanks; ++r) t.board.file(result_of(r, 9), arrivals[r]);
    ASSERT_TRUE(t.answered());
    const step_reply reply = t.reply.get();
    EXPECT_EQ(reply.timeline.result_arrived_at_ns, 4'000);
    EXPECT_GT(reply.timeline.results_in_at_ns, 4'000);  // filed now, on the steady clock
    ASSERT_EQ(reply.rank_timing.size(), static_cast<size_t>(kRanks));
    for (int32_t r = 0; r < kRanks; ++r) {
        const step_timing& timing = reply.rank_timing[static_cast<size_t>(r)];
        EXPECT_EQ(timing.arrived_at_ns, arrivals[r]);
        EXPECT_GT(timing.filed_at_ns, 4'000);
        EXPECT_LE(timing.filed_at_ns, reply.timeline.results_in_at_ns);
    }
    EXPECT_EQ(reply.timing.arrived_at_ns, 4'000) << "the slowest's: the latest arrival";
}

TEST(StepBoard, AFailedResultIsNotFiled) {
    board_under_test t(6, rank0_policy::on_mismatch);
    rank_result failed = result_of(2, 6);
    failed.code = static_cast<int32_t>(status_code::internal);
    for (int32_t r = 0; r < kRanks; ++r) t.board.file(r == 2 ? failed : result_of(r, 6));
    EXPECT_FALSE(t.board.complete());
    EXPECT_FALSE(t.answered());
    EXPECT_TRUE(t.board.claim_for_failure());
}

TEST(StepBoard, ADifferingRankIsADesyncRecordedInTheJournal) {
    board_under_test t(8, rank0_policy::on_mismatch);
    for (int32_t r = 0; r < kRanks; ++r) t.board.file(result_of(r, 8, r == 3 ? 99 : 7));
    const step_reply reply = t.reply.get();
    ASSERT_TRUE(reply.result.is_ok());
    EXPECT_EQ(reply.outputs.packed[1], 7) << "rank 0's outputs answer";
    ASSERT_EQ(reply.desyncs.size(), 1u);
    EXPECT_EQ(reply.desyncs[0].step, 8u);
    EXPECT_EQ(reply.desyncs[0].rank, 3);
    EXPECT_EQ(reply.desyncs[0].first_row, 1);
    ASSERT_EQ(t.journal->latest().size(), 1u);
    const step_outcome o = combine_rank_results(*make_step(8), t.board.results(), rank0_policy::on_mismatch);
    EXPECT_TRUE(o.ship) << "on_mismatch ships rank 0's outputs after a desync";
}

TEST(StepBoard, PolicyNeverFailsTheStepOnADesync) {
    board_under_test t(9, rank0_policy::never);
    for (int32_t r = 0; r < kRanks; ++r) t.board.file(result_of(r, 9, r == 1 ? 42 : 7));
    const step_reply reply = t.reply.get();
    EXPECT_EQ(reply.result.code, status_code::mismatch);
    EXPECT_NE(reply.result.message.find("rank 1"), std::string::npos) << reply.result.message;
    EXPECT_EQ(t.journal->latest().size(), 1u);
}

TEST(StepBoard, ACoordinatorFailureFirstKeepsTheFilingsFromAnswering) {
    board_under_test t(10, rank0_policy::always);
    t.board.file(result_of(0, 10));
    ASSERT_TRUE(t.board.claim_for_failure());
    for (int32_t r = 1; r < kRanks; ++r) t.board.file(result_of(r, 10));
    EXPECT_FALSE(t.answered()) << "the coordinator answers a step it failed";
    EXPECT_FALSE(t.board.claim_for_failure()) << "claimed once";
}

// Ranks file from their threads while the coordinator tries to fail the step: every round is
// answered exactly once, by the filings exactly when the coordinator's claim lost.
TEST(StepBoard, FilingsRacingAFailureAnswerOnce) {
    for (int round = 0; round < 2000; ++round) {
        board_under_test t(static_cast<uint64_t>(round + 1), rank0_policy::on_mismatch);
        std::atomic<bool> go{false};
        std::vector<std::thread> ranks;
        for (int32_t r = 0; r < kRanks; ++r) {
            ranks.emplace_back([&, r] {
                while (!go.load()) {
                }
                t.board.file(result_of(r, static_cast<uint64_t>(round + 1)));
            });
        }
        go.store(true);
        if (round % 3 != 0) std::this_thread::yield();
        const bool coordinator_failed_it = t.board.claim_for_failure();
        for (std::thread& th : ranks) th.join();
        if (coordinator_failed_it) {
            ASSERT_FALSE(t.answered()) << "round " << round
                                       << ": answered by the filings after the coordinator claimed it";
        } else {
            ASSERT_TRUE(t.board.complete()) << "round " << round;
            ASSERT_TRUE(t.answered()) << "round " << round;
            ASSERT_TRUE(t.reply.get().result.is_ok());
        }
    }
}

TEST(DesyncJournal, KeepsTheLatestEvents) {
    desync_journal journal;
    for (uint64_t step = 1; step <= kKeptDesyncEvents + 10; ++step) journal.record({desync_event{step, 1, 0}});
    const std::vector<desync_event> kept = journal.latest();
    ASSERT_EQ(kept.size(), kKeptDesyncEvents);
    EXPECT_EQ(kept.front().step, 11u);
    EXPECT_EQ(kept.back().step, kKeptDesyncEvents + 10);
}

}  // namespace
}  // namespace ds

// The answer lane (actors/answer_lane.h): ranks' answers over the lane settle a step's board and
// answer its caller however their frames arrive (several at once, in pieces), on the lane's thread
// or on a caller's that reads the lane itself, through shared memory and over TCP alike; and
// connections that are not the group's ranks, send what no rank sends or leave a frame unfinished
// are closed without harm to the others.
#include <time.h>

#include "support/answer_lane_support.h"

namespace ds::answer_lane_test {
namespace {

// The tests that hold for either path a rank's answers take.
class AnswerLanePaths : public ::testing::TestWithParam<lane_path> {};

TEST_P(AnswerLanePaths, EveryRanksAnswerOnTheLaneSettlesTheStepAndAnswersItsCaller) {
    std::shared_ptr<answer_lane> lane;
    ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(), lane).is_ok());
    std::vector<std::unique_ptr<answer_sender>> senders;
    for (int32_t r = 0; r < kRanks; ++r) senders.push_back(sender_of(*lane, r, GetParam()));
    for (uint64_t id = 1; id <= 3; ++id) {
        step_under_test step(id);
        lane->expect(step.board);
        for (int32_t r = kRanks - 1; r >= 0; --r) {
            ASSERT_TRUE(senders[static_cast<size_t>(r)]->send(result_of(r, id)).is_ok());
        }
        ASSERT_TRUE(step.answered_within(kTimeout)) << "step " << id << " was not answered over the lane";
        const step_reply reply = step.reply.get();
        EXPECT_EQ(reply.step_id, id);
        EXPECT_EQ(reply.outputs.packed, result_of(0, id).outputs->packed);
        ASSERT_EQ(reply.rank_timing.size(), static_cast<size_t>(kRanks));
        for (const step_timing& t : reply.rank_timing) {
            // The lane's stamps, in the order they happen: its wake-up, the recv, the filing.
            EXPECT_GT(t.arrived_at_ns, 0);
            EXPECT_GE(t.received_at_ns, t.arrived_at_ns);
            EXPECT_GE(t.filed_at_ns, t.received_at_ns);
        }
    }
    EXPECT_EQ(lane->filed(), uint64_t{3 * kRanks});
}

// Every rank's answer to step `id` over `senders`, from another thread after `delay`.
std::thread send_later(std::vector<std::unique_ptr<answer_sender>>& senders, uint64_t id,
                       std::chrono::milliseconds delay) {
    return std::thread([&senders, id, delay] {
        std::this_thread::sleep_for(delay);
        for (int32_t r = 0; r < kRanks; ++r)
            EXPECT_TRUE(senders[static_cast<size_t>(r)]->send(result_of(r, id)).is_ok());
    });
}

// The thread that answers `step`'s caller, once it has.
std::future<std::thread::id> answering_thread(step_under_test& step) {
    auto thread = std::make_shared<std::promise<std::thread::id>>();
    step.caller->on_answer([thread] { thread->set_value(std::this_thread::get_id()); });
    return thread->get_future();
}

TEST_P(AnswerLanePaths, ACallerReadingTheLaneSettlesItsStepOnItsOwnThreadAndTheLaneReadsAgainAfterIt) {
    std::shared_ptr<answer_lane> lane;
    ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(), lane).is_ok());
    std::vector<std::unique_ptr<answer_sender>> senders;
    for (int32_t r = 0; r < kRanks; ++r) senders.push_back(sender_of(*lane, r, GetParam()));
    step_under_test step(1);
    std::future<std::thread::id> answered_on = answering_thread(step);
    lane->expect(step.board);
    std::thread ranks = send_later(senders, 1, std::chrono::milliseconds(20));
    const bool read = lane->read_until([&] { return step.answered_within(std::chrono::milliseconds(0)); },
                                       std::chrono::steady_clock::now() + kTimeout);
    ranks.join();
    EXPECT_TRUE(read);
    ASSERT_TRUE(step.answered_within(std::chrono::milliseconds(0)));
    EXPECT_EQ(answered_on.get(), std::this_thread::get_id()) << "the lane's thread settled the step, not the caller";
    EXPECT_EQ(step.reply.get().outputs.packed, result_of(0, 1).outputs->packed);
    // No caller reads now: the lane's own thread does.
    step_under_test next(2);
    std::future<std::thread::id> next_answered_on = answering_thread(next);
    lane->expect(next.board);
    send_later(senders, 2, std::chrono::milliseconds(0)).join();
    ASSERT_TRUE(next.answered_within(kTimeout)) << "the lane's thread did not read again";
    EXPECT_NE(next_answered_on.get(), std::this_thread::get_id());
    EXPECT_EQ(lane->filed(), uint64_t{2 * kRanks});
}

// CPU time the calling thread has used: a thread asleep in poll uses none while it waits.
std::chrono::nanoseconds thread_cpu_time() {
    timespec t{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
}

TEST_P(AnswerLanePaths, ACallerSpinningOnTheLaneDoesNotSleepUntilItsAnswersCome) {
    // The answers come 100 ms after the caller begins to wait. Asleep in poll it uses well under a
    // millisecond of CPU meanwhile; polling, it uses the CPU it is given (a fifth of the wait even
    // on a loaded machine).
    constexpr auto kAnswersAfter = std::chrono::milliseconds(100);
    std::shared_ptr<answer_lane> lane;
    ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(), lane).is_ok());
    std::vector<std::unique_ptr<answer_sender>> senders;
    for (int32_t r = 0; r < kRanks; ++r) senders.push_back(sender_of(*lane, r, GetParam()));
    for (const bool spin : {false, true}) {
        const uint64_t id = spin ? 2 : 1;
        step_under_test step(id);
        lane->expect(step.board);
        std::thread ranks = send_later(senders, id, kAnswersAfter);
        const auto now = std::chrono::steady_clock::now();
        const auto before = thread_cpu_time();
        lane->read_until([&] { return step.answered_within(std::chrono::milliseconds(0)); }, now + kTimeout,
                         spin ? now + kTimeout : std::chrono::steady_clock::time_point{});
        const auto used = thread_cpu_time() - before;
        ranks.join();
        ASSERT_TRUE(step.answered_within(std::chrono::milliseconds(0)));
        if (spin) {
            EXPECT_GE(used, kAnswersAfter / 5) << "the caller slept while it should have polled";
        } else {
            EXPECT_LT(used, kAnswersAfter / 5) << "the caller polled while it should have slept";
        }
    }
}

TEST_P(AnswerLanePaths, OfTwoCallersOneReadsAndTheOtherWaitsOnItsReply) {
    std::shared_ptr<answer_lane> lane;
    ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(), lane).is_ok());
    std::vector<std::unique_ptr<answer_sender>> senders;
    for (int32_t r = 0; r < kRanks; ++r) senders.push_back(sender_of(*lane, r, GetParam()));
    step_under_test first(1), second(2);
    lane->expect(first.board);
    lane->expect(second.board);
    auto caller = [&lane](step_under_test& step, std::promise<void>& started) {
        started.set_value();
        const bool read = lane->read_until([&step] { return step.answered_within(std::chrono::milliseconds(0)); },
                                           std::chrono::steady_clock::now() + kTimeout);
        EXPECT_TRUE(step.answered_within(kTimeout));
        return read;
    };
    std::promise<void> first_started, second_started;
    std::future<bool> first_read = std::async(std::launch::async, caller, std::ref(first), std::ref(first_started));
    std::future<bool> second_read = std::async(std::launch::async, caller, std::ref(second), std::ref(second_started));
    // Both callers are in read_until before any answer comes, and each step needs its own.
    first_started.get_future().wait();
    second_started.get_future().wait();
    send_later(senders, 2, std::chrono::milliseconds(50)).join();
    send_later(senders, 1, std::chrono::milliseconds(20)).join();
    EXPECT_EQ(int{first_read.get()} + int{second_read.get()}, 1) << "exactly one caller reads at a time";
    EXPECT_EQ(lane->filed(), uint64_t{2 * kRanks});
}

TEST(AnswerLane, AReadingCallerWhoseStepIsSettledElsewhereIsNudgedOutOfItsWait) {
    std::shared_ptr<answer_lane> lane;
    ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(), lane).is_ok());
    // Each step is settled by filings on its board from another thread (as the coordinator files
    // CAF's answers), which nudge the reading caller; without the nudge each wait would last the
    // reader's whole poll (100 ms).
    constexpr int kSteps = 10;
    const auto began = std::chrono::steady_clock::now();
    for (uint64_t id = 1; id <= kSteps; ++id) {
        step_under_test step(id);
        step.caller->on_answer(lane->nudger());
        lane->expect(step.board);
        std::thread coordinator([&step, id] {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            for (int32_t r = 0; r < kRanks; ++r) step.board->file(result_of(r, id));
        });
        EXPECT_TRUE(lane->read_until([&step] { return step.answered_within(std::chrono::milliseconds(0)); },
                                     std::chrono::steady_clock::now() + kTimeout));
        coordinator.join();
        EXPECT_TRUE(step.answered_within(std::chrono::milliseconds(0)));
    }
    EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::milliseconds(kSteps * 60))
        << "the reading caller slept through the nudges";
    EXPECT_EQ(lane->filed(), 0u);
}

TEST_P(AnswerLanePaths, AnAnswerAfterItsStepIsDoneIsDroppedAndTheConnectionKept) {
    std::shared_ptr<answer_lane> lane;
    ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(), lane).is_ok());
    std::unique_ptr<answer_sender> rank0 = sender_of(*lane, 0, GetParam());
    {
        step_under_test gone(4);
        lane->expect(gone.board);
    }  // the step's board is released: done
    ASSERT_TRUE(rank0->send(result_of(0, 4)).is_ok());
    step_under_test next(5);
    lane->expect(next.board);
    for (int32_t r = 1; r < kRanks; ++r) next.board->file(result_of(r, 5));
    ASSERT_TRUE(rank0->send(result_of(0, 5)).is_ok());
    EXPECT_TRUE(next.answered_within(kTimeout)) << "the kept connection's next answer did not settle its step";
    EXPECT_EQ(lane->filed(), 1u);
}

TEST(AnswerLane, ConnectionsThatAreNotTheGroupsRanksAreClosed) {
    std::shared_ptr<answer_lane> lane;
    ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(), lane).is_ok());
    struct greeting {
        uint32_t magic;
        int32_t rank;
        uint64_t secret;
    };
    const greeting wrong_secret{0x6473616c, 1, lane->secret() ^ 1};
    const greeting wrong_rank{0x6473616c, kRanks, lane->secret()};
    const greeting wrong_magic{0x12345678, 1, lane->secret()};
    for (const greeting& g : {wrong_secret, wrong_rank, wrong_magic}) {
        net::unique_fd fd = raw_connection(*lane);
        ASSERT_TRUE(net::write_all(fd.get(), &g, 4, net::clock::now() + kTimeout).is_ok());
        ASSERT_TRUE(net::write_all(fd.get(), &g.rank, 4, net::clock::now() + kTimeout).is_ok());
        ASSERT_TRUE(net::write_all(fd.get(), &g.secret, 8, net::clock::now() + kTimeout).is_ok());
        EXPECT_TRUE(closed_by_lane(fd.get())) << "rank " << g.rank << ", magic " << g.magic;
    }
    net::unique_fd silent = raw_connection(*lane);
    EXPECT_TRUE(closed_by_lane(silent.get())) << "a connection that never greets stays open";
    net::unique_fd partial = raw_connection(*lane);
    ASSERT_TRUE(net::write_value(partial.get(), uint32_t{0x6473616c}, net::clock::now() + kTimeout).is_ok());
    EXPECT_TRUE(closed_by_lane(partial.get())) << "a greeting cut short stays open";
    EXPECT_EQ(lane->filed(), 0u);
}

TEST(AnswerLane, AGreetingInPartsIsTakenAsItComesAndHoldsNoReaderUp) {
    std::shared_ptr<answer_lane> lane;
    ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(), lane).is_ok());
    std::vector<std::unique_ptr<answer_sender>> senders;
    for (int32_t r = 1; r < kRanks; ++r) senders.push_back(sender_of(*lane, r));
    step_under_test step(2);
    lane->expect(step.board);
    // Rank 0 by hand: the first 4 bytes of its greeting now, the rest after more than a frame's wait.
    net::unique_fd rank0 = raw_connection(*lane);
    char greeting[16];
    const uint32_t magic = 0x6473616c;
    const int32_t rank = 0;
    const uint64_t secret = lane->secret();
    std::memcpy(greeting, &magic, 4);
    std::memcpy(greeting + 4, &rank, 4);
    std::memcpy(greeting + 8, &secret, 8);
    ASSERT_TRUE(write_bytes(rank0.get(), std::string(greeting, 4)).is_ok());
    for (int32_t r = 1; r < kRanks; ++r)
        ASSERT_TRUE(senders[static_cast<size_t>(r - 1)]->send(result_of(r, 2)).is_ok());
    const auto until = std::chrono::steady_clock::now() + kTimeout;
    while (lane->filed() < uint64_t{kRanks - 1} && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(lane->filed(), uint64_t{kRanks - 1}) << "the other ranks' answers waited on a greeting's rest";
    std::this_thread::sleep_for(kFrameWait + std::chrono::milliseconds(50));
    ASSERT_TRUE(write_bytes(rank0.get(), std::string(greeting + 4, 12) + frame_of(result_of(0, 2))).is_ok());
    EXPECT_TRUE(step.answered_within(kTimeout)) << "a greeting finished within the greeting's wait was refused";
    EXPECT_EQ(lane->filed(), uint64_t{kRanks});
}

TEST_P(AnswerLanePaths, ARankThatSendsWhatNoRankSendsLosesItsLaneAndTheOthersAreUnharmed) {
    std::shared_ptr<answer_lane> lane;
    ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(), lane).is_ok());
    std::vector<std::unique_ptr<answer_sender>> senders;
    for (int32_t r = 0; r < kRanks; ++r) senders.push_back(sender_of(*lane, r, GetParam()));
    step_under_test step(7);
    lane->expect(step.board);
    // Rank 3, by hand: a greeting, then a frame longer than any answer of the group.
    net::unique_fd rogue = greeted_as(*lane, 3);
    ASSERT_TRUE(net::write_value(rogue.get(), uint32_t{1u << 30}, net::clock::now() + kTimeout).is_ok());
    EXPECT_TRUE(closed_by_lane(rogue.get()));
    // A frame whose outputs do not match its digest.
    rank_result forged = result_of(2, 7);
    forged.digest ^= 1;
    ASSERT_TRUE(senders[2]->send(forged).is_ok());
    for (int32_t r : {0, 1}) ASSERT_TRUE(senders[static_cast<size_t>(r)]->send(result_of(r, 7)).is_ok());
    EXPECT_FALSE(step.answered_within(std::chrono::milliseconds(200))) << "a forged answer was filed";
    // Rank 3's real connection was replaced by the rogue one; its answer, and rank 2's, come as CAF's would.
    step.board->file(result_of(2, 7));
    step.board->file(result_of(3, 7));
    EXPECT_TRUE(step.answered_within(kTimeout));
    EXPECT_EQ(lane->filed(), 2u);
}

TEST(AnswerLane, FramesThatArriveTogetherAreEveryOneFiled) {
    // A buffer of exactly one frame is filled and read again; one of a frame and a part leaves the
    // next frame's start at its end, to be finished by the next read; one of several frames takes
    // two whole ones at once.
    for (const int32_t max_batch : {kBatch, kBatch + 1, 4 * kBatch}) {
        std::shared_ptr<answer_lane> lane;
        ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(max_batch), lane).is_ok());
        net::unique_fd rank0 = greeted_as(*lane, 0);
        std::vector<std::unique_ptr<step_under_test>> steps;
        std::string frames;
        for (uint64_t id = 1; id <= 3; ++id) {
            steps.push_back(awaiting_rank0(*lane, id));
            frames += frame_of(result_of(0, id));
        }
        ASSERT_TRUE(write_bytes(rank0.get(), frames).is_ok());  // one send
        for (auto& step : steps) {
            EXPECT_TRUE(step->answered_within(kTimeout))
                << "max_batch " << max_batch << ": step " << step->board->step().id << " was not answered";
        }
        EXPECT_EQ(lane->filed(), 3u) << "max_batch " << max_batch;
    }
}

TEST(AnswerLane, FramesWrittenInPiecesWithinTheFrameWaitAreFiled) {
    std::shared_ptr<answer_lane> lane;
    ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(4 * kBatch), lane).is_ok());
    net::unique_fd rank0 = greeted_as(*lane, 0);
    std::unique_ptr<step_under_test> first = awaiting_rank0(*lane, 6);
    std::unique_ptr<step_under_test> second = awaiting_rank0(*lane, 7);
    const std::string frame = frame_of(result_of(0, 6));
    const std::string frames = frame + frame_of(result_of(0, 7));
    // A part of the first length, a part of the first body, the first's end with the second's
    // start, ...: each frame takes 2 pauses, well within the frame wait, and both together 4,
    // beyond it: the second frame's wait begins with its own first bytes. The buffer (max_batch
    // 4 * kBatch) holds both frames, so the second's start stays in it behind the first.
    const size_t cuts[] = {0, 2, 60, frame.size() + 30, frame.size() + 80, frames.size()};
    constexpr auto kPause = std::chrono::milliseconds(30);
    static_assert(2 * kPause < kFrameWait && 4 * kPause > kFrameWait);
    for (size_t i = 0; i + 1 < std::size(cuts); ++i) {
        if (i > 0) std::this_thread::sleep_for(kPause);
        if (i == 1 || i == 2) {
            EXPECT_FALSE(first->answered_within(std::chrono::milliseconds(0))) << "filed in part";
        }
        ASSERT_TRUE(write_bytes(rank0.get(), frames.substr(cuts[i], cuts[i + 1] - cuts[i])).is_ok());
    }
    EXPECT_TRUE(first->answered_within(kTimeout)) << "a frame in pieces was not filed";
    EXPECT_TRUE(second->answered_within(kTimeout)) << "a frame begun with another's end was not filed";
    EXPECT_EQ(lane->filed(), 2u);
}

TEST(AnswerLane, AFrameCutShortClosesItsConnectionAfterTheFrameWait) {
    std::shared_ptr<answer_lane> lane;
    ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(), lane).is_ok());
    net::unique_fd rank0 = greeted_as(*lane, 0);
    std::unique_ptr<step_under_test> step = awaiting_rank0(*lane, 8);
    const std::string frame = frame_of(result_of(0, 8));
    const auto began = net::clock::now();
    ASSERT_TRUE(write_bytes(rank0.get(), frame.substr(0, frame.size() / 2)).is_ok());
    EXPECT_TRUE(closed_by_lane(rank0.get())) << "a frame cut short kept its connection open";
    const auto waited = net::clock::now() - began;
    EXPECT_GE(waited, kFrameWait);
    EXPECT_LT(waited, 10 * kFrameWait);
    // The rest, and a whole frame after it, reach a closed connection (the writes may fail).
    (void)write_bytes(rank0.get(), frame.substr(frame.size() / 2) + frame);
    EXPECT_FALSE(step->answered_within(std::chrono::milliseconds(50))) << "an answer after the close was filed";
    EXPECT_EQ(lane->filed(), 0u);
}

TEST(AnswerLane, ALengthBeyondTheLargestAnswerClosesTheConnectionAtOnce) {
    std::shared_ptr<answer_lane> lane;
    ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(), lane).is_ok());
    net::unique_fd rank0 = greeted_as(*lane, 0);
    // The tests' answers are the largest the group's limits allow: one byte more is too long.
    const auto length = static_cast<uint32_t>(encode_answer(result_of(0, 1)).size() + 1);
    const auto began = net::clock::now();
    ASSERT_TRUE(net::write_value(rank0.get(), length, net::clock::now() + kTimeout).is_ok());
    EXPECT_TRUE(closed_by_lane(rank0.get()));
    // Not by the frame wait, which would close it too: by the length itself.
    EXPECT_LT(net::clock::now() - began, kFrameWait);
    EXPECT_EQ(lane->filed(), 0u);
}

INSTANTIATE_TEST_SUITE_P(BothPaths, AnswerLanePaths, ::testing::Values(lane_path::shared_memory, lane_path::tcp),
                         [](const ::testing::TestParamInfo<lane_path>& path) {
                             return path.param == lane_path::tcp ? "Tcp" : "SharedMemory";
                         });

}  // namespace
}  // namespace ds::answer_lane_test

// The answer lane (actors/answer_lane.h): a rank's result survives the frame bit for bit, ranks'
// answers over the lane settle a step's board and answer its caller however their frames arrive
// (several at once, in pieces), on the lane's thread or on a caller's that reads the lane itself,
// and connections that are not the group's ranks, send what no rank
// sends or leave a frame unfinished are closed without harm to the others; a rank on the lane's
// host answers through a shared-memory ring, and one that breaks the ring's rules loses it.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actors/answer_lane.h"
#include "actors/step_board.h"
#include "transport/local_socket.h"

namespace ds {
namespace {

constexpr int32_t kRanks = 4;
constexpr int32_t kBatch = 3;
constexpr int32_t kN = 2;
constexpr std::chrono::milliseconds kTimeout{5000};
constexpr std::chrono::milliseconds kFrameWait{100};  // the lane's: a frame begun must be finished within it

// max_batch = kBatch: the lane's receive buffer holds exactly one answer frame of the tests' steps.
group_config lane_config(int32_t max_batch = kBatch) {
    group_config c;
    c.distribution.tp = kRanks;
    c.limits.max_batch = max_batch;
    c.limits.max_tokens_per_req = kN;
    return c;
}

std::shared_ptr<const dist_step> make_step(uint64_t id) {
    auto step = std::make_shared<dist_step>();
    step->id = id;
    step->plan = step_plan{kBatch, kRanks, 4, 1, kN, 16};  // bs, tp, pad_bs, reqs_per_rank, N, shard_vocab
    return step;
}

rank_result result_of(int32_t rank, uint64_t step_id) {
    auto outputs = std::make_shared<step_outputs>();
    outputs->resize(kBatch, kN);
    for (size_t i = 0; i < outputs->packed.size(); ++i) outputs->packed[i] = static_cast<int32_t>(100 + i);
    outputs->accept_index[1] = 4;
    outputs->logprobs[0] = -0.25f;
    outputs->logprobs[2] = std::numeric_limits<float>::quiet_NaN();
    outputs->row_error[2] = 1;
    rank_result r;
    r.rank = rank;
    r.step_id = step_id;
    r.digest = outputs->digest();
    r.outputs = outputs;
    r.timing = step_timing{11, 22, 33, 44, 55};
    return r;
}

struct step_under_test {
    std::shared_ptr<step_reply_sink> caller = std::make_shared<step_reply_sink>();
    std::future<step_reply> reply = caller->future();
    std::shared_ptr<step_board> board;

    explicit step_under_test(uint64_t id)
        : board(std::make_shared<step_board>(make_step(id), kRanks, rank0_policy::on_mismatch, caller,
                                             std::make_shared<desync_journal>(), step_timeline{})) {}
    bool answered_within(std::chrono::milliseconds wait) { return reply.wait_for(wait) == std::future_status::ready; }
};

// A rank on the lane's host answers through shared memory unless it is made to use TCP.
enum class lane_path { shared_memory, tcp };

std::unique_ptr<answer_sender> sender_of(const answer_lane& lane, int32_t rank,
                                         lane_path path = lane_path::shared_memory) {
    std::unique_ptr<answer_sender> sender;
    const status s = answer_sender::connect(lane.address(), rank, kTimeout, sender, path == lane_path::shared_memory);
    EXPECT_TRUE(s.is_ok()) << s.message;
    if (sender) {
        EXPECT_EQ(sender->shares_memory(), path == lane_path::shared_memory);
    }
    return sender;
}

// True when the lane closes `fd` within the timeout (it sends nothing, so a read ends at the close).
bool closed_by_lane(int fd) {
    uint8_t byte = 0;
    const status s = net::read_all(fd, &byte, 1, net::clock::now() + kTimeout);
    return s.code == status_code::aborted;
}

net::unique_fd raw_connection(const answer_lane& lane) {
    net::unique_fd fd;
    EXPECT_TRUE(net::connect_tcp("127.0.0.1", lane.port(), net::clock::now() + kTimeout, fd).is_ok());
    return fd;
}

// A connection greeted as `rank` by hand, for frames written as no answer_sender writes them.
net::unique_fd greeted_as(const answer_lane& lane, int32_t rank) {
    net::unique_fd fd = raw_connection(lane);
    const auto deadline = net::clock::now() + kTimeout;
    EXPECT_TRUE(net::write_value(fd.get(), uint32_t{0x6473616c}, deadline).is_ok());
    EXPECT_TRUE(net::write_value(fd.get(), rank, deadline).is_ok());
    EXPECT_TRUE(net::write_value(fd.get(), lane.secret(), deadline).is_ok());
    return fd;
}

// What answer_sender writes for `result`: the body's length, then the body.
std::string frame_of(const rank_result& result) {
    const std::string body = encode_answer(result);
    const auto length = static_cast<uint32_t>(body.size());
    return std::string(reinterpret_cast<const char*>(&length), sizeof length) + body;
}

status write_bytes(int fd, const std::string& bytes) {
    return net::write_all(fd, bytes.data(), bytes.size(), net::clock::now() + kTimeout);
}

// A step whose ranks but rank 0 have filed: rank 0's answer on the lane settles it.
std::unique_ptr<step_under_test> awaiting_rank0(answer_lane& lane, uint64_t id) {
    auto step = std::make_unique<step_under_test>(id);
    lane.expect(step->board);
    for (int32_t r = 1; r < kRanks; ++r) step->board->file(result_of(r, id));
    return step;
}

TEST(AnswerLane, AResultSurvivesTheFrameBitForBit) {
    const rank_result sent = result_of(2, 9);
    rank_result got;
    const status s = decode_answer(encode_answer(sent), 2, *make_step(9), got);
    ASSERT_TRUE(s.is_ok()) << s.message;
    EXPECT_EQ(got.rank, 2);
    EXPECT_EQ(got.step_id, 9u);
    EXPECT_EQ(got.digest, sent.digest);
    EXPECT_EQ(got.outputs->packed, sent.outputs->packed);
    EXPECT_EQ(got.outputs->accept_index, sent.outputs->accept_index);
    EXPECT_EQ(got.outputs->row_error, sent.outputs->row_error);
    EXPECT_EQ(
        std::memcmp(got.outputs->logprobs.data(), sent.outputs->logprobs.data(), sent.outputs->logprobs.size() * 4), 0);
    EXPECT_TRUE(std::isnan(got.outputs->logprobs[2]));
    EXPECT_EQ(got.timing.rank_answered_at_ns, 55);
    EXPECT_EQ(got.timing.rank_step_ns, 11);
}

TEST(AnswerLane, AFrameOfAnotherStepShapeOrDigestIsRefusedNamingTheField) {
    const std::string body = encode_answer(result_of(0, 9));
    rank_result got;
    EXPECT_NE(decode_answer(body, 0, *make_step(8), got).message.find("step id = 9: expected 8"), std::string::npos);
    auto wider = std::make_shared<dist_step>(*make_step(9));
    wider->plan.tokens_per_req = 3;
    EXPECT_NE(decode_answer(body, 0, *wider, got).message.find("N = 2: expected 3 and 3"), std::string::npos)
        << decode_answer(body, 0, *wider, got).message;
    std::string flipped = body;
    flipped.back() ^= 1;  // the last row's error flag
    EXPECT_NE(decode_answer(flipped, 0, *make_step(9), got).message.find("digest"), std::string::npos);
    EXPECT_NE(decode_answer(body.substr(0, 20), 0, *make_step(9), got).message.find("expected at least"),
              std::string::npos);
    EXPECT_EQ(answer_step_id(body.substr(0, 3)), 0u);
}

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

// A rank's handshake on the lane's local socket, by hand: its greeting, and the ring it is handed.
struct local_rank_by_hand {
    net::unique_fd socket;
    std::unique_ptr<answer_ring> ring;
};

local_rank_by_hand local_greeting(const answer_lane& lane, int32_t rank, uint64_t secret) {
    local_rank_by_hand r;
    EXPECT_TRUE(net::connect_local(lane.local_name(), r.socket).is_ok());
    const auto deadline = net::clock::now() + kTimeout;
    EXPECT_TRUE(net::write_value(r.socket.get(), uint32_t{0x6473616c}, deadline).is_ok());
    EXPECT_TRUE(net::write_value(r.socket.get(), rank, deadline).is_ok());
    EXPECT_TRUE(net::write_value(r.socket.get(), secret, deadline).is_ok());
    return r;
}

status receive_ring(local_rank_by_hand& r) {
    uint32_t magic = 0;
    net::unique_fd passed[2];
    DS_TRY(
        net::receive_with_descriptors(r.socket.get(), &magic, sizeof magic, passed, 2, net::clock::now() + kTimeout));
    return answer_ring::attach(std::move(passed[0]), std::move(passed[1]), r.ring);
}

TEST(AnswerLane, ALocalGreetingThatIsNotTheGroupsRanksGetsNoRing) {
    std::shared_ptr<answer_lane> lane;
    ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(), lane).is_ok());
    ASSERT_FALSE(lane->local_name().empty());
    for (const auto& [rank, secret] : {std::pair<int32_t, uint64_t>{1, lane->secret() ^ 1}, {kRanks, lane->secret()}}) {
        local_rank_by_hand r = local_greeting(*lane, rank, secret);
        const status s = receive_ring(r);
        EXPECT_EQ(s.code, status_code::aborted) << "rank " << rank << ": " << s.message;
        EXPECT_EQ(r.ring, nullptr);
    }
    local_rank_by_hand honest = local_greeting(*lane, 1, lane->secret());
    const status s = receive_ring(honest);
    EXPECT_TRUE(s.is_ok()) << s.message;
}

TEST(AnswerLane, ARankThatBreaksItsRingLosesItsLaneAndTheOthersAreUnharmed) {
    // What no writer of the ring does: publish more frames than it has slots, or a length beyond the
    // largest answer.
    enum class breach { head_too_far, length_too_long };
    for (const breach kind : {breach::head_too_far, breach::length_too_long}) {
        std::shared_ptr<answer_lane> lane;
        ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(), lane).is_ok());
        std::vector<std::unique_ptr<answer_sender>> senders;
        for (int32_t r = 0; r < kRanks - 1; ++r) senders.push_back(sender_of(*lane, r));
        local_rank_by_hand rogue = local_greeting(*lane, kRanks - 1, lane->secret());
        ASSERT_TRUE(receive_ring(rogue).is_ok());
        step_under_test step(3);
        lane->expect(step.board);
        // The rogue rank writes its ring's memory as it likes.
        void* memory = ::mmap(nullptr, 256 + 64, PROT_READ | PROT_WRITE, MAP_SHARED, rogue.ring->memory_fd(), 0);
        ASSERT_NE(memory, MAP_FAILED);
        auto* base = static_cast<char*>(memory);
        if (kind == breach::length_too_long) {
            const auto length = static_cast<uint32_t>(rogue.ring->max_body() + 1);
            std::memcpy(base + 256, &length, sizeof length);
        }
        const uint64_t head = kind == breach::head_too_far ? 1000 : 1;
        __atomic_store_n(reinterpret_cast<uint64_t*>(base + 64), head, __ATOMIC_RELEASE);
        const uint64_t one = 1;
        ASSERT_EQ(::write(rogue.ring->bell_fd(), &one, sizeof one), static_cast<ssize_t>(sizeof one));
        ::munmap(memory, 256 + 64);
        EXPECT_TRUE(closed_by_lane(rogue.socket.get())) << "a broken ring kept its rank's lane";
        for (int32_t r = 0; r < kRanks - 1; ++r)
            ASSERT_TRUE(senders[static_cast<size_t>(r)]->send(result_of(r, 3)).is_ok());
        step.board->file(result_of(kRanks - 1, 3));  // as CAF's answer would
        EXPECT_TRUE(step.answered_within(kTimeout));
        EXPECT_EQ(lane->filed(), uint64_t{kRanks - 1});
    }
}

INSTANTIATE_TEST_SUITE_P(BothPaths, AnswerLanePaths, ::testing::Values(lane_path::shared_memory, lane_path::tcp),
                         [](const ::testing::TestParamInfo<lane_path>& path) {
                             return path.param == lane_path::tcp ? "Tcp" : "SharedMemory";
                         });

}  // namespace
}  // namespace ds

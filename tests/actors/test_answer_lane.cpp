// The answer lane (actors/answer_lane.h): a rank's result survives the frame bit for bit, ranks'
// answers over the lane settle a step's board and answer its caller, and connections that are
// not the group's ranks, or send what no rank sends, are closed without harm to the others.
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <thread>

#include "actors/answer_lane.h"
#include "actors/step_board.h"

namespace ds {
namespace {

constexpr int32_t kRanks = 4;
constexpr int32_t kBatch = 3;
constexpr int32_t kN = 2;
constexpr std::chrono::milliseconds kTimeout{5000};

group_config lane_config() {
    group_config c;
    c.distribution.tp = kRanks;
    c.limits.max_batch = kBatch;
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

std::unique_ptr<answer_sender> sender_of(const answer_lane& lane, int32_t rank) {
    std::unique_ptr<answer_sender> sender;
    const status s = answer_sender::connect("127.0.0.1", lane.port(), lane.secret(), rank, kTimeout, sender);
    EXPECT_TRUE(s.is_ok()) << s.message;
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

TEST(AnswerLane, EveryRanksAnswerOnTheLaneSettlesTheStepAndAnswersItsCaller) {
    std::shared_ptr<answer_lane> lane;
    ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(), lane).is_ok());
    std::vector<std::unique_ptr<answer_sender>> senders;
    for (int32_t r = 0; r < kRanks; ++r) senders.push_back(sender_of(*lane, r));
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
        EXPECT_EQ(reply.rank_timing.size(), static_cast<size_t>(kRanks));
    }
    EXPECT_EQ(lane->filed(), uint64_t{3 * kRanks});
}

TEST(AnswerLane, AnAnswerAfterItsStepIsDoneIsDroppedAndTheConnectionKept) {
    std::shared_ptr<answer_lane> lane;
    ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(), lane).is_ok());
    std::unique_ptr<answer_sender> rank0 = sender_of(*lane, 0);
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

TEST(AnswerLane, ARankThatSendsWhatNoRankSendsLosesItsLaneAndTheOthersAreUnharmed) {
    std::shared_ptr<answer_lane> lane;
    ASSERT_TRUE(answer_lane::open("127.0.0.1", 0, lane_config(), lane).is_ok());
    std::vector<std::unique_ptr<answer_sender>> senders;
    for (int32_t r = 0; r < kRanks; ++r) senders.push_back(sender_of(*lane, r));
    step_under_test step(7);
    lane->expect(step.board);
    // Rank 3, by hand: a greeting, then a frame longer than any answer of the group.
    net::unique_fd rogue = raw_connection(*lane);
    const auto deadline = net::clock::now() + kTimeout;
    ASSERT_TRUE(net::write_value(rogue.get(), uint32_t{0x6473616c}, deadline).is_ok());
    ASSERT_TRUE(net::write_value(rogue.get(), int32_t{3}, deadline).is_ok());
    ASSERT_TRUE(net::write_value(rogue.get(), lane->secret(), deadline).is_ok());
    ASSERT_TRUE(net::write_value(rogue.get(), uint32_t{1u << 30}, deadline).is_ok());
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

}  // namespace
}  // namespace ds

// What the answer lane's tests share (tests/actors/test_answer_lane.cpp, test_answer_lane_local.cpp,
// test_answer_frame.cpp): a group's limits, steps and rank results, a step under test with its
// caller, ranks' senders on either path, and connections written by hand.
#pragma once

#include <gtest/gtest.h>

#include <sys/socket.h>

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

namespace ds::answer_lane_test {

constexpr int32_t kRanks = 4;
constexpr int32_t kBatch = 3;
constexpr int32_t kN = 2;
constexpr std::chrono::milliseconds kTimeout{5000};
constexpr std::chrono::milliseconds kFrameWait{100};  // the lane's: a frame begun must be finished within it

// max_batch = kBatch: the lane's receive buffer holds exactly one answer frame of the tests' steps.
inline group_config lane_config(int32_t max_batch = kBatch) {
    group_config c;
    c.distribution.tp = kRanks;
    c.limits.max_batch = max_batch;
    c.limits.max_tokens_per_req = kN;
    return c;
}

inline std::shared_ptr<const dist_step> make_step(uint64_t id) {
    auto step = std::make_shared<dist_step>();
    step->id = id;
    step->plan = step_plan{kBatch, kRanks, 4, 1, kN, 16};  // bs, tp, pad_bs, reqs_per_rank, N, shard_vocab
    return step;
}

inline rank_result result_of(int32_t rank, uint64_t step_id) {
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

inline std::unique_ptr<answer_sender> sender_of(const answer_lane& lane, int32_t rank,
                                                lane_path path = lane_path::shared_memory) {
    std::unique_ptr<answer_sender> sender;
    const status s = answer_sender::connect(lane.address(), rank, kTimeout, sender, path == lane_path::shared_memory);
    EXPECT_TRUE(s.is_ok()) << s.message;
    if (sender) {
        EXPECT_EQ(sender->shares_memory(), path == lane_path::shared_memory);
    }
    return sender;
}

// The greeting as a rank writes it, by hand: magic "dsal", rank, secret, in one write.
inline status write_greeting(int fd, int32_t rank, uint64_t secret) {
    char bytes[16];
    const uint32_t magic = 0x6473616c;
    std::memcpy(bytes, &magic, 4);
    std::memcpy(bytes + 4, &rank, 4);
    std::memcpy(bytes + 8, &secret, 8);
    return net::write_all(fd, bytes, sizeof bytes, net::clock::now() + kTimeout);
}

// True when the lane closes `fd` within the timeout (it sends nothing, so a read ends at the close).
inline bool closed_by_lane(int fd) {
    uint8_t byte = 0;
    const status s = net::read_all(fd, &byte, 1, net::clock::now() + kTimeout);
    return s.code == status_code::aborted;
}

inline net::unique_fd raw_connection(const answer_lane& lane) {
    net::unique_fd fd;
    EXPECT_TRUE(net::connect_tcp("127.0.0.1", lane.port(), net::clock::now() + kTimeout, fd).is_ok());
    return fd;
}

// A connection greeted as `rank` by hand, for frames written as no answer_sender writes them.
inline net::unique_fd greeted_as(const answer_lane& lane, int32_t rank) {
    net::unique_fd fd = raw_connection(lane);
    EXPECT_TRUE(write_greeting(fd.get(), rank, lane.secret()).is_ok());
    return fd;
}

// What answer_sender writes for `result`: the body's length, then the body.
inline std::string frame_of(const rank_result& result) {
    const std::string body = encode_answer(result);
    const auto length = static_cast<uint32_t>(body.size());
    return std::string(reinterpret_cast<const char*>(&length), sizeof length) + body;
}

inline status write_bytes(int fd, const std::string& bytes) {
    return net::write_all(fd, bytes.data(), bytes.size(), net::clock::now() + kTimeout);
}

// A step whose ranks but rank 0 have filed: rank 0's answer on the lane settles it.
inline std::unique_ptr<step_under_test> awaiting_rank0(answer_lane& lane, uint64_t id) {
    auto step = std::make_unique<step_under_test>(id);
    lane.expect(step->board);
    for (int32_t r = 1; r < kRanks; ++r) step->board->file(result_of(r, id));
    return step;
}

}  // namespace ds::answer_lane_test

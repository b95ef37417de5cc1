// The answer lane's path for ranks on its host (actors/answer_lane.h, actors/answer_ring.h): only a
// greeting of the group's ranks is handed a ring, and a rank that breaks its ring's rules loses
// its lane without harm to the others.
#include <sys/mman.h>
#include <unistd.h>

#include "support/answer_lane_support.h"
#include "transport/local_socket.h"

namespace ds::answer_lane_test {
namespace {

// A rank's handshake on the lane's local socket, by hand: its greeting, and the ring it is handed.
struct local_rank_by_hand {
    net::unique_fd socket;
    std::unique_ptr<answer_ring> ring;
};

local_rank_by_hand local_greeting(const answer_lane& lane, int32_t rank, uint64_t secret) {
    local_rank_by_hand r;
    EXPECT_TRUE(net::connect_local(lane.local_name(), r.socket).is_ok());
    EXPECT_TRUE(write_greeting(r.socket.get(), rank, secret).is_ok());
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

}  // namespace
}  // namespace ds::answer_lane_test

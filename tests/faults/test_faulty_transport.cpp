// The fault-injecting transport decorator over the local backend: a flipped bit in a gathered or
// broadcast payload fails the receiving rank's call by name when checksums are on (and slips
// through when they are off), a clean call passes, an armed delay holds the first collective, a
// stale duplicate of a peer's payload fails its checksum unless it carries the same bytes, and a
// logit raised after the shard was handed in fails the swap's checksum naming the sender, and a
// rank that reaches its step's first collective after its peers' timeout fails it without joining.
#include "transport/faulty_transport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "transport/local_transport.h"

namespace ds {
namespace {

constexpr int32_t kWorld = 3;

transport_config small_group(std::chrono::milliseconds timeout = std::chrono::milliseconds(2000)) {
    transport_config c;
    c.world_size = kWorld;
    c.vocab_size = 6;
    c.max_swap_rows = 4;
    c.max_collective_bytes = 1024;
    c.timeout = timeout;
    return c;
}

// Runs body(rank, decorated endpoint) on one thread per rank; each rank's status.
std::vector<status> on_every_rank(local_group& group, bool checksums,
                                  const std::function<status(int32_t, faulty_transport&)>& body,
                                  std::chrono::milliseconds timeout = small_group().timeout) {
    std::vector<status> results(kWorld);
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < kWorld; ++r) {
        threads.emplace_back([&, r] {
            faulty_transport ep(group.endpoint(r), checksums, timeout);
            results[static_cast<size_t>(r)] = body(r, ep);
        });
    }
    for (std::thread& t : threads) t.join();
    return results;
}

TEST(FaultyTransport, CleanCollectivesPassTheirChecksums) {
    local_group group(small_group());
    std::vector<std::vector<int32_t>> gathered(kWorld, std::vector<int32_t>(2 * kWorld));
    const auto results = on_every_rank(group, true, [&](int32_t r, faulty_transport& ep) {
        const int32_t block[2] = {r, 10 * r};
        status s = ep.gather_verify_outputs(block, 2, gathered[static_cast<size_t>(r)].data());
        if (!s.is_ok()) return s;
        int64_t value = r == 1 ? 77 : 0;
        s = ep.broadcast(&value, sizeof value, 1);
        return s.is_ok() && value != 77 ? status{status_code::internal, "broadcast lost its value"} : s;
    });
    for (int32_t r = 0; r < kWorld; ++r) {
        EXPECT_TRUE(results[static_cast<size_t>(r)].is_ok()) << results[static_cast<size_t>(r)].message;
        EXPECT_EQ(gathered[static_cast<size_t>(r)], (std::vector<int32_t>{0, 0, 1, 10, 2, 20}));
    }
}

TEST(FaultyTransport, AFlippedBitFailsTheReceiverNamingTheSender) {
    for (const bool gather : {true, false}) {
        SCOPED_TRACE(gather ? "all_gather" : "broadcast");
        local_group group(small_group());
        const auto results = on_every_rank(group, true, [&](int32_t r, faulty_transport& ep) {
            if (r == 1) ep.arm({0, true, 12345});
            if (gather) {
                const uint64_t mine = 0x1111111111111111ULL * static_cast<uint64_t>(r + 1);
                uint64_t all[kWorld];
                return ep.all_gather(&mine, sizeof mine, all);
            }
            uint64_t value = 0xabcdef;
            return ep.broadcast(&value, sizeof value, 0);
        });
        EXPECT_TRUE(results[0].is_ok()) << results[0].message;
        EXPECT_TRUE(results[2].is_ok()) << results[2].message;
        ASSERT_EQ(results[1].code, status_code::internal);
        // Rank 1 corrupts what it received from rank 2 (a gather) or from the root, rank 0.
        const std::string expected = gather ? "the payload from rank 2 failed its checksum in all_gather"
                                            : "the payload from rank 0 failed its checksum in broadcast";
        EXPECT_EQ(results[1].message, expected);
    }
}

TEST(FaultyTransport, WithoutChecksumsACorruptionGoesThroughUnseen) {
    local_group group(small_group());
    std::vector<uint64_t> received(kWorld * kWorld);
    const auto results = on_every_rank(group, false, [&](int32_t r, faulty_transport& ep) {
        if (r == 1) ep.arm({0, true, 3});
        const uint64_t mine = static_cast<uint64_t>(r);
        return ep.all_gather(&mine, sizeof mine, received.data() + static_cast<size_t>(r) * kWorld);
    });
    for (const status& s : results) EXPECT_TRUE(s.is_ok()) << s.message;
    EXPECT_EQ(received[1 * kWorld + 2], 2u ^ (1u << 3)) << "bit 3 of rank 2's block, as rank 1 received it";
    EXPECT_EQ(received[0 * kWorld + 2], 2u);
}

TEST(FaultyTransport, AnArmedDelayHoldsOnlyTheFirstCollective) {
    local_group group(small_group());
    std::vector<int64_t> elapsed_ms(kWorld);
    const auto results = on_every_rank(group, true, [&](int32_t r, faulty_transport& ep) {
        if (r == 2) ep.arm({150, false, 0});
        const auto start = std::chrono::steady_clock::now();
        status s = ep.barrier();
        elapsed_ms[static_cast<size_t>(r)] =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
        const auto second = std::chrono::steady_clock::now();
        if (s.is_ok()) s = ep.barrier();
        if (std::chrono::steady_clock::now() - second > std::chrono::milliseconds(100))
            return status{status_code::internal, "second barrier delayed"};
        return s;
    });
    for (const status& s : results) EXPECT_TRUE(s.is_ok()) << s.message;
    for (int64_t ms : elapsed_ms) EXPECT_GE(ms, 140) << "every rank waits for the delayed one";
}

TEST(FaultyTransport, ARankLaterThanItsPeersTimeoutFailsItsStepWithoutJoiningTheCollective) {
    const std::chrono::milliseconds timeout{200};
    for (const bool kernel_delay : {true, false}) {
        SCOPED_TRACE(kernel_delay ? "delayed before its first collective" : "transport delay");
        local_group group(small_group(timeout));
        std::vector<int64_t> elapsed_ms(kWorld);
        const auto results = on_every_rank(
            group, true,
            [&](int32_t r, faulty_transport& ep) {
                const auto start = std::chrono::steady_clock::now();
                armed_transport_faults faults;
                if (r == 2 && !kernel_delay) faults.delay_ms = 300;
                ep.arm(faults);
                if (r == 2 && kernel_delay) std::this_thread::sleep_for(std::chrono::milliseconds(300));
                const uint64_t mine = static_cast<uint64_t>(r);
                uint64_t all[kWorld];
                status s = ep.all_gather(&mine, sizeof mine, all);
                elapsed_ms[static_cast<size_t>(r)] =
                    std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start)
                        .count();
                return s;
            },
            timeout);
        // The peers time out waiting for rank 2 (the first one's timeout aborts the other).
        EXPECT_FALSE(results[0].is_ok());
        EXPECT_FALSE(results[1].is_ok());
        ASSERT_EQ(results[2].code, status_code::timeout) << results[2].message;
        EXPECT_NE(results[2].message.find("rank 2: reached all_gather"), std::string::npos) << results[2].message;
        EXPECT_NE(results[2].message.find("past the transport timeout (200 ms)"), std::string::npos)
            << results[2].message;
        EXPECT_LT(elapsed_ms[2], 300 + 150) << "failed at once, without waiting in the collective";
    }
}

// Two gathers: rank 1 receives rank 2's first payload again during the second one.
std::vector<status> gather_twice_with_a_stale_copy(bool same_bytes) {
    local_group group(small_group());
    return on_every_rank(group, true, [&](int32_t r, faulty_transport& ep) {
        uint64_t all[kWorld];
        const uint64_t first = static_cast<uint64_t>(r);
        if (status s = ep.all_gather(&first, sizeof first, all); !s.is_ok()) return s;
        if (r == 1) {
            armed_transport_faults stale;
            stale.stale_put_from = 2;
            ep.arm(stale);
        }
        const uint64_t second = same_bytes ? first : first + 100;
        return ep.all_gather(&second, sizeof second, all);
    });
}

TEST(FaultyTransport, AStaleDuplicateFailsItsChecksumNamingTheSenderUnlessItIsTheSameBytes) {
    const std::vector<status> changed = gather_twice_with_a_stale_copy(false);
    EXPECT_TRUE(changed[0].is_ok()) << changed[0].message;
    EXPECT_EQ(changed[1].message, "the payload from rank 2 failed its checksum in all_gather");
    for (const status& s : gather_twice_with_a_stale_copy(true)) EXPECT_TRUE(s.is_ok()) << s.message;
}

TEST(FaultyTransport, ALogitRaisedAfterTheHandInFailsTheSwapNamingTheSender) {
    for (const bool checksums : {true, false}) {
        SCOPED_TRACE(checksums ? "checksums" : "no checksums");
        local_group group(small_group());
        // Two rows of V 6 over 3 ranks: each rank's shard is 2 logits a row; each rank takes both rows.
        std::vector<std::vector<float>> shards(kWorld, std::vector<float>(4, 0.5f));
        std::vector<float> rank0_row0(6);
        const auto results = on_every_rank(group, checksums, [&](int32_t r, faulty_transport& ep) {
            if (r == 2) {
                armed_transport_faults alter;
                alter.alter_logit = true;
                ep.arm(alter);
            }
            const logits_view shard{shards[static_cast<size_t>(r)].data(), logits_dtype::f32, 2, 2, 2};
            logits_view full;
            status s = ep.swap_batch_vocab(shard, 0, 2, full);
            if (s.is_ok() && r == 0) std::copy_n(static_cast<const float*>(full.data), 6, rank0_row0.begin());
            return s;
        });
        EXPECT_EQ(shards[2][0], 0.5f) << "the caller's shard is left alone";
        for (int32_t r = 0; r < kWorld; ++r) {
            const status& s = results[static_cast<size_t>(r)];
            if (!checksums) {
                EXPECT_TRUE(s.is_ok()) << s.message;
                continue;
            }
            ASSERT_EQ(s.code, status_code::internal) << "rank " << r << ": " << s.message;
            EXPECT_NE(s.message.find("the logits from rank 2 (row 0)"), std::string::npos) << s.message;
        }
        if (!checksums) {
            EXPECT_EQ(rank0_row0[4], 10000.0f) << "every rank receives the raised logit";
        }
    }
}

}  // namespace
}  // namespace ds

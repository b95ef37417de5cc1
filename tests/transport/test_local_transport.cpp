// The local transport: collectives between rank threads, phantom rows of the vocab swap, and the
// failure paths (abort wakes waiters, a missing rank times out by name, a new epoch recovers).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>

#include "transport/local_transport.h"

namespace ds {
namespace {

transport_config small_group(int32_t world, int32_t vocab = 8,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(2000)) {
    transport_config c;
    c.world_size = world;
    c.vocab_size = vocab;
    c.max_swap_rows = 4;
    c.max_collective_bytes = 1024;
    c.timeout = timeout;
    return c;
}

// Runs body(rank, endpoint) on one thread per rank and returns each rank's status.
std::vector<status> on_every_rank(local_group& group, const std::function<status(int32_t, local_endpoint&)>& body) {
    const int32_t world = group.config().world_size;
    std::vector<status> results(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < world; ++r) {
        threads.emplace_back([&, r] { results[static_cast<size_t>(r)] = body(r, group.endpoint(r)); });
    }
    for (std::thread& t : threads) t.join();
    return results;
}

TEST(LocalTransport, AllReduceSumAndMaxAgreeOnEveryRank) {
    local_group group(small_group(3));
    std::vector<std::vector<uint64_t>> sums(3), maxima(3);
    auto results = on_every_rank(group, [&](int32_t r, local_endpoint& ep) {
        sums[static_cast<size_t>(r)] = {uint64_t(r + 1), uint64_t(10 * r)};
        maxima[static_cast<size_t>(r)] = {uint64_t(r), uint64_t(7 - r)};
        status s = ep.all_reduce(sums[static_cast<size_t>(r)].data(), 2, reduce_op::sum);
        if (!s.is_ok()) return s;
        return ep.all_reduce(maxima[static_cast<size_t>(r)].data(), 2, reduce_op::max);
    });
    for (int r = 0; r < 3; ++r) {
        ASSERT_TRUE(results[static_cast<size_t>(r)].is_ok()) << results[static_cast<size_t>(r)].message;
        EXPECT_EQ(sums[static_cast<size_t>(r)], (std::vector<uint64_t>{6, 30}));
        EXPECT_EQ(maxima[static_cast<size_t>(r)], (std::vector<uint64_t>{2, 7}));
    }
}

TEST(LocalTransport, SignedAllReduceAndBroadcastAndGather) {
    local_group group(small_group(4));
    std::vector<int64_t> mins(4);
    std::vector<std::vector<int32_t>> gathered(4, std::vector<int32_t>(4));
    std::vector<int32_t> broadcast(4);
    auto results = on_every_rank(group, [&](int32_t r, local_endpoint& ep) {
        int64_t value = -r;
        status s = ep.all_reduce(&value, 1, reduce_op::max);
        mins[static_cast<size_t>(r)] = value;
        if (!s.is_ok()) return s;
        int32_t mine = 100 + r;
        s = ep.all_gather(&mine, sizeof mine, gathered[static_cast<size_t>(r)].data());
        if (!s.is_ok()) return s;
        broadcast[static_cast<size_t>(r)] = r == 2 ? 42 : -1;
        return ep.broadcast(&broadcast[static_cast<size_t>(r)], sizeof(int32_t), 2);
    });
    for (int r = 0; r < 4; ++r) {
        ASSERT_TRUE(results[static_cast<size_t>(r)].is_ok());
        EXPECT_EQ(mins[static_cast<size_t>(r)], 0);
        EXPECT_EQ(gathered[static_cast<size_t>(r)], (std::vector<int32_t>{100, 101, 102, 103}));
        EXPECT_EQ(broadcast[static_cast<size_t>(r)], 42);
    }
}

TEST(LocalTransport, SwapAssemblesFullRowsAndZeroesPhantomRows) {
    // 2 ranks, V = 8, 3 real rows; each rank asks for 2 rows, so rank 1's second row is phantom.
    local_group group(small_group(2));
    std::vector<float> full(3 * 8);
    std::iota(full.begin(), full.end(), 1.0f);
    std::vector<std::vector<float>> received(2);
    auto results = on_every_rank(group, [&](int32_t r, local_endpoint& ep) {
        const logits_view shard{full.data() + r * 4, logits_dtype::f32, 3, 4, 8};
        logits_view rows;
        status s = ep.swap_batch_vocab(shard, 2 * r, 2, rows);
        if (!s.is_ok()) return s;
        const float* data = static_cast<const float*>(rows.data);
        received[static_cast<size_t>(r)].assign(data, data + rows.rows * rows.vocab);
        return s;
    });
    ASSERT_TRUE(results[0].is_ok() && results[1].is_ok()) << results[0].message << results[1].message;
    EXPECT_EQ(received[0], std::vector<float>(full.begin(), full.begin() + 16));
    std::vector<float> expected(full.begin() + 16, full.end());
    expected.resize(16, 0.0f);
    EXPECT_EQ(received[1], expected);
}

TEST(LocalTransport, RejectsOversizedRequestsNamingTheLimit) {
    local_group group(small_group(1));
    std::vector<uint64_t> big(1000);
    status s = group.endpoint(0).all_reduce(big.data(), big.size(), reduce_op::sum);
    EXPECT_EQ(s.code, status_code::invalid_argument);
    EXPECT_NE(s.message.find("max_collective_bytes"), std::string::npos) << s.message;
    EXPECT_NE(small_group(3, 8).validate().message.find("vocab_size"), std::string::npos);
}

TEST(LocalTransport, MissingRankTimesOutByNameAndNewEpochRecovers) {
    local_group group(small_group(3, 9, std::chrono::milliseconds(100)));
    group.begin_epoch(1);
    // Ranks 0 and 1 enter a barrier; rank 2 never does.
    auto results = on_every_rank(group, [&](int32_t r, local_endpoint& ep) {
        ep.set_epoch(1);
        return r == 2 ? status::success() : ep.barrier();
    });
    for (int r = 0; r < 2; ++r) {
        EXPECT_NE(results[static_cast<size_t>(r)].code, status_code::ok);
        EXPECT_NE(results[static_cast<size_t>(r)].message.find("rank 2"), std::string::npos)
            << results[static_cast<size_t>(r)].message;
    }
    group.begin_epoch(2);
    results = on_every_rank(group, [&](int32_t, local_endpoint& ep) {
        ep.set_epoch(2);
        return ep.barrier();
    });
    for (const status& s : results) EXPECT_TRUE(s.is_ok()) << s.message;
}

TEST(LocalTransport, AbortWakesWaitersAtOnce) {
    local_group group(small_group(2, 8, std::chrono::milliseconds(10000)));
    const auto start = std::chrono::steady_clock::now();
    std::thread aborter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        group.endpoint(1).abort("test abort");
    });
    status s = group.endpoint(0).barrier();
    aborter.join();
    EXPECT_EQ(s.code, status_code::aborted);
    EXPECT_NE(s.message.find("test abort"), std::string::npos);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

}  // namespace
}  // namespace ds

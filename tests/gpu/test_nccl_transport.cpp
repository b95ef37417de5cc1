// The NCCL transport against the local transport: WORLD rank processes, one per GPU,
// run the collective script (collective_script.h) with their shards in device memory and must
// produce, byte for byte, the transcripts of the local transport's threads. WORLD = 1 needs one
// GPU; 2 and 4 run where the machine has that many, and skip (saying so) where it has fewer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "collective_script.h"
#include "kernels/cuda/det_math_probe.h"
#include "support/child_processes.h"
#include "transport/tcp_bootstrap.h"

namespace ds {
namespace {

using std::chrono::milliseconds;

std::string out_path(int32_t world, int32_t rank) {
    return testing::TempDir() + "nccl_peer_" + std::to_string(::getpid()) + "_" + std::to_string(world) + "_" +
           std::to_string(rank) + ".out";
}

std::vector<unsigned char> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class NcclProcessesPerGpu : public testing::TestWithParam<int32_t> {};

TEST_P(NcclProcessesPerGpu, MatchTheLocalTransport) {
    const int32_t world = GetParam();
    const int devices = cuda::device_count();
    if (devices == 0) GTEST_SKIP() << "no CUDA device";
    if (devices < world) GTEST_SKIP() << world << " ranks need " << world << " GPUs; this machine has " << devices;

    std::vector<std::vector<unsigned char>> expected;
    const status local = local_script_transcripts(world, expected);
    ASSERT_TRUE(local.is_ok()) << local.message;

    const milliseconds timeout(20000);  // NCCL's first communicator initialisation is slow
    tcp_rendezvous rendezvous;
    ASSERT_TRUE(rendezvous.listen("127.0.0.1", 0).is_ok());
    child_processes peers;
    for (int32_t r = 0; r < world; ++r) {
        ASSERT_TRUE(peers.start({sibling_binary("nccl_peer"), std::to_string(r), std::to_string(world),
                                 "127.0.0.1:" + std::to_string(rendezvous.port()), out_path(world, r),
                                 std::to_string(timeout.count())}));
    }
    const status served = rendezvous.serve(world, timeout);
    EXPECT_TRUE(served.is_ok()) << served.message;
    const std::vector<int> codes = peers.wait_all(2 * timeout);
    for (int32_t r = 0; r < world; ++r) {
        EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << "rank " << r << " (its stderr is in the test log)";
        EXPECT_FALSE(expected[static_cast<size_t>(r)].empty());
        EXPECT_EQ(read_file(out_path(world, r)), expected[static_cast<size_t>(r)]) << "rank " << r;
        std::remove(out_path(world, r).c_str());
    }
}

INSTANTIATE_TEST_SUITE_P(Worlds, NcclProcessesPerGpu, testing::Values(1, 2, 4),
                         [](const testing::TestParamInfo<int32_t>& world) {
                             return std::to_string(world.param) + "ranks";
                         });

}  // namespace
}  // namespace ds

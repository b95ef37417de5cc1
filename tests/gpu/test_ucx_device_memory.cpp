// The ucx transport with the cuda backend (docs/deployment.md, GPU memory over UCX): 2 ranks as
// threads of this process, each with its own UCX context, sample and verify steps whose shards
// are in GPU memory, in swap (all-to-all, then the packed gather) and gathered mode, once with
// ucx_device_memory = staged
// (device → pinned host → UCX on host memory) and once with direct (UCX puts GPU memory to GPU
// memory). The tokens, accept indices and error flags equal the cpu backend's over the local
// transport; logprobs agree within 1e-5. Below the group, two endpoints swap device shards with
// `direct`, as threads and as two processes on one GPU; they skip, saying why, where UCX has no
// transport that puts GPU memory (two contexts of one process get no cuda_ipc lane).
//
// Skips without a GPU. `direct` skips, saying why, where the loaded UCX has no CUDA support
// (Debian's); DS_EXPECT_UCX_DEVICE_PATH=direct (tools/gpu-run.sh run --ucx-cu13) makes that a
// failure instead.
#include <distsample/group.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/det_math_probe.h"
#include "support/child_processes.h"
#include "transport/tcp_bootstrap.h"
#include "transport/ucx/ucx_transport.h"

namespace ds {
namespace {

constexpr int32_t kTp = 2;
constexpr int32_t kVocab = 4096;
constexpr int32_t kMaxBatch = 8;
constexpr int32_t kMaxN = 4;
constexpr int kSteps = 8;
constexpr int kDirectUnsupportedExit = 77;

group_config config_for(const char* backend, const char* transport, dist_mode mode, ucx_memory_mode memory) {
    group_config c;
    c.distribution.tp = kTp;
    c.limits.vocab_size = kVocab;
    c.limits.max_batch = kMaxBatch;
    c.limits.max_tokens_per_req = kMaxN;
    c.limits.max_slots = kMaxBatch + 1;
    c.backend = *parse_backend_kind(backend);
    c.transport.kind = *parse_transport_kind(transport);
    c.distribution.mode = mode;
    c.transport.ucx.device_memory = memory;
    c.distribution.step_timeout = std::chrono::milliseconds(10000);
    c.transport.timeout = std::chrono::milliseconds(8000);
    return c;
}

bool direct_expected() {
    const char* expected = std::getenv("DS_EXPECT_UCX_DEVICE_PATH");
    return expected != nullptr && std::string(expected) == "direct";
}

// One step: its request (shards filled in by the caller) and its full logits on the host.
struct test_step {
    step_request request;
    std::vector<float> logits;
};

test_step make_step(std::mt19937_64& rng, int index) {
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    test_step s;
    s.request.kind = index % 2 == 0 ? step_kind::sample : step_kind::verify;
    s.request.tokens_per_req = s.request.kind == step_kind::sample ? 1 : uniform(2, kMaxN);
    const int32_t n = s.request.tokens_per_req;
    const int32_t bs = uniform(1, kMaxBatch);  // odd sizes pad the batch: phantom rows
    std::normal_distribution<float> gauss(0.0f, 3.0f);
    s.logits.resize(static_cast<size_t>(bs) * n * kVocab);
    for (float& l : s.logits) l = gauss(rng);
    for (int32_t b = 0; b < bs; ++b) {
        s.request.slots.push_back(b + 1);
        s.request.positions.push_back(uniform(0, 5000));
        for (int32_t j = 0; s.request.kind == step_kind::verify && j < n; ++j)
            s.request.candidates.push_back(uniform(0, kVocab - 1));
    }
    return s;
}

void register_requests(group& g, std::mt19937_64& rng) {
    for (int32_t slot = 1; slot <= kMaxBatch; ++slot) {
        sampling_params p;
        p.temperature = slot % 3 == 0 ? 0.0f : 0.8f;
        p.top_k = slot % 2 == 0 ? 40 : -1;
        p.top_p = 0.9f;
        p.seed = rng();
        const status s = g.register_request(slot, p);
        ASSERT_TRUE(s.is_ok()) << s.message;
    }
}

void expect_same_outputs(const step_outputs& expected, const step_outputs& got, const std::string& what) {
    EXPECT_EQ(expected.packed, got.packed) << what;
    EXPECT_EQ(expected.accept_index, got.accept_index) << what;
    EXPECT_EQ(expected.row_error, got.row_error) << what;
    ASSERT_EQ(expected.logprobs.size(), got.logprobs.size()) << what;
    for (size_t i = 0; i < got.logprobs.size(); ++i) {
        if (std::isnan(expected.logprobs[i]) && std::isnan(got.logprobs[i]))
            continue;  // no token there (unused entries)
        EXPECT_NEAR(expected.logprobs[i], got.logprobs[i], 1e-5) << what << " logprob " << i;
    }
}

class UcxDeviceMemory : public ::testing::TestWithParam<std::tuple<ucx_memory_mode, dist_mode>> {};

TEST_P(UcxDeviceMemory, DeviceShardsGiveTheCpuBackendsTokens) {
    const auto [memory, mode] = GetParam();
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::unique_ptr<group> over_ucx;
    const status created = group::create(config_for("cuda", "ucx", mode, memory), over_ucx);
    if (memory == ucx_memory_mode::direct && created.code == status_code::unsupported) {
        if (direct_expected()) FAIL() << "DS_EXPECT_UCX_DEVICE_PATH=direct, but: " << created.message;
        GTEST_SKIP() << created.message;
    }
    ASSERT_TRUE(created.is_ok()) << created.message;
    std::unique_ptr<group> reference;
    const status reference_created =
        group::create(config_for("cpu", "local", mode, ucx_memory_mode::automatic), reference);
    ASSERT_TRUE(reference_created.is_ok()) << reference_created.message;

    std::mt19937_64 rng(2026 + static_cast<uint64_t>(mode));
    std::mt19937_64 params_rng(7);
    register_requests(*over_ucx, params_rng);
    params_rng.seed(7);
    register_requests(*reference, params_rng);
    for (int i = 0; i < kSteps; ++i) {
        test_step s = make_step(rng, i);
        const int64_t rows = static_cast<int64_t>(s.logits.size() / kVocab);
        const logits_view host_full{s.logits.data(), logits_dtype::f32, rows, kVocab, kVocab};
        std::shared_ptr<void> device_logits;
        const status uploaded = cuda::upload_to_device(s.logits.data(), s.logits.size() * sizeof(float), device_logits);
        ASSERT_TRUE(uploaded.is_ok()) << uploaded.message;
        logits_view device_full = host_full;
        device_full.data = device_logits.get();
        device_full.on_device = true;

        step_request on_device = s.request;
        on_device.shards = split_vocab(device_full, kTp);
        s.request.shards = split_vocab(host_full, kTp);
        const step_reply got = over_ucx->step(on_device);
        const step_reply expected = reference->step(s.request);
        ASSERT_TRUE(got.result.is_ok()) << got.result.message;
        ASSERT_TRUE(expected.result.is_ok()) << expected.result.message;
        EXPECT_TRUE(got.desyncs.empty());
        expect_same_outputs(expected.outputs, got.outputs, std::string("step ") + std::to_string(i));
    }
}

INSTANTIATE_TEST_SUITE_P(Ucx, UcxDeviceMemory,
                         ::testing::Combine(::testing::Values(ucx_memory_mode::staged, ucx_memory_mode::direct),
                                            ::testing::Values(dist_mode::swap, dist_mode::gathered)),
                         [](const auto& param_info) {
                             return std::string(ucx_memory_mode_name(std::get<0>(param_info.param))) + "_" +
                                    mode_name(std::get<1>(param_info.param));
                         });

// `direct` below the group. Two endpoints swap device shards with ucx_device_memory = direct; every
// received row equals the host original, phantom rows are zeros. Where the endpoint refuses
// `direct` (no UCX transport that puts GPU memory between them) the test skips saying why.
constexpr int32_t kDirectWorld = 2;
constexpr int32_t kDirectRows = 3;  // one phantom row: pad_bs 4, two rows per rank
constexpr int32_t kDirectRowsPerRank = 2;
constexpr auto kDirectTimeout = std::chrono::milliseconds(20000);

std::vector<float> direct_full_logits() {
    std::vector<float> full(static_cast<size_t>(kDirectRows) * kVocab);
    std::mt19937 rng(11);
    std::normal_distribution<float> gauss(0.0f, 3.0f);
    for (float& l : full) l = gauss(rng);
    return full;
}

// Rank r's part: joins the rendezvous at `port`, swaps its device shard of direct_full_logits()
// and checks the rows it receives. `unsupported` when the endpoint refuses `direct`.
status swap_device_shard(int32_t r, uint16_t port, bool peer_error_handling) {
    constexpr int32_t kShardVocab = kVocab / kDirectWorld;
    transport_config config;
    config.world_size = kDirectWorld;
    config.vocab_size = kVocab;
    config.max_swap_rows = kDirectRowsPerRank;
    ucx_endpoint_options options;
    options.device_memory = ucx_memory_mode::direct;
    options.backend_on_device = true;
    options.peer_error_handling = peer_error_handling;
    config.timeout = kDirectTimeout;
    const std::vector<float> full = direct_full_logits();
    std::vector<float> shard_host(static_cast<size_t>(kDirectRows) * kShardVocab);
    for (int32_t row = 0; row < kDirectRows; ++row) {
        for (int32_t v = 0; v < kShardVocab; ++v) {
            shard_host[static_cast<size_t>(row) * kShardVocab + v] =
                full[static_cast<size_t>(row) * kVocab + r * kShardVocab + v];
        }
    }
    std::shared_ptr<void> shard_device;
    status s = cuda::upload_to_device(shard_host.data(), shard_host.size() * sizeof(float), shard_device);
    tcp_bootstrap boot("127.0.0.1", port, r, kDirectWorld, config.timeout);
    std::unique_ptr<ucx_endpoint> endpoint;
    if (s.is_ok()) s = ucx_endpoint::create(config, options, boot, endpoint);
    logits_view rows;
    const logits_view shard{shard_device.get(), logits_dtype::f32, kDirectRows, kShardVocab, kShardVocab, true};
    if (s.is_ok()) s = endpoint->swap_batch_vocab(shard, int64_t{r} * kDirectRowsPerRank, kDirectRowsPerRank, rows);
    if (s.is_ok() && !rows.on_device) s = status{status_code::internal, "direct swap returned host rows"};
    std::vector<float> received(static_cast<size_t>(kDirectRowsPerRank) * kVocab);
    if (s.is_ok()) s = cuda::copy_rows_to_host(rows, received.data());
    for (int32_t i = 0; s.is_ok() && i < kDirectRowsPerRank; ++i) {
        const int32_t row = r * kDirectRowsPerRank + i;
        for (int32_t v = 0; v < kVocab; ++v) {
            const float expected = row < kDirectRows ? full[static_cast<size_t>(row) * kVocab + v] : 0.0f;
            if (received[static_cast<size_t>(i) * kVocab + v] != expected) {
                s = status{status_code::mismatch, fmt::format("rank {}: row {} token {} differs", r, row, v)};
                break;
            }
        }
    }
    if (s.is_ok() && endpoint) s = endpoint->barrier();  // nobody leaves while a peer still puts
    return s;
}

// Both ranks as threads of this process, each with its own UCX context, peer error handling off
// (on the H200 with libucx-cu13 UCX gives two contexts of one process shared memory and no
// cuda_ipc lane, so this skips there).
TEST(UcxDirect, SwapWithoutPeerErrorHandlingMovesDeviceRowsExactly) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    tcp_rendezvous rendezvous;
    ASSERT_TRUE(rendezvous.listen("127.0.0.1", 0).is_ok());
    status served;
    std::thread server([&] { served = rendezvous.serve(kDirectWorld, kDirectTimeout); });
    std::vector<status> results(kDirectWorld);
    std::vector<std::thread> ranks;
    for (int32_t r = 0; r < kDirectWorld; ++r) {
        ranks.emplace_back(
            [&, r] { results[static_cast<size_t>(r)] = swap_device_shard(r, rendezvous.port(), false); });
    }
    for (std::thread& t : ranks) t.join();
    server.join();
    if (results[0].code == status_code::unsupported) GTEST_SKIP() << results[0].message;
    for (int32_t r = 0; r < kDirectWorld; ++r)
        EXPECT_TRUE(results[static_cast<size_t>(r)].is_ok())
            << "rank " << r << ": " << results[static_cast<size_t>(r)].message;
}

// The same with each rank in a process of its own (this binary, started with "direct-rank"), as
// rank processes run: two processes on one GPU is where UCX offers cuda_ipc (with peer error
// handling on and off; the swap segfaulted over it until UCX's memory-type cache was turned off).
class UcxDirectAcrossProcesses : public ::testing::TestWithParam<bool> {};

TEST_P(UcxDirectAcrossProcesses, SwapMovesDeviceRowsExactly) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const bool peer_error_handling = GetParam();
    tcp_rendezvous rendezvous;
    ASSERT_TRUE(rendezvous.listen("127.0.0.1", 0).is_ok());
    status served;
    std::thread server([&] { served = rendezvous.serve(kDirectWorld, kDirectTimeout); });
    const std::string dir = ::testing::TempDir();
    std::vector<std::string> outcome_files;
    child_processes children;
    for (int32_t r = 0; r < kDirectWorld; ++r) {
        outcome_files.push_back(fmt::format("{}/ucx_direct_rank{}_{}.txt", dir, r, ::getpid()));
        ASSERT_TRUE(
            children.start({sibling_binary("test_ucx_device_memory"), "direct-rank", std::to_string(r),
                            std::to_string(rendezvous.port()), peer_error_handling ? "1" : "0", outcome_files.back()}));
    }
    const std::vector<int> codes = children.wait_all(kDirectTimeout + std::chrono::seconds(10));
    server.join();
    std::vector<std::string> outcomes;
    for (const std::string& file : outcome_files) {
        std::ifstream in(file);
        outcomes.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        std::remove(file.c_str());
    }
    if (codes[0] == kDirectUnsupportedExit) GTEST_SKIP() << outcomes[0];
    for (int32_t r = 0; r < kDirectWorld; ++r) {
        EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << "rank process " << r << ": " << outcomes[static_cast<size_t>(r)];
    }
}

INSTANTIATE_TEST_SUITE_P(Ucx, UcxDirectAcrossProcesses, ::testing::Bool(), [](const auto& param_info) {
    return std::string(param_info.param ? "PeerErrorHandling" : "NoPeerErrorHandling");
});

// "direct-rank RANK PORT PEER_ERROR_HANDLING(0|1) OUTCOME_FILE": one rank of
// UcxDirectAcrossProcesses. Writes what happened to OUTCOME_FILE; exits 0, kDirectUnsupportedExit
// when the endpoint refuses `direct`, 1 otherwise.
int run_direct_rank(char** argv) {
    const status s =
        swap_device_shard(std::stoi(argv[2]), static_cast<uint16_t>(std::stoi(argv[3])), std::string(argv[4]) == "1");
    std::ofstream(argv[5]) << (s.is_ok() ? "ok" : s.message);
    if (s.code == status_code::unsupported) return kDirectUnsupportedExit;
    return s.is_ok() ? 0 : 1;
}

}  // namespace
}  // namespace ds

int main(int argc, char** argv) {
    if (argc == 6 && std::string(argv[1]) == "direct-rank") return ds::run_direct_rank(argv);
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}

// The ucx transport with the cuda backend (issue 5): 2 ranks as threads of this process, each
// with its own UCX context, sample and verify steps whose shards are in GPU memory, in swap
// (all-to-all, then the packed gather) and gathered mode, once with ucx_device_memory = staged
// (device → pinned host → UCX on host memory) and once with direct (UCX puts GPU memory to GPU
// memory). The tokens, accept indices and error flags equal the cpu backend's over the local
// transport; logprobs agree within 1e-5.
//
// Skips without a GPU. `direct` skips, saying why, where the loaded UCX has no CUDA support
// (Debian's); DS_EXPECT_UCX_DEVICE_PATH=direct (tools/gpu-run.sh run --ucx-cu13) makes that a
// failure instead.
#include <distsample/group.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/det_math_probe.h"

namespace ds {
namespace {

constexpr int32_t kTp = 2;
constexpr int32_t kVocab = 4096;
constexpr int32_t kMaxBatch = 8;
constexpr int32_t kMaxN = 4;
constexpr int kSteps = 8;

group_config config_for(const char* backend, const char* transport, dist_mode mode, ucx_memory_mode memory) {
    group_config c;
    c.tp = kTp;
    c.vocab_size = kVocab;
    c.max_batch = kMaxBatch;
    c.max_tokens_per_req = kMaxN;
    c.max_slots = kMaxBatch + 1;
    c.backend = backend;
    c.transport = transport;
    c.mode = mode;
    c.ucx_device_memory = memory;
    c.step_timeout = std::chrono::milliseconds(10000);
    c.transport_timeout = std::chrono::milliseconds(8000);
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
        for (int32_t j = 0; s.request.kind == step_kind::verify && j < n; ++j) s.request.candidates.push_back(uniform(0, kVocab - 1));
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
        if (std::isnan(expected.logprobs[i]) && std::isnan(got.logprobs[i])) continue;  // no token there (unused entries)
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
    const status reference_created = group::create(config_for("cpu", "local", mode, ucx_memory_mode::automatic), reference);
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
                             return std::string(ucx_memory_mode_name(std::get<0>(param_info.param))) + "_" + mode_name(std::get<1>(param_info.param));
                         });

}  // namespace
}  // namespace ds

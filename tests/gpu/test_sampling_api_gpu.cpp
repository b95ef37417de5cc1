// The engine-facing API on a CUDA device against the same calls on the host: identical predict,
// accept_index, accept_length and row errors on random batches (every dtype, parameter kind,
// bitmask, bias, penalties, logprob mode, vocabularies up to 262144 incl. odd ones); logprobs
// within 1e-5. Also slot-indexed state with device commits. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/det_math_probe.h"
#include "kernels/device_memory.h"
#include "kernels/exact_rules.h"
#include "support/random_calls.h"

namespace {

using namespace ds;
using ds::testing::call_outputs;
using ds::testing::random_call;

// Device copies of host arrays, freed with this object.
class device_arrays {
   public:
    template <class T>
    T* put(const T* host, size_t count) {
        if (host == nullptr) return nullptr;
        std::shared_ptr<void> device;
        const status s = cuda::upload_to_device(host, std::max<size_t>(count, 1) * sizeof(T), device);
        EXPECT_TRUE(s.is_ok()) << s.message;
        owned_.push_back(device);
        return static_cast<T*>(device.get());
    }
    template <class T>
    T* put(const std::vector<T>& host) {
        return host.empty() ? nullptr : put(host.data(), host.size());
    }
    void* zeros(size_t bytes) {
        std::vector<unsigned char> host(bytes, 0);
        return put(host.data(), bytes);
    }

   private:
    std::vector<std::shared_ptr<void>> owned_;
};

template <class T>
std::vector<T> fetch(const T* device, size_t count) {
    std::vector<T> host(count);
    const size_t bytes = count * sizeof(T);
    const status s = copy_rows(host.data(), bytes, device, bytes, bytes, 1);
    EXPECT_TRUE(s.is_ok()) << s.message;
    return host;
}

// The host call moved to the device: every array uploaded, outputs in device memory.
struct device_call {
    device_arrays arrays;
    sampling_call call;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;

    explicit device_call(const sampling_call& host, const random_call& c) : call(host) {
        const auto bs = static_cast<size_t>(c.batch_size);
        const auto rows = static_cast<size_t>(c.rows());
        call.logits.data = c.dtype == logits_dtype::f32 ? static_cast<const void*>(arrays.put(c.logits_f32))
                                                        : static_cast<const void*>(arrays.put(c.logits_half));
        call.logits.on_device = true;
        request_sources& s = call.params;
        auto move = [&](auto& p) { p.values = arrays.put(p.values, bs); };
        move(s.temperature), move(s.top_k), move(s.top_p), move(s.min_p), move(s.seed);
        move(s.presence_penalty), move(s.frequency_penalty), move(s.repetition_penalty), move(call.positions);
        auto move_list = [&](auto& list) {
            if (list.tokens == nullptr) return;
            const auto entries = static_cast<size_t>(list.offsets[bs]);
            list.tokens = arrays.put(list.tokens, entries);
            list.values = arrays.put(list.values, entries);
            list.offsets = arrays.put(list.offsets, bs + 1);
        };
        move_list(s.logit_bias);
        move_list(s.seen);
        call.candidates = arrays.put(call.candidates, rows);
        call.bitmask = arrays.put(call.bitmask, rows * static_cast<size_t>(bitmask_words(c.vocab)));
        call.outputs = {static_cast<int32_t*>(arrays.zeros(rows * 4)), static_cast<int32_t*>(arrays.zeros(rows * 4)),
                        static_cast<int32_t*>(arrays.zeros(bs * 4)), static_cast<float*>(arrays.zeros(rows * 4)),
                        static_cast<uint8_t*>(arrays.zeros(bs))};
        workspace_bytes = ds::workspace_bytes(call);
        workspace = arrays.zeros(workspace_bytes);
    }

    call_outputs run(const random_call& c) {
        const workspace_ref ws{workspace, workspace_bytes};
        const status s = c.verify() ? verify(call, ws) : sample(call, ws);
        EXPECT_TRUE(s.is_ok()) << s.message;
        call_outputs out(c);
        // The outputs to (pageable) host memory on the default stream, then a blocking copy's sync.
        EXPECT_TRUE(copy_outputs(call.outputs, out.view(), c.batch_size, c.tokens_per_req, true).is_ok());
        fetch(call.outputs.row_error, 1);  // waits for the copies before them on the default stream
        return out;
    }
};

call_outputs run_on_host(random_call& c) {
    call_outputs out(c);
    const sampling_call call = ds::testing::make_call(c, out);
    std::vector<uint64_t> workspace((workspace_bytes(call) + 7) / 8);
    const workspace_ref ws{workspace.data(), workspace.size() * 8};
    const status s = c.verify() ? verify(call, ws) : sample(call, ws);
    EXPECT_TRUE(s.is_ok()) << s.message;
    return out;
}

int trials(int fallback) {
    const char* env = std::getenv("DS_GPU_TRIALS");  // shorter runs under compute-sanitizer
    return env != nullptr ? std::atoi(env) : fallback;
}

TEST(GpuSamplingApi, EqualsTheHostOnRandomBatches) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::mt19937_64 rng(31);
    const int count = trials(2000);
    for (int trial = 0; trial < count; ++trial) {
        const int32_t max_vocab = trial % 10 == 0 ? (trial % 20 == 0 ? 262144 : 151936) : 128256;
        random_call c = ds::testing::make_random_call(rng, trial % 3 == 0 ? max_vocab : 5000, trial % 2 == 1);
        const call_outputs host = run_on_host(c);
        call_outputs scratch(c);
        device_call device(ds::testing::make_call(c, scratch), c);
        const call_outputs gpu = device.run(c);
        const std::string what = "trial " + std::to_string(trial) + " V " + std::to_string(c.vocab);
        ASSERT_EQ(host.predict, gpu.predict) << what;
        ASSERT_EQ(host.accept_index, gpu.accept_index) << what;
        ASSERT_EQ(host.accept_length, gpu.accept_length) << what;
        ASSERT_EQ(host.row_error, gpu.row_error) << what;
        for (size_t i = 0; i < host.logprobs.size(); ++i) {
            if (std::isnan(host.logprobs[i])) {
                ASSERT_TRUE(std::isnan(gpu.logprobs[i])) << what << " logprob " << i;
            } else {
                ASSERT_NEAR(host.logprobs[i], gpu.logprobs[i], 1e-5) << what << " logprob " << i;
            }
        }
    }
}

// A row the sampling kernel's resident blocks cannot hold is refused before anything is read,
// naming logits.vocab and the bound; plain greedy rows stream, so they may be longer.
TEST(GpuSamplingApi, RefusesRowsLongerThanTheResidentBlocksHold) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    device_arrays arrays;
    sampling_call call;
    call.logits = {arrays.zeros(16), logits_dtype::f32, 1, exact::kMaxVocab, exact::kMaxVocab, true};
    call.batch_size = 1;
    call.outputs = {static_cast<int32_t*>(arrays.zeros(4)), static_cast<int32_t*>(arrays.zeros(4)),
                    static_cast<int32_t*>(arrays.zeros(4)), nullptr, static_cast<uint8_t*>(arrays.zeros(1))};
    const workspace_ref ws{arrays.zeros(256), 256};
    const status s = sample(call, ws);
    EXPECT_EQ(s.code, status_code::invalid_argument) << s.message;
    EXPECT_NE(s.message.find("logits.vocab = 16777215: expected at most "), std::string::npos) << s.message;
}

// The workspace holds candidate lists for every filter the kernels list tokens for: top-k, top-p
// and min-p alone. Arithmetic only, so it runs without a device too.
TEST(GpuSamplingApi, WorkspaceHoldsListsForEveryFilter) {
    sampling_call call;
    call.logits = {nullptr, logits_dtype::f32, 4, 1000, 1000, true};
    call.batch_size = 4;
    const size_t unfiltered = workspace_bytes(call);
    const size_t lists = 4 * 1000 * 8;  // 8 bytes per token of every row (docs/engine_api.md)
    call.params.min_p = param<float>::uniform(0.05f);
    EXPECT_GE(workspace_bytes(call), unfiltered + lists) << "min_p alone";
    call.params.min_p = param<float>::uniform(0.0f);
    call.params.top_k = param<int32_t>::uniform(20);
    EXPECT_GE(workspace_bytes(call), unfiltered + lists) << "top_k";
    call.params.top_k = param<int32_t>::uniform(-1);
    call.params.top_p = param<float>::uniform(0.9f);
    EXPECT_GE(workspace_bytes(call), unfiltered + lists) << "top_p";
}

TEST(GpuSamplingApi, DeviceCommitsEqualHostCommits) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    constexpr int32_t kSlots = 6, kCapacity = 8, kVocab = 20, kBatch = 4, kN = 3;
    std::mt19937_64 rng(3);
    std::vector<int32_t> slots{5, 0, 2, 3};
    std::vector<int32_t> predict(kBatch * kN), lengths(kBatch);
    for (auto& t : predict) t = static_cast<int32_t>(rng() % kVocab);
    for (auto& l : lengths) l = 1 + static_cast<int32_t>(rng() % kN);
    std::vector<int32_t> tokens(kSlots * kCapacity, 0), counts(kSlots * kCapacity, 0), sizes(kSlots, 0);
    device_arrays arrays;
    commit_call device;
    device.batch_size = kBatch;
    device.tokens_per_req = kN;
    device.slots = arrays.put(slots);
    device.predict = arrays.put(predict);
    device.accept_length = arrays.put(lengths);
    device.seen_tokens = arrays.put(tokens);
    device.seen_counts = arrays.put(counts);
    device.seen_sizes = arrays.put(sizes);
    device.capacity = kCapacity;
    device.max_slots = kSlots;
    device.vocab = kVocab;
    device.on_device = true;
    commit_call host = device;
    host.slots = slots.data(), host.predict = predict.data(), host.accept_length = lengths.data();
    host.seen_tokens = tokens.data(), host.seen_counts = counts.data(), host.seen_sizes = sizes.data();
    host.on_device = false;
    for (int round = 0; round < 5; ++round) {
        ASSERT_TRUE(commit_tokens(device).is_ok());
        ASSERT_TRUE(commit_tokens(host).is_ok());
    }
    EXPECT_EQ(fetch(device.seen_sizes, kSlots), sizes);
    EXPECT_EQ(fetch(device.seen_tokens, kSlots * kCapacity), tokens);
    EXPECT_EQ(fetch(device.seen_counts, kSlots * kCapacity), counts);
}

}  // namespace

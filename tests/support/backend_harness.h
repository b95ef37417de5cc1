// A CPU backend plus owned output buffers, so a test can run a step in a few lines.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kernels/sampling_backend.h"

namespace ds::testing {

inline kernel_config small_config(int32_t vocab, int32_t max_batch, int32_t max_n, int32_t max_slots, int threads = 1) {
    kernel_config c;
    c.vocab_size = vocab;
    c.max_batch = max_batch;
    c.max_tokens_per_req = max_n;
    c.max_slots = max_slots;
    c.max_penalty_tokens = 64;
    c.max_logit_bias = 16;
    c.threads = threads;
    return c;
}

struct backend_harness {
    std::unique_ptr<sampling_backend> backend;
    std::vector<int32_t> packed;
    std::vector<int32_t> accept_index;
    std::vector<float> logprobs;
    std::vector<uint8_t> row_error;
    int32_t bs = 0;
    int32_t n = 1;

    explicit backend_harness(const kernel_config& config) {
        status s = make_backend(backend_kind::cpu, config, backend);
        EXPECT_TRUE(s.is_ok()) << s.message;
    }

    void register_request(int32_t slot, const sampling_params& params) {
        status s = backend->pool().register_request(slot, params);
        ASSERT_TRUE(s.is_ok()) << s.message;
    }

    // Runs a step; `step` must point at arrays that live as long as the call.
    status run(step_kind kind, const step_input& step) {
        bs = step.batch_size;
        n = step.tokens_per_req;
        packed.assign(static_cast<size_t>(bs) * (n + 1), -7);
        accept_index.assign(static_cast<size_t>(bs) * n, -7);
        logprobs.assign(static_cast<size_t>(bs) * n, 0.0f);
        row_error.assign(static_cast<size_t>(bs), 7);
        const step_output out{packed.data(), accept_index.data(), logprobs.data(), row_error.data()};
        return kind == step_kind::sample ? backend->sample(step, out) : backend->verify(step, out);
    }

    int32_t predict(int32_t b, int32_t j) const { return packed[static_cast<size_t>(b) * n + j]; }
    int32_t accept_length(int32_t b) const { return packed[static_cast<size_t>(bs) * n + b]; }
};

inline step_input make_step(const std::vector<float>& logits, int32_t vocab, const std::vector<int32_t>& slots,
                            const std::vector<int64_t>& positions, int32_t n = 1,
                            const std::vector<int32_t>* candidates = nullptr) {
    step_input in;
    in.logits =
        logits_view{logits.data(), logits_dtype::f32, static_cast<int64_t>(logits.size() / vocab), vocab, vocab};
    in.slots = slots.data();
    in.positions = positions.data();
    in.batch_size = static_cast<int32_t>(slots.size());
    in.tokens_per_req = n;
    in.candidates = candidates != nullptr ? candidates->data() : nullptr;
    return in;
}

}  // namespace ds::testing

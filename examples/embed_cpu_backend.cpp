// Embedding a sampling backend in a model runtime: the runtime owns the logits (here a host
// buffer it just "computed"), registers each request's parameters into a slot once, then hands
// the backend a pointer per step. No copy of the logits is made and a step allocates nothing.
#include <cstdio>
#include <memory>
#include <vector>

#include "kernels/sampling_backend.h"

int main() {
    ds::kernel_config config;
    config.vocab_size = 1024;
    config.max_batch = 2;
    config.max_slots = 8;
    config.max_tokens_per_req = 1;

    std::unique_ptr<ds::sampling_backend> backend;
    if (ds::status s = ds::make_backend(ds::backend_kind::cpu, config, backend); !s.is_ok()) {
        std::fprintf(stderr, "backend: %s\n", s.message.c_str());
        return 1;
    }

    ds::sampling_params creative;
    creative.temperature = 0.8f;
    creative.top_p = 0.95f;
    creative.seed = 42;
    ds::sampling_params exact;
    exact.temperature = 0.0f;
    for (auto [slot, params] : {std::pair{1, creative}, std::pair{2, exact}}) {
        if (ds::status s = backend->pool().register_request(slot, params); !s.is_ok()) {
            std::fprintf(stderr, "register: %s\n", s.message.c_str());
            return 1;
        }
    }

    // The model's output: two rows of logits.
    std::vector<float> logits(2 * 1024);
    for (int i = 0; i < 1024; ++i) {
        logits[static_cast<size_t>(i)] = static_cast<float>((i * 37) % 101) / 10.0f;
        logits[static_cast<size_t>(1024 + i)] = static_cast<float>((i * 53) % 97) / 10.0f;
    }
    const int32_t slots[2] = {1, 2};
    const int64_t positions[2] = {17, 5};  // each request's sequence length so far

    ds::step_input step;
    step.logits = ds::logits_view{logits.data(), ds::logits_dtype::f32, 2, 1024, 1024};
    step.slots = slots;
    step.positions = positions;
    step.batch_size = 2;

    int32_t packed[4];
    int32_t accept_index[2];
    float logprobs[2];
    uint8_t row_error[2];
    const ds::step_output out{packed, accept_index, logprobs, row_error};
    if (ds::status s = backend->sample(step, out); !s.is_ok()) {
        std::fprintf(stderr, "sample: %s\n", s.message.c_str());
        return 1;
    }
    for (int b = 0; b < 2; ++b)
        std::printf("request in slot %d -> token %d (logprob %.4f)\n", slots[b], packed[b], logprobs[b]);
    return 0;
}

#include "support/random_calls.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

namespace ds::testing {

namespace {

uint16_t to_bf16(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return static_cast<uint16_t>(bits >> 16);  // truncation: the test only needs some bf16 value
}

// A half-precision value near f (finite inputs within fp16 range; NaN and infinities kept).
uint16_t to_f16(float f) {
    if (std::isnan(f)) return 0x7E00;
    if (std::isinf(f)) return f > 0 ? 0x7C00 : 0xFC00;
    const float clamped = std::clamp(f, -60000.0f, 60000.0f);
    int exponent = 0;
    const float mantissa = std::frexp(std::fabs(clamped), &exponent);  // [0.5, 1)
    if (clamped == 0.0f || exponent < -13) return clamped < 0 ? 0x8000 : 0;
    const auto m = static_cast<uint16_t>(std::lround((mantissa * 2.0f - 1.0f) * 1024.0f)) & 0x3FF;
    const auto e = static_cast<uint16_t>(exponent - 1 + 15);
    return static_cast<uint16_t>((clamped < 0 ? 0x8000 : 0) | (e << 10) | m);
}

sampling_params random_params(std::mt19937_64& rng, int32_t vocab) {
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    sampling_params p;
    p.temperature = unit(rng) < 0.25f ? 0.0f : 0.1f + 1.8f * unit(rng);
    // Small k (the GPU lists top-k candidates on the logits) and, less often, large k (the mass cut).
    const uint64_t k_range = unit(rng) < 0.75f ? 60 : 3000;
    p.top_k = unit(rng) < 0.5f ? -1 : 1 + static_cast<int32_t>(rng() % k_range);
    p.top_p = unit(rng) < 0.5f ? 1.0f : 0.05f + 0.95f * unit(rng);
    p.min_p = unit(rng) < 0.6f ? 0.0f : 0.3f * unit(rng);
    p.seed = rng();
    if (unit(rng) < 0.3f) {
        p.presence_penalty = -1.0f + 2.0f * unit(rng);
        p.frequency_penalty = -1.0f + 2.0f * unit(rng);
        p.repetition_penalty = 0.5f + 1.5f * unit(rng);
    }
    if (unit(rng) < 0.3f) {
        const int entries = 1 + static_cast<int>(rng() % 5);
        for (int i = 0; i < entries; ++i) {
            p.logit_bias.push_back(
                {static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)), -5.0f + 10.0f * unit(rng)});
        }
    }
    return p;
}

std::vector<float> random_logits(std::mt19937_64& rng, int64_t rows, int32_t vocab) {
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    std::vector<float> logits(static_cast<size_t>(rows) * static_cast<size_t>(vocab));
    for (int64_t r = 0; r < rows; ++r) {
        float* row = logits.data() + r * vocab;
        const float kind = unit(rng);
        for (int32_t i = 0; i < vocab; ++i) row[i] = normal(rng);
        if (kind < 0.1f) {  // ties: a few values only
            for (int32_t i = 0; i < vocab; ++i) row[i] = static_cast<float>(rng() % 3);
        } else if (kind < 0.15f) {  // nothing allowed
            for (int32_t i = 0; i < vocab; ++i) row[i] = unit(rng) < 0.5f ? -INFINITY : NAN;
        }
        for (int32_t i = 0; i < vocab; ++i) {
            const float u = unit(rng);
            if (u < 0.02f) row[i] = -INFINITY;
            if (u > 0.995f) row[i] = NAN;
        }
    }
    return logits;
}

}  // namespace

const void* random_call::logits_data() const {
    return dtype == logits_dtype::f32 ? static_cast<const void*>(logits_f32.data())
                                      : static_cast<const void*>(logits_half.data());
}

call_outputs::call_outputs(const random_call& c)
    : predict(static_cast<size_t>(c.rows()), -7),
      accept_index(static_cast<size_t>(c.rows()), -7),
      accept_length(static_cast<size_t>(c.batch_size), -7),
      logprobs(static_cast<size_t>(c.rows()), -7.0f),
      row_error(static_cast<size_t>(c.batch_size), 7) {}

sampling_outputs call_outputs::view() {
    return {predict.data(), accept_index.data(), accept_length.data(), logprobs.data(), row_error.data()};
}

random_call make_random_call(std::mt19937_64& rng, int32_t max_vocab, bool verify) {
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    random_call c;
    const int32_t vocabs[] = {2, 7, 33, 100, 257, 1000, 4099, max_vocab};
    c.vocab = std::min(max_vocab, vocabs[rng() % 8]);
    c.batch_size = 1 + static_cast<int32_t>(rng() % 9);
    c.tokens_per_req = verify ? 1 + static_cast<int32_t>(rng() % 5) : 1;
    c.dtype = static_cast<logits_dtype>(rng() % 3);
    c.logprobs = unit(rng) < 0.5f ? logprob_mode::processed : logprob_mode::raw;
    c.per_row = unit(rng) < 0.8f;
    c.logits_f32 = random_logits(rng, c.rows(), c.vocab);
    if (c.dtype != logits_dtype::f32) {
        c.logits_half.resize(c.logits_f32.size());
        for (size_t i = 0; i < c.logits_f32.size(); ++i) {
            c.logits_half[i] = c.dtype == logits_dtype::bf16 ? to_bf16(c.logits_f32[i]) : to_f16(c.logits_f32[i]);
        }
    }
    for (int32_t b = 0; b < c.batch_size; ++b) {
        c.requests.push_back(c.per_row || b == 0 ? random_params(rng, c.vocab) : c.requests[0]);
        std::vector<int32_t> history;
        if (c.requests.back().has_penalties()) {
            const int len = static_cast<int>(rng() % 12);
            for (int i = 0; i < len; ++i)
                history.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(c.vocab)));
        }
        c.histories.push_back(c.per_row || b == 0 ? history : c.histories[0]);
        c.positions.push_back(static_cast<int64_t>(rng() % 100000));
    }
    if (!c.per_row) {  // scalars: no lists per row, and one request's parameters for all
        for (auto& r : c.requests) r.logit_bias.clear();
        for (auto& h : c.histories) h.clear();
    }
    if (verify) {
        for (int64_t i = 0; i < c.rows(); ++i) {
            // Drafts often equal the row's argmax, so chains get long.
            c.candidates.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(std::min(c.vocab, 4))));
        }
        c.thresholds =
            unit(rng) < 0.8f ? verify_thresholds{} : verify_thresholds{0.3f * unit(rng), 0.5f + 0.5f * unit(rng)};
    }
    if (unit(rng) < 0.3f) {
        c.bitmask.resize(static_cast<size_t>(c.rows()) * static_cast<size_t>(bitmask_words(c.vocab)));
        for (auto& w : c.bitmask) w = static_cast<uint32_t>(rng()) | static_cast<uint32_t>(rng());
    }
    return c;
}

sampling_call make_call(random_call& c, call_outputs& out) {
    c.temperature.clear(), c.top_p.clear(), c.min_p.clear(), c.presence.clear(), c.frequency.clear();
    c.repetition.clear(), c.top_k.clear(), c.seed.clear();
    c.bias_offsets = {0}, c.seen_offsets = {0};
    c.bias_tokens.clear(), c.bias_values.clear(), c.seen_tokens.clear(), c.seen_counts.clear();
    for (int32_t b = 0; b < c.batch_size; ++b) {
        const sampling_params& p = c.requests[static_cast<size_t>(b)];
        c.temperature.push_back(p.temperature);
        c.top_k.push_back(p.top_k);
        c.top_p.push_back(p.top_p);
        c.min_p.push_back(p.min_p);
        c.seed.push_back(static_cast<int64_t>(p.seed));
        c.presence.push_back(p.presence_penalty);
        c.frequency.push_back(p.frequency_penalty);
        c.repetition.push_back(p.repetition_penalty);
        for (const logit_bias_entry& e : p.logit_bias) {
            c.bias_tokens.push_back(e.token);
            c.bias_values.push_back(e.bias);
        }
        c.bias_offsets.push_back(static_cast<int32_t>(c.bias_tokens.size()));
        std::map<int32_t, int32_t> counts;  // the pool lists first-seen order; order does not matter
        for (int32_t t : c.histories[static_cast<size_t>(b)]) ++counts[t];
        for (const auto& [token, count] : counts) {
            c.seen_tokens.push_back(token);
            c.seen_counts.push_back(count);
        }
        c.seen_offsets.push_back(static_cast<int32_t>(c.seen_tokens.size()));
    }
    sampling_call call;
    call.logits = {c.logits_data(), c.dtype, c.rows(), c.vocab, c.vocab, false};
    call.batch_size = c.batch_size;
    call.tokens_per_req = c.tokens_per_req;
    request_sources& s = call.params;
    if (c.per_row) {
        s.temperature = param<float>::per_row(c.temperature.data());
        s.top_k = param<int32_t>::per_row(c.top_k.data());
        s.top_p = param<float>::per_row(c.top_p.data());
        s.min_p = param<float>::per_row(c.min_p.data());
        s.seed = param<int64_t>::per_row(c.seed.data());
        s.presence_penalty = param<float>::per_row(c.presence.data());
        s.frequency_penalty = param<float>::per_row(c.frequency.data());
        s.repetition_penalty = param<float>::per_row(c.repetition.data());
        s.logit_bias = {c.bias_tokens.data(), c.bias_values.data(), c.bias_offsets.data()};
        s.seen = {c.seen_tokens.data(), c.seen_counts.data(), c.seen_offsets.data()};
        call.positions = param<int64_t>::per_row(c.positions.data());
    } else {
        const sampling_params& p = c.requests[0];
        s.temperature = param<float>::uniform(p.temperature);
        s.top_k = param<int32_t>::uniform(p.top_k);
        s.top_p = param<float>::uniform(p.top_p);
        s.min_p = param<float>::uniform(p.min_p);
        s.seed = param<int64_t>::uniform(static_cast<int64_t>(p.seed));
        s.presence_penalty = param<float>::uniform(p.presence_penalty);
        s.frequency_penalty = param<float>::uniform(p.frequency_penalty);
        s.repetition_penalty = param<float>::uniform(p.repetition_penalty);
        call.positions = param<int64_t>::per_row(c.positions.data());
    }
    call.candidates = c.candidates.empty() ? nullptr : c.candidates.data();
    call.bitmask = c.bitmask.empty() ? nullptr : c.bitmask.data();
    call.thresholds = c.thresholds;
    call.logprobs = c.logprobs;
    call.outputs = out.view();
    return call;
}

kernel_config config_for(const random_call& c) {
    kernel_config k;
    k.vocab_size = c.vocab;
    k.max_slots = c.batch_size + 1;
    k.max_batch = c.batch_size;
    k.max_tokens_per_req = c.tokens_per_req;
    k.max_penalty_tokens = 64;
    k.max_logit_bias = 16;
    k.threads = 1;
    return k;
}

status run_on_backend(const random_call& c, sampling_backend& backend, call_outputs& out) {
    std::vector<int32_t> slots;
    for (int32_t b = 0; b < c.batch_size; ++b) {
        const auto& h = c.histories[static_cast<size_t>(b)];
        status s = backend.pool().register_request(b + 1, c.requests[static_cast<size_t>(b)], h.data(),
                                                   static_cast<int32_t>(h.size()));
        if (!s.is_ok()) return s;
        slots.push_back(b + 1);
    }
    step_input step;
    step.logits = {c.logits_data(), c.dtype, c.rows(), c.vocab, c.vocab, false};
    step.slots = slots.data();
    step.positions = c.positions.data();
    step.batch_size = c.batch_size;
    step.tokens_per_req = c.tokens_per_req;
    step.candidates = c.candidates.empty() ? nullptr : c.candidates.data();
    step.bitmask = c.bitmask.empty() ? nullptr : c.bitmask.data();
    step.thresholds = c.thresholds;
    std::vector<int32_t> packed(static_cast<size_t>(c.rows() + c.batch_size));
    const step_output view{packed.data(), out.accept_index.data(), out.logprobs.data(), out.row_error.data()};
    status s = c.verify() ? backend.verify(step, view) : backend.sample(step, view);
    std::copy(packed.begin(), packed.begin() + c.rows(), out.predict.begin());
    std::copy(packed.begin() + c.rows(), packed.end(), out.accept_length.begin());
    return s;
}

}  // namespace ds::testing

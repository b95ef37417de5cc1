// A tiny deterministic workload for the fault tests: V 64, 4 requests (one with penalties, so a
// rank's state depends on what it committed), alternating sample and verify (N 2) steps whose
// logits come from the step's index. A fault-free group runs the same steps as the reference.
#pragma once

#include <distsample/group.h>
#include <gtest/gtest.h>

#include <chrono>
#include <random>

namespace ds::faults_test {

constexpr int32_t kVocab = 64;
constexpr int32_t kBatch = 4;
constexpr int32_t kMaxN = 2;

inline group_config tiny_config(int32_t tp) {
    group_config c;
    c.distribution.tp = tp;
    c.limits.vocab_size = kVocab;
    c.limits.max_batch = kBatch;
    c.limits.max_tokens_per_req = kMaxN;
    c.limits.max_slots = kBatch + 1;
    c.limits.max_penalty_tokens = 64;
    c.limits.max_logit_bias = 4;
    c.distribution.mode = dist_mode::swap;
    c.distribution.policy = rank0_policy::on_mismatch;
    c.transport.payload_checksums = true;
    c.distribution.step_timeout = std::chrono::milliseconds(200);
    c.transport.timeout = std::chrono::milliseconds(1000);
    return c;
}

// The fault-free reference group of the fault tests: no step of it may time out, even on a
// loaded machine (a failed step is not committed, and every later comparison would then differ).
// Not for the soak, which bounds memory (see there).
inline group_config reference_config(int32_t tp) {
    group_config c = tiny_config(tp);
    c.distribution.step_timeout = std::chrono::seconds(10);
    return c;
}

inline void register_requests(group& g) {
    for (int32_t slot = 1; slot <= kBatch; ++slot) {
        sampling_params p;
        p.temperature = slot == 1 ? 0.0f : 1.0f;
        p.top_k = slot == 3 ? 8 : -1;
        p.seed = 1000 + static_cast<uint64_t>(slot);
        if (slot == 4) p.repetition_penalty = 1.5f;
        ASSERT_TRUE(g.register_request(slot, p).is_ok());
    }
}

// The logits and arrays of the workload's step number `index` (0-based).
struct tiny_step {
    std::vector<float> logits;
    step_request request;
};

inline void make_tiny_step(uint64_t index, int32_t tp, tiny_step& out) {
    std::mt19937_64 rng(index * 7919 + 1);
    std::normal_distribution<float> gauss(0.0f, 2.0f);
    const int32_t n = index % 2 == 0 ? 1 : kMaxN;
    out.logits.resize(static_cast<size_t>(kBatch) * n * kVocab);
    for (float& l : out.logits) l = gauss(rng);
    step_request& r = out.request;
    r = step_request{};
    r.kind = n == 1 ? step_kind::sample : step_kind::verify;
    r.tokens_per_req = n;
    for (int32_t b = 0; b < kBatch; ++b) {
        r.slots.push_back(b + 1);
        r.positions.push_back(static_cast<int64_t>(index));
        for (int32_t j = 0; j < (n == 1 ? 0 : n); ++j) r.candidates.push_back(static_cast<int32_t>(rng() % kVocab));
    }
    r.shards = split_vocab(logits_view{out.logits.data(), logits_dtype::f32, int64_t{kBatch} * n, kVocab, kVocab}, tp);
}

inline int64_t since_ns(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
}

// Bit-for-bit: the same code path on the same rows.
inline bool same_outputs(const step_outputs& a, const step_outputs& b) {
    return a.packed == b.packed && a.accept_index == b.accept_index && a.row_error == b.row_error &&
           a.digest() == b.digest();
}

}  // namespace ds::faults_test

// The benchmarks' verify step (bench/coordinator_overhead.cpp, bench/gpu_modes.cpp): a batch of
// requests over a synthetic target and draft model.
#pragma once

#include <distsample/group.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "sources/synthetic_logits.h"

// Logits, candidates and parameters of one verify step over a synthetic target and draft model.
struct workload {
    int32_t batch;
    int32_t n;
    int32_t vocab;
    std::vector<float> logits;
    std::vector<int32_t> candidates;
    std::vector<int32_t> slots;
    std::vector<int64_t> positions;
    std::vector<ds::sampling_params> params;

    workload(int32_t batch_size, int32_t tokens_per_req, int32_t vocab_size)
        : batch(batch_size), n(tokens_per_req), vocab(vocab_size) {
        ds::synthetic_lm_config target_config;
        target_config.vocab_size = vocab;
        ds::synthetic_lm_config draft_config = target_config;
        draft_config.draft_noise = 1.0f;
        const ds::synthetic_lm target(target_config);
        const ds::synthetic_lm draft(draft_config);
        logits.resize(static_cast<size_t>(batch) * n * vocab);
        std::vector<float> draft_row(static_cast<size_t>(vocab));
        for (int32_t b = 0; b < batch; ++b) {
            ds::sampling_params p;
            p.temperature = b % 4 == 0 || n == 1 ? 0.0f : 0.8f;
            p.top_p = b % 3 == 0 ? 0.9f : 1.0f;
            p.top_k = b % 5 == 0 ? 40 : -1;
            p.seed = 1000 + static_cast<uint64_t>(b);
            params.push_back(p);
            slots.push_back(b + 1);
            positions.push_back(100 + b);
            uint64_t context = 77 + static_cast<uint64_t>(b);
            candidates.push_back(b);
            for (int32_t j = 0; j < n; ++j) {
                target.logits(context, logits.data() + (static_cast<size_t>(b) * n + j) * vocab);
                if (j + 1 < n) {
                    draft.logits(context, draft_row.data());
                    const int32_t token =
                        static_cast<int32_t>(std::max_element(draft_row.begin(), draft_row.end()) - draft_row.begin());
                    candidates.push_back(token);
                    context = ds::logits_source::next_context(context, token);
                }
            }
        }
    }

    ds::logits_view view(int32_t first_request, int32_t count) const {
        return ds::logits_view{logits.data() + static_cast<size_t>(first_request) * n * vocab, ds::logits_dtype::f32,
                               int64_t{count} * n, vocab, vocab};
    }

    ds::step_request request(int32_t tp) const {
        ds::step_request r;
        r.kind = ds::step_kind::verify;
        r.tokens_per_req = n;
        r.slots = slots;
        r.positions = positions;
        r.candidates = candidates;
        r.shards = ds::split_vocab(view(0, batch), tp);
        return r;
    }
};

// The rows the example worker's model makes (cpu_worker.cpp), shared with the test that checks
// them against `distsample kernel`: row b*N+j is the synthetic model after the request's slot and
// position, then drafts 1..j. A real worker runs its LM head here instead.
#pragma once

#include <cstdint>
#include <vector>

#include "sources/synthetic_logits.h"

namespace ds::example {

inline uint64_t row_context(int32_t slot, int64_t position, const int32_t* drafts, int32_t j) {
    uint64_t context =
        logits_source::next_context(logits_source::next_context(0, slot), static_cast<int32_t>(position));
    for (int32_t i = 1; i <= j; ++i) context = logits_source::next_context(context, drafts[i]);
    return context;
}

// The full-vocab rows of requests (slot, position, candidates [N]) into rows [bs * N, V].
inline std::vector<float> model_rows(const synthetic_lm& model, const std::vector<int32_t>& slots,
                                     const std::vector<int64_t>& positions, const std::vector<int32_t>& candidates,
                                     int32_t n) {
    const auto vocab = static_cast<size_t>(model.vocab_size());
    std::vector<float> rows(slots.size() * static_cast<size_t>(n) * vocab);
    for (size_t b = 0; b < slots.size(); ++b) {
        const int32_t* drafts = candidates.empty() ? nullptr : candidates.data() + b * static_cast<size_t>(n);
        for (int32_t j = 0; j < n; ++j) {
            const size_t row = b * static_cast<size_t>(n) + static_cast<size_t>(j);
            model.logits(row_context(slots[b], positions[b], drafts, j), rows.data() + row * vocab);
        }
    }
    return rows;
}

}  // namespace ds::example

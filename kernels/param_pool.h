// Per-slot sampling state of one rank (docs/semantics.md, Requests, slots, positions):
// parameters, logit bias and the counts of tokens already emitted (for penalties). Slot 0 is
// reserved, neutral and never registered, so phantom (padding) rows that name it sample greedily
// from unmodified logits.
//
// Storage is allocated once at construction; registering, releasing and recording tokens never
// allocate.
#pragma once

#include <cstdint>
#include <vector>

#include "config/kernel_config.h"
#include "kernels/request_view.h"
#include "kernels/sampling_types.h"

namespace ds {

struct token_count {
    int32_t token = 0;
    int32_t count = 0;
};

// A slot's seen tokens, in first-seen order.
struct token_count_span {
    const token_count* data = nullptr;
    int32_t size = 0;
};

class param_pool {
   public:
    explicit param_pool(const kernel_config& config);

    // Validates `params` and installs them in `slot` (1 <= slot < max_slots), resetting the slot's
    // token counts. Registering an occupied slot replaces the request that held it.
    status register_request(int32_t slot, const sampling_params& params);
    // Same, and seeds the penalty counts with tokens already generated (e.g. a resumed request).
    status register_request(int32_t slot, const sampling_params& params, const int32_t* history, int32_t history_size);
    // Returns the slot to the neutral parameters.
    status release(int32_t slot);
    // Adds emitted tokens to the slot's penalty counts (only tracked when it has penalties).
    status record_tokens(int32_t slot, const int32_t* tokens, int32_t count);

    const sampling_params& params(int32_t slot) const { return params_[static_cast<size_t>(slot)]; }
    token_count_span seen_tokens(int32_t slot) const;
    // The slot's request as the samplers read it, at `position`; views into the pool (valid until
    // the slot changes).
    request_view request(int32_t slot, int64_t position) const;
    const kernel_config& config() const { return config_; }

   private:
    status check_slot(int32_t slot) const;

    kernel_config config_;
    std::vector<sampling_params> params_;
    std::vector<token_count> counts_;  // max_slots rows of max_penalty_tokens entries
    std::vector<int32_t> count_sizes_;
};

// A request's parameters and seen tokens as the samplers read them, at `position`; views into
// `params` and `seen`.
request_view request_of(const sampling_params& params, token_count_span seen = {}, int64_t position = 0);

// Adds every request's emitted tokens (predict[b*N, b*N + accept_length), up to the first -1)
// to its slot's penalty counts; phantom rows (slot 0) are skipped.
status record_step_tokens(param_pool& pool, const step_input& step, const step_output& out);

}  // namespace ds

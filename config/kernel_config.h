// Sizes a sampling backend is built for. Every buffer is allocated once from these at
// construction, so no step allocates (docs/architecture.md, Sampling backends).
#pragma once

#include <cstdint>
#include <string>

namespace ds {

struct kernel_config {
    int32_t vocab_size = 32000;         // V of the rows this backend sees (full vocab or a shard)
    int32_t max_slots = 256;            // parameter-pool rows, slot 0 included
    int32_t max_batch = 256;            // requests per step (pad_bs when batch-DP)
    int32_t max_tokens_per_req = 8;     // N: anchor + drafts
    int32_t max_penalty_tokens = 4096;  // distinct seen tokens tracked per slot for penalties
    int32_t max_logit_bias = 1024;      // logit_bias entries per request
    int32_t threads = 0;                // CPU worker threads; 0 = hardware concurrency

    int64_t max_rows() const { return int64_t{max_batch} * max_tokens_per_req; }
};

// Returns an empty string when the configuration is usable, else a message naming the field.
std::string validate_kernel_config(const kernel_config& config);

}  // namespace ds

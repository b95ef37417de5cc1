// Sizes a sampling backend is built for. Every buffer is allocated once from these at
// construction, so no step allocates (docs/architecture.md, Sampling backends).
#pragma once

#include <cstdint>

#include "core/status.h"

namespace ds {

// The ranges of the sizes, one place for the config keys, kernel_config and the step inputs that
// are sized by them (docs/configuration.md, "Limits").
// Below 2^24: a row's integer masses (at most 2^40 each) then sum below 2^64 (docs/semantics.md,
// "Integer mass").
constexpr int32_t kMaxVocabSize = (1 << 24) - 1;
constexpr int32_t kMaxBatchSize = 1 << 16;  // requests in one step
constexpr int32_t kMaxTokensPerRequest = 64;
constexpr int32_t kMaxSlots = 1 << 20;
constexpr int32_t kMaxPenaltyTokens = 1 << 20;
constexpr int32_t kMaxLogitBias = 1 << 20;
constexpr int32_t kMaxThreads = 1024;

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

// Ok when the configuration is usable, else an invalid_argument status naming the field.
status validate_kernel_config(const kernel_config& config);

}  // namespace ds

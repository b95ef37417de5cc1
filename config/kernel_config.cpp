#include "config/kernel_config.h"

#include <fmt/format.h>

namespace ds {

namespace {
status check_range(const char* field, int64_t value, int64_t lo, int64_t hi) {
    if (value >= lo && value <= hi) return status::success();
    return status::invalid(fmt::format("kernel_config.{} = {}: expected an integer in [{}, {}]", field, value, lo, hi));
}
}  // namespace

status validate_kernel_config(const kernel_config& c) {
    for (const status& error : {
             check_range("vocab_size", c.vocab_size, 1, kMaxVocabSize),
             check_range("max_slots", c.max_slots, 2, kMaxSlots),
             check_range("max_batch", c.max_batch, 1, kMaxBatchSize),
             check_range("max_tokens_per_req", c.max_tokens_per_req, 1, kMaxTokensPerRequest),
             check_range("max_penalty_tokens", c.max_penalty_tokens, 0, kMaxPenaltyTokens),
             check_range("max_logit_bias", c.max_logit_bias, 0, kMaxLogitBias),
             check_range("threads", c.threads, 0, kMaxThreads),
         }) {
        if (!error.is_ok()) return error;
    }
    return status::success();
}

}  // namespace ds

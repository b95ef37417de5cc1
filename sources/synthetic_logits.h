// A deterministic stand-in for a language model: Zipf-shaped logits with a few context-dependent
// "hot" tokens and Philox noise, keyed by (model seed, context). The same context always gives the
// same row, so demos and benchmarks are reproducible. A draft model is the same generator with
// extra noise (draft_noise > 0), which makes its proposals agree with the target often but not
// always, as a real draft model does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sources/logits_source.h"

namespace ds {

struct synthetic_lm_config {
    int32_t vocab_size = 32000;
    uint64_t seed = 1;
    float zipf_exponent = 1.1f;  // base logit of token i is -zipf_exponent * ln(1 + i)
    float noise = 1.2f;          // amplitude of per-context noise on every logit
    int32_t hot_tokens = 6;      // context-chosen tokens that get hot_boost
    float hot_boost = 11.0f;
    float draft_noise = 0.0f;  // extra noise of a draft model (0 for the target)
};

class synthetic_lm final : public logits_source {
   public:
    explicit synthetic_lm(const synthetic_lm_config& config);

    int32_t vocab_size() const override { return config_.vocab_size; }
    // Writes vocab_size logits for the context into `row`.
    void logits(uint64_t context, float* row) const override;
    // A different "prompt" per request, derived from the model's seed.
    uint64_t prompt(int32_t index) const override { return config_.seed * 1000 + static_cast<uint64_t>(index); }
    std::string token_text(int32_t token) const override { return std::to_string(token); }

    const synthetic_lm_config& config() const { return config_; }

   private:
    synthetic_lm_config config_;
    std::vector<float> base_;
};

}  // namespace ds

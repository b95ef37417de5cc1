// A deterministic stand-in for a language model: Zipf-shaped logits with a few context-dependent
// "hot" tokens and Philox noise, keyed by (model seed, context). The same context always gives the
// same row, so demos and benchmarks are reproducible. A draft model is the same generator with
// extra noise (draft_noise > 0), which makes its proposals agree with the target often but not
// always, as a real draft model does.
#pragma once

#include <cstdint>
#include <vector>

namespace ds {

struct synthetic_lm_config {
    int32_t vocab_size = 32000;
    uint64_t seed = 1;
    float zipf_exponent = 1.1f;  // base logit of token i is -zipf_exponent * ln(1 + i)
    float noise = 1.2f;          // amplitude of per-context noise on every logit
    int32_t hot_tokens = 6;      // context-chosen tokens that get hot_boost
    float hot_boost = 11.0f;
    float draft_noise = 0.0f;    // extra noise of a draft model (0 for the target)
};

class synthetic_lm {
   public:
    explicit synthetic_lm(const synthetic_lm_config& config);

    // Writes vocab_size logits for the context into `row`.
    void logits(uint64_t context, float* row) const;

    // The context after appending `token` (a hash of the last two tokens: an n-gram model).
    static uint64_t next_context(uint64_t context, int32_t token);

    const synthetic_lm_config& config() const { return config_; }

   private:
    synthetic_lm_config config_;
    std::vector<float> base_;
};

}  // namespace ds

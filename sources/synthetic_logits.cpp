#include "sources/synthetic_logits.h"

#include <cmath>

#include "kernels/det_math.h"

namespace ds {

namespace dm = ds::detmath;

namespace {

// Four uniforms in [-1, 1) from one Philox call.
void noise4(uint64_t key, uint64_t counter, uint32_t stream, float out[4]) {
    const uint32_t k[2] = {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)};
    const uint32_t c[4] = {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), stream, 0x5EEDu};
    const dm::philox_out r = dm::philox4x32_10(c, k);
    for (int i = 0; i < 4; ++i) out[i] = static_cast<float>(r.v[i] >> 8) * 0x1.0p-23f - 1.0f;
}

}  // namespace

synthetic_lm::synthetic_lm(const synthetic_lm_config& config)
    : config_(config), base_(static_cast<size_t>(config.vocab_size)) {
    for (int32_t i = 0; i < config.vocab_size; ++i) {
        base_[static_cast<size_t>(i)] = -config.zipf_exponent * std::log(1.0f + static_cast<float>(i));
    }
}

void synthetic_lm::logits(uint64_t context, float* row) const {
    const int32_t v = config_.vocab_size;
    const uint64_t key = config_.seed ^ (context * 0x9E3779B97F4A7C15ull);
    float u[4];
    for (int32_t i = 0; i < v; i += 4) {
        noise4(key, static_cast<uint64_t>(i), 1, u);
        for (int32_t j = 0; j < 4 && i + j < v; ++j)
            row[i + j] = base_[static_cast<size_t>(i + j)] + config_.noise * u[j];
    }
    if (config_.draft_noise > 0.0f) {
        const uint64_t draft_key = key ^ 0xD4AF7ull;
        for (int32_t i = 0; i < v; i += 4) {
            noise4(draft_key, static_cast<uint64_t>(i), 2, u);
            for (int32_t j = 0; j < 4 && i + j < v; ++j) row[i + j] += config_.draft_noise * u[j];
        }
    }
    for (int32_t h = 0; h < config_.hot_tokens; h += 4) {
        noise4(key, static_cast<uint64_t>(h), 3, u);
        for (int32_t j = 0; j < 4 && h + j < config_.hot_tokens; ++j) {
            // Hot tokens concentrate in the frequent part of the vocabulary, as real text does.
            const float unit = 0.5f * (u[j] + 1.0f);
            const auto token = static_cast<int32_t>(unit * unit * static_cast<float>(v - 1));
            row[token] += config_.hot_boost / static_cast<float>(1 + h + j);
        }
    }
}

}  // namespace ds

// How the sharded sampler's ranks encode what they exchange (docs/architecture.md, Modes:
// sharded): argmax keys, cut summaries and candidate keys. Shared by the sampler, which reads them
// from every rank, and by every shard-primitives implementation, which writes them.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/det_math.h"

namespace ds::shard_encoding {

// Monotone map of a float to uint32 (larger float, larger key). -0.0 counts as +0.0, as the
// backend's `>` comparison does.
inline uint32_t ordered_bits(float f) {
    const uint32_t u = detmath::float_as_bits(f == 0.0f ? 0.0f : f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

inline float from_ordered_bits(uint32_t o) {
    return detmath::bits_as_float((o & 0x80000000u) ? (o & 0x7FFFFFFFu) : ~o);
}

// (logit, -index) packed so that all_reduce(max) yields the max logit at the lowest index; 0 = none.
inline uint64_t argmax_key(float logit, int32_t global_token) {
    return (uint64_t{ordered_bits(logit)} << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(global_token));
}
inline int32_t argmax_token(uint64_t key) { return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key)); }
inline float argmax_logit(uint64_t key) { return from_ordered_bits(static_cast<uint32_t>(key >> 32)); }

constexpr int kBins = 256;

inline uint64_t double_bits(double d) {
    uint64_t u = 0;
    std::memcpy(&u, &d, sizeof(u));
    return u;
}

inline double from_double_bits(uint64_t u) {
    double d = 0.0;
    std::memcpy(&d, &u, sizeof(d));
    return d;
}

// A rank's summary of a cut row: for each depth d in 1, 4, 16, 64, 256, 1024, with n its tokens of
// nonzero mass, the Q of its min(d, n)-th largest mass (0 when n = 0) and the sum of its
// min(d, n) largest masses, rounded down. Lower bounds of how many tokens (and how much mass)
// have Q >= q follow for any q, and upper bounds of how many tokens of the rank do. One word per
// depth: Q (<= 2^40, 41 bits) above the rounded mass (23 bits).
constexpr int kLevels = 6;
constexpr size_t kSummaryWords = kLevels;
constexpr uint64_t depth_at(int level) { return uint64_t{1} << (2 * level); }

// A mass (< 2^64) rounded down to 17 significant bits as (6-bit shift, 17-bit mantissa): still a
// lower bound, 2^-16 relative at worst.
constexpr int kMantissaBits = 17;
constexpr int kRoundedMassBits = 23;
constexpr uint64_t kRoundedMassMask = (uint64_t{1} << kRoundedMassBits) - 1;

inline uint64_t round_down_mass(uint64_t mass) {
    int shift = 0;
    while ((mass >> shift) >= (uint64_t{1} << kMantissaBits)) ++shift;
    return (static_cast<uint64_t>(shift) << kMantissaBits) | (mass >> shift);
}

inline uint64_t rounded_mass_value(uint64_t code) {
    return (code & ((uint64_t{1} << kMantissaBits) - 1)) << (code >> kMantissaBits);
}

inline uint64_t summary_word(uint64_t q, uint64_t mass_above) {
    return (q << kRoundedMassBits) | round_down_mass(mass_above);
}
inline uint64_t summary_q(uint64_t word) { return word >> kRoundedMassBits; }
inline uint64_t summary_mass(uint64_t word) { return rounded_mass_value(word & kRoundedMassMask); }

// The most candidates a rank other than the decider sends for one row (bounds the exchange by
// 255 words per row, within the transport's buffers).
constexpr uint64_t kMaxSent = 255;

// A candidate on the wire: Q (<= 2^40) above the complemented index local to its shard, so that
// a larger key comes first in (Q desc, index asc); 0 is padding (Q >= 1). Shards of ranks that
// send candidates (TP >= 2) hold at most 2^24 / 2 tokens (config: V <= 2^24).
constexpr int kIndexBits = 23;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
inline uint64_t candidate_key(uint64_t q, int32_t local_token) {
    return (q << kIndexBits) | (kIndexMask - static_cast<uint64_t>(local_token));
}
inline uint64_t candidate_mass(uint64_t key) { return key >> kIndexBits; }
inline int32_t candidate_token(uint64_t key) { return static_cast<int32_t>(kIndexMask - (key & kIndexMask)); }

// What a decider announces when its candidates did not reach the bound it was promised (a bug):
// every rank then fails the step instead of sampling from different cuts.
constexpr uint64_t kBrokenBound = std::numeric_limits<uint64_t>::max();

}  // namespace ds::shard_encoding

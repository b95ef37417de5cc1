// The exactness rules of docs/semantics.md, once, for every sampler: the CPU backend, the CUDA
// kernels and the sharded sampler all decide through these functions, so they cannot drift.
//
// Compiled by g++ for the host and by nvcc for the device, both without contraction and without
// fast math; every operation here is an IEEE operation with one correctly rounded result, an
// integer operation, or an explicit fmaf, so host and device produce the same bits.
#pragma once

#include <cstdint>

#include "kernels/det_math.h"

namespace ds::exact {

namespace dm = ds::detmath;

// Temperatures below this select greedy decoding (as does top_k == 1): the argmax of the allowed
// logits, ties to the lowest index.
constexpr float kGreedyTemperature = 1e-6f;
DS_HD bool is_greedy(float temperature, int32_t top_k) { return temperature < kGreedyTemperature || top_k == 1; }

// ---------------------------------------------------------------------------------------------
// Integer mass (docs/semantics.md, "Integer mass")
// ---------------------------------------------------------------------------------------------
constexpr int kMassBits = 40;
constexpr uint64_t kMassOne = uint64_t{1} << kMassBits;
// Sums of masses stay below 2^64 while a row has fewer than 2^24 tokens.
constexpr int32_t kMaxVocab = (int32_t{1} << 24) - 1;

constexpr float kLog2e = 1.44269504088896341f;

// The per-row factor of the mass: log2(e) / T, so a token's weight is 2^((l - max) * scale).
DS_HD float mass_scale(float temperature) { return kLog2e / temperature; }
// The scale at temperature 1 (the normaliser of log-softmax).
constexpr float kUnitScale = kLog2e;

// 2^r for r in [-0.5, 0.5]: Taylor polynomial of degree 6 in Horner form (relative error below
// 1.3e-7); the result lies in [0.70710677, 1.4142135].
DS_HD float exp2_reduced(float r) {
    float p = 1.5403530393381606e-4f;
    p = fmaf(p, r, 1.3333558146428443e-3f);
    p = fmaf(p, r, 9.6181291076284772e-3f);
    p = fmaf(p, r, 5.5504108664821580e-2f);
    p = fmaf(p, r, 2.4022650695910071e-1f);
    p = fmaf(p, r, 6.9314718055994531e-1f);
    return fmaf(p, r, 1.0f);
}

// Exponents below this have mass 0 (as does everything below -41); clamping there keeps every
// shift of mass_at_exponent below 64 without a clamp of its own.
constexpr float kLowestExponent = -56.0f;

// The exponent x of a token's weight 2^x, into [kLowestExponent, 0]: NaN and -inf become the
// lowest (mass 0), a logit above the maximum (never the case in a row) 0. Q is a function of x
// alone (but for the row's maximum itself, which has 2^40), and Q in [a, b) for integers a < b
// needs x in [log2(a) - 40 - e, log2(b) - 40 + e) with e < 1e-6 (the error of 2^r below):
// kernels may select tokens on x before they compute masses.
DS_HD float mass_exponent(float l, float max_logit, float scale) {
    return fminf(fmaxf((l - max_logit) * scale, kLowestExponent), 0.0f);
}

// Q = floor(2^x * 2^40) for an exponent x in [kLowestExponent, 0], without a division or a
// float-to-integer conversion: the integer part of x comes from the bits of x + 1.5 * 2^23 (round
// to nearest), and Q is the 24-bit mantissa of 2^r shifted into place. 2^40 at x = 0 (2^0 is
// exactly 1).
DS_HD uint64_t mass_at_exponent(float x) {
    constexpr float kRoundingShift = 12582912.0f;    // 1.5 * 2^23
    const float shifted = x + kRoundingShift;        // the nearest integer n, in its low bits
    const float r = x - (shifted - kRoundingShift);  // exact, in [-0.5, 0.5]
    const int32_t n = static_cast<int32_t>(dm::float_as_bits(shifted) - 0x4B400000u);
    // 2^r = mantissa * 2^(e - 23) with e in {-1, 0}, so Q = floor(mantissa * 2^(n + e + 17)): the
    // mantissa placed 23 bits up, then shifted down by 6 - n - e, in [6, 63] for n >= -56.
    const uint32_t bits = dm::float_as_bits(exp2_reduced(r));
    const uint64_t placed = static_cast<uint64_t>((bits & 0x007FFFFFu) | 0x00800000u) << 23;
    const int32_t down = 6 - n - (static_cast<int32_t>(bits >> 23) - 127);
    return placed >> down;
}

// Q = floor(2^((l - max_logit) * scale) * 2^40) for l <= max_logit; 2^40 for l >= max_logit
// (also when both are +inf); 0 for -inf and NaN and for weights below 2^-40 of the top token's.
DS_HD uint64_t token_mass(float l, float max_logit, float scale) {
    // Selected rather than branched on, so a GPU warp never diverges here.
    return l == max_logit ? kMassOne : mass_at_exponent(mass_exponent(l, max_logit, scale));
}

// token_mass of a row whose maximum is finite, for its logits (all at or below the maximum, or
// NaN): the same value with fewer operations, for the kernels' passes over every token. There
// (l - max_logit) * scale is at most 0, and exactly 0 at the maximum, where 2^0 gives 2^40, so
// neither the clamp at 0 nor the select for the maximum changes a result.
DS_HD uint64_t token_mass_under_finite_max(float l, float max_logit, float scale) {
    return mass_at_exponent(fmaxf((l - max_logit) * scale, kLowestExponent));
}

// ceil(min_p * 2^40), at least 1: tokens below it are dropped (min_p in [0, 1]).
DS_HD uint64_t min_p_mass_threshold(float min_p) {
    const uint64_t threshold = static_cast<uint64_t>(ceil(static_cast<double>(min_p) * 0x1.0p40));
    return threshold > 0 ? threshold : 1;
}

// ceil(top_p * kept_mass), computed in double identically on both sides.
DS_HD uint64_t top_p_mass_target(float top_p, uint64_t kept_mass) {
    const double target = ceil(static_cast<double>(kept_mass) * static_cast<double>(top_p));
    const double limit = static_cast<double>(kept_mass);
    return target >= limit ? kept_mass : static_cast<uint64_t>(target);
}

// ---------------------------------------------------------------------------------------------
// The cut (docs/semantics.md, "Filtering")
// ---------------------------------------------------------------------------------------------
// Which tokens survive filtering: mass >= min_mass, and when has_boundary, no later than the
// boundary token in (mass desc, index asc) order.
struct filter_cut {
    uint64_t min_mass = 1;
    bool has_boundary = false;
    uint64_t boundary_mass = 0;
    int32_t boundary_token = -1;

    DS_HD bool keeps(int32_t token, uint64_t mass) const {
        if (mass < min_mass) return false;
        if (!has_boundary) return true;
        return mass > boundary_mass || (mass == boundary_mass && token <= boundary_token);
    }
};

// ---------------------------------------------------------------------------------------------
// Penalties (docs/semantics.md, "Penalties and bias")
// ---------------------------------------------------------------------------------------------
struct penalties {
    float presence = 0.0f;
    float frequency = 0.0f;
    float repetition = 1.0f;

    DS_HD bool active() const { return presence != 0.0f || frequency != 0.0f || repetition != 1.0f; }
};

// The logit of a token emitted `count` >= 1 times before this row: repetition scales it once,
// frequency subtracts per occurrence, presence once.
DS_HD float penalised_logit(float l, int32_t count, const penalties& p) {
    if (p.repetition != 1.0f) l = l > 0.0f ? l / p.repetition : l * p.repetition;
    l = l - p.frequency * static_cast<float>(count);
    return l - p.presence;
}

// How often `token` occurs among the first `count` drafts: row j of a verify chain counts the
// drafts 1..j as emitted before it (they are, whenever the row is used).
DS_HD int32_t occurrences(const int32_t* drafts, int32_t count, int32_t token) {
    int32_t n = 0;
    for (int32_t i = 0; i < count; ++i) n += drafts[i] == token ? 1 : 0;
    return n;
}

// True when drafts[i] is the first occurrence of its token among drafts[0..i].
DS_HD bool first_occurrence(const int32_t* drafts, int32_t i) {
    for (int32_t k = 0; k < i; ++k) {
        if (drafts[k] == drafts[i]) return false;
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Verify (docs/semantics.md, "Verify")
// ---------------------------------------------------------------------------------------------
// A draft with kept mass q under a row of kept mass M is accepted when it has mass at all and
// q / M >= threshold_single or coin <= (q / M) / threshold_acc. A draft without mass (masked,
// filtered, -inf or NaN logit) is never accepted, whatever the thresholds.
DS_HD bool accepts_draft(uint64_t draft_mass, uint64_t kept_mass, double coin, float threshold_single,
                         float threshold_acc) {
    if (draft_mass == 0) return false;
    const double p = static_cast<double>(draft_mass) / static_cast<double>(kept_mass);
    return p >= threshold_single || coin <= p / threshold_acc;
}

// What the row's final token is drawn from after a rejected draft: the kept mass without the
// draft's; when that leaves nothing, the whole kept mass with the draft included.
struct residual {
    uint64_t mass;
    bool excludes_draft;
};

DS_HD residual residual_after(uint64_t kept_mass, uint64_t draft_mass) {
    if (kept_mass > draft_mass) return {kept_mass - draft_mass, draft_mass > 0};
    return {kept_mass, false};
}

// The draw's target in the inverse CDF: floor(u * mass) for the 64-bit uniform `bits`.
DS_HD uint64_t draw_target(uint64_t bits, uint64_t mass) { return dm::mul_high64(bits, mass); }

// ---------------------------------------------------------------------------------------------
// Log-probabilities (docs/semantics.md, "Log-probabilities")
// ---------------------------------------------------------------------------------------------
// l - max_logit in double (0 when equal, also for two infinities).
DS_HD double shifted_logit(float l, float max_logit) {
    return l == max_logit ? 0.0 : static_cast<double>(l) - static_cast<double>(max_logit);
}

// A mass sum as a sum of weights (the top token's weight is 1).
DS_HD double mass_weight(uint64_t mass) { return static_cast<double>(mass) * 0x1.0p-40; }

// The log-probability of a token whose logit is `shifted` above the row's maximum, at
// `temperature`, in a distribution whose weights (at the same temperature, the top token's 1) sum
// to weight_sum: (l - max) / T - ln(weight_sum).
DS_HD double log_probability(double shifted, float temperature, double weight_sum) {
    return shifted / static_cast<double>(temperature) - log(weight_sum);
}

}  // namespace ds::exact

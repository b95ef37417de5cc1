// Deterministic math shared by the CPU and CUDA backends (docs/semantics.md).
//
// Everything here is compiled by g++ for the host and by nvcc for the device. Both sides are
// built without floating-point contraction and without fast math, and every multiply-add that
// matters is an explicit fmaf, so host and device produce the same bits for the same inputs.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DS_HD __host__ __device__ __forceinline__
#else
#define DS_HD inline
#endif

namespace ds::detmath {

// ---------------------------------------------------------------------------------------------
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
// ---------------------------------------------------------------------------------------------
struct philox_out {
    uint32_t v[4];
};

DS_HD void mulhilo32(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
    const uint64_t product = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
    hi = static_cast<uint32_t>(product >> 32);
    lo = static_cast<uint32_t>(product);
}

DS_HD philox_out philox4x32_10(const uint32_t counter[4], const uint32_t key_in[2]) {
    constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
    constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += kWeyl0;
            k1 += kWeyl1;
        }
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo32(kMul0, c0, hi0, lo0);
        mulhilo32(kMul1, c2, hi1, lo1);
        const uint32_t n0 = hi1 ^ c1 ^ k0;
        const uint32_t n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
    }
    return philox_out{{c0, c1, c2, c3}};
}

// What a random draw is for. Distinct purposes never share a stream.
enum class draw_purpose : uint32_t {
    token = 0,  // choose a token (plain sampling, the residual/final token of a verify chain)
    coin = 1,   // accept-or-reject coin for a draft in target-only verification
};

// Key layout of every draw (docs/semantics.md, Random streams):
//   key     = { seed[31:0], seed[63:32] }
//   counter = { position[31:0], position[63:32], draft_index, purpose }
// `position` is the request's sequence length before the step; `draft_index` is the index of the
// row in the request's verify chain (0 for plain sampling). The result is a pure function of these
// four values, so it does not depend on the batch, the slot, the rank or the backend.
DS_HD uint64_t random_bits64(uint64_t seed, uint64_t position, uint32_t draft_index, draw_purpose purpose) {
    const uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
    const uint32_t counter[4] = {static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32), draft_index,
                                 static_cast<uint32_t>(purpose)};
    const philox_out out = philox4x32_10(counter, key);
    return (static_cast<uint64_t>(out.v[1]) << 32) | out.v[0];
}

// floor(a * b / 2^64): with a = u * 2^64 a uniform in [0, 1), this is floor(u * b) exactly.
DS_HD uint64_t mul_high64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
    return __umul64hi(a, b);
#else
    __extension__ typedef unsigned __int128 uint128;  // GCC/Clang extension, fine under -Wpedantic
    return static_cast<uint64_t>((static_cast<uint128>(a) * b) >> 64);
#endif
}

// A uniform in [0, 1) given as a double (53 random bits), for threshold comparisons.
DS_HD double bits_to_unit_double(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

// A user-supplied coin in [0, 1] as the 64-bit fixed-point value the sampler consumes.
DS_HD uint64_t unit_double_to_bits(double u) {
    if (!(u > 0.0)) return 0;
    if (u >= 1.0) return ~uint64_t{0};
    return static_cast<uint64_t>(u * 0x1.0p64);
}

// ---------------------------------------------------------------------------------------------
// Deterministic exp and log. Only + - * / and fmaf, each correctly rounded on both sides.
// ---------------------------------------------------------------------------------------------
DS_HD float bits_as_float(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
DS_HD uint32_t float_as_bits(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

// Smallest argument for which det_exp returns a non-zero value. Below it the result would be a
// subnormal, which the sampler never needs (anything below 2^-40 has zero mass).
constexpr float kExpMinArg = -87.0f;

// e^x for x <= 0 (the only range the sampler uses: x = (logit - max) / T). Returns a value in
// [0, 1]. x = -inf and x < kExpMinArg give 0; NaN gives NaN. Accuracy: within 1 ulp of e^x.
DS_HD float det_exp(float x) {
    // Branch-free: the polynomial runs on x clamped into [kExpMinArg, 0] and selects pick the
    // special cases, so a GPU thread interleaves several tokens' polynomials instead of branching
    // per token. Equal to the branching form on all 2^32 inputs (checked exhaustively, 2026-12-02).
    // x = n*ln2 + r with |r| <= ln2/2; ln2 split in two so n*ln2_hi is exact for |n| <= 2^7.
    constexpr float kLog2e = 1.44269504088896341f;
    constexpr float kLn2Hi = 0.693145751953125f;              // 0x3f317200, 8 trailing zero bits
    constexpr float kLn2Lo = 1.42860682030941723212e-6f;      // ln2 - kLn2Hi
    const float clamped = fminf(fmaxf(x, kExpMinArg), 0.0f);  // NaN becomes kExpMinArg here
    const float n = rintf(clamped * kLog2e);
    float r = fmaf(-n, kLn2Hi, clamped);
    r = fmaf(-n, kLn2Lo, r);
    // Taylor polynomial of degree 7 in Horner form (truncation error < 4e-9 relative).
    float p = 1.98412698e-4f;        // 1/5040
    p = fmaf(p, r, 1.38888889e-3f);  // 1/720
    p = fmaf(p, r, 8.33333333e-3f);  // 1/120
    p = fmaf(p, r, 4.16666667e-2f);  // 1/24
    p = fmaf(p, r, 1.66666667e-1f);  // 1/6
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    // 2^n is a normal float for n in [-126, 0]; the product is correctly rounded.
    const int exponent = static_cast<int>(n) + 127;
    const float value = p * bits_as_float(static_cast<uint32_t>(exponent) << 23);
    if (x != x) return x;
    return x < kExpMinArg ? 0.0f : (x >= 0.0f ? 1.0f : value);
}

// Natural log for finite x > 0 (x <= 0 gives -inf, NaN gives NaN, +inf gives +inf).
// Accuracy: within 2 ulp of ln(x) for normal x.
DS_HD float det_log(float x) {
    if (x != x) return x;
    if (!(x > 0.0f)) return -HUGE_VALF;
    if (x == HUGE_VALF) return x;
    uint32_t bits = float_as_bits(x);
    int exponent = 0;
    if (bits < 0x00800000u) {  // subnormal: scale by 2^24 first
        bits = float_as_bits(x * 16777216.0f);
        exponent = -24;
    }
    exponent += static_cast<int>(bits >> 23) - 127;
    float m = bits_as_float((bits & 0x007FFFFFu) | 0x3F800000u);  // m in [1, 2)
    if (m > 1.41421356f) {
        m = m * 0.5f;
        exponent += 1;
    }
    // ln(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716.
    const float s = (m - 1.0f) / (m + 1.0f);
    const float s2 = s * s;
    float p = 0.1111111111f;         // 1/9
    p = fmaf(p, s2, 0.1428571429f);  // 1/7
    p = fmaf(p, s2, 0.2f);
    p = fmaf(p, s2, 0.3333333333f);
    p = p * s2;  // s^2 (1/3 + s^2/5 + ...)
    const float log_m = fmaf(2.0f * s, p, 2.0f * s);
    constexpr float kLn2Hi = 0.693145751953125f;
    constexpr float kLn2Lo = 1.42860682030941723212e-6f;
    const float e = static_cast<float>(exponent);
    return fmaf(e, kLn2Hi, fmaf(e, kLn2Lo, log_m));
}

// ---------------------------------------------------------------------------------------------
// Integer probability mass (docs/semantics.md, Integer mass).
// ---------------------------------------------------------------------------------------------
constexpr int kMassBits = 40;
constexpr uint64_t kMassOne = uint64_t{1} << kMassBits;

// Q = floor(w * 2^40) for a weight w in [0, 1]; exact because w has 24 significant bits.
DS_HD uint64_t weight_to_mass(float w) {
    // w * 2^40 is exact in float (a power-of-two scale of a value in [0, 1]): one conversion, the
    // same integer as through double.
    return static_cast<uint64_t>(w * 0x1.0p40f);
}

// ceil(fraction * 2^40) for min_p in [0, 1].
DS_HD uint64_t min_p_mass_threshold(float min_p) {
    return static_cast<uint64_t>(ceil(static_cast<double>(min_p) * 0x1.0p40));
}

// ceil(top_p * kept_mass), computed in double identically on both sides.
DS_HD uint64_t top_p_mass_target(float top_p, uint64_t kept_mass) {
    const double target = ceil(static_cast<double>(kept_mass) * static_cast<double>(top_p));
    const double limit = static_cast<double>(kept_mass);
    return target >= limit ? kept_mass : static_cast<uint64_t>(target);
}

// ---------------------------------------------------------------------------------------------
// Half-precision inputs.
// ---------------------------------------------------------------------------------------------
DS_HD float bf16_bits_to_float(uint16_t bits) { return bits_as_float(static_cast<uint32_t>(bits) << 16); }

DS_HD float fp16_bits_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1Fu;
    uint32_t mantissa = h & 0x3FFu;
    if (exponent == 0x1Fu) return bits_as_float(sign | 0x7F800000u | (mantissa << 13));
    if (exponent == 0) {
        if (mantissa == 0) return bits_as_float(sign);
        // Subnormal half: normalise into a float.
        exponent = 113;  // 127 - 15 + 1
        while ((mantissa & 0x400u) == 0) {
            mantissa <<= 1;
            --exponent;
        }
        mantissa &= 0x3FFu;
        return bits_as_float(sign | (exponent << 23) | (mantissa << 13));
    }
    return bits_as_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

}  // namespace ds::detmath

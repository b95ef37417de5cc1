// Deterministic building blocks shared by the CPU and CUDA samplers: the Philox random streams,
// fixed-point draws, bit casts and half-precision conversions (docs/semantics.md). The sampling
// rules built on them live in kernels/exact_rules.h.
//
// Everything here is compiled by g++ for the host and by nvcc for the device, both without
// floating-point contraction and without fast math, so host and device produce the same bits.
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

// Key layout of every draw (docs/semantics.md, "Randomness"):
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

// Leading zero bits of v > 0.
DS_HD int leading_zeros64(uint64_t v) {
#if defined(__CUDA_ARCH__)
    return __clzll(static_cast<long long>(v));
#else
    return __builtin_clzll(v);
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
// Bit casts.
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

// The 64-bit digest of the ranks' outputs and of the checked transport payloads: FNV-1a's
// multiply applied per 8-byte word rather than per byte, six to eight times faster. A step's
// outputs are hashed twice on its critical path (by each rank, and by the coordinator's process
// checking each rank's answer), and checked vocab swaps hash whole shards. Each round is a
// bijection of the state for a given word, so inputs that differ within one word always differ in
// their digests, as FNV-1a guarantees for one byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ds {

inline constexpr uint64_t kDigestBasis = 0xCBF29CE484222325ull;

// `hash` continued over `bytes` bytes at `data` (begin with kDigestBasis).
inline uint64_t digest_bytes(uint64_t hash, const void* data, std::size_t bytes) {
    constexpr uint64_t kPrime = 0x100000001B3ull;
    const auto* p = static_cast<const unsigned char*>(data);
    for (; bytes >= sizeof(uint64_t); p += sizeof(uint64_t), bytes -= sizeof(uint64_t)) {
        uint64_t word;
        std::memcpy(&word, p, sizeof word);
        hash = (hash ^ word) * kPrime;
    }
    if (bytes > 0) {
        // The tail's length in the top byte, which its at most seven bytes leave zero.
        uint64_t word = 0;
        std::memcpy(&word, p, bytes);
        hash = (hash ^ word ^ (uint64_t{bytes} << 56)) * kPrime;
    }
    return hash;
}

inline uint64_t digest_bytes(const void* data, std::size_t bytes) { return digest_bytes(kDigestBasis, data, bytes); }

}  // namespace ds

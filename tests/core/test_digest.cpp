// core/digest.h: equal bytes give equal digests, and one flipped bit anywhere (whole words and the
// tail alike) or a different length changes the digest.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "core/digest.h"

namespace ds {
namespace {

std::vector<unsigned char> pattern(size_t bytes) {
    std::vector<unsigned char> v(bytes);
    for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<unsigned char>(i * 37 + 11);
    return v;
}

TEST(Digest, EqualBytesGiveEqualDigests) {
    const std::vector<unsigned char> a = pattern(77), b = pattern(77);
    EXPECT_EQ(digest_bytes(a.data(), a.size()), digest_bytes(b.data(), b.size()));
}

TEST(Digest, EveryFlippedBitChangesTheDigest) {
    for (size_t bytes = 1; bytes <= 41; ++bytes) {
        std::vector<unsigned char> v = pattern(bytes);
        const uint64_t original = digest_bytes(v.data(), v.size());
        for (size_t bit = 0; bit < bytes * 8; ++bit) {
            v[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
            EXPECT_NE(digest_bytes(v.data(), v.size()), original) << bytes << " bytes, bit " << bit;
            v[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
        }
    }
}

TEST(Digest, TrailingZerosAndLengthsAreTold) {
    std::set<uint64_t> seen;
    const std::vector<unsigned char> zeros(24, 0);
    for (size_t bytes = 0; bytes <= zeros.size(); ++bytes) seen.insert(digest_bytes(zeros.data(), bytes));
    EXPECT_EQ(seen.size(), zeros.size() + 1) << "every length of zeros hashes differently";
}

TEST(Digest, ContinuingAHashEqualsHashingTheWholeWhenSplitAtAWord) {
    const std::vector<unsigned char> v = pattern(40);
    EXPECT_EQ(digest_bytes(digest_bytes(v.data(), 16), v.data() + 16, 24), digest_bytes(v.data(), v.size()));
}

}  // namespace
}  // namespace ds

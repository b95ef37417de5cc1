// The answer lane's bytes (actors/answer_lane.h), host byte order (both ends are processes of one
// build): a rank's greeting, the lane's offer of a ring, and an answer's body, the same over TCP
// and through the shared-memory ring (actors/answer_ring.h):
//   u64 step id, i32 bs, i32 N, u64 digest, i64 x 5 timing (step_timing's fields in order),
//   i32 packed [bs*N + bs], i32 accept_index [bs*N], u32 logprob bits [bs*N], u8 row_error [bs]
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "actors/rank_core.h"

namespace ds {

struct dist_step;

// What a rank sends first, on either path, in one write.
struct lane_greeting {
    uint32_t magic = 0;
    int32_t rank = -1;
    uint64_t secret = 0;
};
static_assert(sizeof(lane_greeting) == 16, "no padding on the wire");
constexpr uint32_t kLaneGreetingMagic = 0x6473616c;  // "dsal"
// The lane's answer to a greeting on its local socket, with the ring's memory and bell attached.
constexpr uint32_t kLaneOfferMagic = 0x6473616f;  // "dsao"

// The body's bytes for a step of bs requests and N tokens each.
size_t answer_body_bytes(int64_t bs, int64_t n);
// The body for `result` (outputs present), appended to `out`.
void append_answer(const rank_result& result, std::string& out);
std::string encode_answer(const rank_result& result);
// Rank `rank`'s result of `step` from a body: invalid, naming the field, when its step id, shape
// or digest is not `step`'s.
status decode_answer(std::string_view body, int32_t rank, const dist_step& step, rank_result& out);
// The step id a body names (0 when the body is too short to name one).
uint64_t answer_step_id(std::string_view body);

}  // namespace ds

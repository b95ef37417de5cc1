// An answer's body on the answer lane (actors/answer_lane.h), the same over TCP and through the
// shared-memory ring (actors/answer_ring.h). Host byte order: both ends are processes of one build.
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

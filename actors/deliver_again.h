// The duplicate_control fault (config/fault_plan.h): the step message a rank is handling arrives
// a second time, as the sender's same request (same sender, same message id), queued behind the
// current one. Rank actors of one process and rank processes apply it alike; each refuses the
// repeated step by its id (repeated_step), and the sender, which took the first reply, drops the
// second.
#pragma once

#include <fmt/format.h>
#include <caf/all.hpp>

#include <cstdint>

#include "actors/log.h"
#include "actors/messages.h"

namespace ds {

// The answer to step `step` arriving after step `latest` (step ids only grow): it already ran.
inline caf::error repeated_step(int32_t rank, uint64_t step, uint64_t latest) {
    rank_log().warn("rank {}: step {} repeated after step {}: refused", rank, step, latest);
    return make_caf_error(status{status_code::aborted, fmt::format("rank {}: step {} already ran", rank, step)});
}

template <class Self, class Msg>
void deliver_again(Self* self, const Msg& msg) {
    const caf::mailbox_element* current = self->current_mailbox_element();
    self->enqueue(caf::make_mailbox_element(current->sender, current->mid, {}, msg), nullptr);
}

}  // namespace ds

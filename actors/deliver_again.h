// The duplicate_control fault (config/fault_plan.h): the step message a rank is handling arrives
// a second time, as the sender's same request (same sender, same message id), queued behind the
// current one. The rank refuses the repeated step by its id (actors/rank_core.h), and the sender,
// which took the first reply, drops the second.
#pragma once

#include <caf/all.hpp>

namespace ds {

template <class Self, class Msg>
void deliver_again(Self* self, const Msg& msg) {
    const caf::mailbox_element* current = self->current_mailbox_element();
    self->enqueue(caf::make_mailbox_element(current->sender, current->mid, {}, msg), nullptr);
}

}  // namespace ds

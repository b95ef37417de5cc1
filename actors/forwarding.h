// Handlers of a typed actor that hands messages on to another actor, which answers the original
// sender itself: the coordinator's stand-ins for rank processes, and a rank process's front.
#pragma once

#include <caf/all.hpp>

namespace ds {

// A handler of `Msg` that hands it on with `forward(msg)` and leaves the `Reply` to the receiver.
template <class Msg, class Reply, class Forward>
auto forwarding(Forward forward) {
    return [forward](Msg& m) -> caf::result<Reply> {
        forward(m);
        return caf::delegated<Reply>{};
    };
}

}  // namespace ds

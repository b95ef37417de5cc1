// The monotonic clock of the step timelines (include/distsample/group.h, step_timeline), in
// nanoseconds.
#pragma once

#include <chrono>
#include <cstdint>

namespace ds {

inline int64_t steady_now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

}  // namespace ds

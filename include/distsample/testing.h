// Test hooks of the embedding API (distsample/group.h): make one rank misbehave on its next step.
// For tests of what a deployment does with a lying or hung rank; fault plans
// (docs/faults.md) are the general mechanism.
#pragma once

#include <cstdint>

#include <distsample/group.h>

namespace ds {

enum class rank_fault : int {
    none,
    alter_token,  // the rank changes its first emitted token (a desync)
    stall,        // the rank never answers (a hung rank)
};

namespace testing {

// Rank `rank` of `g` misbehaves as `fault` on its next step.
status inject_fault(group& g, int32_t rank, rank_fault fault);

}  // namespace testing
}  // namespace ds

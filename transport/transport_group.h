// The ranks of one group as threads of this process (the embedded coordinator, docs/architecture.md),
// whatever backend moves their data. Each rank's thread uses its endpoint; the coordinator aborts
// the group when a step fails (waking ranks that wait in collectives), names the ranks the others
// wait for, and starts a new epoch per step so a failed step does not poison the next one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace ds {

class transport_group {
   public:
    virtual ~transport_group() = default;

    virtual int32_t world_size() const = 0;
    virtual const char* backend_name() const = 0;
    // Rank `rank`'s endpoint, owned by the group; used by that rank's thread only.
    virtual transport& endpoint(int32_t rank) = 0;
    // On rank `rank`'s thread, before the collectives of step `epoch`.
    virtual void enter_epoch(int32_t rank, uint64_t epoch) = 0;

    // Fails every pending and later collective with `reason` until the next begin_epoch.
    virtual void abort(const std::string& reason) = 0;
    // Starts epoch `epoch` (a step id); only while no rank of the new epoch has started.
    virtual void begin_epoch(uint64_t epoch) = 0;
    // Ranks not (yet) in the group's current collective while at least one rank is: the ones
    // the others wait for. Empty when nobody waits.
    virtual std::vector<int32_t> missing_ranks() = 0;
};

}  // namespace ds

// How the ranks of a transport group meet before their first collective: each rank contributes
// one opaque blob (UCX: worker address, rkeys and buffer addresses; NCCL: rank 0's unique id) and
// receives every rank's blob in rank order. The implementation is a TCP rendezvous
// (tcp_bootstrap.h); a coordinator of rank processes opens one per epoch and sends its address to
// the ranks over CAF (actors/remote_ranks.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/sampling_types.h"

namespace ds {

class bootstrap {
   public:
    virtual ~bootstrap() = default;

    virtual int32_t rank() const = 0;
    virtual int32_t world_size() const = 0;

    // Collective: `all` receives world_size blobs, all[r] being rank r's `mine`. Bounded by the
    // implementation's timeout; a failure names what was missing.
    virtual status exchange(const std::string& mine, std::vector<std::string>& all) = 0;
};

}  // namespace ds

// How the ranks of a transport group meet before their first collective: each rank contributes
// one opaque blob (UCX: worker address and rkey; NCCL: the unique id) and receives every rank's
// blob in rank order. Small and pluggable: a TCP rendezvous today (tcp_bootstrap.h), CAF messages
// once ranks join a remote coordinator.
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

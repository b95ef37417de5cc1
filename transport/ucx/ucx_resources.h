// What the ucx endpoint's files share of it (ucx_transport.h): the UCX handles and the per-peer
// state, kept out of the public header so that only transport/ucx sees UCX's headers.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <vector>

#include "transport/remote_swap.h"
#include "transport/ucx/ucx_transport.h"

namespace ds {

struct ucx_endpoint::peer_failure_context {
    ucx_endpoint* self;
    int32_t peer;
};

struct ucx_endpoint::resources {
    ucp_context_h context = nullptr;
    ucp_worker_h worker = nullptr;
    int event_fd = -1;                         // the worker's wake-up descriptor
    ucp_mem_h memory[2] = {nullptr, nullptr};  // per region (ucx_endpoint::region)
    std::vector<ucp_ep_h> eps;                 // per rank; null for this rank
    std::vector<ucp_rkey_h> rkeys[2];          // per region, per rank; null for this rank
    std::vector<uint64_t> remote_base[2];      // per region, per rank: the peer's region address
    std::vector<ucs_status_t> peer_status;     // per rank: set by the error handler
    std::vector<peer_failure_context> failure_contexts;
    std::vector<swap_request> swap_requests;  // per rank, reused by every swap
    std::vector<void*> flush_requests;        // per rank, reused by every flush
};

}  // namespace ds

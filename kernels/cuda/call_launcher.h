// Enqueues a sampling_call on a CUDA stream: the engine-facing API's device path and the CUDA
// backend's staged steps both go through here, so they run the same kernels in the same way.
// Nothing is allocated and nothing waits: the call only enqueues work on the stream.
#pragma once

#include <cuda_runtime.h>

#include <distsample/sampling.h>

#include "kernels/cuda/chain_kernel.h"

namespace ds::cuda {

// Workspace bytes for a call of `batch` requests of N rows over `vocab` tokens; `cut_lists` when
// a request may have a top-k, top-p or min-p filter (cut_possible).
std::size_t call_workspace_bytes(int32_t batch, int32_t tokens_per_req, int32_t vocab, bool cut_lists);

// Whether a request of `call` may have a top-k, top-p or min-p filter, whose tokens are listed:
// per-row arrays, or scalars other than "no filter".
bool cut_possible(const sampling_call& call);

// Replacements for the Philox draws (tests and replays through a backend step).
struct replay_coins {
    const double* coins = nullptr;        // [batch, N - 1]
    const double* final_coins = nullptr;  // [batch]
};

// Invalid, naming `field` (= `vocab`) and the bound, when the chain kernel's blocks of a row of
// `vocab` tokens cannot all be resident on a GPU of `capacity`; `advice` ends the message.
status check_row_fits(const char* field, int32_t vocab, const kernel_capacity& capacity, const char* advice = "");

// Kernel parameters for `call` over `workspace` on a GPU of `capacity` (query_kernel_capacity):
// invalid, naming logits.vocab, when the chain kernel's blocks of a row cannot all be resident.
status plan_call(const sampling_call& call, workspace_ref workspace, const kernel_capacity& capacity,
                 replay_coins coins, chain_kernel_params& params);

// Enqueues the planned call on `stream`.
status enqueue_call(const sampling_call& call, const chain_kernel_params& params, cudaStream_t stream);

// The engine API's device path: plans for the current device and enqueues.
status run_call(const sampling_call& call, workspace_ref workspace, cudaStream_t stream);

}  // namespace ds::cuda

// Launcher of the sampling/verification kernel. CUDA types are fine here: only kernels/cuda/
// includes this header.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/chain_kernel_params.h"

namespace ds::cuda {

// Bytes of chain_kernel_params::workspace for steps of up to max_rows rows and max_batch requests
// (aligned to 256 bytes at its start).
size_t chain_kernel_workspace_bytes(int64_t max_rows, int32_t max_batch, int32_t vocab, bool cut_lists);

// Once per process and device before the first launch: lets the kernel use its shared memory.
cudaError_t prepare_chain_kernel();

// Thread blocks the GPU holds at once over all its SMs, of each kernel. A chain kernel row's
// blocks meet at barriers, so they must all be resident together (check_row_fits); the streaming
// kernel's segments are sized from its count. Call prepare_chain_kernel first.
struct kernel_capacity {
    int streaming_blocks = 1;
    int chain_blocks = 1;
};
cudaError_t query_kernel_capacity(int device, kernel_capacity& out);

// Thread blocks of the kernel launch_chain_kernel starts for `params`.
unsigned chain_kernel_blocks(const chain_kernel_params& params);

// Enqueues one step on `stream`, capturable in a CUDA graph: clears the workspace's counters,
// resolves every request of `call` into params.workspace.requests, then runs the chain (or
// streaming) kernel. Call params.check() first.
cudaError_t launch_step(const sampling_call& call, const chain_kernel_params& params, cudaStream_t stream);

}  // namespace ds::cuda

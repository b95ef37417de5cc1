// Launcher of the sampling/verification kernel. CUDA types are fine here: only kernels/cuda/
// includes this header.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/chain_kernel_params.h"

namespace ds::cuda {

// Bytes of workspace per logits row for chain_kernel_params::summaries.
size_t chain_kernel_summary_bytes();

// Enqueues one step on `stream` (capturable in a CUDA graph). Call params.check() first.
cudaError_t launch_chain_kernel(const chain_kernel_params& params, cudaStream_t stream);

}  // namespace ds::cuda

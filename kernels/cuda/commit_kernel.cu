// commit_tokens on the device: one thread per request (kernels/commit_rules.h); the requests of
// one call name distinct slots.
#include <cuda_runtime.h>

#include "kernels/commit_rules.h"
#include "kernels/cuda/call_entry.h"
#include "kernels/cuda/cuda_status.h"

namespace ds::cuda {

namespace {

__global__ void commit_kernel(commit_call call) {
    const int32_t b = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
    if (b >= call.batch_size) return;
    if (!commit_request(call, b) && call.row_error != nullptr) call.row_error[b] = kRowErrorInvalidParams;
}

}  // namespace

status commit_tokens_on(const commit_call& call, void* stream) {
    constexpr int kThreads = 128;
    const int blocks = (call.batch_size + kThreads - 1) / kThreads;
    commit_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(call);
    CUDA_TRY(cudaGetLastError());
    return status::success();
}

}  // namespace ds::cuda

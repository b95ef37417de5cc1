// The engine API's CUDA entry points, callable from code built without nvcc (kernels/sampling_api.cpp).
// Plain C++: the stream is an opaque cudaStream_t.
#pragma once

#include <cstddef>
#include <cstdint>

#include <distsample/sampling.h>

namespace ds::cuda {

std::size_t call_workspace_size(const sampling_call& call);
status run_call_on(const sampling_call& call, workspace_ref workspace, void* stream);
status commit_tokens_on(const commit_call& call, void* stream);
// Enqueues a device-to-host copy on `stream`.
status copy_to_host_async(void* host, const void* device, std::size_t bytes, void* stream);

}  // namespace ds::cuda

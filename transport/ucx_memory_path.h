// Which memory the ucx transport swaps logits in (config key ucx_device_memory;
// docs/deployment.md, GPU memory over UCX):
//
//   backend   requested   UCX reports CUDA memory    path
//   cpu       auto         any                       host    (as always: the backend reads host rows)
//   cpu       staged       any                       host    (nothing on the GPU to stage)
//   cpu       direct       any                       error: direct needs backend = cuda
//   cuda      auto         yes (and a CUDA build)    direct  (GPU memory to GPU memory)
//   cuda      auto         no                        staged  (the shard copied to pinned host buffers)
//   cuda      staged       any                       staged
//   cuda      direct       yes (and a CUDA build)    direct
//   cuda      direct       no                        error: says why, and to set staged or auto
//
// "UCX reports CUDA memory" also needs a transport that puts GPU memory: cuda_ipc (processes on
// one host) or InfiniBand rc/dc (GPUDirect RDMA). Over tcp and shared memory alone `auto` stages
// and `direct` is refused; the endpoint refuses `direct` again once it sees the lanes it got.
//
// On the H200 (UCX 1.22 from the libucx-cu13 wheel, 2026-12-03) the first direct swap died of a
// segfault on every lane until the cause was found: UCX's memory-type cache learns of CUDA
// allocations by hooking the driver, missed ours (the CUDA runtime is linked statically), so UCX
// took device pointers for host memory and read them with the CPU (a two-process probe saw cma
// fail with "Bad address"; the swap itself segfaulted). The endpoint of a cuda-backend rank turns
// that cache off (UCX then asks the driver about each buffer) and names the memory type of every
// put.
//
// Pure, so the rules are tested without a GPU; the ucx endpoint asks UCX and logs the choice.
#pragma once

#include <string>

#include "config/group_config.h"
#include "kernels/sampling_types.h"

namespace ds {

enum class ucx_memory_path {
    host,    // the cpu backend: host logits, host receive buffers
    staged,  // the cuda backend: device shards copied to pinned host memory, pinned receive buffers
    direct,  // the cuda backend: device shards put straight into the peers' device receive buffers
};

const char* ucx_memory_path_name(ucx_memory_path path);

// What the choice depends on.
struct ucx_memory_facts {
    bool backend_on_device = false;  // the rank samples with the cuda backend
    bool cuda_built = false;         // this build has CUDA
    bool ucx_has_cuda = false;       // the loaded UCX reports UCS_MEMORY_TYPE_CUDA
    bool gpu_transport = false;      // ... and has a transport that puts it (carries_gpu_memory)
    std::string ucx_version;         // for the messages, e.g. "1.13.1"
};

struct ucx_memory_choice {
    ucx_memory_path path = ucx_memory_path::host;
    std::string reason;  // why, for the log: "backend = 'cuda' and UCX 1.22.0 moves CUDA memory"
};

// Whether UCX transports named in `ucx_text` (ucp_context_print_info's resources, or an
// endpoint's lanes) put GPU memory: cuda_ipc, rc, dc.
bool carries_gpu_memory(const std::string& ucx_text);

// The path for `requested`, or an unsupported status saying why and what to set instead.
status choose_ucx_memory_path(ucx_memory_mode requested, const ucx_memory_facts& facts, ucx_memory_choice& out);

}  // namespace ds

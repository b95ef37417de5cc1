#include "transport/ucx_memory_path.h"

#include <fmt/format.h>

namespace ds {

const char* ucx_memory_path_name(ucx_memory_path path) {
    switch (path) {
        case ucx_memory_path::host: return "host";
        case ucx_memory_path::staged: return "staged";
        case ucx_memory_path::direct: return "direct";
    }
    return "unknown";
}

bool carries_gpu_memory(const std::string& ucx_text) {
    for (const char* transport : {"cuda_ipc/", "rc_", "dc_"}) {
        if (ucx_text.find(transport) != std::string::npos) return true;
    }
    return false;
}

status choose_ucx_memory_path(ucx_memory_mode requested, const ucx_memory_facts& facts, ucx_memory_choice& out) {
    constexpr const char* kSetInstead =
        "set ucx_device_memory = auto or staged (config key ucx_device_memory, DISTSAMPLE_UCX_DEVICE_MEMORY or --set "
        "ucx_device_memory=...)";
    const char* name = ucx_memory_mode_name(requested);
    if (!facts.backend_on_device) {
        if (requested == ucx_memory_mode::direct) {
            return {status_code::unsupported,
                    fmt::format(
                        "ucx_device_memory = 'direct' needs backend = 'cuda' (the cpu backend samples host memory); {}",
                        kSetInstead)};
        }
        out = {ucx_memory_path::host,
               fmt::format("ucx_device_memory = '{}', backend = 'cpu': logits stay in host memory", name)};
        return status::success();
    }
    // Why UCX cannot put GPU memory, if it cannot.
    std::string missing;
    if (!facts.cuda_built) {
        missing = "this build has no CUDA support";
    } else if (!facts.ucx_has_cuda) {
        missing = fmt::format(
            "the loaded UCX {} reports no CUDA memory support (Debian's UCX has none; a CUDA-enabled UCX "
            "such as the libucx-cu13 wheel does)",
            facts.ucx_version);
    } else if (!facts.gpu_transport) {
        missing = fmt::format(
            "the loaded UCX {} has no transport here that puts GPU memory (cuda_ipc between processes on "
            "one host, or InfiniBand rc/dc)",
            facts.ucx_version);
    }
    if (requested == ucx_memory_mode::staged) {
        out = {ucx_memory_path::staged,
               "ucx_device_memory = 'staged', backend = 'cuda': device logits staged through pinned host buffers"};
        return status::success();
    }
    if (missing.empty()) {
        out = {ucx_memory_path::direct,
               fmt::format("ucx_device_memory = '{}', backend = 'cuda' and UCX {} moves CUDA memory: "
                           "device logits put GPU to GPU",
                           name, facts.ucx_version)};
        return status::success();
    }
    if (requested == ucx_memory_mode::direct) {
        return {status_code::unsupported,
                fmt::format("ucx_device_memory = 'direct' is not available: {}; {}", missing, kSetInstead)};
    }
    out = {ucx_memory_path::staged,
           fmt::format(
               "ucx_device_memory = 'auto', backend = 'cuda', but {}: device logits staged through pinned host buffers",
               missing)};
    return status::success();
}

}  // namespace ds

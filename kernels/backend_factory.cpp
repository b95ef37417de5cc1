// Builds a backend by kind. Separate from sampling_backend.cpp so the CPU core does not depend on
// the CUDA library.
#include <fmt/format.h>

#include <algorithm>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/sampling_backend.h"
#if defined(DISTSAMPLE_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#endif

namespace ds {

status make_backend(backend_kind kind, const kernel_config& config, std::unique_ptr<sampling_backend>& out) {
    DS_TRY(validate_kernel_config(config));
    if (kind == backend_kind::cuda) {
#if defined(DISTSAMPLE_HAVE_CUDA)
        std::unique_ptr<cuda::cuda_backend> backend;
        status s = cuda::cuda_backend::create(config, backend);
        if (s.is_ok()) out = std::move(backend);
        return s;
#else
        return {status_code::unsupported,
                "backend = 'cuda': this build has no CUDA support (configure with DISTSAMPLE_WITH_CUDA=ON); use "
                "--backend cpu"};
#endif
    }
    out = std::make_unique<cpu::cpu_backend>(config);
    return status::success();
}

status stage_device_logits(const logits_view& rows, void* host, std::size_t capacity, logits_view& staged) {
    const std::size_t bytes =
        static_cast<std::size_t>(rows.vocab) * dtype_size(rows.dtype) * static_cast<std::size_t>(rows.rows);
    if (bytes > capacity) {
        return status::invalid(
            fmt::format("logits: {} rows of {} {} values ({} bytes) exceed the {}-byte host staging buffer", rows.rows,
                        rows.vocab, dtype_name(rows.dtype), bytes, capacity));
    }
    staged = logits_view{host, rows.dtype, rows.rows, rows.vocab, rows.vocab, false};
#if defined(DISTSAMPLE_HAVE_CUDA)
    return cuda::copy_rows_to_host(rows, host);
#else
    return {status_code::unsupported,
            "logits.on_device = true: this build has no CUDA support (configure with DISTSAMPLE_WITH_CUDA=ON)"};
#endif
}

status stage_host_logits(const logits_view& rows, std::shared_ptr<void>& device, std::size_t& capacity,
                         logits_view& staged) {
    const std::size_t bytes =
        static_cast<std::size_t>(rows.vocab) * dtype_size(rows.dtype) * static_cast<std::size_t>(rows.rows);
#if defined(DISTSAMPLE_HAVE_CUDA)
    if (capacity < bytes || !device) {
        if (status s = cuda::allocate_device(bytes, device); !s.is_ok()) return s;
        capacity = bytes;
    }
    staged = logits_view{device.get(), rows.dtype, rows.rows, rows.vocab, rows.vocab, true};
    return rows.rows == 0 ? status::success() : cuda::copy_rows_to_device(rows, device.get());
#else
    (void)bytes, (void)device, (void)capacity, (void)staged;
    return {status_code::unsupported,
            "transport swaps device memory: this build has no CUDA support (configure with DISTSAMPLE_WITH_CUDA=ON)"};
#endif
}

}  // namespace ds

// The one interface every sampling backend implements (CPU now; CUDA behind the same calls).
// A backend owns the rank's parameter pool and all scratch, sized once from a kernel_config.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config/choices.h"
#include "config/kernel_config.h"
#include "kernels/param_pool.h"
#include "kernels/sampling_types.h"

namespace ds {

class sampling_backend {
   public:
    virtual ~sampling_backend() = default;

    virtual const char* name() const = 0;
    virtual const kernel_config& config() const = 0;
    virtual param_pool& pool() = 0;

    // One token per request: predict [bs] then accept_length [bs] (all 1) in out.packed;
    // accept_index[b] = b. Requires step.tokens_per_req == 1.
    virtual status sample(const step_input& step, const step_output& out) = 0;
    // Chain verification of step.candidates against bs * N logits rows (docs/semantics.md, Verify).
    virtual status verify(const step_input& step, const step_output& out) = 0;

    // Adds every request's emitted tokens (predict[b*N, b*N + accept_length)) to its slot's
    // penalty counts. Call once per step with the outputs every rank agreed on.
    status commit_tokens(const step_input& step, const step_output& out);
};

// Builds a backend, or returns a status saying why it cannot (bad config, CUDA not built).
status make_backend(backend_kind kind, const kernel_config& config, std::unique_ptr<sampling_backend>& out);

// Copies logits rows that live in device memory (rows.on_device) into `host` (`capacity` bytes,
// pinned or pageable), densely packed (row_stride = vocab), and describes them in `staged`: for
// paths that read logits on the host (the local and UCX transports, sharded mode). Rows that do
// not fit are an invalid_argument status. Unsupported in builds without CUDA.
status stage_device_logits(const logits_view& rows, void* host, std::size_t capacity, logits_view& staged);

// The other way: copies host rows into `device` (reallocated only when it must grow; `capacity`
// is its size in bytes) and describes them in `staged` (densely packed, on_device): for
// transports that swap device memory (nccl). Unsupported in builds without CUDA.
status stage_host_logits(const logits_view& rows, std::shared_ptr<void>& device, std::size_t& capacity,
                         logits_view& staged);

}  // namespace ds

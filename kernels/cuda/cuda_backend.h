// The CUDA sampling backend: the same operations and the same tokens as the CPU backend
// (docs/semantics.md), on an NVIDIA GPU. Plain C++ interface; the CUDA state lives in the .cu file.
//
// Per step: the requests' parameters, candidates, coins and bitmask are packed into a pinned
// staging buffer and copied to the device in one transfer; host logits are copied too (device
// logits, logits_view::on_device, are read in place); one kernel runs every request's chain; one
// device-to-host copy returns predict | accept_length | accept_index | logprobs | row errors. All
// buffers are allocated at construction.
#pragma once

#include <memory>

#include "kernels/sampling_backend.h"

namespace ds::cuda {

// What a captured step holds: a host-to-device copy of `staged_bytes` (its lists and bitmask; none
// when 0) and the kernels, which write `output_bytes` of outputs into mapped pinned host memory.
struct graph_shape {
    size_t staged_bytes = 0;
    size_t output_bytes = 0;
    unsigned kernel_blocks = 0;
};

class cuda_backend final : public sampling_backend {
   public:
    ~cuda_backend() override;

    // Allocates every buffer for `config` on the current CUDA device.
    static status create(const kernel_config& config, std::unique_ptr<cuda_backend>& out);

    const char* name() const override { return "cuda"; }
    const kernel_config& config() const override;
    param_pool& pool() override;

    status sample(const step_input& step, const step_output& out) override;
    status verify(const step_input& step, const step_output& out) override;

    // CUDA graphs: capture one step's transfers and kernel for a fixed shape (batch size, N,
    // logits pointer, which optional inputs are present), then replay it with new contents.
    // Without logprobs the replays skip their pass and report NaN.
    status capture_graph(const step_input& step, step_kind kind, bool with_logprobs = true);
    status replay_graph(const step_input& step, const step_output& out);
    // Mean time of one replay of the captured graph (transfers and kernel), from CUDA events
    // around `iterations` back-to-back launches.
    status time_graph(int iterations, double& microseconds_per_step);
    // What the captured graph moves and launches (bench_cuda_sampling times an empty step of the
    // same shape).
    status captured_shape(graph_shape& shape) const;

   private:
    struct impl;
    explicit cuda_backend(std::unique_ptr<impl> state);
    std::unique_ptr<impl> impl_;
};

}  // namespace ds::cuda

namespace ds::cuda {

// A copy of host bytes in device memory, for callers (tests, examples) that hold no CUDA types.
// Freed when the last owner goes.
status upload_to_device(const void* host, size_t bytes, std::shared_ptr<void>& device);
// Uninitialised device memory of `bytes` bytes, freed when the last owner goes.
status allocate_device(size_t bytes, std::shared_ptr<void>& device);

// Copies rows.rows host rows of rows.vocab elements (row_stride apart) into `device`, densely
// packed; waits for the copy.
status copy_rows_to_device(const logits_view& rows, void* device);

// Copies rows.rows rows of rows.vocab elements (device memory, row_stride apart) into `host`,
// densely packed; waits for the copy.
status copy_rows_to_host(const logits_view& rows, void* host);

// Device-to-device copy bandwidth, counting bytes read plus bytes written (TB/s), over a copy of
// `bytes` repeated `iterations` times: the memory floor a sampling kernel is compared with.
status measure_copy_bandwidth(size_t bytes, int iterations, double& terabytes_per_second);

}  // namespace ds::cuda

// Floor probes for bench_cuda_sampling (docs/benchmarks.md): what this GPU can do at best for each part of a
// sampling step, measured in the same run as the kernels so their times can be set against what
// is physically reachable. Each probe is a CUDA graph timed like cuda_backend::time_graph
// (warm-up, then the mean of `iterations` back-to-back replays). Plain C++: the bench includes it.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/sampling_types.h"

namespace ds::cuda {

// The fastest plain streaming read found of `rows` dense rows of `vocab` fp32 logits at the
// device address `logits` (16-byte aligned), over 4, 8 and 16 float4 loads in flight per thread
// and grids of 1 to 4 times the blocks the GPU holds at once; each block writes its maximum.
struct read_probe_result {
    double microseconds = 0.0;
    double terabytes_per_second = 0.0;  // bytes read / time
    int loads_in_flight = 0;
    unsigned blocks = 0;
};
status probe_read_floor(const void* logits, int64_t rows, int32_t vocab, int iterations, read_probe_result& best);

// A step that does nothing: the staging copy of `shape` (if it has one) and an empty kernel that
// writes one word of its outputs into mapped pinned host memory, as the step's kernels write theirs.
status probe_step_overhead(const graph_shape& shape, int iterations, double& microseconds);

// The chain kernel's per-token arithmetic over `rows` rows of `vocab` tokens, in its chunks and
// rounds, on logits made in registers (no memory read): the mass pass of a temperature-only row
// (exact::token_mass at the row's scale, three integer sums) and, apart, the
// argmax pass (a compare and select per token).
struct arithmetic_probe_result {
    double mass_pass_us = 0.0;
    double argmax_pass_us = 0.0;
};
status probe_exact_arithmetic(int64_t rows, int32_t vocab, float temperature, int iterations,
                              arithmetic_probe_result& result);

// A design probe for temperature-only rows (two_pass_probe.cu): a block streams its chunk for the
// chunk's maximum, meets its row's blocks at a global barrier, then reads the chunk again (from
// L2) for the masses, holding no chunk in shared memory across the barrier. fp32 `[rows, vocab]`
// logits (16-byte aligned, vocab a multiple of 4). Times per chunk size; the chunk kept in
// registers instead of read again; no barrier (each block's own maximum), the barrier's bound.
struct two_pass_probe_result {
    double reread_2048_us = 0.0;
    double reread_4096_us = 0.0;
    double reread_8192_us = 0.0;
    double registers_8192_us = 0.0;
    double no_barrier_4096_us = 0.0;
};
status probe_two_pass_rows(const float* logits, int64_t rows, int32_t vocab, float temperature, int iterations,
                           two_pass_probe_result& result);

}  // namespace ds::cuda

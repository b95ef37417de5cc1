// Runs the shared exactness math (kernels/det_math.h, kernels/exact_rules.h) on the GPU so tests
// can compare it bit for bit with the host. Plain C++ interface: nothing outside kernels/ sees
// CUDA types.
#pragma once

#include <cstdint>

#include "kernels/sampling_types.h"

namespace ds::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no GPU.
int device_count();

// For each i: mass_out[i] = exact::token_mass(logits[i], 0, scales[i]) and
// bits_out[i] = random_bits64(seed, i, i % 7, token). Host arrays of length n.
status probe_det_math(const float* logits, const float* scales, int64_t n, uint64_t seed, uint64_t* mass_out,
                      uint64_t* bits_out);

}  // namespace ds::cuda

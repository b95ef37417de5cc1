// Runs the shared math of kernels/det_math.h on the GPU so tests can compare it bit for bit with
// the host. Plain C++ interface: nothing outside kernels/ sees CUDA types.
#pragma once

#include <cstdint>

#include "kernels/sampling_types.h"

namespace ds::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no GPU.
int device_count();

// For each i: exp_out[i] = det_exp(exp_in[i]), log_out[i] = det_log(log_in[i]),
// mass_out[i] = weight_to_mass(det_exp(exp_in[i])), bits_out[i] = random_bits64(seed, i, i % 7,
// token). Host arrays of length n.
status probe_det_math(const float* exp_in, const float* log_in, int64_t n, uint64_t seed, float* exp_out,
                      float* log_out, uint64_t* mass_out, uint64_t* bits_out);

}  // namespace ds::cuda

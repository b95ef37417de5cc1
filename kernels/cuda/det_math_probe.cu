#include "kernels/cuda/det_math_probe.h"

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"
#include "kernels/det_math.h"
#include "kernels/exact_rules.h"

namespace ds::cuda {

namespace dm = ds::detmath;

namespace {

__global__ void det_math_kernel(const float* logits, const float* scales, int64_t n, uint64_t seed, uint64_t* mass_out,
                                uint64_t* bits_out) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        mass_out[i] = exact::token_mass(logits[i], 0.0f, scales[i]);
        bits_out[i] =
            dm::random_bits64(seed, static_cast<uint64_t>(i), static_cast<uint32_t>(i % 7), dm::draw_purpose::token);
    }
}

}  // namespace

int device_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return count;
}

status probe_det_math(const float* logits, const float* scales, int64_t n, uint64_t seed, uint64_t* mass_out,
                      uint64_t* bits_out) {
    const size_t fbytes = static_cast<size_t>(n) * sizeof(float);
    const size_t ubytes = static_cast<size_t>(n) * sizeof(uint64_t);
    device_buffer d_logits, d_scales, d_mass, d_bits;
    DS_TRY(d_logits.allocate(fbytes));
    DS_TRY(d_scales.allocate(fbytes));
    DS_TRY(d_mass.allocate(ubytes));
    DS_TRY(d_bits.allocate(ubytes));
    CUDA_TRY(cudaMemcpy(d_logits.get(), logits, fbytes, cudaMemcpyHostToDevice));
    CUDA_TRY(cudaMemcpy(d_scales.get(), scales, fbytes, cudaMemcpyHostToDevice));
    det_math_kernel<<<1024, 256>>>(static_cast<const float*>(d_logits.get()), static_cast<const float*>(d_scales.get()),
                                   n, seed, static_cast<uint64_t*>(d_mass.get()), static_cast<uint64_t*>(d_bits.get()));
    CUDA_TRY(cudaGetLastError());
    CUDA_TRY(cudaMemcpy(mass_out, d_mass.get(), ubytes, cudaMemcpyDeviceToHost));
    CUDA_TRY(cudaMemcpy(bits_out, d_bits.get(), ubytes, cudaMemcpyDeviceToHost));
    return status::success();
}

}  // namespace ds::cuda

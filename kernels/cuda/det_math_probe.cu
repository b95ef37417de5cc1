#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/det_math_probe.h"
#include "kernels/det_math.h"

namespace ds::cuda {

namespace dm = ds::detmath;

namespace {

__global__ void det_math_kernel(const float* exp_in, const float* log_in, int64_t n, uint64_t seed, float* exp_out,
                                float* log_out, uint64_t* mass_out, uint64_t* bits_out) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float e = dm::det_exp(exp_in[i]);
        exp_out[i] = e;
        mass_out[i] = e == e ? dm::weight_to_mass(e) : 0;
        log_out[i] = dm::det_log(log_in[i]);
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

status probe_det_math(const float* exp_in, const float* log_in, int64_t n, uint64_t seed, float* exp_out,
                      float* log_out, uint64_t* mass_out, uint64_t* bits_out) {
    const size_t fbytes = static_cast<size_t>(n) * sizeof(float);
    const size_t ubytes = static_cast<size_t>(n) * sizeof(uint64_t);
    const size_t sizes[6] = {fbytes, fbytes, fbytes, fbytes, ubytes, ubytes};
    device_buffer buf[6];
    for (int i = 0; i < 6; ++i) {
        status s = buf[i].allocate(sizes[i]);
        if (!s.is_ok()) return s;
    }
    auto* d_exp_in = static_cast<float*>(buf[0].get());
    auto* d_log_in = static_cast<float*>(buf[1].get());
    auto* d_exp_out = static_cast<float*>(buf[2].get());
    auto* d_log_out = static_cast<float*>(buf[3].get());
    auto* d_mass = static_cast<uint64_t*>(buf[4].get());
    auto* d_bits = static_cast<uint64_t*>(buf[5].get());
    CUDA_TRY(cudaMemcpy(d_exp_in, exp_in, fbytes, cudaMemcpyHostToDevice));
    CUDA_TRY(cudaMemcpy(d_log_in, log_in, fbytes, cudaMemcpyHostToDevice));
    det_math_kernel<<<1024, 256>>>(d_exp_in, d_log_in, n, seed, d_exp_out, d_log_out, d_mass, d_bits);
    CUDA_TRY(cudaGetLastError());
    CUDA_TRY(cudaMemcpy(exp_out, d_exp_out, fbytes, cudaMemcpyDeviceToHost));
    CUDA_TRY(cudaMemcpy(log_out, d_log_out, fbytes, cudaMemcpyDeviceToHost));
    CUDA_TRY(cudaMemcpy(mass_out, d_mass, ubytes, cudaMemcpyDeviceToHost));
    CUDA_TRY(cudaMemcpy(bits_out, d_bits, ubytes, cudaMemcpyDeviceToHost));
    return status::success();
}

}  // namespace ds::cuda

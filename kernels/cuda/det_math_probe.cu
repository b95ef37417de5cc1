#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/det_math_probe.h"
#include "kernels/det_math.h"

namespace ds::cuda {

namespace dm = ds::detmath;

namespace {

__global__ void det_math_kernel(const float* exp_in, const float* log_in, int64_t n, uint64_t seed,
                                float* exp_out, float* log_out, uint64_t* mass_out, uint64_t* bits_out) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float e = dm::det_exp(exp_in[i]);
        exp_out[i] = e;
        mass_out[i] = e == e ? dm::weight_to_mass(e) : 0;
        log_out[i] = dm::det_log(log_in[i]);
        bits_out[i] = dm::random_bits64(seed, static_cast<uint64_t>(i), static_cast<uint32_t>(i % 7),
                                        dm::draw_purpose::token);
    }
}

status cuda_failure(const char* what, cudaError_t error) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return {status_code::internal, std::string(what) + ": " + cudaGetErrorString(error)};
}

// Frees device buffers on every exit path.
struct device_buffers {
    void* ptrs[6] = {};
    ~device_buffers() {
        for (void* p : ptrs) cudaFree(p);
    }
};

}  // namespace

int device_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return count;
}

status probe_det_math(const float* exp_in, const float* log_in, int64_t n, uint64_t seed,
                      float* exp_out, float* log_out, uint64_t* mass_out, uint64_t* bits_out) {
    const size_t fbytes = static_cast<size_t>(n) * sizeof(float);
    const size_t ubytes = static_cast<size_t>(n) * sizeof(uint64_t);
    const size_t sizes[6] = {fbytes, fbytes, fbytes, fbytes, ubytes, ubytes};
    device_buffers buf;
    for (int i = 0; i < 6; ++i) {
        if (cudaError_t e = cudaMalloc(&buf.ptrs[i], sizes[i]); e != cudaSuccess) return cuda_failure("cudaMalloc", e);
    }
    auto* d_exp_in = static_cast<float*>(buf.ptrs[0]);
    auto* d_log_in = static_cast<float*>(buf.ptrs[1]);
    auto* d_exp_out = static_cast<float*>(buf.ptrs[2]);
    auto* d_log_out = static_cast<float*>(buf.ptrs[3]);
    auto* d_mass = static_cast<uint64_t*>(buf.ptrs[4]);
    auto* d_bits = static_cast<uint64_t*>(buf.ptrs[5]);
    if (cudaError_t e = cudaMemcpy(d_exp_in, exp_in, fbytes, cudaMemcpyHostToDevice); e != cudaSuccess) return cuda_failure("copy in", e);
    if (cudaError_t e = cudaMemcpy(d_log_in, log_in, fbytes, cudaMemcpyHostToDevice); e != cudaSuccess) return cuda_failure("copy in", e);
    det_math_kernel<<<1024, 256>>>(d_exp_in, d_log_in, n, seed, d_exp_out, d_log_out, d_mass, d_bits);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return cuda_failure("launch", e);
    if (cudaError_t e = cudaMemcpy(exp_out, d_exp_out, fbytes, cudaMemcpyDeviceToHost); e != cudaSuccess) return cuda_failure("copy out", e);
    if (cudaError_t e = cudaMemcpy(log_out, d_log_out, fbytes, cudaMemcpyDeviceToHost); e != cudaSuccess) return cuda_failure("copy out", e);
    if (cudaError_t e = cudaMemcpy(mass_out, d_mass, ubytes, cudaMemcpyDeviceToHost); e != cudaSuccess) return cuda_failure("copy out", e);
    if (cudaError_t e = cudaMemcpy(bits_out, d_bits, ubytes, cudaMemcpyDeviceToHost); e != cudaSuccess) return cuda_failure("copy out", e);
    return status::success();
}

}  // namespace ds::cuda

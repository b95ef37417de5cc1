// kernels/device_memory.h on the CUDA runtime. Copies go on the legacy default stream and are
// waited for, so a kernel on any stream launched afterwards sees their result.
#include "kernels/device_memory.h"

#include "kernels/cuda/cuda_status.h"

namespace ds {

bool cuda_built() { return true; }

cuda_allocation::~cuda_allocation() {
    if (data_ == nullptr) return;
    if (kind_ == cuda_memory_kind::device) {
        cudaFree(data_);
    } else {
        cudaFreeHost(data_);
    }
}

status cuda_allocation::allocate(cuda_memory_kind kind, std::size_t bytes, cuda_allocation& out) {
    cuda_allocation fresh;
    void* raw = nullptr;
    const std::size_t size = bytes > 0 ? bytes : 1;
    if (kind == cuda_memory_kind::device) {
        CUDA_TRY(cudaMalloc(&raw, size));
    } else {
        CUDA_TRY(cudaHostAlloc(&raw, size, cudaHostAllocDefault));
    }
    fresh.data_ = static_cast<unsigned char*>(raw);
    fresh.bytes_ = bytes;
    fresh.kind_ = kind;
    out = std::move(fresh);
    return status::success();
}

status copy_rows(void* to, std::size_t to_pitch, const void* from, std::size_t from_pitch, std::size_t row_bytes,
                 std::size_t rows) {
    if (rows == 0) return status::success();
    CUDA_TRY(cudaMemcpy2DAsync(to, to_pitch, from, from_pitch, row_bytes, rows, cudaMemcpyDefault, cudaStreamLegacy));
    CUDA_TRY(cudaStreamSynchronize(cudaStreamLegacy));
    return status::success();
}

status zero_device_bytes(void* data, std::size_t bytes) {
    if (bytes == 0) return status::success();
    CUDA_TRY(cudaMemsetAsync(data, 0, bytes, cudaStreamLegacy));
    CUDA_TRY(cudaStreamSynchronize(cudaStreamLegacy));
    return status::success();
}

int current_cuda_device() {
    int device = -1;
    if (cudaGetDevice(&device) != cudaSuccess) {
        cudaGetLastError();  // not sticky: nothing is left behind for the next call
        return -1;
    }
    return device;
}

cuda_device_scope::cuda_device_scope(int device) {
    if (device < 0) return;
    const int current = current_cuda_device();
    if (current < 0 || current == device) return;
    if (cudaSetDevice(device) == cudaSuccess) {
        previous_ = current;
    } else {
        cudaGetLastError();  // the step's own CUDA calls report the device's trouble
    }
}

cuda_device_scope::~cuda_device_scope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
}

}  // namespace ds

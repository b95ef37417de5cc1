// CUDA error handling at the kernels/ boundary (DESIGN.md §6): a failed call becomes a status
// naming the call, the file and the line, after the sticky error is cleared so later calls start
// clean. Plus RAII owners of device and pinned host memory (move-only).
#pragma once

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstddef>
#include <utility>

#include "kernels/sampling_types.h"

namespace ds::cuda {

inline status cuda_error_status(cudaError_t error, const char* call, const char* file, int line) {
    cudaGetLastError();
    return {status_code::internal, fmt::format("{} failed at {}:{}: {}", call, file, line, cudaGetErrorString(error))};
}

#define CUDA_TRY(call)                                                                            \
    do {                                                                                          \
        const cudaError_t cuda_try_error_ = (call);                                               \
        if (cuda_try_error_ != cudaSuccess) {                                                     \
            return ::ds::cuda::cuda_error_status(cuda_try_error_, #call, __FILE__, __LINE__);     \
        }                                                                                         \
    } while (0)

template <cudaError_t (*Free)(void*)>
class cuda_memory {
   public:
    cuda_memory() = default;
    cuda_memory(const cuda_memory&) = delete;
    cuda_memory& operator=(const cuda_memory&) = delete;
    cuda_memory(cuda_memory&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(other.bytes_) {}
    cuda_memory& operator=(cuda_memory&& other) noexcept {
        std::swap(ptr_, other.ptr_);
        std::swap(bytes_, other.bytes_);
        return *this;
    }
    ~cuda_memory() {
        if (ptr_ != nullptr) Free(ptr_);
    }
    void* get() const { return ptr_; }
    size_t bytes() const { return bytes_; }

   protected:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

inline cudaError_t free_device(void* p) { return cudaFree(p); }
inline cudaError_t free_pinned(void* p) { return cudaFreeHost(p); }

class device_buffer : public cuda_memory<free_device> {
   public:
    status allocate(size_t bytes) {
        CUDA_TRY(cudaMalloc(&ptr_, bytes > 0 ? bytes : 1));
        bytes_ = bytes;
        return status::success();
    }
};

class pinned_buffer : public cuda_memory<free_pinned> {
   public:
    status allocate(size_t bytes) {
        CUDA_TRY(cudaMallocHost(&ptr_, bytes > 0 ? bytes : 1));
        bytes_ = bytes;
        return status::success();
    }
};

// Elapsed device time between two points of a stream, with the events freed on every path.
class event_timer {
   public:
    event_timer() = default;
    event_timer(const event_timer&) = delete;
    event_timer& operator=(const event_timer&) = delete;
    ~event_timer() {
        if (start_ != nullptr) cudaEventDestroy(start_);
        if (stop_ != nullptr) cudaEventDestroy(stop_);
    }

    status start(cudaStream_t stream) {
        CUDA_TRY(cudaEventCreate(&start_));
        CUDA_TRY(cudaEventCreate(&stop_));
        CUDA_TRY(cudaEventRecord(start_, stream));
        return status::success();
    }

    status stop(cudaStream_t stream, float& milliseconds) {
        CUDA_TRY(cudaEventRecord(stop_, stream));
        CUDA_TRY(cudaEventSynchronize(stop_));
        CUDA_TRY(cudaEventElapsedTime(&milliseconds, start_, stop_));
        return status::success();
    }

   private:
    cudaEvent_t start_ = nullptr;
    cudaEvent_t stop_ = nullptr;
};

}  // namespace ds::cuda

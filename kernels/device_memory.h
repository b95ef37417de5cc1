// GPU memory and pinned host memory for code outside kernels/ (the ucx transport, the rank
// engine), which includes no CUDA headers (docs/architecture.md, Modules): a move-only owner, and the copies that
// staging needs. In a build without CUDA every call returns status unsupported.
#pragma once

#include <cstddef>
#include <utility>

#include "kernels/sampling_types.h"

namespace ds {

// Whether this build has CUDA (the calls below can work).
bool cuda_built();

enum class cuda_memory_kind {
    device,       // cudaMalloc on the current device
    pinned_host,  // cudaHostAlloc: page-locked host memory, copied to and from the GPU at full speed
};

class cuda_allocation {
   public:
    cuda_allocation() = default;
    ~cuda_allocation();
    cuda_allocation(cuda_allocation&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)), kind_(other.kind_) {}
    cuda_allocation& operator=(cuda_allocation&& other) noexcept {
        std::swap(data_, other.data_);
        std::swap(bytes_, other.bytes_);
        std::swap(kind_, other.kind_);
        return *this;
    }
    cuda_allocation(const cuda_allocation&) = delete;
    cuda_allocation& operator=(const cuda_allocation&) = delete;

    // `bytes` bytes of uninitialised memory of `kind` (at least one byte, so that data() is
    // never null after success); replaces what `out` held.
    static status allocate(cuda_memory_kind kind, std::size_t bytes, cuda_allocation& out);

    unsigned char* data() const { return data_; }
    std::size_t bytes() const { return bytes_; }
    cuda_memory_kind kind() const { return kind_; }

   private:
    unsigned char* data_ = nullptr;
    std::size_t bytes_ = 0;
    cuda_memory_kind kind_ = cuda_memory_kind::device;
};

// Copies `rows` rows of `row_bytes` bytes, `from_pitch` bytes apart in `from`, to `to_pitch` bytes
// apart in `to`, each side host or device memory, and waits for the copy. Nothing to do for 0 rows.
status copy_rows(void* to, std::size_t to_pitch, const void* from, std::size_t from_pitch, std::size_t row_bytes,
                 std::size_t rows);

// Sets `bytes` bytes of device memory to zero and waits.
status zero_device_bytes(void* data, std::size_t bytes);

// The calling thread's current CUDA device, or -1 (no CUDA, or none can be used).
int current_cuda_device();

// Makes `device` the calling thread's current CUDA device for the scope and restores the previous
// one after: a rank's engine keeps the device it was built on when another thread (a model
// worker's, which may have chosen another GPU) runs its step. Nothing happens for device < 0.
class cuda_device_scope {
   public:
    explicit cuda_device_scope(int device);
    ~cuda_device_scope();
    cuda_device_scope(const cuda_device_scope&) = delete;
    cuda_device_scope& operator=(const cuda_device_scope&) = delete;

   private:
    int previous_ = -1;  // to restore; -1: nothing was changed
};

}  // namespace ds

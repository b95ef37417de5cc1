// CUDA error handling at the kernels/ boundary (docs/architecture.md, Modules): a failed call becomes a status
// naming the call, the file and the line, after the sticky error is cleared so later calls start
// clean. Plus RAII owners of device and pinned host memory (move-only), a stream, an event timer and a
// captured CUDA graph.
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

#define CUDA_TRY(call)                                                                        \
    do {                                                                                      \
        const cudaError_t cuda_try_error_ = (call);                                           \
        if (cuda_try_error_ != cudaSuccess) {                                                 \
            return ::ds::cuda::cuda_error_status(cuda_try_error_, #call, __FILE__, __LINE__); \
        }                                                                                     \
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

// Page-locked host memory that kernels also reach at get() (unified addressing maps it at the
// same address; allocate checks that), so a kernel can read and write it with no copy.
class pinned_buffer : public cuda_memory<free_pinned> {
   public:
    status allocate(size_t bytes) {
        CUDA_TRY(cudaMallocHost(&ptr_, bytes > 0 ? bytes : 1));
        bytes_ = bytes;
        void* on_device = nullptr;
        CUDA_TRY(cudaHostGetDevicePointer(&on_device, ptr_, 0));
        if (on_device != ptr_) {
            return {status_code::unsupported,
                    "pinned host memory is not at the same address on the device (no unified addressing)"};
        }
        return status::success();
    }
};

// A non-blocking stream, destroyed with its owner (a graph cannot be captured on the legacy
// default stream).
class cuda_stream {
   public:
    cuda_stream() = default;
    cuda_stream(const cuda_stream&) = delete;
    cuda_stream& operator=(const cuda_stream&) = delete;
    ~cuda_stream() {
        if (stream_ != nullptr) cudaStreamDestroy(stream_);
    }
    status create() {
        CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        return status::success();
    }
    cudaStream_t get() const { return stream_; }

   private:
    cudaStream_t stream_ = nullptr;
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

// A stream's work recorded as a CUDA graph and instantiated, destroyed with its owner; and the
// timing every benchmark figure uses (cuda_backend::time_graph, the floor probes).
class captured_graph {
   public:
    captured_graph() = default;
    captured_graph(const captured_graph&) = delete;
    captured_graph& operator=(const captured_graph&) = delete;
    ~captured_graph() { reset(); }

    bool empty() const { return exec_ == nullptr; }

    void reset() {
        if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
        exec_ = nullptr;
    }

    // Records what `enqueue()` (returning a status) issues on `stream`, replacing any earlier graph.
    template <class Enqueue>
    status capture(cudaStream_t stream, const Enqueue& enqueue) {
        reset();
        cudaGraph_t graph = nullptr;
        CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        const status enqueued = enqueue();
        const cudaError_t captured = cudaStreamEndCapture(stream, &graph);  // ends the capture on every path
        cudaError_t instantiated = captured;
        if (enqueued.is_ok() && captured == cudaSuccess) instantiated = cudaGraphInstantiate(&exec_, graph, 0);
        if (graph != nullptr) cudaGraphDestroy(graph);
        if (instantiated != cudaSuccess) exec_ = nullptr;
        if (!enqueued.is_ok()) return enqueued;
        CUDA_TRY(instantiated);
        return status::success();
    }

    status launch(cudaStream_t stream) const {
        CUDA_TRY(cudaGraphLaunch(exec_, stream));
        return status::success();
    }

    // Mean device time of one replay: one warm-up launch, then `iterations` back-to-back launches
    // between two events.
    status time_replays(cudaStream_t stream, int iterations, double& microseconds_per_replay) const {
        if (iterations < 1) return status::invalid("iterations must be >= 1");
        CUDA_TRY(cudaGraphLaunch(exec_, stream));  // warm-up
        event_timer timer;                         // frees its events on every return
        status s = timer.start(stream);
        if (!s.is_ok()) return s;
        for (int i = 0; i < iterations; ++i) CUDA_TRY(cudaGraphLaunch(exec_, stream));
        float ms = 0.0f;
        s = timer.stop(stream, ms);
        if (!s.is_ok()) return s;
        microseconds_per_replay = 1000.0 * ms / iterations;
        return status::success();
    }

   private:
    cudaGraphExec_t exec_ = nullptr;
};

}  // namespace ds::cuda

// How the CUDA backend lays a step out in its buffers: the staging sections (in mapped pinned
// memory, or copied to the device), the outputs, and what a captured graph bakes in. Host code,
// for cuda_backend.cu alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/chain_kernel.h"
#include "kernels/sampling_types.h"

namespace ds::cuda {

constexpr size_t kSectionAlign = 256;

// `bytes` rounded up to a multiple of kSectionAlign, so every section starts aligned for any type.
inline size_t section_bytes(size_t bytes) { return (bytes + kSectionAlign - 1) / kSectionAlign * kSectionAlign; }

// Sections carved one after another from a staging buffer, at the same offsets on the host and
// on the device (a device copy, or the buffer's own mapped address); a section's size depends on
// the step, so the offsets are the step's layout.
class staging_carver {
   public:
    // A host buffer copied to `device` before the kernels read it.
    staging_carver(char* host, char* device) : host_(host), device_(device) {}
    // Mapped pinned memory, which the device reads at its host address.
    explicit staging_carver(char* mapped) : staging_carver(mapped, mapped) {}

    // Copies `count` elements into the next section and returns their device address (null for
    // no elements).
    template <class T>
    const T* put(const T* values, size_t count) {
        if (count == 0 || values == nullptr) return nullptr;
        T* at = reserve<T>(count);
        std::memcpy(at, values, count * sizeof(T));
        return device_of(at);
    }
    // The next section's host address, for filling in place.
    template <class T>
    T* reserve(size_t count) {
        T* at = reinterpret_cast<T*>(host_ + used_);
        used_ += section_bytes(count * sizeof(T));
        return at;
    }
    template <class T>
    const T* device_of(const T* host) const {
        return reinterpret_cast<const T*>(device_ + (reinterpret_cast<const char*>(host) - host_));
    }
    size_t used() const { return used_; }

   private:
    char* host_;
    char* device_;
    size_t used_ = 0;
};

// Where each output sits in the output buffer (bytes): predict and accept_length adjacent, as
// step_output's packed buffer.
struct output_layout {
    size_t packed = 0, accept_index = 0, logprobs = 0, row_error = 0, total = 0;
};

inline output_layout outputs_for(int32_t bs, int32_t n) {
    output_layout o;
    const size_t rows = static_cast<size_t>(bs) * static_cast<size_t>(n);
    o.packed = 0;
    o.accept_index = section_bytes((rows + static_cast<size_t>(bs)) * sizeof(int32_t));
    o.logprobs = o.accept_index + section_bytes(rows * sizeof(int32_t));
    o.row_error = o.logprobs + section_bytes(rows * sizeof(float));
    o.total = o.row_error + static_cast<size_t>(bs);
    return o;
}

// What a captured graph bakes in: the staging sections' sizes (so their offsets) and the kernels'
// by-value arguments.
struct staged_shape {
    int32_t batch_size = 0, tokens_per_req = 0, bias_entries = 0, seen_entries = 0, stream_segments = 0;
    const void* logits = nullptr;
    int64_t row_stride = 0;
    logits_dtype dtype = logits_dtype::f32;
    bool verify = false, bitmask = false, coins = false, final_coins = false, logprobs = false;
    float threshold_single = 1.0f, threshold_acc = 1.0f;

    bool operator==(const staged_shape& o) const {
        return batch_size == o.batch_size && tokens_per_req == o.tokens_per_req && bias_entries == o.bias_entries &&
               seen_entries == o.seen_entries && stream_segments == o.stream_segments && logits == o.logits &&
               row_stride == o.row_stride && dtype == o.dtype && verify == o.verify && bitmask == o.bitmask &&
               coins == o.coins && final_coins == o.final_coins && logprobs == o.logprobs &&
               threshold_single == o.threshold_single && threshold_acc == o.threshold_acc;
    }
};

// A staged step: the call over device staging, the launch planned from it, and what moves.
struct staged_step {
    sampling_call call;
    chain_kernel_params params;
    size_t staged_bytes = 0;  // of the copied staging: 0 when the step has no lists and no bitmask
    staged_shape shape;
};

}  // namespace ds::cuda

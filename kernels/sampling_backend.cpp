#include "kernels/sampling_backend.h"

namespace ds {

const char* dtype_name(logits_dtype dtype) {
    switch (dtype) {
        case logits_dtype::f32: return "f32";
        case logits_dtype::bf16: return "bf16";
        case logits_dtype::f16: return "f16";
    }
    return "unknown";
}

std::size_t dtype_size(logits_dtype dtype) { return dtype == logits_dtype::f32 ? 4 : 2; }

status sampling_backend::commit_tokens(const step_input& step, const step_output& out) {
    return record_step_tokens(pool(), step, out);
}

}  // namespace ds

#include "kernels/sampling_backend.h"

#include <fmt/format.h>

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

status parse_backend_kind(std::string_view name, backend_kind& kind) {
    if (name == "cpu") {
        kind = backend_kind::cpu;
    } else if (name == "cuda") {
        kind = backend_kind::cuda;
    } else {
        return status::invalid(fmt::format("backend = '{}': expected 'cpu' or 'cuda'", name));
    }
    return status::success();
}

}  // namespace ds

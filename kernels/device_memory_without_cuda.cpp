// kernels/device_memory.h in a build without CUDA: nothing to allocate, every call says why.
#include "kernels/device_memory.h"

namespace ds {

namespace {

status no_cuda(const char* what) {
    return {status_code::unsupported,
            std::string(what) + ": this build has no CUDA support (configure with -DDISTSAMPLE_WITH_CUDA=ON)"};
}

}  // namespace

bool cuda_built() { return false; }

cuda_allocation::~cuda_allocation() = default;

status cuda_allocation::allocate(cuda_memory_kind kind, std::size_t, cuda_allocation&) {
    return no_cuda(kind == cuda_memory_kind::device ? "device memory" : "pinned host memory");
}

status copy_rows(void*, std::size_t, const void*, std::size_t, std::size_t, std::size_t) {
    return no_cuda("copying device rows");
}

status zero_device_bytes(void*, std::size_t) { return no_cuda("zeroing device memory"); }

int current_cuda_device() { return -1; }

cuda_device_scope::cuda_device_scope(int) {}

cuda_device_scope::~cuda_device_scope() = default;

}  // namespace ds

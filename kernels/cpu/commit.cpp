#include "kernels/cpu/commit.h"

#include "kernels/commit_rules.h"

namespace ds::cpu {

void commit_tokens(const commit_call& call) {
    for (int32_t b = 0; b < call.batch_size; ++b) {
        const bool ok = commit_request(call, b);
        if (!ok && call.row_error != nullptr) call.row_error[b] = kRowErrorInvalidParams;
    }
}

}  // namespace ds::cpu

#include "transport/remote_swap.h"

#include <fmt/format.h>

#include <algorithm>

namespace ds {

int64_t swap_request::real_requested_rows() const { return std::clamp<int64_t>(real_rows - first_row, 0, row_count); }

status check_swap_requests(const std::vector<swap_request>& requests, const swap_request& mine, int32_t rank) {
    for (size_t peer = 0; peer < requests.size(); ++peer) {
        const swap_request& theirs = requests[peer];
        if (theirs.real_rows != mine.real_rows || theirs.dtype != mine.dtype) {
            return status::invalid(fmt::format("swap_batch_vocab: rank {} has {} rows of {}, rank {} has {} rows of {}",
                                               peer, theirs.real_rows,
                                               dtype_name(static_cast<logits_dtype>(theirs.dtype)), rank,
                                               mine.real_rows, dtype_name(static_cast<logits_dtype>(mine.dtype))));
        }
    }
    return status::success();
}

}  // namespace ds

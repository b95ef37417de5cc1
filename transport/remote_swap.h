// What the backends that push or send rows between processes (ucx, nccl) share: a sender must
// know which rows each receiver asked for, so a vocab swap starts by all-gathering every rank's
// request; the ranks must agree on the batch (rows, dtype) or fail alike.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/transport.h"

namespace ds {

// What a rank asks of swap_batch_vocab.
struct swap_request {
    int64_t first_row;
    int64_t row_count;
    int64_t real_rows;  // the shard's rows (the batch before padding), the same on every rank
    int64_t dtype;      // logits_dtype

    static swap_request of(const logits_view& shard, int64_t first_row, int64_t row_count) {
        return {first_row, row_count, shard.rows, static_cast<int64_t>(shard.dtype)};
    }
    // Real (non-phantom) rows among the requested ones.
    int64_t real_requested_rows() const;
};

// Every rank's request (all-gathered) against this rank's: invalid_argument, naming both ranks,
// when their batches differ.
status check_swap_requests(const std::vector<swap_request>& requests, const swap_request& mine, int32_t rank);

}  // namespace ds

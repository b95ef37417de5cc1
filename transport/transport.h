// The one narrow interface between ranks (docs/architecture.md, Transports): the collectives a
// distributed sampling step needs. Backends: `local` (ranks as threads of one process), `ucx`
// (rank processes, or rank threads) and `nccl` (one rank process per GPU); transport_factory.h
// picks one. Every call is collective (all ranks of the group make it, in the same order, with the
// same sizes), blocks until the group has finished it, and is bounded by the group's timeout.
// After abort() or a timeout every pending and later call fails: ranks as threads go on in a new
// epoch (transport_group.h), rank processes with new endpoints.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "config/group_config.h"
#include "kernels/sampling_types.h"

namespace ds {

enum class reduce_op { sum, max };

// What every backend sizes its buffers and waits by. Buffers are allocated once at construction;
// a call that would need more is an invalid_argument status, never an allocation.
struct transport_config {
    int32_t world_size = 1;
    int32_t vocab_size = 0;                      // V (full vocabulary)
    int64_t max_swap_rows = 0;                   // rows one rank may receive from swap_batch_vocab
    std::size_t max_collective_bytes = 1 << 16;  // per rank, for all_gather / all_reduce / broadcast
    std::chrono::milliseconds timeout{5000};     // bound of every wait

    // Ok when usable, else an invalid_argument status naming the field.
    status validate() const;
};

// The ucx backend's own options (the other backends have none): the group's ucx keys, and whether
// the rank samples with the cuda backend, so that the swap's logits may live in GPU memory
// (transport/ucx_memory_path.h).
struct ucx_endpoint_options : ucx_options {
    bool backend_on_device = false;
};

// The checks every backend makes at its boundary (one message per violation, naming the field).
status check_swap_shape(const transport_config& config, const logits_view& shard, int64_t first_row, int64_t row_count);
status check_collective_size(const transport_config& config, std::size_t bytes, const char* what);

class transport {
   public:
    virtual ~transport() = default;

    virtual int32_t rank() const = 0;
    virtual int32_t world_size() const = 0;
    // Where swap_batch_vocab reads the shard and returns the rows: device memory (nccl, and ucx
    // with ucx_device_memory resolved to direct) or host memory (every other backend). Callers
    // stage logits to match.
    virtual bool swaps_device_logits() const { return false; }

    // Vocab swap (the batch-DP all-to-all): every rank holds `shard`, its vocab slice
    // [rank * V/TP, (rank+1) * V/TP) of the step's rows. This rank receives the full-vocab rows
    // [first_row, first_row + row_count) assembled from every rank's slice. Rows at or past
    // `shard.rows` are phantom rows (padding) and come back as zeros. The returned view points
    // into this endpoint's persistent receive buffer and stays valid until the next call.
    virtual status swap_batch_vocab(const logits_view& shard, int64_t first_row, int64_t row_count,
                                    logits_view& full_rows) = 0;

    // All-gather of the packed [reqs_per_rank, 2N+1] int32 verify outputs
    // (predict | accept_index | accept_length): out receives world_size blocks in rank order.
    virtual status gather_verify_outputs(const int32_t* block, std::size_t block_ints, int32_t* out) = 0;

    // out receives world_size copies of `bytes` bytes, in rank order.
    virtual status all_gather(const void* in, std::size_t bytes, void* out) = 0;

    // Element-wise reduction across ranks, in place.
    virtual status all_reduce(uint64_t* data, std::size_t count, reduce_op op) = 0;
    virtual status all_reduce(int64_t* data, std::size_t count, reduce_op op) = 0;

    // Copies `bytes` bytes from `root`'s data into every rank's data.
    virtual status broadcast(void* data, std::size_t bytes, int32_t root) = 0;

    virtual status barrier() = 0;

    // Fails every pending and later collective of the group (wakes the waiters) with `reason`.
    virtual void abort(const char* reason) = 0;
};

}  // namespace ds

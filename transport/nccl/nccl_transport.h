// The `nccl` transport: one rank process per GPU (NCCL refuses two ranks of one communicator on
// the same GPU), over a non-blocking NCCL communicator (config.blocking = 0).
//
// - swap_batch_vocab: the shard must be GPU memory (logits_view::on_device); each rank packs the
//   rows every peer asked for (cudaMemcpy2DAsync into a staging buffer), one grouped ncclSend /
//   ncclRecv per peer (this NCCL, 2.28, has no ncclAlltoAll), then unpacks the slices into the
//   full-vocab rows. The returned view is device memory (on_device). As in the UCX transport, the
//   ranks' requested rows are all-gathered first.
// - gather_verify_outputs / all_gather: one ncclAllGather; all_reduce: ncclAllReduce on uint64 /
//   int64 (sum, max: exact on integers); broadcast: ncclBroadcast; barrier: a one-word all-reduce.
//   These take host memory, like the other backends, staged through device buffers.
// - The unique id goes from rank 0 through the bootstrap (bootstrap.h).
// - Every wait polls the stream and ncclCommGetAsyncError against the transport timeout; a
//   timeout, an asynchronous error or abort() calls ncclCommAbort, and the endpoint stays failed
//   (a new communicator is needed). NCCL cannot tell which peer is missing: a timeout says so.
//
// Device buffers are allocated once at construction. Compiled when DISTSAMPLE_WITH_NCCL is on
// (needs CUDA). Run on an H200, one rank process per GPU: the collective script equals the local
// transport byte for byte (tests/gpu/test_nccl_transport.cpp); 2 and 4 ranks need as many GPUs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "transport/bootstrap.h"
#include "transport/failure_latch.h"
#include "transport/transport.h"

namespace ds {

struct nccl_options {
    int32_t device = -1;  // CUDA device of this rank; -1: rank % device count
};

class nccl_endpoint final : public transport {
   public:
    // Selects the device, meets the peers through `boot` (rank 0's unique id) and initialises the
    // communicator, bounded by config.timeout.
    static status create(const transport_config& config, bootstrap& boot, const nccl_options& options,
                         std::unique_ptr<nccl_endpoint>& out);
    ~nccl_endpoint() override;
    nccl_endpoint(const nccl_endpoint&) = delete;
    nccl_endpoint& operator=(const nccl_endpoint&) = delete;

    int32_t rank() const override { return rank_; }
    int32_t world_size() const override { return config_.world_size; }
    bool swaps_device_logits() const override { return true; }

    status swap_batch_vocab(const logits_view& shard, int64_t first_row, int64_t row_count,
                            logits_view& full_rows) override;
    status gather_verify_outputs(const int32_t* block, std::size_t block_ints, int32_t* out) override;
    status all_gather(const void* in, std::size_t bytes, void* out) override;
    status all_reduce(uint64_t* data, std::size_t count, reduce_op op) override;
    status all_reduce(int64_t* data, std::size_t count, reduce_op op) override;
    status broadcast(void* data, std::size_t bytes, int32_t root) override;
    status barrier() override;
    void abort(const char* reason) override;

   private:
    struct resources;

    nccl_endpoint(const transport_config& config, int32_t rank);

    status setup(bootstrap& boot, const nccl_options& options);
    // Makes this thread use the rank's device; fails when the endpoint has failed.
    status enter(const char* what);
    // Waits (bounded) until the communicator has taken an enqueued call (non-blocking mode).
    status settle(int result, const char* what);
    // Waits (bounded) until the stream has run everything enqueued.
    status wait(const char* what);
    status check_cuda(int error, const char* what);
    // Records a failure (the first reason wins), then failed().
    status fail(status_code code, std::string reason);
    // Aborts the communicator (once) and returns the recorded failure: the endpoint stays failed.
    status failed();
    template <class T>
    status reduce_impl(T* data, std::size_t count, reduce_op op);

    transport_config config_;
    int32_t rank_;
    std::unique_ptr<resources> gpu_;
    failure_latch failure_;
};

}  // namespace ds

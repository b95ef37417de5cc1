// The `ucx` transport: one endpoint per rank process, one-sided puts into the peers' memory.
//
// Every buffer a peer writes into lives in one region registered once (ucp_mem_map); its rkey,
// base address and the worker address are exchanged through a bootstrap (bootstrap.h) when the
// endpoint is created. A collective is a push: each rank ucp_put_nbx-es its contribution straight
// into the receivers' regions, flushes each peer's endpoint (remote completion), then puts a flag word, the
// call's sequence number, into each peer's flag slot; a rank's call returns once every peer's flag
// has reached that number. Every rank flags every peer on every call (also in broadcast and
// barrier), so finishing call k proves each peer has entered call k and is done with call k-1's
// results: the data areas are double-buffered by the sequence number's parity and never
// overwritten while a peer still reads them.
//
// Peer failure: endpoints use UCP_ERR_HANDLING_MODE_PEER, so a dead peer fails the call with an
// error naming its rank instead of a hang (with Debian's UCX 1.13 this drops the shared-memory
// transports and traffic goes over tcp, docs/deployment.md, UCX settings; ucx_options::peer_error_handling
// = false keeps shared memory, without cma, and leaves a dead peer to the timeout). A wait past
// the timeout fails naming the ranks whose flags are missing, or whose endpoints have not
// acknowledged this rank's puts. abort() may be called from any thread and wakes the waiter. After a failure the
// endpoint stays failed until set_epoch starts a new epoch (ranks as threads of one process: ucx_group.h); a dead peer
// stays failed for good, and a group that lost a rank process is re-formed by creating new endpoints.
//
// Memory (transport/ucx_memory_path.h, config key ucx_device_memory): the flags and collective
// areas are host memory; the swap receive areas are host memory for the cpu backend, pinned host
// memory when a cuda-backend rank stages its device shard through the host (`staged`), or device
// memory registered as CUDA memory (`direct`, where UCX reports CUDA support, e.g. the libucx-cu13
// wheel, and has cuda_ipc or rc/dc; Debian's UCX has none): then the swap takes the device shard, puts device to device
// and returns device rows (swaps_device_logits).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/device_memory.h"
#include "transport/bootstrap.h"
#include "transport/failure_latch.h"
#include "transport/transport.h"
#include "transport/ucx_memory_path.h"

namespace ds {

class ucx_endpoint final : public transport {
   public:
    // Creates this rank's UCX context, worker and registered region, exchanges addresses and
    // rkeys through `boot`, connects to every peer and meets them in a barrier (bounded by
    // config.timeout). Logs the chosen transports.
    static status create(const transport_config& config, const ucx_endpoint_options& options, bootstrap& boot,
                         std::unique_ptr<ucx_endpoint>& out);
    ~ucx_endpoint() override;
    ucx_endpoint(const ucx_endpoint&) = delete;
    ucx_endpoint& operator=(const ucx_endpoint&) = delete;

    int32_t rank() const override { return rank_; }
    int32_t world_size() const override { return config_.world_size; }
    bool swaps_device_logits() const override { return memory_path_ == ucx_memory_path::direct; }
    // Where the swap's logits live, chosen once at creation from ucx_device_memory.
    ucx_memory_path memory_path() const { return memory_path_; }

    // Also exchanges every rank's requested rows (first_row, row_count), dtype and real row count
    // first (a small collective), since a sender must know which rows each receiver wants.
    status swap_batch_vocab(const logits_view& shard, int64_t first_row, int64_t row_count,
                            logits_view& full_rows) override;
    status gather_verify_outputs(const int32_t* block, std::size_t block_ints, int32_t* out) override;
    status all_gather(const void* in, std::size_t bytes, void* out) override;
    status all_reduce(uint64_t* data, std::size_t count, reduce_op op) override;
    status all_reduce(int64_t* data, std::size_t count, reduce_op op) override;
    status broadcast(void* data, std::size_t bytes, int32_t root) override;
    status barrier() override;
    void abort(const char* reason) override;

    // The UCX transports carrying traffic to the next rank, e.g. "tcp/lo" (empty for one rank).
    const std::string& transport_summary() const { return transport_summary_; }

    // On this rank's thread, before the collectives of epoch `epoch` (a step id; increasing):
    // clears an abort or timeout of an earlier epoch (not a dead peer) and numbers this epoch's
    // calls from epoch << 32, above every flag an older epoch may still deliver. Every rank of
    // the group enters the same epochs.
    void set_epoch(uint64_t epoch);
    // Whether this rank is inside a collective now (any thread may ask).
    bool in_collective() const { return in_collective_.load(std::memory_order_acquire); }

   private:
    struct resources;
    struct peer_failure_context;

    ucx_endpoint(const transport_config& config, const ucx_endpoint_options& options, int32_t rank);

    // The two registered regions a peer puts into; index into resources' per-region arrays.
    enum class region { control = 0, swap = 1 };

    // prepare (context, memory path, worker, registered regions: this rank's blob), the
    // bootstrap exchange, then connect (endpoints to the peers, their rkeys, a first barrier).
    status setup(bootstrap& boot);
    status prepare(std::string& mine);
    // prepare's phases: the UCX context and worker; the control and swap regions; their
    // registration (each region's packed rkey); the blob the peers connect with.
    status init_context();
    status allocate_regions();
    status register_regions(std::string (&rkeys)[2]);
    status pack_blob(const std::string (&rkeys)[2], std::string& mine);
    status connect(const std::vector<std::string>& blobs);
    // connect's phases: per-peer state sized to the world; one peer's endpoint and rkeys from its
    // blob; after the first barrier, whether the lanes UCX chose can carry the memory path.
    void reset_peers();
    status connect_peer(int32_t peer, const std::string& blob);
    status check_lanes();
    // Asks the UCX context for CUDA support, resolves options_.device_memory, logs the choice.
    status choose_memory_path();
    // One collective: issue_puts(parity) puts this rank's data into the peers' areas of that
    // parity; then flush, flag every peer, and wait for every peer's flag of this call.
    template <class IssuePuts>
    status collective(const char* what, IssuePuts&& issue_puts);
    // `from_device`: `data` is device memory.
    status put(int32_t peer, const void* data, std::size_t bytes, region to, std::size_t remote_offset,
               bool from_device = false);
    // One progress call; once a wait has spun `spins` times and there was nothing to do, yields
    // the core, or with `sleep_when_idle` sleeps briefly on the worker's events.
    void progress(int spins, bool sleep_when_idle);
    status flush(const char* what);
    status wait_for_flags(uint64_t sequence, const char* what);
    // The first peer whose endpoint reported an error, or -1.
    int32_t failed_peer() const;
    // Fails the endpoint with "rank R: <what>: rank P failed (<UCX status>)".
    status fail_for_peer(int32_t peer, const char* what);
    template <class T>
    status reduce_impl(T* data, std::size_t count, reduce_op op);

    // Offsets inside the control region (flags, collectives) and the swap region.
    std::size_t flag_offset(int32_t source) const;
    std::size_t collective_offset(uint64_t parity, int32_t source) const;
    std::size_t swap_offset(uint64_t parity) const;
    std::size_t swap_region_bytes() const;
    unsigned char* control_at(std::size_t offset) { return control_.data() + offset; }

    transport_config config_;
    ucx_endpoint_options options_;
    int32_t rank_;
    std::unique_ptr<resources> ucx_;
    ucx_memory_path memory_path_ = ucx_memory_path::host;
    std::vector<unsigned char> control_;  // flags | collective area, parity 0 | parity 1
    std::size_t collective_area_bytes_ = 0;
    // The swap region: swap receive area, parity 0 | parity 1; host_swap_ on the host path,
    // else cuda_swap_ (pinned host or device memory).
    std::vector<unsigned char> host_swap_;
    cuda_allocation cuda_swap_;
    unsigned char* swap_base_ = nullptr;
    std::size_t swap_area_bytes_ = 0;
    uint64_t epoch_ = 0;
    uint64_t sequence_ = 0;
    std::atomic<bool> in_collective_{false};
    uint64_t flag_source_[2] = {0, 0};  // stays valid until the next call's flush completes the put
    std::string transport_summary_;

    failure_latch failure_;  // until set_epoch; a dead peer for good
};

}  // namespace ds

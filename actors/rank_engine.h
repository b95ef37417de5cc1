// What one TP rank does, without the actor around it: owns the rank's parameter pool, its
// sampling backend (full-vocab rows for `gathered` and `swap`) or shard sampler (`sharded`), and
// runs a planned step through its transport endpoint. The rank core (rank_core.h) owns one.
#pragma once

#include <chrono>
#include <memory>

#include "actors/dist_step.h"
#include "config/group_config.h"
#include "kernels/device_memory.h"
#include "kernels/sampling_backend.h"
#include "sharded/sharded_sampler.h"
#include "transport/faulty_transport.h"
#include "transport/timed_transport.h"

namespace ds {

// What the group's mode needs of each rank's transport endpoint (swap rows, collective bytes).
transport_config rank_transport_config(const group_config& config);
// The ucx backend's options for a rank of `config`.
ucx_endpoint_options rank_ucx_options(const group_config& config);

class rank_engine {
   public:
    // Builds the rank's backend; check init_status() before use. Out of memory, there and in
    // every call below, is a status saying what it was allocating.
    rank_engine(const group_config& config, int32_t rank, transport& endpoint);

    const status& init_status() const { return init_status_; }
    int32_t rank() const { return rank_; }

    status register_request(int32_t slot, const sampling_params& params, const std::vector<int32_t>& history);
    status release(int32_t slot);

    // Runs the step on `shard`, this rank's vocab shard of the step's rows (host or device); `out`
    // receives the outputs of the step's bs requests (every rank ends with the whole batch's).
    status run(const dist_step& step, const logits_view& shard, step_outputs& out);

    // Time the last run() took in all, and the part of it spent in collectives.
    int64_t last_run_ns() const { return last_run_ns_; }
    int64_t last_transport_ns() const { return last_transport_ns_; }
    int64_t last_received_bytes() const { return last_received_bytes_; }

    // Adds the outputs every rank agreed on to the slots' penalty counts.
    status commit(const dist_step& step, const step_outputs& agreed);

   private:
    // The constructor's work: the backend (or the sharded sampler) and the mode's buffers.
    status build();
    // run() but for a failed allocation, which run() reports naming the step.
    status run_allocating(const dist_step& step, const logits_view& shard, step_outputs& out);
    param_pool& pool();
    status run_gathered(const dist_step& step, const logits_view& shard, step_outputs& out);
    status run_swap(const dist_step& step, const logits_view& shard, step_outputs& out);
    // Swapped rows in device memory (nccl) for a backend that reads the host: staged there.
    status readable_by_backend(logits_view& rows);
    // Device rows copied into the host staging buffer.
    status stage_to_host(const logits_view& rows, logits_view& staged);

    group_config config_;
    int32_t rank_;
    timed_transport endpoint_;
    status init_status_;
    int64_t last_run_ns_ = 0;
    int64_t last_transport_ns_ = 0;
    int64_t last_received_bytes_ = 0;
    std::unique_ptr<sampling_backend> backend_;  // gathered, swap
    std::unique_ptr<param_pool> shard_pool_;     // sharded: parameters over the global vocab
    std::unique_ptr<sharded_sampler> sharded_;   // sharded
    // swap: this rank's outputs and the gathered blocks, sized once.
    step_outputs local_out_;
    std::vector<int32_t> packed_block_;
    std::vector<int32_t> gathered_blocks_;
    std::vector<int32_t> extra_block_;  // logprob bits and error flags
    std::vector<int32_t> gathered_extras_;
    bool backend_reads_device_ = false;  // the cuda backend takes device logits as they are
    // The CUDA device the engine was built on (-1: CPU backend): a step keeps to it on whichever
    // thread runs it (a model worker's runs its rank's steps).
    int device_ = -1;
    // Logits moved to where the transport or the backend reads them: a host copy of device rows
    // (the shard for a host transport, or the swapped rows of a device transport: never both in
    // one step), and a device copy of a host shard for a transport that swaps device memory.
    // The cuda backend with a host transport (ucx_device_memory staged, local) stages its shard
    // in pinned memory sized once; other ranks rarely see device rows and grow a vector.
    cuda_allocation pinned_staging_;
    std::vector<unsigned char> host_staging_;
    std::shared_ptr<void> device_staging_;
    std::size_t device_staging_bytes_ = 0;
};

}  // namespace ds

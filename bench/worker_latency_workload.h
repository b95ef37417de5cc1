// The workload of bench_worker_latency (worker_latency.cpp): its options, the group's
// configuration, the synthetic model, the verify step it submits, where a worker's forward leaves
// its shard, and the worker process itself.
#pragma once

#include <distsample/group.h>
#include <distsample/rank.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/device_memory.h"
#include "sources/synthetic_logits.h"

namespace ds::bench {

constexpr int32_t kWorkerTp = 4;

struct worker_options {
    int steps = 300;
    std::string mode = "sharded";
    int32_t batch = 4;
    int32_t n = 4;
    int32_t vocab = 4096;
    int64_t forward_us = 2000;
    backend_kind backend = backend_kind::cpu;
    // tuning.rank_spin_us (the ranks and the answer lane's thread), reply_spin_us (the caller) and
    // scheduler_spin_us (CAF's scheduler threads): --spin-us sets all three, the others one each.
    int32_t rank_spin_us = 0;
    int32_t reply_spin_us = 0;
    int32_t scheduler_spin_us = 0;
};

// What a worker reports per step, on steady_clock (one clock for every process of the host).
struct worker_record {
    uint64_t step = 0;
    int64_t got_ns = 0;       // next_step returned the description
    int64_t provided_ns = 0;  // provide_logits was called
};

// The group of the workers (`workers`: ucx between rank processes) or of rank threads (local).
group_config make_config(const worker_options& o, bool workers);
synthetic_lm make_model(const worker_options& o);
std::vector<sampling_params> request_params(const worker_options& o);
// The verify step every run submits: slots 1..bs, drafts from the model's own argmax chain.
step_request make_step(const worker_options& o);

// Where a worker's forward leaves its shard: the host rows themselves (CPU backend) or a copy in
// device memory (CUDA backend), `rows` x `shard_vocab` floats.
class shard_memory {
   public:
    status prepare(const worker_options& o, int64_t max_rows, int32_t shard_vocab);
    // The shard of `rows` (full rows of `vocab` floats) that begins at token `first`.
    status place(const float* rows, int64_t count, int32_t vocab, int32_t first, int32_t shard_vocab,
                 logits_view& shard);

   private:
    cuda_allocation device_;
};

// A worker process: serves steps until its rank leaves the group, writing a record per step to `out`.
[[noreturn]] void run_worker(const worker_options& o, int32_t rank, uint16_t port, int out);

}  // namespace ds::bench

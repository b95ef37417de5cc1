// One tensor-parallel rank inside a model worker process (docs/deployment.md, Ranks inside
// model workers). The worker's LM head makes its vocab shard of every step's rows; it hands that
// shard to its rank, which samples it exactly with its peers and the coordinator
// (`distsample coordinator` or `distsample serve` with rank processes), and learns the tokens the
// group agreed on for its next forward:
//
//   ds::worker_rank_config c;                     // the group's config, the coordinator, this rank
//   std::unique_ptr<ds::worker_rank> rank;
//   ds::status s = ds::worker_rank::join(c, rank);
//   ds::worker_step step;
//   s = rank->next_step(std::chrono::seconds(1), step);   // slots, positions, drafts: run the forward
//   s = rank->provide_logits(step.id, shard);             // rows [bs * N, shard_vocab] of this rank
//   ds::step_outputs out;
//   s = rank->outputs(step.id, std::chrono::seconds(1), out);  // the agreed tokens
//
// The coordinator sends a step's description as soon as the scheduler submits it, so the actors'
// latency overlaps the model's forward. A worker that does not hand in its logits within
// `logits_timeout` fails the step with a timeout naming its rank. CAF stays behind this header.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <distsample/group.h>

#include "config/topology_config.h"

namespace ds {

struct worker_rank_config {
    group_config group;                              // the coordinator's, with topology.logits_source = "worker"
    topology_config topology;                        // join and heartbeat timeouts, UCX's transports
    std::string coordinator;                         // HOST:PORT the coordinator listens on
    int32_t rank = 0;                                // in [0, group.distribution.tp)
    std::chrono::milliseconds logits_timeout{5000};  // from the step's arrival to provide_logits

    // Ok when usable, else invalid_argument naming the field and its allowed range.
    status check() const;
};

// What the worker makes logits for: rows b * N + j, j = 0 .. N-1, of request b follow its context
// and, for j > 0, drafts 1..j (`candidates`, verify only). Only vocab ids
// [vocab_begin, vocab_begin + shard_vocab) are this rank's.
struct worker_step {
    uint64_t id = 0;
    step_kind kind = step_kind::sample;
    int32_t batch_size = 0;
    int32_t tokens_per_req = 1;       // N
    std::vector<int32_t> slots;       // [batch_size]
    std::vector<int64_t> positions;   // [batch_size]
    std::vector<int32_t> candidates;  // [batch_size, N], verify only
    int32_t vocab_begin = 0;
    int32_t shard_vocab = 0;
};

class worker_rank {
   public:
    // Joins the coordinator (bounded by topology.join_timeout) and serves in background threads.
    static status join(const worker_rank_config& config, std::unique_ptr<worker_rank>& out);
    ~worker_rank();  // leaves the group
    worker_rank(const worker_rank&) = delete;
    worker_rank& operator=(const worker_rank&) = delete;

    // The next step whose logits the rank waits for; timeout when none arrives within `wait`,
    // aborted when the rank has left the group (its coordinator is gone or evicted it).
    status next_step(std::chrono::milliseconds wait, worker_step& out);
    // Step `step_id`'s shard: batch_size * N rows of shard_vocab logits (host memory, or device
    // memory with the CUDA backend), complete when called and valid until outputs() returns. The
    // calling thread runs this rank's part of the step on it (kernels, collectives, its answer to
    // the coordinator), so it returns when that is done; ok means the shard was taken, and the
    // step's outcome comes from outputs().
    status provide_logits(uint64_t step_id, const logits_view& shard);
    // The outputs the group agreed on for step `step_id` (predict, accept lengths, ...), once the
    // coordinator commits them; the step's error when it failed.
    status outputs(uint64_t step_id, std::chrono::milliseconds wait, step_outputs& out);

    struct impl;

   private:
    explicit worker_rank(std::unique_ptr<impl> state);
    std::unique_ptr<impl> impl_;
};

}  // namespace ds

// The configuration of a group of TP rank actors and how a step is laid out over them, in parts:
// the sizes every buffer is allocated for (limits), how a step is spread over the ranks
// (distribution), the sampling backend, the transport with one options type per backend that has
// any, latency tuning, and the faults to inject. docs/configuration.md lists every key.
//
// How a step of bs requests is laid out over TP ranks (docs/architecture.md, The coordinator and
// Modes). Batch-DP ("swap") pads the batch to pad_bs = ceil(bs / TP) * TP; the phantom rows name
// slot 0 (neutral) and rank r samples requests [r * reqs_per_rank, (r + 1) * reqs_per_rank). Rank r
// always holds the vocab shard [r * V/TP, (r + 1) * V/TP).
#pragma once

#include <chrono>
#include <cstdint>

#include "config/choices.h"
#include "config/fault_plan.h"
#include "config/kernel_config.h"
#include "core/status.h"

namespace ds {

// The sizes every buffer of a rank is allocated for, once, when the group starts.
struct group_limits {
    int32_t vocab_size = 32000;      // V, a multiple of tp
    int32_t max_batch = 64;          // requests per step (before padding)
    int32_t max_tokens_per_req = 8;  // N
    int32_t max_slots = 256;         // per-rank parameter-pool rows, slot 0 included
    int32_t max_penalty_tokens = 4096;
    int32_t max_logit_bias = 1024;
    // What the ranks' buffers may take (config/capacity.h); 0: this host's physical memory.
    int64_t memory_budget_mib = 0;
};

// How a step is spread over the ranks and what the coordinator makes of their answers.
struct distribution_config {
    int32_t tp = 4;  // ranks
    dist_mode mode = dist_mode::swap;
    rank0_policy policy = rank0_policy::on_mismatch;
    std::chrono::milliseconds step_timeout{10000};  // the coordinator's bound on a step's whole fan-out
};

// The ucx transport's own options.
struct ucx_options {
    // With the cuda backend: GPU memory over UCX, or staged through the host.
    ucx_memory_mode device_memory = ucx_memory_mode::automatic;
    // The endpoints detect a failed peer (UCP_ERR_HANDLING_MODE_PEER). Off, UCX may use the
    // transports without peer error handling (shared memory; cma is left out), and a dead peer is
    // noticed only by the transport timeout.
    bool peer_error_handling = true;
};

struct transport_options {
    transport_kind kind = transport_kind::local;
    std::chrono::milliseconds timeout{10000};  // one collective
    // Check the payloads of gathers and broadcasts (transport/faulty_transport.h): one extra
    // 8-byte all-gather per checked collective.
    bool payload_checksums = false;
    ucx_options ucx;
};

// CAF's shared scheduler, which runs the coordinator (each rank has a thread of its own). An idle
// worker polls its queue for `spin_us`, then sleeps on a condition variable; a message to a
// sleeping worker pays a thread wake-up (tens of microseconds, more on a loaded or power-saving
// host), a spinning worker takes it at once but holds a core meanwhile.
struct scheduler_config {
    int32_t threads = 1;
    int32_t spin_us = 0;
};
constexpr int32_t kMaxSchedulerThreads = 256;
constexpr int32_t kMaxSpinMicroseconds = 1'000'000;

// Latency against idle cores (scheduler_config): the scheduler's workers, how long an idle worker
// polls before it sleeps, how long group::step polls for its answer before it sleeps on the
// future, and how long a rank's thread polls its mailbox after a step's message before it sleeps.
// Polling saves a thread wake-up per hop and costs a core while it lasts.
struct tuning_config {
    int32_t threads_per_rank = 1;  // CPU worker threads of each rank's backend
    int32_t scheduler_threads = 1;
    int32_t scheduler_spin_us = 0;
    int32_t reply_spin_us = 0;
    int32_t rank_spin_us = 0;

    scheduler_config scheduler() const { return {scheduler_threads, scheduler_spin_us}; }
};

constexpr int32_t kMaxTp = 1024;
constexpr int64_t kMaxMemoryBudgetMib = int64_t{1} << 30;

// Everything a group of rank actors is built for; buffers are sized once from these.
struct group_config {
    group_limits limits;
    distribution_config distribution;
    backend_kind backend = backend_kind::cpu;
    transport_options transport;
    tuning_config tuning;
    fault_plan faults;  // injected from the first step (config/fault_plan.h; config section "faults")

    // The largest padded batch a rank's buffers are sized for.
    int32_t max_pad_bs() const { return (limits.max_batch + distribution.tp - 1) / distribution.tp * distribution.tp; }
};

// Ok when usable, else an invalid_argument status naming the field.
status validate_group_config(const group_config& config);

struct step_plan {
    int32_t bs = 0;
    int32_t tp = 1;
    int32_t pad_bs = 0;          // ceil(bs / tp) * tp
    int32_t reqs_per_rank = 0;   // pad_bs / tp
    int32_t tokens_per_req = 1;  // N
    int32_t shard_vocab = 0;     // V / tp

    int32_t phantom_rows() const { return pad_bs - bs; }
    // Requests [first_request(r), first_request(r) + reqs_per_rank) are rank r's under batch-DP.
    int32_t first_request(int32_t rank) const { return rank * reqs_per_rank; }
    // Vocab ids [vocab_begin(r), vocab_begin(r) + shard_vocab) are rank r's shard.
    int32_t vocab_begin(int32_t rank) const { return rank * shard_vocab; }
};

// Plans a step of `bs` requests with `n` tokens each, or says which field is out of range: the
// group's sizes (tp, vocab_size, ...), bs = 0, bs above max_batch, pad_bs above max_pad_bs, n.
result<step_plan> plan_step(const group_config& config, int32_t bs, int32_t n);

}  // namespace ds

// The configuration of a group of TP rank actors and how a step is laid out over them.
//
// How a step of bs requests is laid out over TP ranks (docs/architecture.md, The coordinator and
// Modes). Batch-DP ("swap") pads the batch to pad_bs = ceil(bs / TP) * TP; the phantom rows name
// slot 0 (neutral) and rank r samples requests [r * reqs_per_rank, (r + 1) * reqs_per_rank). Rank r
// always holds the vocab shard [r * V/TP, (r + 1) * V/TP).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "config/fault_plan.h"

namespace ds {

// How the ranks sample a step (docs/architecture.md, Modes).
enum class dist_mode {
    gathered,  // all-gather the full logits, every rank samples every row (reference)
    swap,      // all-to-all vocab swap, each rank verifies its requests, packed all-gather
    sharded,   // logits never move: ranks exchange maxima, masses and cut points
};

const char* mode_name(dist_mode mode);
// "gathered" | "swap" | "sharded"; false for anything else.
bool parse_mode(const std::string& name, dist_mode& mode);

struct group_limits {
    int32_t tp = 1;           // ranks
    int32_t vocab_size = 0;   // V, a multiple of tp
    int32_t max_batch = 256;  // requests per step before padding
    int32_t max_tokens_per_req = 8;

    // The largest padded batch a rank's buffers are sized for.
    int32_t max_pad_bs() const { return (max_batch + tp - 1) / tp * tp; }
};

// What the coordinator does with the ranks' outputs (docs/architecture.md, Rank-0 policy and
// desync events). Every policy compares each rank's output digest with rank 0's and records a
// desync event on a difference.
enum class rank0_policy {
    always,       // answer with rank 0's outputs and make every rank commit them
    never,        // trust no rank: a difference fails the step with a `mismatch` error
    on_mismatch,  // answer with rank 0's outputs; repair the ranks only when they differ
};

const char* policy_name(rank0_policy policy);
bool parse_policy(const std::string& name, rank0_policy& policy);

// Where the ucx transport keeps the vocab swap's logits when a rank samples on the GPU
// (transport/ucx_memory_path.h resolves it once UCX is up).
enum class ucx_memory_mode {
    automatic,  // "auto": direct where UCX can move CUDA memory, else staged
    direct,     // put GPU memory to GPU memory (needs a UCX built with CUDA, e.g. libucx-cu13)
    staged,     // copy the shard to pinned host buffers; UCX moves host memory
};

const char* ucx_memory_mode_name(ucx_memory_mode mode);
// "auto" | "direct" | "staged"; false for anything else.
bool parse_ucx_memory_mode(const std::string& name, ucx_memory_mode& mode);

// CAF's shared scheduler, which runs the coordinator (each rank has a thread
// of its own). An idle worker polls its queue for `spin_us`, then sleeps on a condition variable;
// a message to a sleeping worker pays a thread wake-up (tens of microseconds, more on a loaded or
// power-saving host), a spinning worker takes it at once but holds a core meanwhile.
struct scheduler_config {
    int32_t threads = 1;
    int32_t spin_us = 0;
};
constexpr int32_t kMaxSchedulerThreads = 256;
constexpr int32_t kMaxSpinMicroseconds = 1'000'000;

// Everything a group of rank actors is built for; buffers are sized once from these.
struct group_config {
    int32_t tp = 4;
    int32_t vocab_size = 32000;
    int32_t max_batch = 64;          // requests per step (before padding)
    int32_t max_tokens_per_req = 8;  // N
    int32_t max_slots = 256;         // per-rank parameter-pool rows, slot 0 included
    int32_t max_penalty_tokens = 4096;
    int32_t max_logit_bias = 1024;
    int32_t threads_per_rank = 1;  // CPU worker threads of each rank's backend
    std::string backend = "cpu";
    std::string transport = "local";  // auto | local | ucx | nccl (transport/transport_factory.h)
    // The ucx transport with the cuda backend: GPU memory over UCX, or staged through the host.
    ucx_memory_mode ucx_device_memory = ucx_memory_mode::automatic;
    // The ucx transport's endpoints detect a failed peer (UCP_ERR_HANDLING_MODE_PEER). Off, UCX
    // may use the transports without peer error handling (shared memory; cma is left out), and a
    // dead peer is noticed only by transport_timeout.
    bool ucx_peer_error_handling = true;
    dist_mode mode = dist_mode::swap;
    rank0_policy policy = rank0_policy::on_mismatch;
    std::chrono::milliseconds step_timeout{10000};       // coordinator: a step's whole fan-out
    std::chrono::milliseconds transport_timeout{10000};  // one collective
    // Check the payloads of gathers and broadcasts (transport/faulty_transport.h): one extra
    // 8-byte all-gather per checked collective.
    bool payload_checksums = false;
    // Faults to inject from the first step (config/fault_plan.h; config section "faults").
    fault_plan faults;
    // The ranks make their own logits (rank processes with a local source, topology.logits_source):
    // steps come without shards. Not a config key: set by `distsample coordinator` / `rank`.
    bool ranks_make_logits = false;
    // Latency against idle cores (scheduler_config): the scheduler's workers, how long an idle
    // worker polls before it sleeps, how long group::step polls for its answer before it sleeps
    // on the future, and how long a rank's thread polls its mailbox after a step's message before
    // it sleeps. Polling saves a thread wake-up per hop and costs a core while it lasts.
    int32_t scheduler_threads = 1;
    int32_t scheduler_spin_us = 0;
    int32_t reply_spin_us = 0;
    int32_t rank_spin_us = 0;

    group_limits limits() const { return {tp, vocab_size, max_batch, max_tokens_per_req}; }
    scheduler_config scheduler() const { return {scheduler_threads, scheduler_spin_us}; }
};

// Empty when usable, else a message naming the field.
std::string validate_group_config(const group_config& config);

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

// Empty when usable, else a message naming the field (tp, vocab_size, max_batch, ...).
std::string validate_group_limits(const group_limits& limits);

// Plans a step of `bs` requests with `n` tokens each. Returns an empty string on success, else a
// message naming the field: bs = 0, bs above max_batch, pad_bs above max_pad_bs, n out of range.
std::string plan_step(const group_limits& limits, int32_t bs, int32_t n, step_plan& plan);

}  // namespace ds

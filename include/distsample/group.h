// Embedding distsample: a group of TP rank actors and a coordinator, in this process.
//
//   ds::group_config config;                 // tp, vocab_size, mode, rank-0 policy, limits
//   std::unique_ptr<ds::group> group;
//   ds::status s = ds::group::create(config, group);
//   s = group->register_request(1, params);  // slot 1 on every rank
//   ds::step_request step;                   // slots, positions, candidates, per-rank shards
//   step.shards = ds::split_vocab(full_logits, config.distribution.tp);  // or each rank's own shard
//   ds::step_reply reply = group->step(step);                // blocks; reply.result.is_ok()
//
// The ranks can also be rank processes (`distsample rank`, docs/deployment.md) that join this
// process over the network: group::create_with_rank_processes.
//
// Every submitted step gets exactly one reply, in submission order: the outputs (equal to the
// sampling backend on the full rows, for every TP degree and mode) or a typed error naming the
// field, the rank or the step. CAF stays behind this header.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "actors/dist_step.h"
#include "config/fault_plan.h"
#include "config/group_config.h"
#include "kernels/sampling_types.h"

namespace ds {

// A rank whose outputs differed from rank 0's (docs/architecture.md, Rank-0 policy and desync events).
struct desync_event {
    uint64_t step = 0;
    int32_t rank = 0;
    int32_t first_row = -1;  // the first request whose outputs differ
};

// Where a step's time went on its ranks (the slowest rank of each): the rank's whole step (from
// receiving it to having its outputs) and the part of it inside transport collectives (waiting
// for and copying from peers). Step latency minus rank_step_ns is the actors' and coordinator's
// own cost.
struct step_timing {
    int64_t rank_step_ns = 0;
    int64_t rank_transport_ns = 0;
    int64_t rank_received_bytes = 0;  // bytes the rank's collectives brought it from its peers
    // When the rank's actor took the step's message and when it answered, on steady_clock in
    // nanoseconds (the rank process's clock; the slowest's: the latest of each).
    int64_t rank_began_at_ns = 0;
    int64_t rank_answered_at_ns = 0;
    // Stamped in the coordinator's process: when the result reached it (the answer lane's thread
    // woke for it, or it was filed), when the lane's recv returned its last bytes (0: it came over
    // CAF) and when it was filed on the step's board (0: never filed).
    int64_t arrived_at_ns = 0;
    int64_t received_at_ns = 0;
    int64_t filed_at_ns = 0;
};

// Where a step was when, on steady_clock in nanoseconds: with step_timing's, where a step's time
// outside the ranks goes (bench_coordinator_overhead). The last four are stamped by the thread
// that settles the step: the last rank to file its result, usually (actors/step_board.h).
struct step_timeline {
    int64_t received_at_ns = 0;    // the coordinator took the step
    int64_t dispatched_at_ns = 0;  // ... had planned it and began sending the ranks their messages
    // The last rank's result reached the coordinator's process: the answer lane's thread woke for
    // it (a rank process), or it was filed (a rank thread, CAF's answer).
    int64_t result_arrived_at_ns = 0;
    int64_t results_in_at_ns = 0;  // the last rank's result was filed
    int64_t answered_at_ns = 0;    // digests compared, desyncs recorded
    int64_t delivered_at_ns = 0;   // the library caller's future was about to be fulfilled (0 for other clients)
};

struct step_reply {
    status result;                         // ok, or why the step failed
    uint64_t step_id = 0;                  // assigned by the coordinator in submission order
    step_outputs outputs;                  // valid when result.is_ok()
    std::vector<desync_event> desyncs;     // found in this step
    step_timing timing;                    // the slowest rank's
    std::vector<step_timing> rank_timing;  // every rank's, in rank order
    step_timeline timeline;
};

class group;
struct topology_config;       // config/topology_config.h
enum class rank_fault : int;  // distsample/testing.h
namespace testing {
status inject_fault(group& g, int32_t rank, rank_fault fault);
}

inline constexpr std::size_t kKeptDesyncEvents = 1024;

class group {
   public:
    static status create(const group_config& config, std::unique_ptr<group>& out);
    // A group whose ranks are rank processes (`distsample rank`, the same config and topology)
    // that join on host:port (port 0: any free port; rank_port() says which). It returns once it
    // listens: steps and registrations fail fast, naming the missing rank, until every rank has
    // joined and the group has formed (wait_for_ranks). A rank process that dies fails the calls
    // in flight on it naming the rank; when it (or a successor) joins again the group re-forms in
    // a new epoch (docs/architecture.md, Ranks in other processes).
    static status create_with_rank_processes(const group_config& config, const topology_config& topology,
                                             const std::string& host, uint16_t port, std::unique_ptr<group>& out);
    ~group();
    group(const group&) = delete;
    group& operator=(const group&) = delete;

    const group_config& config() const;
    // Where the rank processes join (the port actually bound); 0 for rank threads.
    uint16_t rank_port() const;
    // True when the ranks make their own logits (rank processes with topology.logits_source other
    // than wire): steps then carry no shards.
    bool ranks_make_logits() const;
    // Asks health() until it is ok (for rank processes: every one has joined and the group has
    // formed) or `within` has passed; the timeout's message then says what is missing.
    status wait_for_ranks(std::chrono::milliseconds within);

    // Registers a request into `slot` on every rank (re-registering replaces it); `history` seeds
    // the penalty counts.
    status register_request(int32_t slot, const sampling_params& params, const std::vector<int32_t>& history = {});
    status release(int32_t slot);

    // Submits a step; replies arrive in submission order. `step.shards` must stay valid until then.
    std::future<step_reply> submit(step_request step);
    // The reply of a submitted step, once it is there. With rank processes the waiting thread
    // reads the ranks' answers itself meanwhile, so it is the thread the last answer wakes (one
    // thread wake-up sooner than reply.get(); docs/architecture.md, The answer lane).
    step_reply wait(std::future<step_reply>& reply);
    // submit() and wait().
    step_reply step(step_request step);

    // Ok when every rank answers and its backend works; else the first rank's error.
    status health();

    // The latest desync events, at most kKeptDesyncEvents (a long run's memory stays flat; the
    // gateway's metrics count them all).
    std::vector<desync_event> desync_events();

    // Replaces every rank's fault plan (config/fault_plan.h); it applies to the steps submitted
    // after it returns. An empty plan clears the faults.
    status set_fault_plan(const fault_plan& plan);

   private:
    friend status testing::inject_fault(group& g, int32_t rank, rank_fault fault);
    struct impl;
    explicit group(std::unique_ptr<impl> state);
    std::unique_ptr<impl> impl_;
};

}  // namespace ds

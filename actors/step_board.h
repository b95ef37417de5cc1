// Where one step's rank results meet (docs/architecture.md, The step board). Each rank files its result here: a rank
// actor from its own thread, a rank process through the membership actor, and the coordinator
// again from every answer it takes (a second filing for a rank is ignored). The filing that
// completes the set settles the step on the spot: it compares the digests with rank 0's under the
// rank-0 policy, records the desync events and answers a library caller, without a hop through
// the coordinator's mailbox (a CAF delivery to the scheduled coordinator costs tens of
// microseconds). The coordinator still answers its other clients, sends the commits and starts the
// next job once every rank's answer is in. Exactly one of "the set completed" and "the coordinator
// failed the step" answers the caller: each claims the board first.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "actors/messages.h"
#include "config/group_config.h"

namespace ds {

// What the ranks' results of a step amount to under the rank-0 policy.
struct step_outcome {
    status failure;                              // a mismatch under policy `never`, else ok
    std::vector<desync_event> desyncs;           // ranks whose digest differs from rank 0's
    std::shared_ptr<const step_outputs> agreed;  // rank 0's outputs: the answer
    bool ship = false;                           // the ranks commit `agreed`, else their own outputs
    step_timing slowest;                         // the slowest rank's figures
    std::vector<step_timing> rank_timing;        // every rank's
};

// Pure: the same results give the same outcome on any thread.
step_outcome combine_rank_results(const dist_step& step, const std::vector<rank_result>& results, rank0_policy policy);

// The latest kKeptDesyncEvents desync events of a group, written by whichever thread settles a
// step and read by the coordinator.
class desync_journal {
   public:
    void record(const std::vector<desync_event>& events);
    std::vector<desync_event> latest() const;

   private:
    mutable std::mutex mutex_;
    std::deque<desync_event> events_;
};

class step_board {
   public:
    // `caller`: the library caller's end, answered by the settling filing (null: the coordinator
    // answers). `timeline` holds the coordinator's stamps so far.
    step_board(std::shared_ptr<const dist_step> step, int32_t ranks, rank0_policy policy,
               std::shared_ptr<step_reply_sink> caller, std::shared_ptr<desync_journal> journal,
               const step_timeline& timeline);
    step_board(const step_board&) = delete;
    step_board& operator=(const step_board&) = delete;

    const dist_step& step() const { return *step_; }
    // Files rank result.rank's successful result, which reached this process at `arrived_at_ns`
    // (0: now); the filing that completes the set settles the step.
    void file(const rank_result& result, int64_t arrived_at_ns = 0);
    // Every rank's result is filed: results() may be read.
    bool complete() const { return filed_.load(std::memory_order_acquire) == ranks_; }
    const std::vector<rank_result>& results() const { return results_; }
    // The coordinator's claim before it fails the step; false when the set completed first and the
    // step stands.
    bool claim_for_failure();

   private:
    enum claim : int { open, settled, failed };
    void settle();

    const std::shared_ptr<const dist_step> step_;
    const int32_t ranks_;
    const rank0_policy policy_;
    const std::shared_ptr<step_reply_sink> caller_;
    const std::shared_ptr<desync_journal> journal_;
    const step_timeline timeline_;
    std::vector<rank_result> results_;
    std::unique_ptr<std::atomic<bool>[]> taken_;  // by rank: a filing owns the slot
    std::atomic<int32_t> filed_{0};
    std::atomic<int64_t> last_arrival_ns_{0};  // the latest arrival of a filed result
    std::atomic<int> claim_{open};
};

}  // namespace ds

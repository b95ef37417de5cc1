// Where a rank inside a model worker (include/distsample/rank.h) meets its worker: the rank's
// actor announces each step and waits, bounded, for the worker's shard of its rows; the worker
// takes the announcements, hands in its shards and reads the outputs the group committed
// (docs/deployment.md, Ranks inside model workers). The rank core reaches it as its shard_supplier.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>

#include <distsample/rank.h>

#include "actors/rank_core.h"

namespace ds {

class worker_handoff {
   public:
    // `spin` > 0: the rank polls that long for the worker's shard before its thread sleeps
    // (tuning.rank_spin_us), so a shard handed in meanwhile costs no thread wake-up.
    worker_handoff(int32_t rank, std::chrono::milliseconds logits_timeout,
                   std::chrono::microseconds spin = std::chrono::microseconds(0));

    // The rank's side (its actor's thread).
    status supply(const dist_step& step, logits_view& shard);
    void on_commit(const dist_step& step, const step_outputs& outputs);

    // The worker's side.
    status next_step(std::chrono::milliseconds wait, worker_step& out);
    status provide(uint64_t step_id, const logits_view& shard);
    status outputs(uint64_t step_id, std::chrono::milliseconds wait, step_outputs& out);

    // The rank has left the group: every wait ends with `why`.
    void close(status why);

   private:
    static constexpr size_t kKeptOutputs = 64;  // committed steps the worker may still ask for

    status check_shard(uint64_t step_id, const logits_view& shard) const;

    void spin_for_shard(uint64_t step_id) const;

    const int32_t rank_;
    const std::chrono::milliseconds logits_timeout_;
    const std::chrono::microseconds spin_;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<worker_step> announced_;  // not yet taken by next_step
    uint64_t waiting_for_ = 0;           // the step whose logits supply() waits for; 0: none
    int64_t expected_rows_ = 0;          // of the step waited for
    int32_t expected_vocab_ = 0;
    std::atomic<uint64_t> provided_for_{0};  // written under mutex_, polled without it by spin_for_shard
    logits_view provided_;
    uint64_t latest_step_ = 0;  // the latest step announced
    std::map<uint64_t, step_outputs> committed_;
    status closed_ = status::success();
    bool is_closed_ = false;
};

}  // namespace ds

// Where a rank inside a model worker (include/distsample/rank.h) meets its worker: the rank's
// actor announces each step and waits, bounded, for the worker's shard of its rows; the worker
// takes the announcements, hands in its shards and reads the outputs the group committed
// (docs/deployment.md, Ranks inside model workers). The worker's thread that hands a shard in
// also runs the rank's part of the step on it (kernels, collectives, the answer), so no thread
// wakes between the last shard and the answer. The rank core reaches it as its shard_supplier.
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
    using shard_work = shard_supplier::shard_work;

    // `spin` > 0: the rank polls that long for its worked step before its thread sleeps
    // (tuning.rank_spin_us), so a step worked on meanwhile costs the rank no thread wake-up.
    worker_handoff(int32_t rank, std::chrono::milliseconds logits_timeout,
                   std::chrono::microseconds spin = std::chrono::microseconds(0));

    // The rank's side (its actor's thread): announces `step`, waits up to logits_timeout for the
    // worker's shard, then until the worker's thread has run `work` on it; `work`'s status.
    status with_shard(const dist_step& step, const shard_work& work);
    void on_commit(const dist_step& step, const step_outputs& outputs);

    // The worker's side.
    status next_step(std::chrono::milliseconds wait, worker_step& out);
    // Hands in step `step_id`'s shard and runs the rank's part of the step on it, on this thread;
    // ok once the shard was taken (the step's own outcome comes from outputs()).
    status provide(uint64_t step_id, const logits_view& shard);
    status outputs(uint64_t step_id, std::chrono::milliseconds wait, step_outputs& out);

    // The rank has left the group: every wait ends with `why`.
    void close(status why);

   private:
    static constexpr size_t kKeptOutputs = 64;  // committed steps the worker may still ask for

    status check_shard(uint64_t step_id, const logits_view& shard) const;

    void spin_until_worked(uint64_t step_id) const;

    const int32_t rank_;
    const std::chrono::milliseconds logits_timeout_;
    const std::chrono::microseconds spin_;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<worker_step> announced_;  // not yet taken by next_step
    uint64_t waiting_for_ = 0;           // the step whose logits with_shard() waits for; 0: none
    int64_t expected_rows_ = 0;          // of the step waited for
    int32_t expected_vocab_ = 0;
    const shard_work* work_ = nullptr;     // of the step waited for, run by the worker's thread
    uint64_t taken_for_ = 0;               // the latest step whose shard the worker handed in
    std::atomic<uint64_t> worked_for_{0};  // ... and worked on: written under mutex_, polled without it
    status work_status_ = status::success();
    uint64_t latest_step_ = 0;  // the latest step announced
    std::map<uint64_t, step_outputs> committed_;
    status closed_ = status::success();
    bool is_closed_ = false;
};

}  // namespace ds

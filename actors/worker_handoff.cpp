#include "actors/worker_handoff.h"

#include <fmt/format.h>

namespace ds {

namespace {

worker_step describe(const dist_step& step, int32_t rank) {
    worker_step d;
    d.id = step.id;
    d.kind = step.kind;
    d.batch_size = step.plan.bs;
    d.tokens_per_req = step.plan.tokens_per_req;
    const auto bs = static_cast<size_t>(step.plan.bs);
    d.slots.assign(step.slots.begin(), step.slots.begin() + static_cast<std::ptrdiff_t>(bs));
    d.positions.assign(step.positions.begin(), step.positions.begin() + static_cast<std::ptrdiff_t>(bs));
    if (step.kind == step_kind::verify) {
        const size_t count = bs * static_cast<size_t>(step.plan.tokens_per_req);
        d.candidates.assign(step.candidates.begin(), step.candidates.begin() + static_cast<std::ptrdiff_t>(count));
    }
    d.vocab_begin = step.plan.vocab_begin(rank);
    d.shard_vocab = step.plan.shard_vocab;
    return d;
}

}  // namespace

worker_handoff::worker_handoff(int32_t rank, std::chrono::milliseconds logits_timeout, std::chrono::microseconds spin)
    : rank_(rank), logits_timeout_(logits_timeout), spin_(spin) {}

void worker_handoff::spin_until_worked(uint64_t step_id) const {
    const auto until = std::chrono::steady_clock::now() + spin_;
    while (worked_for_.load(std::memory_order_acquire) != step_id && std::chrono::steady_clock::now() < until) {
    }
}

status worker_handoff::check_shard(uint64_t step_id, const logits_view& shard) const {
    if (shard.data == nullptr || shard.rows != expected_rows_ || shard.vocab != expected_vocab_ ||
        shard.row_stride < shard.vocab) {
        return status::invalid(fmt::format(
            "rank {}: shard of step {}: {} rows of {} (row_stride {}{}): expected {} rows of shard_vocab = {}, "
            "row_stride >= shard_vocab",
            rank_, step_id, shard.rows, shard.vocab, shard.row_stride, shard.data == nullptr ? ", data = null" : "",
            expected_rows_, expected_vocab_));
    }
    return status::success();
}

status worker_handoff::with_shard(const dist_step& step, const shard_work& work) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (is_closed_) return closed_;
    announced_.push_back(describe(step, rank_));
    latest_step_ = step.id;
    waiting_for_ = step.id;
    expected_rows_ = int64_t{step.plan.bs} * step.plan.tokens_per_req;
    expected_vocab_ = step.plan.shard_vocab;
    work_ = &work;
    changed_.notify_all();
    if (spin_.count() > 0) {
        lock.unlock();
        spin_until_worked(step.id);
        lock.lock();
    }
    changed_.wait_for(lock, logits_timeout_, [&] { return is_closed_ || taken_for_ == step.id; });
    if (taken_for_ != step.id) {
        // Not taken: a late worker must not compute a step that has failed.
        waiting_for_ = 0;
        work_ = nullptr;
        if (is_closed_) return closed_;
        if (!announced_.empty() && announced_.back().id == step.id) announced_.pop_back();
        return {status_code::timeout,
                fmt::format("its worker did not hand in the logits of step {} within logits_timeout = {} ms", step.id,
                            logits_timeout_.count())};
    }
    // The worker's thread is working on the shard (provide). Not bounded here: the work's own
    // waits are (the transport's and the kernels' timeouts), and it holds references into this frame.
    changed_.wait(lock, [&] { return worked_for_.load(std::memory_order_relaxed) == step.id; });
    return work_status_;
}

void worker_handoff::on_commit(const dist_step& step, const step_outputs& outputs) {
    std::lock_guard<std::mutex> lock(mutex_);
    committed_[step.id] = outputs;
    while (committed_.size() > kKeptOutputs) committed_.erase(committed_.begin());
    changed_.notify_all();
}

status worker_handoff::next_step(std::chrono::milliseconds wait, worker_step& out) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, wait, [&] { return is_closed_ || !announced_.empty(); })) {
        return {status_code::timeout, fmt::format("rank {}: no step within {} ms", rank_, wait.count())};
    }
    if (announced_.empty()) return closed_;
    out = std::move(announced_.front());
    announced_.pop_front();
    return status::success();
}

status worker_handoff::provide(uint64_t step_id, const logits_view& shard) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (is_closed_) return closed_;
    if (waiting_for_ != step_id) {
        return status::invalid(fmt::format(
            "rank {}: step_id = {}: the rank is not waiting for its logits ({}; a step whose logits come after "
            "logits_timeout has failed)",
            rank_, step_id,
            waiting_for_ == 0 ? std::string("it waits for none") : fmt::format("it waits for step {}", waiting_for_)));
    }
    DS_TRY(check_shard(step_id, shard));
    waiting_for_ = 0;
    taken_for_ = step_id;
    const shard_work& work = *work_;
    lock.unlock();
    // This rank's part of the step, on the worker's thread: the rank's own thread waits meanwhile.
    status worked = work(shard);
    lock.lock();
    work_status_ = std::move(worked);
    work_ = nullptr;
    worked_for_.store(step_id, std::memory_order_release);
    changed_.notify_all();
    return status::success();
}

status worker_handoff::outputs(uint64_t step_id, std::chrono::milliseconds wait, step_outputs& out) {
    std::unique_lock<std::mutex> lock(mutex_);
    // A step is committed before the next one is announced (the coordinator runs them in order);
    // one that was not, failed.
    const auto settled = [&] { return is_closed_ || committed_.count(step_id) > 0 || latest_step_ > step_id; };
    if (!changed_.wait_for(lock, wait, settled)) {
        return {status_code::timeout,
                fmt::format("rank {}: step {} was not committed within {} ms", rank_, step_id, wait.count())};
    }
    const auto found = committed_.find(step_id);
    if (found != committed_.end()) {
        out = found->second;
        return status::success();
    }
    if (is_closed_) return closed_;
    return {status_code::aborted,
            fmt::format("rank {}: step {} was not committed: it failed (its scheduler got the error)", rank_, step_id)};
}

void worker_handoff::close(status why) {
    std::lock_guard<std::mutex> lock(mutex_);
    is_closed_ = true;
    closed_ =
        why.is_ok() ? status{status_code::aborted, fmt::format("rank {}: has left the group", rank_)} : std::move(why);
    changed_.notify_all();
}

}  // namespace ds

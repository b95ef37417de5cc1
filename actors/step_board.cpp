#include "actors/step_board.h"

#include <fmt/format.h>

#include <algorithm>

#include "actors/log.h"
#include "core/clock.h"

namespace ds {

step_outcome combine_rank_results(const dist_step& step, const std::vector<rank_result>& results, rank0_policy policy) {
    step_outcome o;
    const rank_result& reference = results[0];
    o.agreed = reference.outputs;
    for (const rank_result& r : results) {
        o.slowest.rank_step_ns = std::max(o.slowest.rank_step_ns, r.timing.rank_step_ns);
        o.slowest.rank_transport_ns = std::max(o.slowest.rank_transport_ns, r.timing.rank_transport_ns);
        o.slowest.rank_received_bytes = std::max(o.slowest.rank_received_bytes, r.timing.rank_received_bytes);
        o.slowest.rank_began_at_ns = std::max(o.slowest.rank_began_at_ns, r.timing.rank_began_at_ns);
        o.slowest.rank_answered_at_ns = std::max(o.slowest.rank_answered_at_ns, r.timing.rank_answered_at_ns);
        o.slowest.arrived_at_ns = std::max(o.slowest.arrived_at_ns, r.timing.arrived_at_ns);
        o.slowest.received_at_ns = std::max(o.slowest.received_at_ns, r.timing.received_at_ns);
        o.slowest.filed_at_ns = std::max(o.slowest.filed_at_ns, r.timing.filed_at_ns);
        o.rank_timing.push_back(r.timing);
        if (r.digest == reference.digest) continue;
        o.desyncs.push_back(
            desync_event{step.id, r.rank, r.outputs->first_difference(*reference.outputs, step.plan.tokens_per_req)});
    }
    if (!o.desyncs.empty() && policy == rank0_policy::never) {
        const desync_event& e = o.desyncs.front();
        o.failure = status{status_code::mismatch,
                           fmt::format("step {}: rank {} differs from rank 0 at request {} (rank-0 policy 'never')",
                                       e.step, e.rank, e.first_row)};
    }
    // always: every rank commits rank 0's outputs; on_mismatch: only after a desync, else their own.
    o.ship = policy == rank0_policy::always || !o.desyncs.empty();
    return o;
}

void desync_journal::record(const std::vector<desync_event>& events) {
    if (events.empty()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    events_.insert(events_.end(), events.begin(), events.end());
    while (events_.size() > kKeptDesyncEvents) events_.pop_front();
}

std::vector<desync_event> desync_journal::latest() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {events_.begin(), events_.end()};
}

step_board::step_board(std::shared_ptr<const dist_step> step, int32_t ranks, rank0_policy policy,
                       std::shared_ptr<step_reply_sink> caller, std::shared_ptr<desync_journal> journal,
                       const step_timeline& timeline)
    : step_(std::move(step)),
      ranks_(ranks),
      policy_(policy),
      caller_(std::move(caller)),
      journal_(std::move(journal)),
      timeline_(timeline),
      results_(static_cast<size_t>(ranks)),
      taken_(new std::atomic<bool>[static_cast<size_t>(ranks)]) {
    for (int32_t r = 0; r < ranks; ++r) taken_[static_cast<size_t>(r)].store(false, std::memory_order_relaxed);
}

void step_board::file(const rank_result& result, int64_t arrived_at_ns) {
    if (result.code != 0 || result.rank < 0 || result.rank >= ranks_) return;
    if (taken_[static_cast<size_t>(result.rank)].exchange(true, std::memory_order_acq_rel)) return;
    rank_result& kept = results_[static_cast<size_t>(result.rank)];
    kept = result;
    kept.timing.filed_at_ns = steady_now_ns();
    const int64_t arrived = arrived_at_ns > 0 ? arrived_at_ns : kept.timing.filed_at_ns;
    kept.timing.arrived_at_ns = arrived;
    int64_t latest = last_arrival_ns_.load(std::memory_order_relaxed);
    while (arrived > latest && !last_arrival_ns_.compare_exchange_weak(latest, arrived, std::memory_order_relaxed)) {
    }
    if (filed_.fetch_add(1, std::memory_order_acq_rel) + 1 == ranks_) settle();
}

bool step_board::claim_for_failure() {
    int expected = open;
    return claim_.compare_exchange_strong(expected, failed, std::memory_order_acq_rel);
}

void step_board::settle() {
    const int64_t complete_at_ns = steady_now_ns();
    int expected = open;
    if (!claim_.compare_exchange_strong(expected, settled, std::memory_order_acq_rel))
        return;  // failed by the coordinator
    step_outcome o = combine_rank_results(*step_, results_, policy_);
    for (const desync_event& e : o.desyncs) {
        coordinator_log().warn("desync in step {}: rank {} differs from rank 0 at request {}", e.step, e.rank,
                               e.first_row);
    }
    journal_->record(o.desyncs);
    const int64_t answered_at_ns = steady_now_ns();
    if (!caller_) return;
    if (!o.failure.is_ok()) {
        caller_->fail(o.failure);
        return;
    }
    step_reply r;
    r.step_id = step_->id;
    r.outputs = *o.agreed;
    r.desyncs = std::move(o.desyncs);
    r.timing = o.slowest;
    r.rank_timing = std::move(o.rank_timing);
    r.timeline = timeline_;
    r.timeline.result_arrived_at_ns = last_arrival_ns_.load(std::memory_order_relaxed);
    r.timeline.results_in_at_ns = complete_at_ns;
    r.timeline.answered_at_ns = answered_at_ns;
    r.timeline.delivered_at_ns = steady_now_ns();
    caller_->answer(std::move(r));
}

}  // namespace ds

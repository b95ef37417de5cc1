#include "actors/coordinator_actor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <utility>

#include "actors/log.h"
#include "actors/messages.h"
#include "actors/step_board.h"
#include "core/clock.h"
#include "kernels/validation.h"

namespace ds {

namespace {

// Where a job's answer goes: a CAF response promise (the gateway, remote clients, register and
// the other fan-outs) or, for a step from the library API, the caller's sink, which the step's
// board answers (actors/step_board.h).
struct reply_to {
    caf::response_promise promise;
    std::shared_ptr<step_reply_sink> sink;

    void fail(const status& why) {
        if (sink) {
            sink->fail(why);
        } else {
            promise.deliver(make_caf_error(why));
        }
    }
};

// One queued piece of work. Exactly one of request / reg / rel is used, per `what`.
struct job {
    enum class kind { step, reg, release, health } what = kind::step;
    std::shared_ptr<const step_request> request;
    register_msg reg;
    release_msg rel;
    reply_to reply;
    int64_t received_at_ns = 0;
};

struct coordinator_state {
    group_config config;
    logits_origin logits = logits_origin::in_step;
    std::vector<rank_actor_type> ranks;
    transport_group* transport = nullptr;
    std::deque<job> queue;
    bool busy = false;
    uint64_t next_step_id = 1;
    // The job in flight.
    uint64_t current_id = 0;
    std::shared_ptr<const dist_step> current_step;
    reply_to current_reply;
    std::shared_ptr<step_board> board;  // where the running step's results meet
    int32_t pending = 0;
    std::vector<bool> answered;  // by rank, for the running step
    // By rank: the running step's results as they came to this actor (over CAF); the board's may
    // still be being written by the answer lane's thread when the last of these arrives.
    std::vector<rank_result> results;
    std::chrono::steady_clock::time_point deadline;
    bool deadline_check_armed = false;
    step_timeline timeline;
    std::shared_ptr<desync_journal> journal = std::make_shared<desync_journal>();
    static inline const char* name = "distsample.coordinator";
};

using coordinator = coordinator_actor_type::stateful_base<coordinator_state>;

void pump(coordinator* self);

void finish_job(coordinator* self) {
    coordinator_state& st = self->state;
    st.busy = false;
    st.current_step.reset();
    st.current_reply = reply_to{};
    st.board.reset();
    st.pending = 0;
    pump(self);
}

result<step_plan> check_request(const group_config& config, logits_origin logits, const step_request& r) {
    const int32_t bs = r.batch_size();
    const int32_t n = r.kind == step_kind::sample ? 1 : r.tokens_per_req;
    if (r.kind == step_kind::sample && r.tokens_per_req != 1) {
        return status::invalid(fmt::format("tokens_per_req = {}: expected 1 for a sample step", r.tokens_per_req));
    }
    DS_TRY_ASSIGN(const step_plan plan, plan_step(config, bs, n));
    const size_t rows = static_cast<size_t>(bs) * static_cast<size_t>(n);
    auto sized = [](const auto& values, size_t expected, const char* field, bool optional) {
        if ((optional && values.empty()) || values.size() == expected) return status::success();
        return status::invalid(fmt::format("{}: expected {} entries, got {}", field, expected, values.size()));
    };
    for (const status& e :
         {sized(r.positions, static_cast<size_t>(bs), "positions", false),
          sized(r.candidates, r.kind == step_kind::verify ? rows : 0, "candidates", false),
          sized(r.bitmask, rows * static_cast<size_t>(bitmask_words(config.limits.vocab_size)), "bitmask", true),
          sized(r.coins, static_cast<size_t>(bs) * static_cast<size_t>(n - 1), "coins", true),
          sized(r.final_coins, static_cast<size_t>(bs), "final_coins", true)}) {
        if (!e.is_ok()) return e;
    }
    if (logits == logits_origin::made_by_ranks && !r.shards.empty()) {
        return status::invalid(
            fmt::format("shards: expected none, the ranks make their own logits (topology.logits_source), got {}",
                        r.shards.size()));
    }
    if (logits == logits_origin::in_step && r.shards.size() != static_cast<size_t>(config.distribution.tp)) {
        return status::invalid(fmt::format("shards: expected one logits view per rank ({}), got {}",
                                           config.distribution.tp, r.shards.size()));
    }
    for (size_t rank = 0; rank < r.shards.size(); ++rank) {
        const logits_view& v = r.shards[rank];
        if (v.data == nullptr)
            return status::invalid(fmt::format("shards[{}].data: expected a non-null pointer", rank));
        if (v.vocab != plan.shard_vocab)
            return status::invalid(
                fmt::format("shards[{}].vocab = {}: expected V / TP = {}", rank, v.vocab, plan.shard_vocab));
        if (static_cast<size_t>(v.rows) != rows)
            return status::invalid(
                fmt::format("shards[{}].rows = {}: expected batch_size * N = {}", rank, v.rows, rows));
        if (v.row_stride < v.vocab)
            return status::invalid(
                fmt::format("shards[{}].row_stride = {}: expected >= {}", rank, v.row_stride, v.vocab));
        if (v.dtype != r.shards[0].dtype)
            return status::invalid(fmt::format("shards[{}].dtype = {}: expected {} like shards[0]", rank,
                                               dtype_name(v.dtype), dtype_name(r.shards[0].dtype)));
    }
    // The kernels' own checks (slots, positions, candidates, coins, thresholds) over the full vocab.
    kernel_config limits;
    limits.vocab_size = config.limits.vocab_size;
    limits.max_slots = config.limits.max_slots;
    limits.max_batch = config.limits.max_batch;
    limits.max_tokens_per_req = config.limits.max_tokens_per_req;
    step_input in;
    // validate_step checks the logits' shape, not their values: without shards (the ranks make
    // the rows) it gets the shape of the rows the ranks will make.
    static const float no_logits = 0.0f;
    in.logits = r.shards.empty() ? logits_view{&no_logits, logits_dtype::f32, static_cast<int64_t>(rows),
                                               config.limits.vocab_size, config.limits.vocab_size}
                                 : logits_view{r.shards[0].data, r.shards[0].dtype, static_cast<int64_t>(rows),
                                               config.limits.vocab_size, config.limits.vocab_size};
    in.slots = r.slots.data();
    in.positions = r.positions.data();
    in.batch_size = bs;
    in.tokens_per_req = n;
    in.candidates = r.candidates.empty() ? nullptr : r.candidates.data();
    in.thresholds = r.thresholds;
    in.coins = r.coins.empty() ? nullptr : r.coins.data();
    in.final_coins = r.final_coins.empty() ? nullptr : r.final_coins.data();
    DS_TRY(validate_step(in, r.kind, limits));
    DS_TRY(check_distinct_slots(r.slots));
    return plan;
}

void complete_step(coordinator* self);

void fail_current(coordinator* self, const status& why) {
    coordinator_state& st = self->state;
    // Every rank's result was filed first: the step stands (its board answered a library caller).
    if (st.board && !st.board->claim_for_failure()) {
        complete_step(self);
        return;
    }
    if (st.current_step) coordinator_log().warn("{}", why.message);
    st.current_reply.fail(why);
    if (st.current_step) st.transport->abort(why.message);  // wake ranks still waiting in collectives
    finish_job(self);
}

// Every rank's result is on the board, which settled the step: answer a client that is not the
// library caller, then have the ranks commit (sent before the next job starts, so every rank
// commits before it runs the next step).
void complete_step(coordinator* self) {
    coordinator_state& st = self->state;
    const dist_step& step = *st.current_step;
    // A complete board's filings are all written (and visible here); an incomplete one means every
    // rank's result came here first (pending reached 0) while a filing of the lane's is under way.
    const std::vector<rank_result>& results = st.board->complete() ? st.board->results() : st.results;
    step_outcome o = combine_rank_results(step, results, st.config.distribution.policy);
    if (!st.current_reply.sink) {
        if (!o.failure.is_ok()) {
            st.current_reply.promise.deliver(make_caf_error(o.failure));
        } else {
            step_timeline timeline = st.timeline;
            timeline.result_arrived_at_ns = timeline.results_in_at_ns = timeline.answered_at_ns = steady_now_ns();
            st.current_reply.promise.deliver(
                step_answer{step.id, o.agreed, std::move(o.desyncs), o.slowest, std::move(o.rank_timing), timeline});
        }
    }
    if (o.failure.is_ok()) {
        for (const rank_actor_type& rank : st.ranks) self->send(rank, commit_msg{step.id, o.ship ? o.agreed : nullptr});
    }
    finish_job(self);
}

void on_rank_result(coordinator* self, uint64_t id, rank_result& r) {
    coordinator_state& st = self->state;
    if (!st.busy || id != st.current_id || !st.current_step) return;  // a late answer to a failed step
    if (r.code != 0) {
        // Named once: the transport's own messages already begin with the rank.
        const std::string rank = fmt::format("rank {}: ", r.rank);
        const bool named = r.message.rfind(rank, 0) == 0;
        fail_current(self, status{static_cast<status_code>(r.code),
                                  fmt::format("step {}: {}{}", id, named ? "" : rank, r.message)});
        return;
    }
    st.answered[static_cast<size_t>(r.rank)] = true;
    st.board->file(r);  // a no-op when the rank filed it itself, as it does before it answers
    st.results[static_cast<size_t>(r.rank)] = std::move(r);  // r is not read again
    if (--st.pending == 0) complete_step(self);
}

// "rank 1, rank 3": when some ranks wait in a collective, the ones they wait for; else `others`.
std::string culprit_names(coordinator_state& st, const std::vector<int32_t>& others) {
    std::vector<int32_t> culprits = st.transport->missing_ranks();
    if (culprits.empty()) culprits = others;
    std::string names;
    for (int32_t r : culprits) names += fmt::format("{}rank {}", names.empty() ? "" : ", ", r);
    return names;
}

// A rank's request failed (the rank is down, or refused the step).
void on_rank_error(coordinator* self, uint64_t id, int32_t rank, const caf::error& e) {
    coordinator_state& st = self->state;
    if (!st.busy || id != st.current_id) return;
    const std::string names = culprit_names(st, {rank});
    fail_current(self, to_status(e, fmt::format("step {}: {} did not answer within {} ms", id, names,
                                                st.config.distribution.step_timeout.count())));
}

// Step deadlines are watched by one periodic check while steps run, not by a timer per request to
// a rank: in CAF 0.17 every request timeout and every cancellation (its answer) is an event pushed
// to the clock thread, and a push that wakes that thread costs the sender a futex call, 2 * TP of
// them on the step's critical path. A step fails within its timeout plus one check period.
std::chrono::milliseconds deadline_check_period(std::chrono::milliseconds step_timeout) {
    return std::clamp(step_timeout / 20, std::chrono::milliseconds{1}, std::chrono::milliseconds{50});
}

void arm_deadline_check(coordinator* self) {
    coordinator_state& st = self->state;
    if (st.deadline_check_armed) return;
    st.deadline_check_armed = true;
    self->delayed_send(self, deadline_check_period(st.config.distribution.step_timeout), deadline_check_atom::value);
}

void check_deadline(coordinator* self) {
    coordinator_state& st = self->state;
    st.deadline_check_armed = false;
    if (!st.busy || !st.current_step) return;  // idle: the next step arms the check again
    if (std::chrono::steady_clock::now() < st.deadline) {
        arm_deadline_check(self);
        return;
    }
    std::vector<int32_t> silent;
    for (size_t r = 0; r < st.answered.size(); ++r) {
        if (!st.answered[r]) silent.push_back(static_cast<int32_t>(r));
    }
    const std::string names = culprit_names(st, silent);
    fail_current(
        self, status{status_code::timeout, fmt::format("step {}: {} did not answer within {} ms", st.current_id, names,
                                                       st.config.distribution.step_timeout.count())});
}

void start_step(coordinator* self, job& j) {
    coordinator_state& st = self->state;
    const uint64_t id = st.next_step_id++;
    result<step_plan> checked = check_request(st.config, st.logits, *j.request);
    if (!checked.is_ok()) {
        j.reply.fail(checked.error());
        return;
    }
    const step_plan& plan = *checked;
    st.busy = true;
    st.current_id = id;
    st.current_reply = std::move(j.reply);
    st.current_step =
        std::make_shared<const dist_step>(make_dist_step(id, *j.request, plan, st.config.limits.vocab_size));
    st.pending = static_cast<int32_t>(st.ranks.size());
    st.answered.assign(st.ranks.size(), false);
    st.results.assign(st.ranks.size(), rank_result{});
    st.deadline = std::chrono::steady_clock::now() + st.config.distribution.step_timeout;
    arm_deadline_check(self);
    st.transport->begin_epoch(id);  // no rank runs a step now: the last one finished or failed
    st.timeline = step_timeline{j.received_at_ns};
    st.timeline.dispatched_at_ns = steady_now_ns();
    st.board =
        std::make_shared<step_board>(st.current_step, static_cast<int32_t>(st.ranks.size()),
                                     st.config.distribution.policy, st.current_reply.sink, st.journal, st.timeline);
    for (size_t r = 0; r < st.ranks.size(); ++r) {
        const auto rank = static_cast<int32_t>(r);
        self->request(st.ranks[r], caf::infinite, step_msg{st.current_step, {}, st.board})
            .then([self, id](rank_result& result) { on_rank_result(self, id, result); },
                  [self, id, rank](caf::error& e) { on_rank_error(self, id, rank, e); });
    }
}

// Registration and release go to every rank; the first failure answers the job.
template <class Msg>
void start_fan_out(coordinator* self, job& j, const Msg& msg) {
    coordinator_state& st = self->state;
    st.busy = true;
    st.current_id = 0;
    st.current_reply = std::move(j.reply);
    st.pending = static_cast<int32_t>(st.ranks.size());
    for (size_t r = 0; r < st.ranks.size(); ++r) {
        const auto rank = static_cast<int32_t>(r);
        self->request(st.ranks[r], st.config.distribution.step_timeout, msg)
            .then(
                [self](op_ack&) {
                    if (--self->state.pending == 0) {
                        self->state.current_reply.promise.deliver(op_ack{0});
                        finish_job(self);
                    }
                },
                [self, rank](caf::error& e) {
                    if (!self->state.busy) return;
                    fail_current(self, to_status(e, fmt::format("rank {} did not answer within {} ms", rank,
                                                                self->state.config.distribution.step_timeout.count())));
                });
    }
}

void pump(coordinator* self) {
    coordinator_state& st = self->state;
    // Every rank filed its result, which settled the step: complete it now instead of after the
    // ranks' answers, which may still wait in the mailbox behind this next job.
    if (st.busy && st.board && st.board->complete() && !st.queue.empty()) {
        complete_step(self);  // and pumps
        return;
    }
    while (!st.busy && !st.queue.empty()) {
        job j = std::move(st.queue.front());
        st.queue.pop_front();
        switch (j.what) {
            case job::kind::step: start_step(self, j); break;
            case job::kind::reg: start_fan_out(self, j, j.reg); break;
            case job::kind::release: start_fan_out(self, j, j.rel); break;
            case job::kind::health: start_fan_out(self, j, health_msg{}); break;
        }
    }
}

coordinator_actor_type::behavior_type coordinator_actor(coordinator* self, group_config config,
                                                        std::vector<rank_actor_type> ranks, transport_group* transport,
                                                        logits_origin logits) {
    self->state.config = config;
    self->state.logits = logits;
    self->state.ranks = std::move(ranks);
    self->state.transport = transport;
    auto enqueue = [self](job j) {
        self->state.queue.push_back(std::move(j));
        pump(self);
    };
    return {
        [self, enqueue](submit_msg& m) -> caf::result<step_answer> {
            job j;
            j.what = job::kind::step;
            j.received_at_ns = steady_now_ns();
            j.request = std::move(m.request);
            j.reply.promise = self->make_response_promise();
            caf::response_promise promise = j.reply.promise;
            enqueue(std::move(j));
            return promise;
        },
        [enqueue](caller_submit_msg& m) {
            job j;
            j.what = job::kind::step;
            j.received_at_ns = steady_now_ns();
            j.request = std::move(m.request);
            j.reply.sink = std::move(m.reply);
            enqueue(std::move(j));
        },
        [self, enqueue](register_msg& m) -> caf::result<op_ack> {
            job j;
            j.what = job::kind::reg;
            j.reg = std::move(m);
            j.reply.promise = self->make_response_promise();
            caf::response_promise promise = j.reply.promise;
            enqueue(std::move(j));
            return promise;
        },
        [self, enqueue](release_msg& m) -> caf::result<op_ack> {
            job j;
            j.what = job::kind::release;
            j.rel = m;
            j.reply.promise = self->make_response_promise();
            caf::response_promise promise = j.reply.promise;
            enqueue(std::move(j));
            return promise;
        },
        [self, enqueue](health_msg&) -> caf::result<op_ack> {
            job j;
            j.what = job::kind::health;
            j.reply.promise = self->make_response_promise();
            caf::response_promise promise = j.reply.promise;
            enqueue(std::move(j));
            return promise;
        },
        [self](desync_query&) -> desync_log { return desync_log{self->state.journal->latest()}; },
        [self](deadline_check_atom) { check_deadline(self); },
        [self](fault_msg& m) -> caf::result<op_ack> {
            if (m.rank < 0 || static_cast<size_t>(m.rank) >= self->state.ranks.size()) {
                return make_caf_error(status::invalid(
                    fmt::format("rank = {}: expected a rank in [0, {})", m.rank, self->state.ranks.size())));
            }
            self->delegate(self->state.ranks[static_cast<size_t>(m.rank)], m);
            return caf::delegated<op_ack>{};
        },
    };
}

}  // namespace

coordinator_actor_type spawn_coordinator_actor(caf::actor_system& system, const group_config& config,
                                               std::vector<rank_actor_type> ranks, transport_group& transport,
                                               logits_origin logits) {
    return system.spawn(coordinator_actor, config, std::move(ranks), &transport, logits);
}

}  // namespace ds

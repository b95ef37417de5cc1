#include "actors/membership_actor.h"

#include <fmt/format.h>

#include <cstring>
#include <functional>
#include <map>
#include <utility>

#include "actors/answer_lane.h"
#include "actors/log.h"
#include "actors/messages.h"
#include "actors/step_board.h"
#include "transport/tcp_bootstrap.h"

namespace ds {

namespace {

// A call to a rank process (a step, a registration, ...), answered once: by its reply or timeout,
// or by `fail` when the rank's down_msg comes first.
struct pending_call {
    int32_t rank = 0;
    std::function<void(const status&)> fail;
};

struct membership_state {
    group_config config;
    std::string host;                         // where each epoch's rendezvous listens
    uint16_t rendezvous_port = 0;             // and on which port (0: any free one)
    std::vector<rank_actor_type> ranks;       // null until the rank joins
    std::vector<register_msg> registrations;  // by slot, replayed when the group forms
    fault_plan_msg faults;                    // every rank's plan, sent again when the group forms
    bool formed = false;
    bool forming = false;
    bool reform_requested = false;  // while forming: form again when done
    bool form_when_idle = false;    // form once no call is in flight
    uint64_t epoch = 0;
    std::map<uint64_t, pending_call> in_flight;
    uint64_t next_key = 0;
    std::shared_ptr<answer_lane> lane;  // where the ranks' answers may also come (null: CAF only)
    static inline const char* name = "distsample.membership";
};

using membership_actor = caf::stateful_actor<membership_state>;

rank_result failed_result(int32_t rank, uint64_t step_id, status_code code, std::string message) {
    rank_result r;
    r.rank = rank;
    r.step_id = step_id;
    r.code = static_cast<int32_t>(code);
    r.message = std::move(message);
    return r;
}

uint64_t track(membership_actor* self, int32_t rank, std::function<void(const status&)> fail) {
    const uint64_t key = self->state.next_key++;
    self->state.in_flight[key] = pending_call{rank, std::move(fail)};
    return key;
}

void try_form(membership_actor* self);

// A form deferred until every call in flight was answered (try_form) starts with the last answer.
void form_if_idle(membership_actor* self) {
    membership_state& st = self->state;
    if (!st.form_when_idle || !st.in_flight.empty()) return;
    st.form_when_idle = false;
    try_form(self);
}

// True once per call: the first of its reply and the rank's down_msg answers it.
bool untrack(membership_actor* self, uint64_t key) {
    if (self->state.in_flight.erase(key) == 0) return false;
    form_if_idle(self);
    return true;
}

// Why the group cannot run a step now, and the rank it names: the first one missing; else, with
// every rank present and a new epoch forming (after a failure), `rank` itself, which is not to
// blame: the reason says it waits.
std::pair<int32_t, std::string> not_formed(const membership_state& st, int32_t rank) {
    for (size_t r = 0; r < st.ranks.size(); ++r) {
        if (!st.ranks[r]) return {static_cast<int32_t>(r), "its rank process has not joined or is gone"};
    }
    return {rank,
            fmt::format("waits for the group to form (epoch {}; the failure before it names the cause)", st.epoch)};
}

// Copies rank `rank`'s shard rows (row stride = shard vocab) into the step's payload; nothing when
// the ranks make their own logits (no shards).
status copy_shard(const dist_step& step, int32_t rank, shard_payload& out) {
    if (step.shards.empty()) return status::success();
    const logits_view& v = step.shards[static_cast<size_t>(rank)];
    if (v.on_device) return {status_code::unsupported, "logits in device memory cannot be sent to a rank process"};
    const size_t row_bytes = static_cast<size_t>(v.vocab) * dtype_size(v.dtype);
    out.dtype = v.dtype;
    out.bytes.resize(row_bytes * static_cast<size_t>(v.rows));
    const auto* base = static_cast<const uint8_t*>(v.data);
    for (int64_t row = 0; row < v.rows; ++row) {
        std::memcpy(out.bytes.data() + static_cast<size_t>(row) * row_bytes,
                    base + static_cast<size_t>(row * v.row_stride) * dtype_size(v.dtype), row_bytes);
    }
    return status::success();
}

// The rendezvous blocks until every rank has arrived (bounded): a blocking actor, its own thread.
// (Arguments passed through spawn, not captured: CAF 0.17 dereferences a null argument tuple for
// an actor function without arguments, which UBSan rejects.)
void serve_rendezvous(caf::blocking_actor*, std::shared_ptr<tcp_rendezvous> rendezvous, int32_t tp,
                      std::chrono::milliseconds timeout, uint64_t epoch) {
    if (status s = rendezvous->serve(tp, timeout); !s.is_ok())
        coordinator_log().warn("rendezvous of epoch {}: {}", epoch, s.message);
}

void form_done(membership_actor* self, uint64_t epoch, const status& s) {
    membership_state& st = self->state;
    if (epoch != st.epoch) return;
    st.forming = false;
    st.formed = s.is_ok();
    if (s.is_ok()) {
        coordinator_log().info("remote group formed: {} ranks, epoch {}", st.config.distribution.tp, epoch);
    } else {
        coordinator_log().warn("forming the remote group (epoch {}) failed: {}", epoch, s.message);
    }
    if (st.reform_requested || !s.is_ok()) {
        st.reform_requested = false;
        // A failed attempt is retried after a pause; a rank still inside the failed bootstrap
        // takes the new form_msg when that one has timed out.
        if (s.is_ok()) {
            try_form(self);
        } else {
            self->delayed_send(self, std::chrono::milliseconds{200}, reform_atom::value);
        }
    }
}

// When every rank has joined: a new rendezvous (epoch), and every rank builds a new endpoint.
void try_form(membership_actor* self) {
    membership_state& st = self->state;
    if (st.forming) {
        st.reform_requested = true;
        return;
    }
    st.formed = false;
    // A rank still inside a failed step's collective must leave it before any peer closes its
    // endpoint: UCX 1.13 (tcp) aborts a process that handles a put or an acknowledgement on an
    // endpoint its peer has just closed. Every call is bounded by the step timeout.
    if (!st.in_flight.empty()) {
        st.form_when_idle = true;
        return;
    }
    for (const auto& rank : st.ranks) {
        if (!rank) return;
    }
    st.forming = true;
    const uint64_t epoch = ++st.epoch;
    auto rendezvous = std::make_shared<tcp_rendezvous>();
    if (status s = rendezvous->listen(st.host, st.rendezvous_port); !s.is_ok()) {
        form_done(self, epoch, s);
        return;
    }
    const std::chrono::milliseconds timeout = st.config.transport.timeout;
    // A rank may take the form_msg up to one transport timeout late (still inside the failed
    // step's collective), then needs up to one more to arrive: the rendezvous waits for both, as
    // long as the form requests below.
    self->spawn(serve_rendezvous, rendezvous, st.config.distribution.tp, 2 * timeout, epoch);
    std::vector<register_msg> live;
    for (const register_msg& r : st.registrations) {
        if (r.slot != 0) live.push_back(r);
    }
    const form_msg form{epoch,
                        st.host,
                        rendezvous->port(),
                        std::move(live),
                        st.lane ? st.lane->port() : uint16_t{0},
                        st.lane ? st.lane->secret() : 0,
                        st.lane ? st.lane->local_name() : std::string()};
    // The epoch is done when every rank has answered, also when one failed: a rank still inside
    // this epoch's bootstrap would miss the next epoch's rendezvous.
    struct form_answers {
        int32_t remaining;
        status first_failure;
    };
    auto answers = std::make_shared<form_answers>(form_answers{st.config.distribution.tp, status::success()});
    auto answered = [self, epoch, answers](const status& s) {
        if (!s.is_ok() && answers->first_failure.is_ok()) answers->first_failure = s;
        if (--answers->remaining > 0 || !self->state.forming || epoch != self->state.epoch)
            return;  // or given up already
        form_done(self, epoch, answers->first_failure);
    };
    for (int32_t r = 0; r < st.config.distribution.tp; ++r) {
        // Before the form_msg (one sender, so in order): a restarted process gets its plan back.
        // A plan the rank rejects was rejected when it was set, so the answer is only logged.
        self->request(st.ranks[static_cast<size_t>(r)], 2 * timeout, st.faults)
            .then([](op_ack&) {},
                  [r](caf::error& e) { coordinator_log().warn("rank {}: fault plan: {}", r, caf::to_string(e)); });
        self->request(st.ranks[static_cast<size_t>(r)], 2 * timeout, form)
            .then([answered](op_ack&) { answered(status::success()); },
                  [answered, epoch, r](caf::error& e) {
                      answered(to_status(e, fmt::format("rank {} did not form epoch {}", r, epoch)));
                  });
    }
}

void on_down(membership_actor* self, const caf::down_msg& d) {
    membership_state& st = self->state;
    for (size_t r = 0; r < st.ranks.size(); ++r) {
        if (!st.ranks[r] || st.ranks[r].address() != d.source) continue;
        const auto rank = static_cast<int32_t>(r);
        coordinator_log().warn("rank {}: its process is gone ({})", rank, caf::to_string(d.reason));
        st.ranks[r] = rank_actor_type{};
        st.formed = false;
        const status gone{status_code::aborted, fmt::format("the rank process is gone ({})", caf::to_string(d.reason))};
        // An epoch being formed with it cannot complete: give it up now rather than at its timeout.
        if (st.forming) form_done(self, st.epoch, status{gone.code, fmt::format("rank {}: {}", rank, gone.message)});
        for (auto it = st.in_flight.begin(); it != st.in_flight.end();) {
            if (it->second.rank != rank) {
                ++it;
                continue;
            }
            auto fail = std::move(it->second.fail);
            it = st.in_flight.erase(it);
            fail(gone);
        }
        form_if_idle(self);
    }
}

// Forwards a register / release / health message to rank `rank`'s process.
template <class Msg>
caf::result<op_ack> forward_op(membership_actor* self, int32_t rank, const Msg& msg) {
    membership_state& st = self->state;
    if (!st.formed) {
        const auto [culprit, reason] = not_formed(st, rank);
        return make_caf_error(status{status_code::aborted, fmt::format("rank {}: {}", culprit, reason)});
    }
    auto promise = self->make_response_promise();
    auto named = [rank](const status& why) {
        return make_caf_error(status{why.code, fmt::format("rank {}: {}", rank, why.message)});
    };
    const uint64_t key =
        track(self, rank, [promise, named](const status& why) mutable { promise.deliver(named(why)); });
    self->request(st.ranks[static_cast<size_t>(rank)], st.config.distribution.step_timeout, msg)
        .then(
            [self, key, promise](op_ack& a) mutable {
                if (untrack(self, key)) promise.deliver(a);
            },
            [self, key, promise](caf::error& e) mutable {
                if (untrack(self, key)) promise.deliver(e);
            });
    return caf::delegated<op_ack>{};
}

// Hands a step to rank `rank`'s process, with its shard rows when the coordinator has them, and
// its answer back as it came (filed on the step's board first, as rank threads do).
caf::result<rank_result> forward_step(membership_actor* self, int32_t rank, const step_msg& m) {
    membership_state& st = self->state;
    const uint64_t step_id = m.step->id;
    if (!st.formed) {
        const auto [culprit, reason] = not_formed(st, rank);
        return failed_result(culprit, step_id, status_code::aborted, reason);
    }
    step_msg msg{m.step, {}, nullptr};
    if (status c = copy_shard(*m.step, rank, msg.payload); !c.is_ok())
        return failed_result(rank, step_id, c.code, c.message);
    if (m.board && st.lane) st.lane->expect(m.board);
    auto promise = self->make_response_promise();
    const uint64_t key = track(self, rank, [promise, rank, step_id](const status& why) mutable {
        promise.deliver(failed_result(rank, step_id, why.code, why.message));
    });
    self->request(st.ranks[static_cast<size_t>(rank)], st.config.distribution.step_timeout, std::move(msg))
        .then(
            [self, key, promise, board = m.board](rank_result& result) mutable {
                if (!untrack(self, key)) return;
                if (board) board->file(result);
                promise.deliver(std::move(result));
            },
            [self, key, promise, rank, step_id](caf::error& e) mutable {
                if (!untrack(self, key)) return;
                const status why = to_status(e, fmt::format("did not answer within {} ms",
                                                            self->state.config.distribution.step_timeout.count()));
                promise.deliver(failed_result(rank, step_id, why.code, why.message));
            });
    return caf::delegated<rank_result>{};
}

caf::behavior membership_behavior(membership_actor* self, group_config config, std::string host,
                                  uint16_t rendezvous_port, std::shared_ptr<answer_lane> lane) {
    membership_state& st = self->state;
    st.config = config;
    st.lane = std::move(lane);
    st.host = std::move(host);
    st.rendezvous_port = rendezvous_port;
    st.faults = fault_plan_msg{std::make_shared<const fault_plan>(config.faults)};
    st.ranks.resize(static_cast<size_t>(config.distribution.tp));
    st.registrations.resize(static_cast<size_t>(config.limits.max_slots));
    self->set_down_handler([self](caf::down_msg& d) { on_down(self, d); });
    return {
        [self](join_msg& m) -> caf::result<op_ack> {
            membership_state& s = self->state;
            if (m.rank < 0 || m.rank >= s.config.distribution.tp) {
                return make_caf_error(status::invalid(
                    fmt::format("rank = {}: expected a rank in [0, {})", m.rank, s.config.distribution.tp)));
            }
            if (m.tp != s.config.distribution.tp)
                return make_caf_error(status::invalid(
                    fmt::format("tp = {}: the coordinator has tp = {}", m.tp, s.config.distribution.tp)));
            if (m.vocab_size != s.config.limits.vocab_size) {
                return make_caf_error(status::invalid(fmt::format(
                    "vocab_size = {}: the coordinator has vocab_size = {}", m.vocab_size, s.config.limits.vocab_size)));
            }
            if (m.mode != s.config.distribution.mode) {
                return make_caf_error(
                    status::invalid(fmt::format("mode = {}: the coordinator has mode = {}", mode_name(m.mode),
                                                mode_name(s.config.distribution.mode))));
            }
            auto handle = caf::actor_cast<rank_actor_type>(m.handle);
            if (!handle)
                return make_caf_error(status::invalid(fmt::format("rank {}: joined without an actor", m.rank)));
            auto& slot = s.ranks[static_cast<size_t>(m.rank)];
            if (slot) self->demonitor(slot.address());
            slot = handle;
            self->monitor(handle);
            coordinator_log().info("rank {} joined from {}", m.rank, caf::to_string(handle.node()));
            try_form(self);
            return op_ack{m.rank};
        },
        [self](reform_atom) { try_form(self); },
        [self](int32_t rank, step_msg& m) -> caf::result<rank_result> { return forward_step(self, rank, m); },
        [self](int32_t rank, commit_msg& m) {
            if (self->state.formed) self->send(self->state.ranks[static_cast<size_t>(rank)], std::move(m));
        },
        [self](int32_t rank, register_msg& m) -> caf::result<op_ack> {
            if (m.slot > 0 && m.slot < self->state.config.limits.max_slots)
                self->state.registrations[static_cast<size_t>(m.slot)] = m;
            return forward_op(self, rank, m);
        },
        [self](int32_t rank, release_msg& m) -> caf::result<op_ack> {
            if (m.slot > 0 && m.slot < self->state.config.limits.max_slots)
                self->state.registrations[static_cast<size_t>(m.slot)] = register_msg{};
            return forward_op(self, rank, m);
        },
        [self](int32_t rank, health_msg& m) -> caf::result<op_ack> { return forward_op(self, rank, m); },
        [self](int32_t rank, fault_msg& m) -> caf::result<op_ack> { return forward_op(self, rank, m); },
        // Every rank gets the same plan; one that is not formed takes it when the group forms.
        [self](int32_t rank, fault_plan_msg& m) -> caf::result<op_ack> {
            self->state.faults = m;
            if (!self->state.formed) return op_ack{rank};
            return forward_op(self, rank, m);
        },
    };
}

}  // namespace

caf::actor spawn_membership_actor(caf::actor_system& system, const group_config& config, const std::string& host,
                                  uint16_t rendezvous_port, std::shared_ptr<answer_lane> lane) {
    return system.spawn(membership_behavior, config, host, rendezvous_port, std::move(lane));
}

}  // namespace ds

#include "actors/rank_actor.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <vector>

#include "actors/answer_lane.h"
#include "actors/deliver_again.h"
#include "actors/log.h"
#include "actors/step_board.h"
#include "core/clock.h"
#include "transport/tcp_bootstrap.h"
#include "transport/transport_factory.h"

namespace ds {

namespace {

struct rank_state {
    std::shared_ptr<rank_core> core;
    std::vector<caf::response_promise> unanswered;  // steps a hang swallowed; dropped at the next form
    std::unique_ptr<answer_sender> lane;            // a rank process's answer lane of this epoch, or none
    static inline const char* name = "distsample.rank";
};

using rank_actor_pointer = rank_actor_type::stateful_pointer<rank_state>;

// Polls the mailbox until a message is there or `spin` has passed (group_config::rank_spin_us), so
// that the next step's message, sent meanwhile, is taken without a thread wake-up.
void poll_mailbox(rank_actor_pointer self, std::chrono::microseconds spin) {
    if (spin.count() == 0) return;
    const auto until = std::chrono::steady_clock::now() + spin;
    while (self->mailbox().empty() && std::chrono::steady_clock::now() < until) {
    }
}

caf::result<op_ack> ack(int32_t rank, const status& s) {
    if (!s.is_ok()) return make_caf_error(status{s.code, fmt::format("rank {}: {}", rank, s.message)});
    return op_ack{rank};
}

// A rank process's answer lane of a new epoch. Without one (the coordinator offers none, or it
// cannot be reached) the rank answers over CAF alone, only slower: the failure is logged.
std::unique_ptr<answer_sender> connect_answer_lane(const rank_core& core, const form_msg& m) {
    std::unique_ptr<answer_sender> lane;
    if (m.answer_port == 0) return lane;
    if (status s = answer_sender::connect({m.host, m.answer_port, m.answer_secret, m.answer_local}, core.rank(),
                                          core.config().transport.timeout, lane);
        !s.is_ok())
        rank_log().warn("rank {}: {}; answers go over CAF only", core.rank(), s.message);
    return lane;
}

// Sends a successful result on the answer lane; a lane that fails is dropped until the next epoch.
void answer_on_lane(rank_state& st, const rank_result& result) {
    if (!st.lane || result.code != 0 || !result.outputs) return;
    if (status s = st.lane->send(result); !s.is_ok()) {
        rank_log().warn("rank {}: answer lane: {}; answers go over CAF only", result.rank, s.message);
        st.lane.reset();
    }
}

// A rank process's endpoint of a new epoch, through the epoch's rendezvous, and the registrations.
status form(rank_core& core, const form_msg& m) {
    const group_config& config = core.config();
    tcp_bootstrap boot(m.host, m.port, core.rank(), config.distribution.tp, config.transport.timeout);
    core.detach();  // the old endpoint closes before the new one is built
    std::unique_ptr<transport> endpoint;
    DS_TRY(make_rank_transport(config.transport.kind, rank_transport_config(config), rank_ucx_options(config), boot,
                               endpoint));
    DS_TRY(core.attach(std::move(endpoint)));
    for (const register_msg& r : m.registrations) DS_TRY(core.register_request(r.slot, r.params, r.history));
    return status::success();
}

caf::result<rank_result> on_step(rank_actor_pointer self, step_msg& m, std::chrono::microseconds spin) {
    const int64_t began_at_ns = steady_now_ns();
    rank_core& core = *self->state.core;
    const int32_t rank = core.rank();
    const step_admission a = core.admit(m.step->id);
    if (!a.refusal.is_ok()) {
        rank_log().warn("rank {}: {}: refused", rank, a.refusal.message);
        return make_caf_error(status{a.refusal.code, fmt::format("rank {}: {}", rank, a.refusal.message)});
    }
    if (a.crash) {
        rank_log().warn("rank {}: fault plan: crash at step {}", rank, m.step->id);
        rank_log().flush();
        ::_exit(3);
    }
    // A dropped message never reached the rank: no promise is kept, nothing answers.
    if (a.drop) return caf::delegated<rank_result>{};
    if (a.deliver_again) deliver_again(self, m);
    // Filed on the step's board and sent on the answer lane first, by the thread that made the
    // result (for a rank inside a model worker, the worker's: rank_core::run): the last rank to
    // file answers a library caller itself (step_board.h), in this process directly and from a
    // rank process over the answer lane. CAF's answer follows for the coordinator.
    bool answered_early = false;
    auto answer_early = [&](rank_result& result) {
        if (!a.answer) return;
        result.timing.rank_began_at_ns = began_at_ns;
        result.timing.rank_answered_at_ns = steady_now_ns();
        if (m.board) m.board->file(result);
        answer_on_lane(self->state, result);
        answered_early = true;
    };
    rank_result result;
    if (a.run) result = core.run(m.step, m.payload, a, answer_early);
    if (!a.answer) {
        rank_log().warn("rank {}: fault plan: hang at step {} (not answered)", rank, m.step->id);
        self->state.unanswered.push_back(self->make_response_promise());
        return caf::delegated<rank_result>{};
    }
    if (!answered_early) answer_early(result);
    // Answered now, so that the rank can poll for the coordinator's next message.
    self->make_response_promise<rank_result>().deliver(std::move(result));
    poll_mailbox(self, spin);
    return caf::delegated<rank_result>{};
}

rank_actor_type::behavior_type rank_actor(rank_actor_pointer self, std::shared_ptr<rank_core> core) {
    self->state.core = std::move(core);
    const int32_t rank = self->state.core->rank();
    const std::chrono::microseconds spin{self->state.core->config().tuning.rank_spin_us};
    return {
        [self, rank](form_msg& m) -> caf::result<op_ack> {
            self->state.unanswered.clear();  // the coordinator gave up on them before it formed a new epoch
            self->state.lane.reset();
            status s = form(*self->state.core, m);
            if (s.is_ok()) self->state.lane = connect_answer_lane(*self->state.core, m);
            if (s.is_ok()) rank_log().info("rank {}: formed epoch {}", rank, m.epoch);
            return ack(rank, s.is_ok() ? s : status{s.code, fmt::format("epoch {}: {}", m.epoch, s.message)});
        },
        [self, rank](register_msg& m) -> caf::result<op_ack> {
            return ack(rank, self->state.core->register_request(m.slot, m.params, m.history));
        },
        [self, rank](release_msg& m) -> caf::result<op_ack> { return ack(rank, self->state.core->release(m.slot)); },
        [self, rank](health_msg&) -> caf::result<op_ack> { return ack(rank, self->state.core->health()); },
        [self, rank](fault_msg& m) -> caf::result<op_ack> {
            self->state.core->set_hook(m.fault);
            return op_ack{rank};
        },
        [self, rank](fault_plan_msg& m) -> caf::result<op_ack> {
            self->state.core->set_fault_plan(m.plan);
            return op_ack{rank};
        },
        [self, spin](step_msg& m) -> caf::result<rank_result> { return on_step(self, m, spin); },
        [self, rank, spin](commit_msg& m) {
            status s = self->state.core->commit(m.step_id, m.agreed.get());
            if (!s.is_ok()) rank_log().error("rank {}: commit of step {} failed: {}", rank, m.step_id, s.message);
            poll_mailbox(self, spin);
        },
    };
}

}  // namespace

rank_actor_type spawn_rank_actor(caf::actor_system& system, std::shared_ptr<rank_core> core) {
    return system.spawn<caf::detached>(rank_actor, std::move(core));
}

}  // namespace ds

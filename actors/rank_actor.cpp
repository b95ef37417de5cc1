#include "actors/rank_actor.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <vector>

#include "actors/deliver_again.h"
#include "actors/log.h"
#include "actors/messages.h"
#include "actors/rank_engine.h"
#include "actors/step_board.h"
#include "config/fault_plan.h"
#include "core/clock.h"
#include "transport/faulty_transport.h"

namespace ds {

namespace {

const fault_plan no_faults;

struct rank_state {
    std::shared_ptr<wakeable_sleep> delays;
    std::unique_ptr<faulty_transport> endpoint;  // declared first: the engine uses it
    std::unique_ptr<rank_engine> engine;
    transport_group* transport = nullptr;
    rank_fault fault = rank_fault::none;
    std::shared_ptr<const fault_plan> plan;
    std::shared_ptr<const step_outputs> last_outputs;  // committed when the coordinator says "your own"
    std::vector<caf::response_promise> unanswered;     // steps swallowed by the stall hook or a hang fault
    uint64_t last_step = 0;                            // the latest step id this rank received
    static inline const char* name = "distsample.rank";
};

// Polls the mailbox until a message is there or `spin` has passed (group_config::rank_spin_us), so
// that the next step's message, sent meanwhile, is taken without a thread wake-up.
template <class Self>
void poll_mailbox(Self* self, std::chrono::microseconds spin) {
    if (spin.count() == 0) return;
    const auto until = std::chrono::steady_clock::now() + spin;
    while (self->mailbox().empty() && std::chrono::steady_clock::now() < until) {
    }
}

rank_actor_type::behavior_type rank_actor(rank_actor_type::stateful_pointer<rank_state> self, group_config config,
                                          int32_t rank, transport_group* transport,
                                          std::shared_ptr<wakeable_sleep> delays) {
    self->state.transport = transport;
    self->state.delays = delays;
    self->state.endpoint = std::make_unique<faulty_transport>(
        transport->endpoint(rank), config.transport.payload_checksums, config.transport.timeout, std::move(delays));
    self->state.engine = std::make_unique<rank_engine>(config, rank, *self->state.endpoint);
    const std::chrono::milliseconds drop_wait = drop_put_wait(config);
    const std::chrono::microseconds spin{config.tuning.rank_spin_us};
    auto ack = [self, rank](const status& s) -> caf::result<op_ack> {
        if (!s.is_ok()) return make_caf_error(status{s.code, fmt::format("rank {}: {}", rank, s.message)});
        return op_ack{rank};
    };
    return {
        [self, ack](register_msg& m) -> caf::result<op_ack> {
            return ack(self->state.engine->register_request(m.slot, m.params, m.history));
        },
        [self, ack](release_msg& m) -> caf::result<op_ack> { return ack(self->state.engine->release(m.slot)); },
        [self, ack](health_msg&) -> caf::result<op_ack> { return ack(self->state.engine->init_status()); },
        [self, rank](fault_msg& m) -> caf::result<op_ack> {
            self->state.fault = m.fault;
            return op_ack{rank};
        },
        [self, rank](fault_plan_msg& m) -> caf::result<op_ack> {
            self->state.plan = m.plan;
            return op_ack{rank};
        },
        [self, rank, vocab = config.limits.vocab_size, drop_wait, spin](run_step_msg& m) -> caf::result<rank_result> {
            const int64_t began_at_ns = steady_now_ns();
            rank_state& st = self->state;
            if (m.step->id <= st.last_step) return repeated_step(rank, m.step->id, st.last_step);
            st.last_step = m.step->id;
            const uint64_t plan_epoch = st.delays->epoch();  // before the plan: a later one wakes its delays
            const fault_plan& plan = st.plan ? *st.plan : no_faults;
            const rank_step_faults faults = faults_at(plan, rank, m.step->id);
            const rank_fault hook = st.fault;  // the test hooks fire once
            st.fault = rank_fault::none;
            if (hook == rank_fault::stall || faults.hang) {
                st.unanswered.push_back(self->make_response_promise());
                return caf::delegated<rank_result>{};
            }
            // A dropped message never reached the rank: no promise is kept, nothing answers.
            if (faults.drop_control) return caf::delegated<rank_result>{};
            if (faults.duplicate_control) deliver_again(self, m);
            st.transport->enter_epoch(rank, m.step->id);
            // Armed before the kernel delay, so that the endpoint counts it in how late the rank is.
            st.endpoint->arm(transport_faults_at(plan, faults, rank, st.endpoint->world_size(), m.step->id, drop_wait),
                             plan_epoch);
            if (faults.kernel_delay_ms > 0)
                st.delays->sleep_for(std::chrono::milliseconds(faults.kernel_delay_ms), plan_epoch);
            auto outputs = std::make_shared<step_outputs>();
            status s = st.engine->run(*m.step, *outputs);
            if (s.is_ok()) {
                alter_outputs(hook == rank_fault::alter_token || faults.alter_token, faults.alter_accept_length, vocab,
                              m.step->plan.tokens_per_req, *outputs);
            }
            rank_result result;
            result.rank = rank;
            result.step_id = m.step->id;
            result.code = static_cast<int32_t>(s.code);
            result.message = s.message;
            result.timing = step_timing{st.engine->last_run_ns(), st.engine->last_transport_ns(),
                                        st.engine->last_received_bytes(), began_at_ns, 0};
            if (s.is_ok()) {
                result.digest = outputs->digest();
                result.outputs = outputs;
                st.last_outputs = outputs;
            }
            // Answered now, so that the rank can poll for the coordinator's next message. Filed
            // first: the last rank to file answers a library caller itself (step_board.h).
            result.timing.rank_answered_at_ns = steady_now_ns();
            if (m.board) m.board->file(result);
            self->make_response_promise<rank_result>().deliver(std::move(result));
            poll_mailbox(self, spin);
            return caf::delegated<rank_result>{};
        },
        [self, spin](commit_msg& m) {
            rank_state& st = self->state;
            const std::shared_ptr<const step_outputs> agreed = m.agreed ? m.agreed : st.last_outputs;
            if (!agreed) return;
            status s = st.engine->commit(*m.step, *agreed);
            if (!s.is_ok())
                rank_log().error("rank {}: commit of step {} failed: {}", st.engine->rank(), m.step->id, s.message);
            poll_mailbox(self, spin);
        },
    };
}

}  // namespace

rank_actor_type spawn_rank_actor(caf::actor_system& system, const group_config& config, int32_t rank,
                                 transport_group& transport, std::shared_ptr<wakeable_sleep> delays) {
    return system.spawn<caf::detached>(rank_actor, config, rank, &transport, std::move(delays));
}

}  // namespace ds

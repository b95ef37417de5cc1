// The embedding API (include/distsample/group.h) over the actors: an actor system, the transport
// group the configuration names (transport_factory.h), TP rank actors and a coordinator; or, for
// rank processes, the membership actor and its stand-ins (actors/remote_ranks.h) in place of the
// rank actors and the transport. A step goes straight to the coordinator, which fulfils the
// caller's future itself (step_reply_sink).
#include <distsample/group.h>
#include <distsample/testing.h>

#include <fmt/format.h>

#include <thread>

#include "actors/answer_lane.h"
#include "actors/coordinator_actor.h"
#include "actors/messages.h"
#include "actors/rank_actor.h"
#include "actors/rank_core.h"
#include "actors/rank_engine.h"
#include "actors/remote_ranks.h"
#include "config/capacity.h"
#include "config/topology_config.h"
#include "transport/transport_factory.h"

namespace ds {

namespace {

// Extra time a blocking call waits beyond the coordinator's own step timeout, which always
// answers first; this only guards against a coordinator that is gone.
constexpr std::chrono::seconds kReplyMargin{5};

// How often wait_for_ranks asks: each ask fails fast while the group is incomplete.
constexpr std::chrono::milliseconds kRankPollPeriod{50};

}  // namespace

struct group::impl {
    group_config config;
    // Declared before the actor system, so it outlives the rank threads the system joins.
    std::unique_ptr<transport_group> transport;
    caf::actor_system_config system_config;
    caf::actor_system system;
    std::vector<rank_actor_type> ranks;  // the rank actors, or the rank processes' stand-ins
    caf::actor membership;               // rank processes only: who joined, and the epochs
    uint16_t rank_port = 0;              // rank processes only: where they join
    logits_origin logits = logits_origin::in_step;
    coordinator_actor_type coordinator;
    std::shared_ptr<answer_lane> lane;  // rank processes' answers, read by a waiting caller (null: none)
    std::shared_ptr<wakeable_sleep> fault_delays = std::make_shared<wakeable_sleep>();  // the ranks' injected delays

    // Rank threads.
    impl(const group_config& c, std::unique_ptr<transport_group> t)
        : config(c), transport(std::move(t)), system(configure_actor_system(system_config, c.tuning.scheduler())) {}
    // Rank processes: the middleman, with the topology's heartbeat and connection timeout.
    impl(const group_config& c, const topology_config& topology)
        : config(c), system(configure_remote_actor_system(system_config, topology, c.tuning.scheduler())) {}

    // Sends `msg` to the coordinator and waits for its answer (bounded).
    template <class Answer, class Msg>
    status ask(Msg msg, Answer& answer) {
        caf::scoped_actor self{system};
        status result;
        self->request(coordinator, config.distribution.step_timeout + kReplyMargin, std::move(msg))
            .receive([&](Answer& a) { answer = std::move(a); },
                     [&](caf::error& e) { result = to_status(e, "coordinator"); });
        return result;
    }
};

status group::create(const group_config& config, std::unique_ptr<group>& out) {
    DS_TRY(validate_group_config(config));
    DS_TRY(check_memory_budget(config, config.distribution.tp));  // every rank lives in this process
    const transport_config t = rank_transport_config(config);
    DS_TRY(t.validate());
    std::unique_ptr<transport_group> transport;
    DS_TRY(make_transport_group(config.transport.kind, t, rank_ucx_options(config), transport));
    auto state = std::make_unique<impl>(config, std::move(transport));
    for (int32_t r = 0; r < config.distribution.tp; ++r) {
        auto core = std::make_shared<rank_core>(config, r, rank_host::thread, state->fault_delays);
        // A backend that cannot be built is reported by the health check below, naming the rank.
        (void)core->attach(*state->transport);
        state->ranks.push_back(spawn_rank_actor(state->system, std::move(core)));
    }
    state->coordinator = spawn_coordinator_actor(state->system, config, state->ranks, *state->transport);
    out.reset(new group(std::move(state)));
    // Building a rank's backend can fail (e.g. cuda not built): say so now, naming the rank.
    status s = out->health();
    if (s.is_ok() && !config.faults.empty()) s = out->set_fault_plan(config.faults);
    return s;
}

status group::create_with_rank_processes(const group_config& config, const topology_config& topology,
                                         const std::string& host, uint16_t port, std::unique_ptr<group>& out) {
    DS_TRY(validate_group_config(config));
    DS_TRY(validate_topology_config(topology, config.distribution.tp));
    // One rank's buffers must fit a host: the rank processes check it on theirs, and so does this one for them.
    DS_TRY(check_memory_budget(config, 1));
    auto state = std::make_unique<impl>(config, topology);
    remote_ranks remote;
    DS_TRY(publish_remote_ranks(state->system, config, host, port, remote, topology));
    state->transport = std::move(remote.transport);
    state->ranks = std::move(remote.proxies);
    state->membership = std::move(remote.membership);
    state->rank_port = remote.port;
    state->lane = std::move(remote.lane);
    state->logits = topology.ranks_make_logits() ? logits_origin::made_by_ranks : logits_origin::in_step;
    state->coordinator = spawn_coordinator_actor(state->system, config, state->ranks, *state->transport, state->logits);
    out.reset(new group(std::move(state)));
    return status::success();
}

group::group(std::unique_ptr<impl> state) : impl_(std::move(state)) {}

group::~group() {
    // Wake rank threads blocked in a collective, then stop every actor; the actor system joins
    // them. Rank processes are left to notice the coordinator gone: their transport's abort would
    // re-form the group (a new epoch and a rendezvous the shutdown would then wait out).
    if (!impl_->membership) impl_->transport->abort("group shut down");
    caf::anon_send_exit(impl_->coordinator, caf::exit_reason::user_shutdown);
    for (const rank_actor_type& rank : impl_->ranks) caf::anon_send_exit(rank, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(impl_->membership, caf::exit_reason::user_shutdown);  // null for rank threads
}

const group_config& group::config() const { return impl_->config; }

uint16_t group::rank_port() const { return impl_->rank_port; }

bool group::ranks_make_logits() const { return impl_->logits == logits_origin::made_by_ranks; }

status group::wait_for_ranks(std::chrono::milliseconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    for (;;) {
        const status s = health();
        if (s.is_ok()) return s;
        if (std::chrono::steady_clock::now() >= deadline)
            return {status_code::timeout, fmt::format("the group did not form in time ({})", s.message)};
        std::this_thread::sleep_for(kRankPollPeriod);
    }
}

status group::register_request(int32_t slot, const sampling_params& params, const std::vector<int32_t>& history) {
    op_ack ack;
    return impl_->ask(register_msg{slot, params, history}, ack);
}

status group::release(int32_t slot) {
    op_ack ack;
    return impl_->ask(release_msg{slot}, ack);
}

std::future<step_reply> group::submit(step_request step) {
    auto sink = std::make_shared<step_reply_sink>();
    std::future<step_reply> future = sink->future();
    if (impl_->lane) sink->on_answer(impl_->lane->nudger());  // a caller reading the lane looks again
    // High priority: taken before the previous step's rank answers still in the coordinator's
    // mailbox (the step's board has answered the caller already). Steps keep their order among
    // themselves; registrations are waited for (ask), so a step never overtakes one.
    caf::anon_send<caf::message_priority::high>(
        impl_->coordinator, caller_submit_msg{std::make_shared<const step_request>(std::move(step)), std::move(sink)});
    return future;
}

step_reply group::wait(std::future<step_reply>& reply) {
    auto ready = [&reply] { return reply.wait_for(std::chrono::seconds(0)) == std::future_status::ready; };
    const auto now = std::chrono::steady_clock::now();
    // Polling first spares the wake-up of a thread asleep (on the lane, or on the future) when the
    // answer is near.
    const auto poll_until = now + std::chrono::microseconds(impl_->config.tuning.reply_spin_us);
    // The coordinator answers within its step timeout; the margin only guards against one that is gone.
    if (impl_->lane)
        impl_->lane->read_until(ready, now + impl_->config.distribution.step_timeout + kReplyMargin, poll_until);
    while (std::chrono::steady_clock::now() < poll_until && !ready()) {
    }
    return reply.get();
}

step_reply group::step(step_request step) {
    std::future<step_reply> reply = submit(std::move(step));
    return wait(reply);
}

status group::health() {
    op_ack ack;
    return impl_->ask(health_msg{}, ack);
}

std::vector<desync_event> group::desync_events() {
    desync_log log;
    status s = impl_->ask(desync_query{}, log);
    return s.is_ok() ? log.events : std::vector<desync_event>{};
}

status testing::inject_fault(group& g, int32_t rank, rank_fault fault) {
    op_ack ack;
    return g.impl_->ask(fault_msg{rank, fault}, ack);
}

status group::set_fault_plan(const fault_plan& plan) {
    DS_TRY(validate_fault_plan(plan, impl_->config.distribution.tp));
    const fault_plan_msg msg{std::make_shared<const fault_plan>(plan)};
    // A rank asleep in a delay of the old plan would take its new plan only when it wakes.
    impl_->fault_delays->wake_all();
    // Straight to the ranks and waiting for all of them: a step submitted after this returns
    // reaches every rank after its new plan.
    caf::scoped_actor self{impl_->system};
    status result;
    for (const rank_actor_type& rank : impl_->ranks) {
        self->request(rank, impl_->config.distribution.step_timeout, msg)
            .receive([](op_ack&) {},
                     [&](caf::error& e) {
                         if (result.is_ok()) result = to_status(e, "a rank did not take its fault plan");
                     });
    }
    return result;
}

}  // namespace ds

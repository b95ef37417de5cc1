#include "actors/remote_ranks.h"

#include <fmt/format.h>
#include <caf/io/all.hpp>

#include <stdexcept>
#include <utility>

#include "actors/answer_lane.h"
#include "actors/forwarding.h"
#include "actors/membership_actor.h"

namespace ds {

namespace {

// Rank r's stand-in for the coordinator: hands each message to the membership actor with r.
rank_actor_type::behavior_type rank_proxy(rank_actor_type::pointer self, caf::actor members, int32_t rank) {
    auto forward = [self, members, rank](auto& msg) { return self->delegate(members, rank, std::move(msg)); };
    return {
        [rank](form_msg&) -> caf::result<op_ack> {
            return make_caf_error(
                status{status_code::unsupported, fmt::format("rank {}: the membership actor forms the group", rank)});
        },
        forwarding<register_msg, op_ack>(forward),
        forwarding<release_msg, op_ack>(forward),
        forwarding<health_msg, op_ack>(forward),
        forwarding<fault_msg, op_ack>(forward),
        forwarding<fault_plan_msg, op_ack>(forward),
        forwarding<step_msg, rank_result>(forward),
        // A typed actor may not send() to a dynamically typed one; the mailbox keeps the order anyway.
        [members, rank](commit_msg& m) { caf::anon_send(members, rank, std::move(m)); },
    };
}

// What the coordinator's transport_group calls mean when the ranks are processes: an abort
// re-forms the group (new endpoints in a new epoch); the endpoints live in the rank processes.
// The membership actor is held weakly: a group declares its transport before its actor system
// (actors/group.cpp), so this outlives the system, and a strong handle released after the
// system is gone would destroy the actor then.
class remote_transport_group final : public transport_group {
   public:
    remote_transport_group(int32_t world, const caf::actor& members) : world_(world), membership_(members.address()) {}
    int32_t world_size() const override { return world_; }
    const char* backend_name() const override { return "rank processes"; }
    transport& endpoint(int32_t) override {
        throw std::logic_error("the endpoints of remote ranks live in the rank processes");
    }
    void enter_epoch(int32_t, uint64_t) override {}
    void abort(const std::string&) override {
        if (auto members = caf::actor_cast<caf::actor>(membership_)) caf::anon_send(members, reform_atom::value);
    }
    void begin_epoch(uint64_t) override {}
    std::vector<int32_t> missing_ranks() override { return {}; }

   private:
    int32_t world_;
    caf::actor_addr membership_;
};

}  // namespace

caf::actor_system_config& configure_remote_actor_system(caf::actor_system_config& cfg, const topology_config& topology,
                                                        const scheduler_config& scheduler) {
    configure_actor_system(cfg, scheduler);
    cfg.load<caf::io::middleman>();
    // A rank process whose host vanishes without closing its connection is noticed after
    // connection-timeout without heartbeats; a killed process is noticed at once (connection reset).
    cfg.set("middleman.heartbeat-interval", caf::timespan{topology.heartbeat});
    cfg.set("middleman.connection-timeout", caf::timespan{topology.connection_timeout});
    return cfg;
}

status publish_remote_ranks(caf::actor_system& system, const group_config& config, const std::string& host,
                            uint16_t port, remote_ranks& out, const topology_config& topology) {
    std::shared_ptr<answer_lane> lane;
    if (topology.answer_port >= 0) {
        DS_TRY(answer_lane::open(host, static_cast<uint16_t>(topology.answer_port), config, lane,
                                 topology.answer_shared_memory));
    }
    out.lane = lane;
    out.membership =
        spawn_membership_actor(system, config, host, static_cast<uint16_t>(topology.rendezvous_port), std::move(lane));
    auto published = system.middleman().publish(out.membership, port, host.c_str(), true);
    if (!published) {
        caf::anon_send_exit(out.membership, caf::exit_reason::user_shutdown);
        return {status_code::internal,
                fmt::format("cannot listen on {}:{}: {}", host, port, caf::to_string(published.error()))};
    }
    out.port = *published;
    out.proxies.clear();
    for (int32_t r = 0; r < config.distribution.tp; ++r)
        out.proxies.push_back(system.spawn(rank_proxy, out.membership, r));
    out.transport = std::make_unique<remote_transport_group>(config.distribution.tp, out.membership);
    return status::success();
}

}  // namespace ds

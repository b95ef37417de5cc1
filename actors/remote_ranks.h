// The coordinator's side of ranks in other processes (docs/architecture.md, Ranks in other
// processes): the membership actor (actors/membership_actor.h), published over CAF's middleman,
// forms the group from the rank processes that join; TP local proxy actors (rank_actor_type)
// stand in for the ranks, so the coordinator actor is the one of the embedded group: it plans,
// fans out, checks digests and applies the rank-0 policy unchanged. A failed step (the coordinator
// aborts the group) re-forms it, so no endpoint left inside a failed collective is used again.
// Penalty counts committed since a request's registration are not carried over a re-form (the
// registration, with its history, is).
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/messages.h"
#include "config/group_config.h"
#include "config/topology_config.h"
#include "transport/transport_group.h"

namespace ds {

class answer_lane;

// Loads the middleman and sets its heartbeat and connection timeout from the topology (Debian's
// CAF has heartbeats off, and a dead peer would then only be noticed when its connection resets);
// the shared scheduler as configure_actor_system sets it (a coordinator process: the group's tuning).
caf::actor_system_config& configure_remote_actor_system(caf::actor_system_config& cfg,
                                                        const topology_config& topology = {},
                                                        const scheduler_config& scheduler = {});

struct remote_ranks {
    std::vector<rank_actor_type> proxies;  // rank r's stand-in, for spawn_coordinator_actor
    // What the coordinator aborts: re-forms the group. It holds the membership actor weakly, so
    // it may outlive the actor system.
    std::unique_ptr<transport_group> transport;
    caf::actor membership;
    uint16_t port = 0;  // where the membership actor is published
    // Where the ranks' answers also come (null: CAF only); a waiting caller reads it itself.
    std::shared_ptr<answer_lane> lane;
};

// Publishes the membership actor on host:port (port 0: any free port). The rendezvous of each
// epoch listens on `host` too, on topology.rendezvous_port.
status publish_remote_ranks(caf::actor_system& system, const group_config& config, const std::string& host,
                            uint16_t port, remote_ranks& out, const topology_config& topology = {});

}  // namespace ds

// The membership actor: the coordinator's side of ranks in other processes (docs/architecture.md,
// Ranks in other processes). Published over CAF's middleman (actors/remote_ranks.h), it takes the
// rank processes' join_msg, monitors each of them, and forms the group: once all TP ranks are
// present it opens a fresh TCP rendezvous (a new epoch) and sends every rank a form_msg (with the
// answer lane's port and secret, actors/answer_lane.h), after which each rank builds a new
// transport endpoint (ucx) and re-registers the requests. It passes the coordinator's messages
// for rank r, which reach it through r's proxy, to r's process, and their answers back.
//
// A rank process that dies (down_msg) fails the calls in flight on it with an error naming the
// rank; calls fail fast while the group is incomplete; when the rank joins again the group is
// re-formed. A re-form waits until every call in flight to a rank process has been answered or has
// timed out, and an epoch ends once every rank has answered it.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "config/group_config.h"

namespace ds {

class answer_lane;

// To the membership actor: form the group again, in a new epoch.
using reform_atom = caf::atom_constant<caf::atom("reform")>;

// Each epoch's rendezvous listens on host:rendezvous_port (0: any free port); `lane`, when not
// null, is offered to the ranks in every form_msg.
caf::actor spawn_membership_actor(caf::actor_system& system, const group_config& config, const std::string& host,
                                  uint16_t rendezvous_port, std::shared_ptr<answer_lane> lane);

}  // namespace ds

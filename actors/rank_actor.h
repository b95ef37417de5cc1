// The one rank actor, around a rank core (actors/rank_core.h): a thread of the group's process
// (ds::group, `distsample step`, `serve`), the worker of a rank process (`distsample rank`), or
// the rank a model worker embeds (include/distsample/rank.h). Spawned detached: collectives
// block, so a rank gets its own thread and never blocks CAF's shared scheduler.
//
// Messages (actors/messages.h): register_msg / release_msg / health_msg -> op_ack; step_msg ->
// rank_result (failures are results too, so the coordinator can name the rank); commit_msg (no
// reply); fault_msg, fault_plan_msg -> op_ack; form_msg -> op_ack (a rank process: a new endpoint
// through the epoch's rendezvous, then the registrations). A fault plan (config/fault_plan.h)
// makes the rank hang, sleep, alter its outputs, drop or re-deliver a step message, crash (a rank
// process), or arm its transport decorator (transport/faulty_transport.h) on the steps it names.
// A step id the rank has already received is refused: ids only grow.
#pragma once

#include <caf/all.hpp>

#include <memory>

#include "actors/messages.h"
#include "actors/rank_core.h"

namespace ds {

// The actor owns `core` from here on (it runs on the actor's thread only).
rank_actor_type spawn_rank_actor(caf::actor_system& system, std::shared_ptr<rank_core> core);

}  // namespace ds

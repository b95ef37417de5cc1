// One actor per TP rank, spawned detached: collectives block, so a rank gets its own thread and
// never blocks CAF's shared scheduler. It owns a rank_engine (pool, backend, transport endpoint).
//
// Messages: register_msg / release_msg / health_msg -> op_ack; run_step_msg -> rank_result (failures are
// results too, so the coordinator can name the rank); commit_msg (no reply); fault_msg, fault_plan_msg -> op_ack.
// A fault plan (config/fault_plan.h) makes the rank hang, sleep, alter its outputs, drop or
// re-deliver a step message, or arm its transport decorator (transport/faulty_transport.h) on the
// steps it names. A step id the rank has already received is refused: ids only grow.
#pragma once

#include <caf/all.hpp>

#include <memory>

#include "actors/messages.h"
#include "config/group_config.h"
#include "core/wakeable_sleep.h"
#include "transport/transport_group.h"

namespace ds {

// The plan's delays (kernel and transport) sleep on `delays`: group::set_fault_plan wakes them.
rank_actor_type spawn_rank_actor(caf::actor_system& system, const group_config& config, int32_t rank,
                                 transport_group& transport, std::shared_ptr<wakeable_sleep> delays);

}  // namespace ds

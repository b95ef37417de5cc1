// The coordinator (docs/architecture.md, The coordinator): one per group, on CAF's shared scheduler (it never blocks).
// Jobs (steps, registrations, releases) run one at a time in arrival order, so every client's
// replies come in submission order and a rank never sees a registration overtake a step. A step
// is validated, planned (pad_bs, reqs_per_rank, shards), fanned out to the ranks with response
// promises and a timeout, and answered exactly once: rank 0's outputs after the digest check and
// the rank-0 policy, or a typed error naming the field, the rank or the step. The ranks' results
// meet on the step's board (step_board.h), which answers a library caller as soon as the last
// rank files; the coordinator answers other clients and sends the commits.
//
// Messages: submit_msg -> step_answer; register_msg / release_msg / health_msg -> op_ack; desync_query ->
// desync_log; fault_msg -> op_ack (forwarded to the rank: a test hook).
#pragma once

#include <caf/all.hpp>

#include <vector>

#include "actors/messages.h"
#include "config/group_config.h"
#include "transport/transport_group.h"

namespace ds {

// Where a step's logits come from: the step's shards, one per rank, or the ranks themselves (rank
// processes with a model of their own, topology.logits_source), when steps carry none.
enum class logits_origin { in_step, made_by_ranks };

coordinator_actor_type spawn_coordinator_actor(caf::actor_system& system, const group_config& config,
                                               std::vector<rank_actor_type> ranks, transport_group& transport,
                                               logits_origin logits = logits_origin::in_step);

}  // namespace ds

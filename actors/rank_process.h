// One rank in its own process (`distsample rank`): a detached actor owning the rank's engine and
// transport endpoint joins the coordinator published at host:port (actors/remote_ranks.h), builds a
// new endpoint through the rendezvous of every epoch the coordinator forms, and runs the steps it
// is sent. Logits come with each step (remote_step_msg), or from a `supplier` when the rank makes
// its shard of the step's rows itself (topology.logits_source): its own model (make_model_supplier)
// or the model worker that embeds it (include/distsample/rank.h), and the step message carries none. The coordinator's
// fault plan (config/fault_plan.h) applies here as in in-process ranks, plus `crash`: the process exits
// (_exit(3)) when the step arrives; `hang` runs the step with its peers but never answers it.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "actors/rank_core.h"
#include "config/group_config.h"
#include "config/topology_config.h"
#include "kernels/sampling_types.h"

namespace ds {

// Sent to the handle that run_rank_process gives its `joined` callback: the rank leaves the group.
using leave_atom = caf::atom_constant<caf::atom("leave")>;

// UCX_TLS and UCX_NET_DEVICES from the topology, set before UCX starts.
void set_ucx_environment(const topology_config& topology);

struct rank_process_options {
    std::unique_ptr<shard_supplier> supplier;  // null: the steps carry the logits
    // Called once the coordinator has accepted the rank, with the handle that takes a leave_atom.
    std::function<void(const caf::actor& leave)> joined;
};

// Joins and serves until the coordinator is gone (ok), or joining fails, or the coordinator
// dropped this process and runs on without it (evicted: its heartbeats stopped, e.g. while it was
// stopped). Those end with an error, so that a supervisor that restarts failed processes restarts
// the rank. Eviction is told from a coordinator that is gone by a SIGCONT since the join (the
// process was stopped), or by the coordinator answering at its address within
// topology.connection_timeout. Reaching the coordinator and its answer are each bounded by
// topology.join_timeout. A leave_atom ends it (ok). `system` is
// configured by configure_remote_actor_system. End the process afterwards without destroying
// `system`: CAF 0.17's teardown can wait forever for an actor the middleman sent to the (now gone)
// coordinator, since something in the middleman keeps a strong reference to it.
status run_rank_process(caf::actor_system& system, const group_config& config, int32_t rank, const std::string& host,
                        uint16_t port, const topology_config& topology = {}, rank_process_options options = {});

}  // namespace ds

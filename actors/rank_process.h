// One rank in its own process (`distsample rank`): a detached actor owning the rank's engine and
// transport endpoint joins the coordinator published at host:port (actors/remote_ranks.h), builds a
// new endpoint through the rendezvous of every epoch the coordinator forms, and runs the steps it
// is sent. Logits come with each step (remote_step_msg), or, with a local
// `source` (topology.logits_source), the rank makes its shard of the step's rows itself: row b*N+j
// is the source's distribution after the request's context (its registered history and the tokens
// committed since, the last two as an n-gram window) and its drafts 1..j, as the gateway's model
// makes them (gateway/steps.cpp), and the step message carries none. The coordinator's fault plan
// (config/fault_plan.h) applies here as in in-process ranks, plus `crash`: the process exits
// (_exit(3)) when the step arrives; `hang` runs the step with its peers but never answers it.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <string>

#include "config/group_config.h"
#include "config/topology_config.h"
#include "kernels/sampling_types.h"
#include "sources/logits_source.h"

namespace ds {

// Joins and serves until the coordinator is gone (ok), or joining fails, or the coordinator
// dropped this process and runs on without it (evicted: its heartbeats stopped, e.g. while it was
// stopped). Those end with an error, so that a supervisor that restarts failed processes restarts
// the rank. Eviction is told from a coordinator that is gone by a SIGCONT since the join (the
// process was stopped), or by the coordinator answering at its address within
// topology.connection_timeout. Reaching the coordinator and its answer are each bounded by
// topology.join_timeout. `system` is
// configured by configure_remote_actor_system. End the process afterwards without destroying
// `system`: CAF 0.17's teardown can wait forever for an actor the middleman sent to the (now gone)
// coordinator, since something in the middleman keeps a strong reference to it.
status run_rank_process(caf::actor_system& system, const group_config& config, int32_t rank, const std::string& host,
                        uint16_t port, const topology_config& topology = {}, const logits_source* source = nullptr);

}  // namespace ds

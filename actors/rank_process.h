// One rank in its own process (`distsample rank`): a detached actor owning the rank's engine and
// transport endpoint joins the coordinator published at host:port (actors/remote_ranks.h), builds a
// new endpoint through the rendezvous of every epoch the coordinator forms, and runs the steps it
// is sent. Logits come with each step (remote_step_msg).
#pragma once

#include <cstdint>
#include <string>

#include "config/group_config.h"
#include "kernels/sampling_types.h"

namespace ds {

// Joins and serves until the coordinator is gone (ok) or joining fails (the reason).
status run_rank_process(const group_config& config, int32_t rank, const std::string& host, uint16_t port);

}  // namespace ds

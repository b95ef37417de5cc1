// Per-subsystem loggers of the actor runtime (docs/architecture.md, Logs), on stderr: "distsample.coordinator"
// (desync events, failed steps) and "distsample.rank" (rank-local failures).
#pragma once

#include <spdlog/spdlog.h>

#include <memory>

namespace ds {

spdlog::logger& coordinator_log();
spdlog::logger& rank_log();

}  // namespace ds

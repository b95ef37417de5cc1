// The transport's logger, "distsample.transport" on stderr (docs/architecture.md,
// Logs): which backend and which UCX transports a group chose, peer failures.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>

namespace ds {

// The logger `name`, or the one of that name the embedding application registered.
std::shared_ptr<spdlog::logger> subsystem_logger(const char* name);

spdlog::logger& transport_log();

}  // namespace ds

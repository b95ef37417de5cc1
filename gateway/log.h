// The gateway's logger ("distsample.gateway", on stderr).
#pragma once

#include <spdlog/spdlog.h>

namespace ds::gateway {

spdlog::logger& gateway_log();

}  // namespace ds::gateway

#include "transport/transport_log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace ds {

std::shared_ptr<spdlog::logger> subsystem_logger(const char* name) {
    if (auto existing = spdlog::get(name)) return existing;
    return spdlog::stderr_color_mt(name);
}

spdlog::logger& transport_log() {
    static const std::shared_ptr<spdlog::logger> logger = subsystem_logger("distsample.transport");
    return *logger;
}

}  // namespace ds

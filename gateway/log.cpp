#include "gateway/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <memory>

namespace ds::gateway {

spdlog::logger& gateway_log() {
    static const std::shared_ptr<spdlog::logger> logger = [] {
        if (auto existing = spdlog::get("distsample.gateway")) return existing;
        return spdlog::stderr_color_mt("distsample.gateway");
    }();
    return *logger;
}

}  // namespace ds::gateway

#include "actors/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace ds {

namespace {

std::shared_ptr<spdlog::logger> make_logger(const char* name) {
    // Reuse a logger of that name if the embedding application registered one.
    if (auto existing = spdlog::get(name)) return existing;
    return spdlog::stderr_color_mt(name);
}

}  // namespace

spdlog::logger& coordinator_log() {
    static const std::shared_ptr<spdlog::logger> logger = make_logger("distsample.coordinator");
    return *logger;
}

spdlog::logger& rank_log() {
    static const std::shared_ptr<spdlog::logger> logger = make_logger("distsample.rank");
    return *logger;
}

}  // namespace ds

#include "actors/log.h"

#include "transport/transport_log.h"

namespace ds {

spdlog::logger& coordinator_log() {
    static const std::shared_ptr<spdlog::logger> logger = subsystem_logger("distsample.coordinator");
    return *logger;
}

spdlog::logger& rank_log() {
    static const std::shared_ptr<spdlog::logger> logger = subsystem_logger("distsample.rank");
    return *logger;
}

}  // namespace ds

// What all scheduler connections together may hold (docs/gateway.md, "Limits"): how many are
// open (gateway.max_connections) and how many bytes of unfinished frames and unanswered requests
// they buffer (gateway.max_buffered_bytes). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>

#include "config/gateway_config.h"

namespace ds::gateway {

class connection_budget {
   public:
    explicit connection_budget(const gateway_config& config)
        : max_connections_(config.max_connections), max_bytes_(config.max_buffered_bytes) {}

    // Counts a new connection in; false (counting nothing) when the limit is reached.
    bool admit();
    void leave() { --open_; }

    // Takes `bytes` of the budget; false (taking nothing) when they would pass it.
    bool take(uint64_t bytes);
    void give_back(uint64_t bytes) { buffered_ -= bytes; }

    int64_t max_connections() const { return max_connections_; }
    uint64_t max_bytes() const { return max_bytes_; }

   private:
    const int64_t max_connections_;
    const uint64_t max_bytes_;
    std::atomic<int64_t> open_{0};
    std::atomic<uint64_t> buffered_{0};
};

}  // namespace ds::gateway

#include "gateway/admission.h"

namespace ds::gateway {

bool connection_budget::admit() {
    if (open_.fetch_add(1) < max_connections_) return true;
    --open_;
    return false;
}

bool connection_budget::take(uint64_t bytes) {
    uint64_t used = buffered_.load();
    do {
        if (used + bytes > max_bytes_) return false;
    } while (!buffered_.compare_exchange_weak(used, used + bytes));
    return true;
}

}  // namespace ds::gateway

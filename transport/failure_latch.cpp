#include "transport/failure_latch.h"

namespace ds {

status failure_latch::fail(status_code code, std::string reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failed_.load()) {
        failure_ = {code, std::move(reason)};
        failed_.store(true, std::memory_order_release);
    }
    return failure_;
}

status failure_latch::get() const {
    if (!failed()) return status::success();
    std::lock_guard<std::mutex> lock(mutex_);
    return failure_;
}

void failure_latch::clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    failure_ = status::success();
    failed_.store(false, std::memory_order_release);
}

}  // namespace ds

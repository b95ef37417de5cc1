// The first failure of a transport endpoint (an abort, a timeout, a dead peer), kept until
// cleared; any thread may record or read it, so abort() can fail a waiter on another thread.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "kernels/sampling_types.h"

namespace ds {

// The first failure of an endpoint, kept until cleared; any thread may record or read it.
class failure_latch {
   public:
    // Records `code` and `reason` unless a failure is recorded already; returns the recorded one.
    status fail(status_code code, std::string reason);
    bool failed() const { return failed_.load(std::memory_order_acquire); }
    // Success, or the recorded failure.
    status get() const;
    void clear();

   private:
    std::atomic<bool> failed_{false};
    mutable std::mutex mutex_;
    status failure_;
};

}  // namespace ds

// A sleep that another thread can cut short. The delays a fault plan injects into a rank sleep on
// one, so that replacing the plan (a Clear) wakes a rank asleep in the old plan's delay instead
// of leaving it there for as long as the old plan said (docs/gateway.md, "Fault injection").
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace ds {

class wakeable_sleep {
   public:
    // How many times wake_all() was called: a sleep given it as `since` ends at the next call.
    uint64_t epoch() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return epoch_;
    }

    // Sleeps for `duration` unless wake_all() is (or was) called after epoch `since`; true when
    // it slept the whole duration.
    bool sleep_for(std::chrono::milliseconds duration, uint64_t since) {
        std::unique_lock<std::mutex> lock(mutex_);
        return !woken_.wait_for(lock, duration, [&] { return epoch_ != since; });
    }

    void wake_all() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            ++epoch_;
        }
        woken_.notify_all();
    }

   private:
    mutable std::mutex mutex_;
    std::condition_variable woken_;
    uint64_t epoch_ = 0;
};

}  // namespace ds

#include "kernels/cpu/thread_pool.h"

namespace ds::cpu {

thread_pool::thread_pool(int threads) {
    for (int worker = 1; worker < threads; ++worker) {
        workers_.emplace_back([this, worker] { worker_loop(worker); });
    }
}

thread_pool::~thread_pool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
}

void thread_pool::drain(int worker) {
    for (int64_t index = next_index_.fetch_add(1); index < count_; index = next_index_.fetch_add(1)) {
        invoke_(ctx_, index, worker);
    }
}

void thread_pool::run(int64_t count, invoke_fn invoke, void* ctx) {
    if (workers_.empty() || count <= 1) {
        for (int64_t index = 0; index < count; ++index) invoke(ctx, index, 0);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        invoke_ = invoke;
        ctx_ = ctx;
        count_ = count;
        next_index_.store(0);
        busy_workers_ = static_cast<int>(workers_.size());
        ++generation_;
    }
    wake_.notify_all();
    drain(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return busy_workers_ == 0; });
}

void thread_pool::worker_loop(int worker) {
    uint64_t seen_generation = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
            if (stopping_) return;
            seen_generation = generation_;
        }
        drain(worker);
        std::lock_guard<std::mutex> lock(mutex_);
        if (--busy_workers_ == 0) done_.notify_one();
    }
}

}  // namespace ds::cpu

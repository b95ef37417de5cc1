#include "gateway/job_queue.h"

namespace ds::gateway {

job_queue::job_queue() : thread_([this] { run(); }) {}

job_queue::~job_queue() { stop(); }

void job_queue::push(std::function<void()> job) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        jobs_.push_back(std::move(job));
    }
    ready_.notify_one();
}

void job_queue::run_or_push(std::function<void()> job) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (busy_ || !jobs_.empty()) {
            jobs_.push_back(std::move(job));
            ready_.notify_one();
            return;
        }
        busy_ = true;
    }
    job();
    {
        std::lock_guard<std::mutex> lock(mutex_);
        busy_ = false;
    }
    ready_.notify_one();
}

void job_queue::stop() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    ready_.notify_one();
    if (thread_.joinable()) thread_.join();
}

void job_queue::run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        ready_.wait(lock, [this] { return !busy_ && (stopping_ || !jobs_.empty()); });
        if (jobs_.empty()) return;
        std::function<void()> job = std::move(jobs_.front());
        jobs_.pop_front();
        busy_ = true;
        lock.unlock();
        job();
        lock.lock();
        busy_ = false;
    }
}

}  // namespace ds::gateway

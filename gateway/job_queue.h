// A thread that runs jobs one at a time in the order they were pushed: the gateway's dispatcher
// (group calls in arrival order) and its completion thread (step futures in submission order).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace ds::gateway {

class job_queue {
   public:
    job_queue();
    ~job_queue();
    job_queue(const job_queue&) = delete;
    job_queue& operator=(const job_queue&) = delete;

    void push(std::function<void()> job);

    // Runs `job` on the calling thread when nothing is queued or running (the order stays that of
    // the calls), else queues it: saves a thread hand-off on the hot path. For jobs that never block.
    void run_or_push(std::function<void()> job);

    // Runs what is queued, then joins. Idempotent.
    void stop();

   private:
    void run();

    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<std::function<void()>> jobs_;
    bool busy_ = false;  // a job is running (here or on a caller's thread)
    bool stopping_ = false;
    std::thread thread_;
};

}  // namespace ds::gateway

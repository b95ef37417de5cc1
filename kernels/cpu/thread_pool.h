// A fixed set of worker threads for row-parallel CPU kernels. Threads are created once; running
// a parallel loop neither allocates nor creates threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace ds::cpu {

class thread_pool {
   public:
    // `threads` counts the calling thread: thread_pool(1) runs everything on the caller.
    explicit thread_pool(int threads);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int size() const { return static_cast<int>(workers_.size()) + 1; }

    // Calls body(index, worker) for every index in [0, count), spread over the threads; `worker`
    // in [0, size()) identifies the thread so bodies can use per-thread scratch. Blocks until all
    // calls returned. Bodies must not throw.
    template <class Body>
    void parallel_for(int64_t count, Body& body) {
        run(
            count, [](void* ctx, int64_t index, int worker) { (*static_cast<Body*>(ctx))(index, worker); }, &body);
    }

   private:
    using invoke_fn = void (*)(void* ctx, int64_t index, int worker);
    void run(int64_t count, invoke_fn invoke, void* ctx);
    void worker_loop(int worker);
    void drain(int worker);

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::condition_variable done_;
    uint64_t generation_ = 0;
    int busy_workers_ = 0;
    bool stopping_ = false;
    // The loop being run.
    invoke_fn invoke_ = nullptr;
    void* ctx_ = nullptr;
    int64_t count_ = 0;
    std::atomic<int64_t> next_index_{0};
};

}  // namespace ds::cpu

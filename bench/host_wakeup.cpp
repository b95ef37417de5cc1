// What a host charges the answer lane's reader (docs/benchmarks.md, bench_host_wakeup): the cost
// of a steady-clock read (every timestamp of the step timeline is one), and a thread's wake-up
// through an eventfd, asleep in poll as the reader waits against spinning on the descriptor,
// with the time a fixed piece of work takes right after each wake-up (a core that woke from
// idle may run it slower: cold caches, a lower clock). p50 / p90 / p99 in µs, ratios in one run.
//
//   bench_host_wakeup [--wakeups 3000]
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/clock.h"

namespace {

struct sorted_us {
    std::vector<double> us;
    explicit sorted_us(std::vector<int64_t> ns) {
        std::sort(ns.begin(), ns.end());
        for (int64_t v : ns) us.push_back(static_cast<double>(v) / 1e3);
    }
    double at(double q) const { return us.empty() ? 0.0 : us[static_cast<size_t>(q * (us.size() - 1))]; }
};

double clock_read_ns() {
    constexpr int kReads = 2'000'000;
    volatile int64_t last = 0;
    const int64_t start = ds::steady_now_ns();
    for (int i = 0; i < kReads; ++i) last = ds::steady_now_ns();
    return static_cast<double>(last - start) / kReads;
}

// A fixed piece of work like the reader's per answer: 8 KB read and hashed, a few allocations.
uint32_t reader_like_work(std::vector<uint32_t>& bytes) {
    uint32_t hash = 0;
    for (uint32_t word : bytes) hash = hash * 31 + word;
    for (int k = 0; k < 8; ++k) {
        auto* block = static_cast<volatile char*>(::operator new(1024));
        block[0] = static_cast<char>(hash);
        ::operator delete(const_cast<char*>(block));
    }
    bytes[hash % bytes.size()] += 1;
    return hash;
}

struct wakeup_p50 {
    double wake_us, work_us;
};

// The waiter either sleeps in poll (spinning = false) or reads the non-blocking eventfd in a loop.
wakeup_p50 measure_wakeups(bool spinning, int wakeups) {
    const int bell = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (bell < 0) std::exit(1);
    std::atomic<int64_t> rung_at{0};
    std::atomic<int> handled{0};
    std::atomic<bool> stop{false};
    std::vector<int64_t> wake_ns, work_ns;
    std::thread waiter([&] {
        std::vector<uint32_t> bytes(2048, 1);
        while (!stop.load()) {
            if (!spinning) {
                pollfd p{bell, POLLIN, 0};
                if (::poll(&p, 1, 100) <= 0) continue;
            }
            uint64_t count = 0;
            if (::read(bell, &count, sizeof count) != static_cast<ssize_t>(sizeof count)) continue;
            const int64_t woke = ds::steady_now_ns();
            reader_like_work(bytes);
            work_ns.push_back(ds::steady_now_ns() - woke);
            wake_ns.push_back(woke - rung_at.load());
            handled.fetch_add(1);
        }
    });
    for (int i = 0; i < wakeups; ++i) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // the waiter goes idle
        const int before = handled.load();
        rung_at.store(ds::steady_now_ns());
        const uint64_t one = 1;
        if (::write(bell, &one, sizeof one) != static_cast<ssize_t>(sizeof one)) std::exit(1);
        while (handled.load() == before) {
        }
    }
    stop = true;
    waiter.join();
    ::close(bell);
    const sorted_us wake(wake_ns), work(work_ns);
    std::printf("%-22s %8.1f %8.1f %8.1f   %8.2f %8.2f\n", spinning ? "spinning on read" : "asleep in poll",
                wake.at(0.5), wake.at(0.9), wake.at(0.99), work.at(0.5), work.at(0.9));
    return {wake.at(0.5), work.at(0.5)};
}

}  // namespace

int main(int argc, char** argv) {
    int wakeups = 3000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--wakeups") == 0) wakeups = std::clamp(std::atoi(argv[i + 1]), 10, 1'000'000);
    }
    std::printf("steady-clock read: %.1f ns\n\n", clock_read_ns());
    std::printf("%-22s %26s   %17s\n", "", "wake-up (us) p50/p90/p99", "work after p50/p90");
    const wakeup_p50 asleep = measure_wakeups(false, wakeups);
    const wakeup_p50 spinning = measure_wakeups(true, wakeups);
    std::printf("\nasleep / spinning at p50: wake-up %.1fx, the work after it %.2fx\n",
                asleep.wake_us / std::max(spinning.wake_us, 1e-3), asleep.work_us / std::max(spinning.work_us, 1e-3));
    return 0;
}

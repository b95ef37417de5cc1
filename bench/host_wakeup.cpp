// What a host charges the answer lane's reader (docs/benchmarks.md, bench_host_wakeup): the cost
// of a steady-clock read (every timestamp of the step timeline is one), and a thread's wake-up
// through an eventfd and through a loopback TCP connection, asleep in poll as the reader waits
// against spinning on the descriptor, with the read that follows and the time a fixed piece of
// work takes right after it (a core that woke from idle may run it slower: cold caches, a lower
// clock), then four answers sent at once on four connections, as the lane reads its ranks'.
// p50 / p90 / p99 in µs, ratios in one run.
//
//   bench_host_wakeup [--wakeups 3000]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "bench/percentiles.h"
#include "core/clock.h"

namespace {

[[noreturn]] void fail(const char* what) {
    std::perror(what);
    std::exit(1);
}

// Samples in ns as percentiles in µs.
ds::bench::percentiles us_of(const std::vector<int64_t>& ns) {
    std::vector<double> us;
    for (int64_t v : ns) us.push_back(static_cast<double>(v) / 1e3);
    return ds::bench::of(std::move(us));
}

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

// A one-way channel: what the ringer writes to `out` wakes the waiter polling `in`. An eventfd
// (the lane's bell), or a loopback TCP connection carrying an answer-sized message (a rank's
// answer on the lane).
struct channel {
    const char* name;
    int in = -1, out = -1;
    size_t message = 8;
};

channel eventfd_channel() {
    const int bell = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return {"eventfd", bell, bell, sizeof(uint64_t)};
}

channel tcp_channel() {
    const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(listener, 1) != 0 || ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0)
        fail("a loopback listener");
    const int sender = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(sender, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) fail("connect");
    const int receiver = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (receiver < 0) fail("accept");
    ::close(listener);
    const int on = 1;
    ::setsockopt(sender, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    constexpr size_t kAnswerBytes = 848;  // bs 16, N 4: an answer frame's body
    return {"loopback TCP", receiver, sender, kAnswerBytes};
}

struct wakeup_p50 {
    double wake_us, read_us, work_us;
};

// Reads the rest of a message whose first `got` bytes are in `in` (a TCP read may return part).
void read_rest(int fd, std::vector<char>& in, ssize_t got) {
    while (got < static_cast<ssize_t>(in.size())) {
        const ssize_t n = ::read(fd, in.data() + got, in.size() - static_cast<size_t>(got));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) fail("read");
        if (n > 0) got += n;
    }
}

// The waiter either sleeps in poll (spinning = false) or reads the non-blocking descriptor in a
// loop; per message: ring -> the read begins (the wake-up), the read itself, the work after it.
wakeup_p50 measure_wakeups(const channel& c, bool spinning, int wakeups) {
    if (c.in < 0 || c.out < 0) fail("a channel");
    std::atomic<int64_t> rung_at{0};
    std::atomic<int> handled{0};
    std::atomic<bool> stop{false};
    std::vector<int64_t> wake_ns, read_ns, work_ns;
    std::thread waiter([&] {
        std::vector<uint32_t> bytes(2048, 1);
        std::vector<char> in(c.message);
        while (!stop.load()) {
            if (!spinning) {
                pollfd p{c.in, POLLIN, 0};
                if (::poll(&p, 1, 100) <= 0) continue;
            }
            const int64_t woke = ds::steady_now_ns();
            const ssize_t got = ::read(c.in, in.data(), in.size());
            if (got <= 0) continue;
            read_rest(c.in, in, got);
            const int64_t read = ds::steady_now_ns();
            reader_like_work(bytes);
            work_ns.push_back(ds::steady_now_ns() - read);
            read_ns.push_back(read - woke);
            wake_ns.push_back(woke - rung_at.load());
            handled.fetch_add(1);
        }
    });
    std::vector<char> out(c.message, 1);
    if (c.in == c.out) *reinterpret_cast<uint64_t*>(out.data()) = 1;  // an eventfd adds what it is given
    for (int i = 0; i < wakeups; ++i) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // the waiter goes idle
        const int before = handled.load();
        rung_at.store(ds::steady_now_ns());
        if (::write(c.out, out.data(), out.size()) != static_cast<ssize_t>(out.size())) fail("write");
        while (handled.load() == before) {
        }
    }
    stop = true;
    waiter.join();
    const ds::bench::percentiles wake = us_of(wake_ns), read = us_of(read_ns), work = us_of(work_ns);
    std::printf("%-12s %-17s %7.1f %7.1f %7.1f   %7.2f %7.2f   %7.2f %7.2f\n", c.name,
                spinning ? "spinning on read" : "asleep in poll", wake.p50, wake.p90, wake.p99, read.p50, read.p90,
                work.p50, work.p90);
    return {wake.p50, read.p50, work.p50};
}

// Answers sent at once, as the lane gets them from its ranks: `senders` threads, released
// together, each write an answer-sized message to a loopback TCP connection of its own; the
// reader, asleep in poll on all of them, reads each whole as it is ready. Per round: release ->
// poll returns, and from there -> the first and the last message read.
void measure_answers_at_once(int senders, int rounds) {
    std::vector<channel> links;
    for (int s = 0; s < senders; ++s) links.push_back(tcp_channel());
    std::atomic<int> released{0};
    std::atomic<int64_t> released_at{0};
    std::atomic<int> handled{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int s = 0; s < senders; ++s) {
        threads.emplace_back([&, s] {
            const std::vector<char> out(links[s].message, 1);
            for (int seen = 0;;) {
                while (released.load() == seen && !stop.load()) std::this_thread::yield();
                if (stop.load()) return;
                seen = released.load();
                if (::write(links[s].out, out.data(), out.size()) != static_cast<ssize_t>(out.size())) fail("write");
            }
        });
    }
    std::vector<int64_t> wake_ns, first_ns, last_ns;
    std::thread reader([&] {
        std::vector<pollfd> polled;
        for (const channel& c : links) polled.push_back(pollfd{c.in, POLLIN, 0});
        std::vector<char> in(links[0].message);
        while (!stop.load()) {
            if (::poll(polled.data(), polled.size(), 100) <= 0) continue;
            const int64_t woke = ds::steady_now_ns();
            int64_t first = 0, last = 0;
            for (int read = 0; read < senders;) {
                for (pollfd& p : polled) {
                    const ssize_t got = ::read(p.fd, in.data(), in.size());
                    if (got <= 0) continue;
                    read_rest(p.fd, in, got);
                    last = ds::steady_now_ns();
                    if (read++ == 0) first = last;
                }
            }
            wake_ns.push_back(woke - released_at.load());
            first_ns.push_back(first - woke);
            last_ns.push_back(last - woke);
            handled.fetch_add(1);
        }
    });
    for (int r = 1; r <= rounds; ++r) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // the reader goes idle
        released_at.store(ds::steady_now_ns());
        released.store(r);
        while (handled.load() < r) {
        }
    }
    stop = true;
    reader.join();
    for (std::thread& t : threads) t.join();
    for (const channel& c : links) ::close(c.in), ::close(c.out);
    const ds::bench::percentiles wake = us_of(wake_ns), first = us_of(first_ns), last = us_of(last_ns);
    std::printf("%d answers at once over loopback TCP, the reader asleep in poll (us, p50 / p90):\n", senders);
    std::printf("  release -> poll returns %.1f / %.1f; then the first read %.1f / %.1f, the last %.1f / %.1f\n",
                wake.p50, wake.p90, first.p50, first.p90, last.p50, last.p90);
}

}  // namespace

int main(int argc, char** argv) {
    int wakeups = 3000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--wakeups") == 0) wakeups = std::clamp(std::atoi(argv[i + 1]), 10, 1'000'000);
    }
    std::printf("steady-clock read: %.1f ns\n\n", clock_read_ns());
    std::printf("%-30s %23s   %15s   %15s\n", "", "wake-up (us) p50/90/99", "read p50/90", "work after p50/90");
    for (const channel& c : {eventfd_channel(), tcp_channel()}) {
        const wakeup_p50 asleep = measure_wakeups(c, false, wakeups);
        const wakeup_p50 spinning = measure_wakeups(c, true, wakeups);
        std::printf("%-12s asleep / spinning at p50: wake-up %.1fx, read %.2fx, the work after it %.2fx\n\n", c.name,
                    asleep.wake_us / std::max(spinning.wake_us, 1e-3), asleep.read_us / std::max(spinning.read_us, 1e-3),
                    asleep.work_us / std::max(spinning.work_us, 1e-3));
        ::close(c.in);
        if (c.out != c.in) ::close(c.out);
    }
    measure_answers_at_once(4, std::max(wakeups / 3, 10));
    return 0;
}

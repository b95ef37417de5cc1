#include "actors/answer_lane.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "actors/dist_step.h"
#include "actors/log.h"
#include "actors/step_board.h"
#include "core/clock.h"
#include "transport/local_socket.h"

namespace ds {

namespace {

// Frames a rank may publish before the reader has taken them: a rank answers each step once, so
// this many steps in flight (more send over CAF until the reader catches up).
constexpr uint32_t kRingSlots = 8;
// A peer that began a greeting or a frame has this long to finish it.
constexpr std::chrono::milliseconds kFrameWait{100};
constexpr int64_t kFrameWaitNs = std::chrono::nanoseconds(kFrameWait).count();
// A connection must greet this soon after it is accepted.
constexpr std::chrono::milliseconds kGreetingWait{1000};
// The longest the thread sleeps in poll before it looks at stopping_.
constexpr int kIdlePollMs = 100;
// How soon the lane's thread reads again after a caller that read the lane leaves.
constexpr int kReaderBackMs = 1;

// Logs why a rank's connection is closed; false, for a reader to return.
bool lane_lost(int32_t rank, const std::string& why) {
    coordinator_log().warn("answer lane: rank {}: {}; its answers come over CAF", rank, why);
    return false;
}

uint64_t random_secret() {
    std::random_device device;
    return (uint64_t{device()} << 32) ^ uint64_t { device() };
}

}  // namespace

answer_lane::answer_lane(const std::string& host, const group_config& config, net::unique_fd listener, uint16_t port,
                         net::unique_fd local_listener, std::string local_name)
    : ranks_(config.distribution.tp),
      max_body_(answer_body_bytes(config.limits.max_batch, config.limits.max_tokens_per_req)),
      spin_(config.tuning.rank_spin_us),
      host_(host),
      listener_(std::move(listener)),
      port_(port),
      local_listener_(std::move(local_listener)),
      local_name_(std::move(local_name)),
      secret_(random_secret()) {}

status answer_lane::open(const std::string& host, uint16_t port, const group_config& config,
                         std::shared_ptr<answer_lane>& out, bool shared_memory) {
    net::unique_fd listener;
    uint16_t bound = 0;
    if (status s = net::listen_tcp(host, port, listener, bound); !s.is_ok())
        return {s.code, fmt::format("answer lane: {}", s.message)};
    auto wake = std::make_shared<bell>();
    wake->fd = net::unique_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (wake->fd.get() < 0) return net::io_error("answer lane: eventfd");
    // A random name: lanes of several groups on one host never meet, and a stale name is never reused.
    std::string local_name = shared_memory ? fmt::format("distsample-answers-{:016x}", random_secret()) : "";
    net::unique_fd local_listener;
    if (status s = shared_memory ? net::listen_local(local_name, local_listener) : status::success(); !s.is_ok()) {
        coordinator_log().warn("answer lane: {}; ranks on this host answer over TCP", s.message);
        local_name.clear();
    }
    std::shared_ptr<answer_lane> lane(
        new answer_lane(host, config, std::move(listener), bound, std::move(local_listener), std::move(local_name)));
    lane->bell_ = std::move(wake);
    lane->thread_ = std::thread([raw = lane.get()] { raw->serve(); });
    out = std::move(lane);
    return status::success();
}

answer_lane::~answer_lane() {
    {
        std::lock_guard<std::mutex> lock(stop_mutex_);
        stopping_.store(true, std::memory_order_release);
    }
    stop_.notify_one();
    bell_->ring();
    if (thread_.joinable()) thread_.join();
}

void answer_lane::expect(const std::shared_ptr<step_board>& board) {
    {
        // Every rank's forwarding of a step names its board: the first one registers it.
        std::lock_guard<std::mutex> lock(mutex_);
        if (boards_.count(board->step().id) > 0) return;
        for (auto it = boards_.begin(); it != boards_.end();) it = it->second.expired() ? boards_.erase(it) : ++it;
        boards_.emplace(board->step().id, board);
    }
    if (spin_.count() == 0) return;
    spin_until_ns_.store(steady_now_ns() + std::chrono::nanoseconds(spin_).count(), std::memory_order_release);
    bell_->ring();  // the reader starts spinning now
}

std::shared_ptr<step_board> answer_lane::board_of(uint64_t step_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = boards_.find(step_id);
    return found == boards_.end() ? nullptr : found->second.lock();
}

void answer_lane::serve() {
    while (!stopping_.load(std::memory_order_acquire)) {
        if (guests_.load(std::memory_order_acquire) > 0) {
            // A caller that leaves does not wake this thread (on its way back to its own caller, a
            // wake-up could take its core): the thread looks again every kReaderBackMs.
            std::unique_lock<std::mutex> lock(stop_mutex_);
            stop_.wait_for(lock, std::chrono::milliseconds(kReaderBackMs), [&] {
                return guests_.load(std::memory_order_acquire) == 0 || stopping_.load(std::memory_order_acquire);
            });
            continue;
        }
        std::lock_guard<std::mutex> reading(reading_);
        round(kIdlePollMs, nullptr);
    }
}

bool answer_lane::read_until(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline,
                             std::chrono::steady_clock::time_point spin_until) {
    if (done()) return false;  // the lane's thread keeps reading, undisturbed
    guests_.fetch_add(1, std::memory_order_acq_rel);
    bell_->ring();  // the lane's thread ends its round and lets go of reading_
    std::unique_lock<std::mutex> reading(reading_, std::defer_lock);
    while (!reading.try_lock()) {
        // Another caller keeps the role it has: this one waits on its reply as without a lane.
        if (bell_->reader.load() != std::thread::id() || done() || std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::yield();
    }
    if (reading.owns_lock()) {
        // Sequentially consistent with the nudger's load: either it sees this reader and rings, or
        // the reply it set is seen by the done() below.
        bell_->reader.store(std::this_thread::get_id());
        while (!done()) {
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) break;
            round(static_cast<int>(std::min<int64_t>(left.count(), kIdlePollMs)), &done,
                  std::chrono::steady_clock::now() < spin_until);
        }
        bell_->reader.store(std::thread::id());
    }
    const bool did_read = reading.owns_lock();
    if (did_read) reading.unlock();
    guests_.fetch_sub(1, std::memory_order_acq_rel);
    return did_read;
}

std::function<void()> answer_lane::nudger() const {
    return [wake = bell_] {
        std::atomic_thread_fence(std::memory_order_seq_cst);  // the reply set before, the reader looked up after
        const std::thread::id reader = wake->reader.load();
        if (reader != std::thread::id() && reader != std::this_thread::get_id()) wake->ring();
    };
}

void answer_lane::bell::ring() const {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(fd.get(), &one, sizeof one);
}

void answer_lane::bell::drain() const {
    uint64_t count = 0;
    [[maybe_unused]] const ssize_t n = ::read(fd.get(), &count, sizeof count);
}

void answer_lane::gather_polled() {
    polled_.assign({pollfd{bell_->fd.get(), POLLIN, 0}, pollfd{listener_.get(), POLLIN, 0},
                    pollfd{local_listener_.get(), POLLIN, 0}});  // poll skips a descriptor of -1
    polled_owner_.clear();
    for (size_t i = 0; i < connections_.size(); ++i) {
        const connection& c = connections_[i];
        // The ring's bell first: answers published just before a hang-up are filed before the close.
        if (c.ring) {
            polled_.push_back(pollfd{c.ring->bell_fd(), POLLIN, 0});
            polled_owner_.emplace_back(i, true);
        }
        polled_.push_back(pollfd{c.fd.get(), POLLIN, 0});
        polled_owner_.emplace_back(i, false);
    }
}

void answer_lane::round(int max_wait_ms, const std::function<bool()>* done, bool spin) {
    const bool spinning = spin || steady_now_ns() < spin_until_ns_.load(std::memory_order_acquire);
    // A spinning reader looks at the rings' memory before it asks the kernel: their answers are
    // filed without a poll and without draining their bells (a later round drains what they hold).
    if (spinning && read_rings_in_memory(done)) return;
    gather_polled();
    if (::poll(polled_.data(), polled_.size(), spinning ? 0 : std::min(max_wait_ms, idle_poll_ms())) <= 0) {
        drop_closed_and_silent();
        return;
    }
    const int64_t woke_at_ns = steady_now_ns();
    if (polled_[0].revents != 0) bell_->drain();
    if (polled_[1].revents != 0) accept_connection(listener_, false);
    if (polled_[2].revents != 0) accept_connection(local_listener_, true);
    // Connections accepted just now are not in `polled_`: they are read on the next round.
    for (size_t i = 0; i < polled_owner_.size(); ++i) {
        const auto [index, ring_bell] = polled_owner_[i];
        connection& c = connections_[index];
        if (polled_[i + 3].revents == 0 || c.fd.get() < 0) continue;
        bool keep = true;
        if (ring_bell)
            keep = read_ring(c, woke_at_ns);
        else if (c.rank < 0)
            keep = read_greeting(c) && (!c.local || c.rank < 0 || offer_ring(c));
        else if (c.local)
            keep = false;  // a ring's socket only closes: a hang-up, or bytes no rank sends
        else
            keep = read_answers(c, woke_at_ns);
        if (!keep) c.fd = net::unique_fd();
        // A caller whose step is settled returns now; the next reader takes what is left.
        if (done != nullptr && (*done)()) return;
    }
    drop_closed_and_silent();
}

int answer_lane::idle_poll_ms() const {
    const int64_t now_ns = steady_now_ns();
    int64_t wait_ns = std::chrono::nanoseconds(std::chrono::milliseconds(kIdlePollMs)).count();
    for (const connection& c : connections_) {
        if (c.rank >= 0 && c.filled > 0) wait_ns = std::min(wait_ns, c.partial_since_ns + kFrameWaitNs - now_ns);
    }
    // Rounded up: the round it wakes finds the frame's time up instead of polling again for 0 ms.
    return static_cast<int>(std::max<int64_t>(0, (wait_ns + 999'999) / 1'000'000));
}

void answer_lane::drop_closed_and_silent() {
    const auto now = net::clock::now();
    const int64_t now_ns = std::chrono::nanoseconds(now.time_since_epoch()).count();  // steady_now_ns()'s clock
    std::vector<connection> kept;
    for (connection& c : connections_) {
        if (c.fd.get() < 0) continue;
        if (c.rank < 0 && now - c.accepted > kGreetingWait) {
            coordinator_log().warn("answer lane: a connection that did not greet within {} ms was closed",
                                   kGreetingWait.count());
            continue;
        }
        if (c.rank >= 0 && c.filled > 0 && now_ns - c.partial_since_ns >= kFrameWaitNs) {
            lane_lost(c.rank, fmt::format("a frame not finished within {} ms", kFrameWait.count()));
            continue;
        }
        kept.push_back(std::move(c));
    }
    connections_ = std::move(kept);
}

void answer_lane::accept_connection(const net::unique_fd& listener, bool local) {
    net::unique_fd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (fd.get() < 0) return;  // gone before it was accepted, or out of descriptors: the rank uses CAF
    // Every rank holds one connection; more than twice that many are not ranks of this group.
    if (connections_.size() >= static_cast<size_t>(2 * ranks_)) {
        coordinator_log().warn("answer lane: a connection beyond {} refused", 2 * ranks_);
        return;
    }
    // Any process of this network namespace can reach the local socket: only this user's are heard.
    ucred peer{};
    socklen_t length = sizeof peer;
    if (local && (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 || peer.uid != ::geteuid())) {
        coordinator_log().warn("answer lane: a local connection of another user (uid {}) refused", peer.uid);
        return;
    }
    connection c;
    c.fd = std::move(fd);
    c.local = local;
    c.accepted = net::clock::now();
    c.in.resize(sizeof(lane_greeting));
    connections_.push_back(std::move(c));
}

bool answer_lane::read_greeting(connection& c) {
    // The greeting's bytes as they come, never waiting for the rest: a peer that sends a part holds
    // no reader up, and is closed kGreetingWait after it was accepted (drop_closed_and_silent).
    while (c.filled < sizeof(lane_greeting)) {
        const ssize_t n = ::recv(c.fd.get(), c.in.data() + c.filled, sizeof(lane_greeting) - c.filled, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
        if (n <= 0) {
            coordinator_log().warn("answer lane: a connection closed before its greeting");
            return false;
        }
        c.filled += static_cast<size_t>(n);
    }
    lane_greeting g;
    std::memcpy(&g, c.in.data(), sizeof g);
    c.filled = 0;
    if (g.magic != kLaneGreetingMagic || g.secret != secret_ || g.rank < 0 || g.rank >= ranks_) {
        coordinator_log().warn("answer lane: a connection that is not a rank of this group was closed");
        return false;
    }
    // A rank that connects again (a new epoch, a restarted process) replaces its old connection.
    for (connection& other : connections_) {
        if (&other != &c && other.rank == g.rank) other.fd = net::unique_fd();
    }
    c.rank = g.rank;
    if (!c.local) c.in.resize(sizeof(uint32_t) + max_body_);
    coordinator_log().debug("answer lane: rank {} connected{}", g.rank, c.local ? " on this host" : "");
    return true;
}

bool answer_lane::offer_ring(connection& c) {
    std::unique_ptr<answer_ring> ring;
    status s = answer_ring::create(max_body_, kRingSlots, ring);
    if (s.is_ok()) {
        const int passed[] = {ring->memory_fd(), ring->rank_bell_fd()};
        s = net::send_with_descriptors(c.fd.get(), &kLaneOfferMagic, sizeof kLaneOfferMagic, passed, 2,
                                       net::clock::now() + kFrameWait);
    }
    // The rank, with no ring, answers over TCP.
    if (!s.is_ok()) return lane_lost(c.rank, fmt::format("no shared-memory ring ({})", s.message));
    c.ring = std::move(ring);
    return true;
}

bool answer_lane::read_rings_in_memory(const std::function<bool()>* done) {
    const int64_t now_ns = steady_now_ns();
    for (connection& c : connections_) {
        if (c.ring && c.fd.get() >= 0 && !read_ring_frames(c, now_ns)) c.fd = net::unique_fd();
    }
    return done != nullptr && (*done)();
}

bool answer_lane::read_ring(connection& c, int64_t woke_at_ns) {
    c.ring->drain_bell();  // before the ring is read: a frame published after this rings again
    return read_ring_frames(c, woke_at_ns);
}

bool answer_lane::read_ring_frames(connection& c, int64_t woke_at_ns) {
    for (;;) {
        bool got = false;
        if (const status s = c.ring->read(ring_body_, got); !s.is_ok()) return lane_lost(c.rank, s.message);
        if (!got) return true;
        if (!file_answer(c, ring_body_, woke_at_ns, steady_now_ns())) return false;
    }
}

bool answer_lane::read_answers(connection& c, int64_t woke_at_ns) {
    for (;;) {
        const size_t room = c.in.size() - c.filled;  // never 0: file_frames leaves less than a whole frame
        const ssize_t n = ::recv(c.fd.get(), c.in.data() + c.filled, room, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
        if (n == 0) return false;  // a rank process that closes its end leaves quietly
        if (n < 0) return lane_lost(c.rank, net::io_error("recv").message);
        const int64_t received_at_ns = steady_now_ns();
        if (c.filled == 0) c.partial_since_ns = woke_at_ns;
        c.filled += static_cast<size_t>(n);
        if (!file_frames(c, woke_at_ns, received_at_ns)) return false;
        // Less than the room: the socket held no more. A full buffer may have left some behind.
        if (static_cast<size_t>(n) < room) return true;
    }
}

bool answer_lane::file_frames(connection& c, int64_t woke_at_ns, int64_t received_at_ns) {
    size_t at = 0;
    while (c.filled - at >= sizeof(uint32_t)) {
        uint32_t length = 0;
        std::memcpy(&length, c.in.data() + at, sizeof length);
        if (length > max_body_)
            return lane_lost(c.rank, fmt::format("answer of {} bytes: expected at most {}", length, max_body_));
        if (c.filled - at - sizeof length < length) break;
        if (!file_answer(c, std::string_view(c.in.data() + at + sizeof length, length), woke_at_ns, received_at_ns))
            return false;
        at += sizeof length + length;
    }
    if (at > 0) {
        // What is left is a frame whose first bytes came with this recv (what came before is filed).
        std::memmove(c.in.data(), c.in.data() + at, c.filled - at);
        c.filled -= at;
        c.partial_since_ns = woke_at_ns;
    }
    return true;
}

bool answer_lane::file_answer(const connection& c, std::string_view body, int64_t woke_at_ns, int64_t received_at_ns) {
    const std::shared_ptr<step_board> board = board_of(answer_step_id(body));
    if (!board) return true;  // the step is done: CAF's answer came first
    rank_result result;
    if (const status s = decode_answer(body, c.rank, board->step(), result); !s.is_ok())
        return lane_lost(c.rank, s.message);
    result.timing.received_at_ns = received_at_ns;
    filed_.fetch_add(1, std::memory_order_relaxed);  // before the filing, which may answer the caller
    board->file(result, woke_at_ns);
    return true;
}

}  // namespace ds

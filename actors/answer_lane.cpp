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

namespace ds {

namespace {

constexpr uint32_t kGreetingMagic = 0x6473616c;  // "dsal"
constexpr size_t kHeaderBytes = sizeof(uint64_t) + 2 * sizeof(int32_t) + sizeof(uint64_t) + 5 * sizeof(int64_t);
// A peer that began a greeting or a frame has this long to finish it.
constexpr std::chrono::milliseconds kFrameWait{100};
constexpr int64_t kFrameWaitNs = std::chrono::nanoseconds(kFrameWait).count();
// A connection must greet this soon after it is accepted.
constexpr std::chrono::milliseconds kGreetingWait{1000};
// The longest the thread sleeps in poll before it looks at stopping_.
constexpr int kIdlePollMs = 100;
// How soon the lane's thread reads again after a caller that read the lane leaves.
constexpr int kReaderBackMs = 1;

size_t body_bytes(int64_t bs, int64_t n) {
    return kHeaderBytes + static_cast<size_t>(bs * n + bs) * 4 + static_cast<size_t>(bs * n) * 8 +
           static_cast<size_t>(bs);
}

template <class T>
void put(std::string& out, const T& value) {
    out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

template <class T>
void put_all(std::string& out, const std::vector<T>& values) {
    out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// Reads the body in order; the caller has checked its length.
class body_reader {
   public:
    explicit body_reader(std::string_view body) : at_(body.data()) {}
    template <class T>
    T take() {
        T value;
        std::memcpy(&value, at_, sizeof value);
        at_ += sizeof value;
        return value;
    }
    template <class T>
    void take_all(std::vector<T>& values) {
        std::memcpy(values.data(), at_, values.size() * sizeof(T));
        at_ += values.size() * sizeof(T);
    }

   private:
    const char* at_;
};

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

void append_answer(const rank_result& result, std::string& out) {
    const step_outputs& o = *result.outputs;
    const int32_t bs = o.batch_size();
    const int32_t n = bs == 0 ? 0 : static_cast<int32_t>(o.accept_index.size() / static_cast<size_t>(bs));
    out.reserve(out.size() + body_bytes(bs, n));
    put(out, result.step_id);
    put(out, bs);
    put(out, n);
    put(out, result.digest);
    const step_timing& t = result.timing;
    for (int64_t v :
         {t.rank_step_ns, t.rank_transport_ns, t.rank_received_bytes, t.rank_began_at_ns, t.rank_answered_at_ns})
        put(out, v);
    put_all(out, o.packed);
    put_all(out, o.accept_index);
    put_all(out, o.logprobs);  // their bytes: the bits, NaN payloads included
    put_all(out, o.row_error);
}

std::string encode_answer(const rank_result& result) {
    std::string body;
    append_answer(result, body);
    return body;
}

uint64_t answer_step_id(std::string_view body) {
    if (body.size() < sizeof(uint64_t)) return 0;
    return body_reader(body).take<uint64_t>();
}

status decode_answer(std::string_view body, int32_t rank, const dist_step& step, rank_result& out) {
    if (body.size() < kHeaderBytes)
        return status::invalid(fmt::format("answer of {} bytes: expected at least {}", body.size(), kHeaderBytes));
    body_reader in(body);
    out = rank_result{};
    out.rank = rank;
    out.step_id = in.take<uint64_t>();
    const auto bs = in.take<int32_t>();
    const auto n = in.take<int32_t>();
    if (out.step_id != step.id) return status::invalid(fmt::format("step id = {}: expected {}", out.step_id, step.id));
    if (bs != step.plan.bs || n != step.plan.tokens_per_req)
        return status::invalid(fmt::format("step {}: bs = {}, N = {}: expected {} and {}", step.id, bs, n, step.plan.bs,
                                           step.plan.tokens_per_req));
    if (body.size() != body_bytes(bs, n))
        return status::invalid(
            fmt::format("step {}: answer of {} bytes: expected {}", step.id, body.size(), body_bytes(bs, n)));
    out.digest = in.take<uint64_t>();
    step_timing& t = out.timing;
    for (int64_t* v :
         {&t.rank_step_ns, &t.rank_transport_ns, &t.rank_received_bytes, &t.rank_began_at_ns, &t.rank_answered_at_ns})
        *v = in.take<int64_t>();
    auto outputs = std::make_shared<step_outputs>();
    outputs->resize(bs, n);
    in.take_all(outputs->packed);
    in.take_all(outputs->accept_index);
    in.take_all(outputs->logprobs);
    in.take_all(outputs->row_error);
    if (outputs->digest() != out.digest)
        return status::invalid(
            fmt::format("step {}: digest = {:#x}: the outputs hash to {:#x}", step.id, out.digest, outputs->digest()));
    out.outputs = std::move(outputs);
    return status::success();
}

answer_lane::answer_lane(const group_config& config, net::unique_fd listener, uint16_t port)
    : ranks_(config.distribution.tp),
      max_body_(body_bytes(config.limits.max_batch, config.limits.max_tokens_per_req)),
      spin_(config.tuning.rank_spin_us),
      listener_(std::move(listener)),
      port_(port),
      secret_(random_secret()) {}

status answer_lane::open(const std::string& host, uint16_t port, const group_config& config,
                         std::shared_ptr<answer_lane>& out) {
    net::unique_fd listener;
    uint16_t bound = 0;
    if (status s = net::listen_tcp(host, port, listener, bound); !s.is_ok())
        return {s.code, fmt::format("answer lane: {}", s.message)};
    auto wake = std::make_shared<bell>();
    wake->fd = net::unique_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (wake->fd.get() < 0) return net::io_error("answer lane: eventfd");
    std::shared_ptr<answer_lane> lane(new answer_lane(config, std::move(listener), bound));
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

bool answer_lane::read_until(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline) {
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
            round(static_cast<int>(std::min<int64_t>(left.count(), kIdlePollMs)), &done);
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

void answer_lane::round(int max_wait_ms, const std::function<bool()>* done) {
    std::vector<pollfd>& polled = polled_;
    polled.assign({pollfd{bell_->fd.get(), POLLIN, 0}, pollfd{listener_.get(), POLLIN, 0}});
    for (const connection& c : connections_) polled.push_back(pollfd{c.fd.get(), POLLIN, 0});
    const bool spinning = steady_now_ns() < spin_until_ns_.load(std::memory_order_acquire);
    if (::poll(polled.data(), polled.size(), spinning ? 0 : std::min(max_wait_ms, idle_poll_ms())) <= 0) {
        drop_closed_and_silent();
        return;
    }
    const int64_t woke_at_ns = steady_now_ns();
    if (polled[0].revents != 0) bell_->drain();
    if (polled[1].revents != 0) accept_connection();
    // Connections accepted just now are not in `polled`: they are read on the next round.
    for (size_t i = 0; i + 2 < polled.size(); ++i) {
        connection& c = connections_[i];
        if (polled[i + 2].revents == 0 || c.fd.get() < 0) continue;
        if (!(c.rank < 0 ? read_greeting(c) : read_answers(c, woke_at_ns))) c.fd = net::unique_fd();
        // A caller whose step is settled returns now; the next reader takes what is left.
        if (done != nullptr && (*done)()) return;
    }
    drop_closed_and_silent();
}

int answer_lane::idle_poll_ms() const {
    const int64_t now_ns = steady_now_ns();
    int64_t wait_ns = std::chrono::nanoseconds(std::chrono::milliseconds(kIdlePollMs)).count();
    for (const connection& c : connections_) {
        if (c.filled > 0) wait_ns = std::min(wait_ns, c.partial_since_ns + kFrameWaitNs - now_ns);
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
        if (c.filled > 0 && now_ns - c.partial_since_ns >= kFrameWaitNs) {
            lane_lost(c.rank, fmt::format("a frame not finished within {} ms", kFrameWait.count()));
            continue;
        }
        kept.push_back(std::move(c));
    }
    connections_ = std::move(kept);
}

void answer_lane::accept_connection() {
    net::unique_fd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (fd.get() < 0) return;  // gone before it was accepted, or out of descriptors: the rank uses CAF
    // Every rank holds one connection; more than twice that many are not ranks of this group.
    if (connections_.size() >= static_cast<size_t>(2 * ranks_)) {
        coordinator_log().warn("answer lane: a connection beyond {} refused", 2 * ranks_);
        return;
    }
    connection c;
    c.fd = std::move(fd);
    c.accepted = net::clock::now();
    connections_.push_back(std::move(c));
}

bool answer_lane::read_greeting(connection& c) {
    const auto deadline = net::clock::now() + kFrameWait;
    uint32_t magic = 0;
    int32_t rank = -1;
    uint64_t secret = 0;
    status s = net::read_value(c.fd.get(), magic, deadline);
    if (s.is_ok()) s = net::read_value(c.fd.get(), rank, deadline);
    if (s.is_ok()) s = net::read_value(c.fd.get(), secret, deadline);
    if (!s.is_ok() || magic != kGreetingMagic || secret != secret_ || rank < 0 || rank >= ranks_) {
        coordinator_log().warn("answer lane: a connection that is not a rank of this group was closed{}",
                               s.is_ok() ? "" : fmt::format(" ({})", s.message));
        return false;
    }
    // A rank that connects again (a new epoch, a restarted process) replaces its old connection.
    for (connection& other : connections_) {
        if (&other != &c && other.rank == rank) other.fd = net::unique_fd();
    }
    c.rank = rank;
    c.in.resize(sizeof(uint32_t) + max_body_);
    coordinator_log().debug("answer lane: rank {} connected", rank);
    return true;
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

status answer_sender::connect(const std::string& host, uint16_t port, uint64_t secret, int32_t rank,
                              std::chrono::milliseconds timeout, std::unique_ptr<answer_sender>& out) {
    const auto deadline = net::clock::now() + timeout;
    net::unique_fd fd;
    status s = net::connect_tcp(host, port, deadline, fd);
    if (s.is_ok()) s = net::write_value(fd.get(), kGreetingMagic, deadline);
    if (s.is_ok()) s = net::write_value(fd.get(), rank, deadline);
    if (s.is_ok()) s = net::write_value(fd.get(), secret, deadline);
    if (!s.is_ok()) return {s.code, fmt::format("answer lane at {}:{}: {}", host, port, s.message)};
    out.reset(new answer_sender(std::move(fd), timeout));
    return status::success();
}

status answer_sender::send(const rank_result& result) {
    frame_.assign(sizeof(uint32_t), '\0');  // the body's length, set below
    append_answer(result, frame_);
    const auto length = static_cast<uint32_t>(frame_.size() - sizeof(uint32_t));
    std::memcpy(frame_.data(), &length, sizeof length);
    return net::write_all(fd_.get(), frame_.data(), frame_.size(), net::clock::now() + timeout_);
}

}  // namespace ds

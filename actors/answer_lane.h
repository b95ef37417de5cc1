// The answer lane (docs/architecture.md, The answer lane): a rank process's successful step result
// travels to the coordinator's process on a path of its own, read by a thread (the lane's own, or a
// caller waiting for its step) that files it on the step's board (step_board.h), where the set's
// last filing answers a library caller on the spot. The same result still comes back over CAF,
// which the coordinator needs for its commits and the next job, and a second filing for a rank is
// ignored: the lane only takes CAF's middleman hops (a wake-up of each process's multiplexer and of
// the scheduled membership actor, hundreds of microseconds on loopback) off the step's critical
// path. A lane that fails costs nothing but that speed: the rank drops it until the next epoch and
// CAF answers alone.
//
// Two paths, one frame body (actors/answer_frame.h):
// - a rank on the coordinator's host connects to the lane's local socket (an abstract Unix socket,
//   transport/local_socket.h), greets, and is handed a shared-memory ring and its bell
//   (actors/answer_ring.h): answers then cross without the kernel's network path;
// - any other rank (another host or network namespace, where the local name is not found) connects
//   over TCP and sends, per answer, u32 body bytes and the body.
// The greeting, on either path: u32 magic "dsal", i32 rank, u64 secret (from the form_msg); on the
// local path the lane answers u32 magic "dsao" with the ring's memory and bell attached.
// A connection with a wrong magic, secret or rank, a frame larger than the group's largest
// answer or not finished within 100 ms of its first bytes, a ring whose head or lengths break its
// rules, a frame for a step not in flight or of another shape, or a digest that does not match its
// outputs is closed (logged); its rank's answers then come over CAF only.
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "actors/answer_frame.h"
#include "actors/answer_ring.h"
#include "actors/answer_sender.h"
#include "actors/rank_core.h"
#include "config/group_config.h"
#include "transport/socket_io.h"

namespace ds {

class step_board;
struct dist_step;

// The coordinator's end: a listening socket and the thread that reads every rank's connection.
class answer_lane {
   public:
    // Listens on host:port (0: any free port) for `config`'s ranks; `spin` > 0: after each step is
    // expected, the thread polls without sleeping for that long (tuning.rank_spin_us).
    // With `shared_memory`, also listens at a random local name for ranks on this host (without
    // one when the host refuses it: those ranks then use TCP too).
    static status open(const std::string& host, uint16_t port, const group_config& config,
                       std::shared_ptr<answer_lane>& out, bool shared_memory = true);
    ~answer_lane();  // stops the thread, closes every connection
    answer_lane(const answer_lane&) = delete;
    answer_lane& operator=(const answer_lane&) = delete;

    uint16_t port() const { return port_; }
    uint64_t secret() const { return secret_; }
    const std::string& local_name() const { return local_name_; }
    answer_lane_address address() const { return {host_, port_, secret_, local_name_}; }

    // The step `board` settles may be answered on the lane; held weakly, so an answer that comes
    // after its step is done is dropped.
    void expect(const std::shared_ptr<step_board>& board);
    // Answers filed on a board so far.
    uint64_t filed() const { return filed_.load(std::memory_order_relaxed); }

    // The calling thread does the lane's reading itself until `done()` or `deadline`, while the
    // lane's thread waits: a caller that waits for its step here is the thread the step's last
    // answer wakes, and it settles the step on the spot, one thread wake-up fewer than being woken
    // by the lane's thread (each is tens of microseconds on the GPU machines' VMs). False at once,
    // reading nothing, when `done()` holds already or another caller reads. `done` is asked after
    // every round; another thread that makes it true calls a nudger(). Until `spin_until` the
    // caller polls without sleeping (tuning.reply_spin_us): no wake-up when the answers come.
    bool read_until(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline,
                    std::chrono::steady_clock::time_point spin_until = {});
    // Ends the reading caller's current wait in poll, so that it asks `done` again (a no-op on the
    // reading thread itself, or when nobody reads). It holds the lane's wake-up descriptor, not
    // the lane, so it may outlive the lane and run on any thread.
    std::function<void()> nudger() const;

   private:
    struct connection {
        net::unique_fd fd;
        bool local = false;  // accepted on the local socket: answers come through `ring`
        int32_t rank = -1;   // -1 until its greeting is read
        std::unique_ptr<answer_ring> ring;
        net::clock::time_point accepted;
        // A rank's received bytes (room for one largest frame, sized at its greeting): one recv
        // takes every frame the socket holds, and a frame cut short waits at the front.
        std::vector<char> in;
        size_t filled = 0;
        int64_t partial_since_ns = 0;  // when the frame cut short began to arrive (steady_now_ns)
    };

    answer_lane(const std::string& host, const group_config& config, net::unique_fd listener, uint16_t port,
                net::unique_fd local_listener, std::string local_name);
    // The lane's thread: rounds while no caller reads.
    void serve();
    // One poll of the bell, the listener and every connection (bounded by `max_wait_ms`), then
    // what they hold: accepted, greeted, answers filed; it ends early once `done` (if given)
    // holds. With `spin`, or while the lane spins (tuning.rank_spin_us), poll does not sleep.
    // Under reading_.
    void round(int max_wait_ms, const std::function<bool()>* done, bool spin = false);

    // What wakes the reader from its poll: an eventfd, and which caller reads (none: the lane's
    // thread, or nobody).
    struct bell {
        net::unique_fd fd;
        std::atomic<std::thread::id> reader{};
        void ring() const;
        void drain() const;
    };
    // The round's descriptors: the bell, the listeners, each connection's socket and ring bell.
    void gather_polled();
    void accept_connection(const net::unique_fd& listener, bool local);
    // False: the connection is to be closed.
    bool read_greeting(connection& c);
    // A greeted local connection's ring, created and handed to its rank.
    bool offer_ring(connection& c);
    // Empties the ring's bell, then takes every frame the ring holds and files it.
    bool read_ring(connection& c, int64_t woke_at_ns);
    // Takes every frame the connection's ring holds and files it, leaving its bell as it is.
    bool read_ring_frames(connection& c, int64_t woke_at_ns);
    // Files what every ring holds, with no system call; true when `done` says the step is settled.
    bool read_rings_in_memory(const std::function<bool()>* done);
    // Reads what the socket holds and files every complete frame; `woke_at_ns`: when poll returned.
    bool read_answers(connection& c, int64_t woke_at_ns);
    // `received_at_ns`: when the recv that completed the frames returned.
    bool file_frames(connection& c, int64_t woke_at_ns, int64_t received_at_ns);
    bool file_answer(const connection& c, std::string_view body, int64_t woke_at_ns, int64_t received_at_ns);
    // How long poll may sleep: kIdlePollMs, or less when a frame cut short runs out of time sooner.
    int idle_poll_ms() const;
    // Forgets closed connections and closes those that did not greet, or finish a frame, in time.
    void drop_closed_and_silent();
    std::shared_ptr<step_board> board_of(uint64_t step_id);

    const int32_t ranks_;
    const size_t max_body_;
    const std::chrono::microseconds spin_;
    const std::string host_;
    const net::unique_fd listener_;
    const uint16_t port_;
    const net::unique_fd local_listener_;  // -1: none
    const std::string local_name_;
    const uint64_t secret_;
    std::shared_ptr<bell> bell_;
    std::atomic<bool> stopping_{false};
    std::atomic<int64_t> spin_until_ns_{0};
    std::atomic<uint64_t> filed_{0};
    // Whoever reads: the lane's thread, or a caller in read_until.
    std::mutex reading_;
    std::vector<connection> connections_;  // under reading_
    std::vector<pollfd> polled_;           // under reading_: a round's descriptors
    // under reading_: for each of polled_ past the listeners, its connection's index and whether it
    // is the connection's ring bell
    std::vector<std::pair<size_t, bool>> polled_owner_;
    std::string ring_body_;  // under reading_: a frame copied out of a ring
    // Callers in read_until; the lane's thread waits on stop_ while there are any, looking again
    // every kReaderBackMs.
    std::mutex stop_mutex_;
    std::condition_variable stop_;
    std::atomic<int> guests_{0};
    std::mutex mutex_;
    std::map<uint64_t, std::weak_ptr<step_board>> boards_;  // by step id, under mutex_
    std::thread thread_;
};

}  // namespace ds

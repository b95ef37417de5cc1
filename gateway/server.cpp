#include "gateway/server.h"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <boost/asio.hpp>

#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "gateway/protocol.h"
#include "gateway/steps.h"

namespace ds::gateway {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using unix_socket = asio::local::stream_protocol;
using clock_type = std::chrono::steady_clock;

namespace {

spdlog::logger& gateway_log() {
    static const std::shared_ptr<spdlog::logger> logger = [] {
        if (auto existing = spdlog::get("distsample.gateway")) return existing;
        return spdlog::stderr_color_mt("distsample.gateway");
    }();
    return *logger;
}

// A thread that runs jobs one at a time in the order they were pushed.
class job_queue {
   public:
    job_queue() : thread_([this] { run(); }) {}
    ~job_queue() { stop(); }
    job_queue(const job_queue&) = delete;
    job_queue& operator=(const job_queue&) = delete;

    void push(std::function<void()> job) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            jobs_.push_back(std::move(job));
        }
        ready_.notify_one();
    }

    // Runs `job` on the calling thread when nothing is queued or running (the order stays that of
    // the calls), else queues it: saves a thread hand-off on the hot path. For jobs that never block.
    void run_or_push(std::function<void()> job) {
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

    // Runs what is queued, then joins.
    void stop() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
        }
        ready_.notify_one();
        if (thread_.joinable()) thread_.join();
    }

   private:
    void run() {
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

    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<std::function<void()>> jobs_;
    bool busy_ = false;  // a job is running (here or on a caller's thread)
    bool stopping_ = false;
    std::thread thread_;
};

// A reply frame for `request_id`; `fill` sets its body.
template <class Fill>
std::string reply_frame(uint64_t request_id, Fill&& fill) {
    wire::Reply reply;
    reply.set_version(kProtocolVersion);
    reply.set_request_id(request_id);
    fill(reply);
    std::string out;
    append_frame(reply, out);
    return out;
}

std::string error_frame(uint64_t request_id, const wire::Error& error) {
    return reply_frame(request_id, [&](wire::Reply& r) { *r.mutable_error() = error; });
}

// Compares without an early exit, so the time taken does not reveal a matching prefix.
bool same_secret(const std::string& given, const std::string& secret) {
    if (given.size() != secret.size()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ secret[i]);
    return diff == 0;
}

// One scheduler connection: reads frames, hands requests to the server, writes the replies in
// request order. All its state is touched on its strand only; `deliver` may be called from any
// thread.
class connection_base : public std::enable_shared_from_this<connection_base> {
   public:
    virtual ~connection_base() = default;
    // Queues the reply of request number `seq`; `close_after`: close once it has been written.
    virtual void deliver(uint64_t seq, std::string frame, bool close_after) = 0;
    // deliver() after `delay` (slow_connection): the connection's later replies wait behind it.
    virtual void deliver_late(uint64_t seq, std::string frame, std::chrono::milliseconds delay) = 0;
    // Closes the connection now (cut_connection); the replies it still owes are dropped.
    virtual void cut() = 0;
};

}  // namespace

struct server::impl {
    static constexpr int64_t kInlineModelLogits = 65536;

    gateway_config config;
    group& ranks;
    group_config group_limits;
    const logits_source* model;
    gateway_metrics metrics;
    slot_table slots;

    asio::io_context io;
    asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
    tcp::acceptor tcp_acceptor{io};
    unix_socket::acceptor unix_acceptor{io};
    tcp::acceptor http_acceptor{io};
    std::vector<std::thread> io_threads;
    std::unique_ptr<job_queue> dispatcher;
    std::unique_ptr<job_queue> completer;
    uint16_t bound_tcp_port = 0;
    uint16_t bound_metrics_port = 0;
    std::mutex stop_mutex;
    bool stopped = false;
    // The fault plan's ledger (actors/fault_report.h), replaced by Inject / Clear; each step's
    // completion records into the ledger of the plan it was submitted under.
    std::mutex ledger_mutex;
    std::shared_ptr<fault_ledger> ledger;
    uint64_t next_step_id = 1;  // the group's id of the next step to complete (completion thread only)

    impl(const gateway_config& c, group& g, const logits_source* m)
        : config(c),
          ranks(g),
          group_limits(g.config()),
          model(m),
          metrics(g.config().distribution.tp),
          slots(g.config().limits.max_slots),
          ledger(std::make_shared<fault_ledger>(g.config().faults, g.config().distribution.policy)) {}

    std::shared_ptr<fault_ledger> current_ledger() {
        std::lock_guard<std::mutex> lock(ledger_mutex);
        return ledger;
    }
    // On the completion thread, in submission order: every submitted step took the group's next
    // id, and an answered step says its own. Returns the step's id.
    uint64_t record_faults(fault_ledger& step_ledger, const step_reply& reply, clock_type::time_point arrived) {
        const uint64_t id = reply.result.is_ok() ? reply.step_id : next_step_id;
        next_step_id = id + 1;
        if (step_ledger.plan().empty()) return id;
        const int64_t latency_ns =
            std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - arrived).count();
        metrics.observe_faults(step_ledger.record(id, reply, latency_ns));
        return id;
    }
    // A step's reply, through the connection faults that fire on it: the step itself was answered
    // and counted either way.
    void send_step_reply(connection_base& conn, uint64_t seq, std::string frame, const connection_step_faults& faults) {
        if (faults.cut) {
            ++metrics.replies_dropped;
            return conn.cut();
        }
        if (faults.reply_delay_ms > 0)
            return conn.deliver_late(seq, std::move(frame), std::chrono::milliseconds(faults.reply_delay_ms));
        conn.deliver(seq, std::move(frame), false);
    }

    status start();
    void stop();
    template <class Acceptor>
    void accept(Acceptor& acceptor);
    void accept_http();
    // Handles one decoded request of `conn` (called on the connection's strand).
    void handle(const std::shared_ptr<connection_base>& conn, uint64_t seq, std::shared_ptr<wire::Request> request,
                clock_type::time_point arrived);
    void run_step(const std::shared_ptr<connection_base>& conn, uint64_t seq, std::shared_ptr<wire::Request> request,
                  clock_type::time_point arrived);
    std::string stats_frame(uint64_t request_id);
};

namespace {

template <class Socket>
class connection final : public connection_base {
   public:
    // Reading pauses while this many requests of the connection, or requests of this many
    // maximum-size frames, wait for their replies: the memory a client can make the server hold.
    static constexpr uint64_t kMaxInFlight = 4096;
    static constexpr uint64_t kMaxInFlightFrames = 4;
    static constexpr std::chrono::seconds kLinger{2};

    connection(Socket socket, server::impl& server, std::string peer)
        : socket_(std::move(socket)),
          strand_(asio::make_strand(server.io)),
          linger_timer_(strand_),
          server_(server),
          reader_(static_cast<uint32_t>(server.config.max_frame_bytes)),
          authenticated_(server.config.secret.empty()),
          peer_(std::move(peer)) {}

    ~connection() override { --server_.metrics.connections_open; }

    void start() {
        ++server_.metrics.connections_accepted;
        ++server_.metrics.connections_open;
        asio::dispatch(strand_, [self = shared()] { self->read(); });
    }

    void deliver(uint64_t seq, std::string frame, bool close_after) override {
        asio::post(strand_, [self = shared(), seq, frame = std::move(frame), close_after]() mutable {
            self->ready_.emplace(seq, std::make_pair(std::move(frame), close_after));
            self->flush();
        });
    }

    void deliver_late(uint64_t seq, std::string frame, std::chrono::milliseconds delay) override {
        auto timer = std::make_shared<asio::steady_timer>(strand_, delay);
        timer->async_wait(asio::bind_executor(
            strand_, [self = shared(), timer, seq, frame = std::move(frame)](boost::system::error_code) mutable {
                self->ready_.emplace(seq, std::make_pair(std::move(frame), false));
                self->flush();
            }));
    }

    void cut() override {
        asio::post(strand_, [self = shared()] {
            gateway_log().warn("cut the connection from {} (fault cut_connection)", self->peer_);
            self->close();
        });
    }

   private:
    std::shared_ptr<connection> shared() { return std::static_pointer_cast<connection>(shared_from_this()); }

    void read() {
        const bool too_much_in_flight =
            next_seq_ - next_to_send_ >= kMaxInFlight ||
            in_flight_bytes_ >= kMaxInFlightFrames * static_cast<uint64_t>(server_.config.max_frame_bytes);
        if (reading_ || read_done_ || closed_ || too_much_in_flight) return;
        reading_ = true;
        socket_.async_read_some(asio::buffer(chunk_),
                                asio::bind_executor(strand_, [self = shared()](boost::system::error_code ec, size_t n) {
                                    self->reading_ = false;
                                    self->on_read(ec, n);
                                }));
    }

    void on_read(boost::system::error_code ec, size_t n) {
        if (closed_) return;
        if (ec) {
            read_done_ = true;
            if (ec == asio::error::eof && reader_.buffered() > 0) {
                reject(0, reader_.truncated_error());
            } else if (ec != asio::error::eof) {
                close();
            } else {
                flush();  // a half-closed client still gets its replies
            }
            return;
        }
        reader_.append(chunk_.data(), n);
        const auto arrived = clock_type::now();
        const uint8_t* payload = nullptr;
        size_t size = 0;
        wire::Error error;
        for (;;) {
            const frame_reader::result r = reader_.next(payload, size, error);
            if (r == frame_reader::result::need_more) break;
            if (r == frame_reader::result::error) {
                reject(0, error);
                return;
            }
            auto request = std::make_shared<wire::Request>();
            if (!decode_request(payload, size, *request, error)) {
                reject(request->request_id(), error);
                return;
            }
            if (!authenticated_) {
                const bool ok = request->has_auth() && same_secret(request->auth().secret(), server_.config.secret);
                if (!ok) {
                    gateway_log().warn("rejected an unauthenticated connection from {}", peer_);
                    reject(request->request_id(),
                           make_error(wire::Error::UNAUTHENTICATED, "auth",
                                      "this server needs an Auth frame with the shared secret first"));
                    return;
                }
                authenticated_ = true;
            }
            request_bytes_.push_back(size);
            in_flight_bytes_ += size;
            server_.handle(shared_from_this(), next_seq_++, std::move(request), arrived);
        }
        read();
    }

    // Answers with `error` after the replies already owed, then closes; reads nothing more.
    void reject(uint64_t request_id, const wire::Error& error) {
        ++server_.metrics.frames_rejected;
        read_done_ = true;
        request_bytes_.push_back(0);
        ready_.emplace(next_seq_++, std::make_pair(error_frame(request_id, error), true));
        flush();
    }

    void flush() {
        if (closed_) return;
        for (auto it = ready_.find(next_to_send_); it != ready_.end(); it = ready_.find(next_to_send_)) {
            outbox_ += it->second.first;
            closing_ = closing_ || it->second.second;
            ready_.erase(it);
            ++next_to_send_;
            in_flight_bytes_ -= request_bytes_.front();
            request_bytes_.pop_front();
        }
        if (writing_) return;
        if (outbox_.empty()) {
            if (closing_) {
                linger();
            } else if (read_done_ && next_to_send_ == next_seq_) {
                close();
            }
            return;
        }
        writing_ = true;
        sending_ = std::move(outbox_);
        outbox_.clear();
        asio::async_write(socket_, asio::buffer(sending_),
                          asio::bind_executor(strand_, [self = shared()](boost::system::error_code ec, size_t) {
                              self->writing_ = false;
                              if (ec) {
                                  self->close();
                                  return;
                              }
                              self->flush();
                              self->read();  // resumes a paused reader
                          }));
    }

    // After an error reply: stop sending, then read and drop what the client still sends until it
    // closes (or kLinger passes), so closing does not reset the connection before the client has
    // read the error.
    void linger() {
        if (lingering_ || closed_) return;
        lingering_ = true;
        boost::system::error_code ignored;
        socket_.shutdown(Socket::shutdown_send, ignored);
        linger_timer_.expires_after(kLinger);
        linger_timer_.async_wait(
            asio::bind_executor(strand_, [self = shared()](boost::system::error_code) { self->close(); }));
        drain();
    }

    void drain() {
        socket_.async_read_some(asio::buffer(chunk_),
                                asio::bind_executor(strand_, [self = shared()](boost::system::error_code ec, size_t) {
                                    if (ec || self->closed_) return self->close();
                                    self->drain();
                                }));
    }

    void close() {
        if (closed_) return;
        linger_timer_.cancel();
        closed_ = true;
        boost::system::error_code ignored;
        socket_.shutdown(Socket::shutdown_both, ignored);
        socket_.close(ignored);
    }

    Socket socket_;
    asio::strand<asio::io_context::executor_type> strand_;
    asio::steady_timer linger_timer_;
    server::impl& server_;
    frame_reader reader_;
    std::array<uint8_t, 16384> chunk_{};
    bool authenticated_;
    std::string peer_;
    uint64_t next_seq_ = 0;                                   // the number the next request gets
    uint64_t next_to_send_ = 0;                               // the request whose reply goes out next
    std::deque<size_t> request_bytes_;                        // frame sizes of requests next_to_send_ ... next_seq_ - 1
    uint64_t in_flight_bytes_ = 0;                            // their sum: the parsed requests the server holds
    std::map<uint64_t, std::pair<std::string, bool>> ready_;  // replies waiting for earlier ones
    std::string outbox_;
    std::string sending_;
    bool reading_ = false;
    bool read_done_ = false;
    bool writing_ = false;
    bool closing_ = false;  // an error reply is queued: close after it
    bool lingering_ = false;
    bool closed_ = false;
};

std::string peer_name(const tcp::socket& s) {
    boost::system::error_code ec;
    const tcp::endpoint e = s.remote_endpoint(ec);
    return ec ? "tcp peer" : fmt::format("{}:{}", e.address().to_string(), e.port());
}
std::string peer_name(const unix_socket::socket&) { return "unix socket peer"; }

// One HTTP request on the metrics port: GET /metrics or GET /healthz, then close.
class http_session : public std::enable_shared_from_this<http_session> {
   public:
    http_session(tcp::socket socket, server::impl& server)
        : socket_(std::move(socket)), server_(server), request_(8192) {}

    void start() {
        asio::async_read_until(
            socket_, request_, "\r\n\r\n", [self = shared_from_this()](boost::system::error_code ec, size_t) {
                if (ec) return;
                std::istream in(&self->request_);
                std::string method;
                std::string target;
                in >> method >> target;
                if (method != "GET") return self->respond(405, "method not allowed\n");
                if (target == "/metrics") return self->respond(200, self->server_.metrics.render());
                if (target == "/healthz") {
                    // group::health waits for the ranks: run it on the dispatcher, not here.
                    self->server_.dispatcher->push([self] {
                        const status s = self->server_.ranks.health();
                        asio::post(self->socket_.get_executor(), [self, s] {
                            self->respond(s.is_ok() ? 200 : 503, s.is_ok() ? "ok\n" : s.message + "\n");
                        });
                    });
                    return;
                }
                self->respond(404, "not found: try /metrics or /healthz\n");
            });
    }

   private:
    void respond(int code, const std::string& body) {
        const char* reason = code == 200   ? "OK"
                             : code == 404 ? "Not Found"
                             : code == 405 ? "Method Not Allowed"
                                           : "Service Unavailable";
        response_ = fmt::format(
            "HTTP/1.1 {} {}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: "
            "close\r\n\r\n{}",
            code, reason, body.size(), body);
        asio::async_write(socket_, asio::buffer(response_),
                          [self = shared_from_this()](boost::system::error_code, size_t) {
                              boost::system::error_code ignored;
                              self->socket_.shutdown(tcp::socket::shutdown_both, ignored);
                          });
    }

    tcp::socket socket_;
    server::impl& server_;
    asio::streambuf request_;
    std::string response_;
};

}  // namespace

template <class Acceptor>
void server::impl::accept(Acceptor& acceptor) {
    using socket_type = typename Acceptor::protocol_type::socket;
    acceptor.async_accept([this, &acceptor](boost::system::error_code ec, socket_type socket) {
        if (ec == asio::error::operation_aborted) return;
        if (!ec) {
            if constexpr (std::is_same_v<socket_type, tcp::socket>) {
                boost::system::error_code ignored;
                socket.set_option(tcp::no_delay(true), ignored);
            }
            std::string peer = peer_name(socket);
            std::make_shared<connection<socket_type>>(std::move(socket), *this, std::move(peer))->start();
        }
        accept(acceptor);
    });
}

void server::impl::accept_http() {
    http_acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
        if (ec == asio::error::operation_aborted) return;
        if (!ec) std::make_shared<http_session>(std::move(socket), *this)->start();
        accept_http();
    });
}

void server::impl::handle(const std::shared_ptr<connection_base>& conn, uint64_t seq,
                          std::shared_ptr<wire::Request> request, clock_type::time_point arrived) {
    const uint64_t id = request->request_id();
    switch (request->body_case()) {
        case wire::Request::kAuth:
            conn->deliver(seq, reply_frame(id, [](wire::Reply& r) { r.set_ok(true); }), false);
            return;
        case wire::Request::kSampleStep:
        case wire::Request::kVerifyStep: {
            // An io thread may check and submit a step itself, but computes no more than
            // kInlineModelLogits model logits: bigger model steps go to the dispatcher's thread.
            const wire::Step& step = request->has_verify_step() ? request->verify_step() : request->sample_step();
            const int64_t model_logits =
                step.logits_size() > 0
                    ? 0
                    : int64_t{step.slots_size()} * std::max(1, step.tokens_per_req()) * group_limits.limits.vocab_size;
            auto job = [this, conn, seq, request, arrived] { run_step(conn, seq, request, arrived); };
            if (model_logits <= kInlineModelLogits) {
                dispatcher->run_or_push(std::move(job));
            } else {
                dispatcher->push(std::move(job));
            }
            return;
        }
        case wire::Request::kRegister:
            dispatcher->push([this, conn, seq, request, id] {
                const wire::Register& m = request->register_();
                int32_t slot = m.slot();
                wire::Error error;
                if (slot == 0) {
                    slot = slots.free_slot();
                    if (slot == 0)
                        error = make_error(wire::Error::NO_FREE_SLOT, "slot",
                                           fmt::format("all {} slots are registered", slots.max_slots() - 1));
                } else if (slot < 1 || slot >= slots.max_slots()) {
                    error =
                        make_error(wire::Error::BAD_FIELD, "slot",
                                   fmt::format("slot = {}: expected 0 (any) or 1 to {}", slot, slots.max_slots() - 1));
                }
                for (int i = 0; i < m.history_size() && error.code() == wire::Error::UNSPECIFIED; ++i) {
                    if (m.history(i) < 0 || m.history(i) >= group_limits.limits.vocab_size) {
                        error = make_error(wire::Error::BAD_FIELD, fmt::format("history[{}]", i),
                                           fmt::format("history[{}] = {}: expected a token id in [0, {})", i,
                                                       m.history(i), group_limits.limits.vocab_size));
                    }
                }
                if (error.code() == wire::Error::UNSPECIFIED) {
                    const std::vector<int32_t> history(m.history().begin(), m.history().end());
                    if (status s = ranks.register_request(slot, params_of(m.params()), history); !s.is_ok()) {
                        error = error_of(s);
                    } else {
                        slots.set(slot, history);
                    }
                }
                if (error.code() != wire::Error::UNSPECIFIED) return conn->deliver(seq, error_frame(id, error), false);
                conn->deliver(
                    seq,
                    reply_frame(id,
                                [&](wire::Reply& r) {
                                    r.mutable_registered()->set_scheduler_request_id(m.scheduler_request_id());
                                    r.mutable_registered()->set_slot(slot);
                                }),
                    false);
            });
            return;
        case wire::Request::kRelease:
            dispatcher->push([this, conn, seq, request, id] {
                const int32_t slot = request->release().slot();
                if (!slots.registered(slot)) {
                    return conn->deliver(seq,
                                         error_frame(id, make_error(wire::Error::UNKNOWN_SLOT, "slot",
                                                                    fmt::format("slot {} is not registered", slot))),
                                         false);
                }
                if (status s = ranks.release(slot); !s.is_ok())
                    return conn->deliver(seq, error_frame(id, error_of(s)), false);
                slots.release(slot);
                conn->deliver(seq, reply_frame(id, [](wire::Reply& r) { r.set_ok(true); }), false);
            });
            return;
        case wire::Request::kHealth:
            dispatcher->push([this, conn, seq, id] {
                const status s = ranks.health();
                conn->deliver(seq,
                              reply_frame(id,
                                          [&](wire::Reply& r) {
                                              r.mutable_health()->set_ok(s.is_ok());
                                              r.mutable_health()->set_message(s.message);
                                          }),
                              false);
            });
            return;
        case wire::Request::kStats:
            dispatcher->push([this, conn, seq, id] { conn->deliver(seq, stats_frame(id), false); });
            return;
        case wire::Request::kInject:
        case wire::Request::kClear:
            // On the dispatcher, so the plan applies from the next step this gateway submits.
            dispatcher->push([this, conn, seq, request, id] {
                fault_plan plan;
                if (request->has_inject()) {
                    plan.seed = request->inject().seed();
                    for (int i = 0; i < request->inject().faults_size(); ++i) {
                        result<fault_spec> spec = parse_fault_spec(request->inject().faults(i));
                        if (!spec.is_ok()) {
                            return conn->deliver(
                                seq,
                                error_frame(id, make_error(wire::Error::BAD_FIELD, fmt::format("faults[{}]", i),
                                                           spec.error().message)),
                                false);
                        }
                        plan.faults.push_back(*spec);
                    }
                }
                if (status s = ranks.set_fault_plan(plan); !s.is_ok())
                    return conn->deliver(seq, error_frame(id, error_of(s)), false);
                {
                    std::lock_guard<std::mutex> lock(ledger_mutex);
                    ledger = std::make_shared<fault_ledger>(plan, group_limits.distribution.policy);
                }
                conn->deliver(seq, reply_frame(id, [](wire::Reply& r) { r.set_ok(true); }), false);
            });
            return;
        case wire::Request::BODY_NOT_SET: break;  // decode_request rejected it already
    }
}

std::string server::impl::stats_frame(uint64_t request_id) {
    return reply_frame(request_id, [&](wire::Reply& r) {
        wire::StatsReply& s = *r.mutable_stats();
        s.set_steps(metrics.steps.load());
        s.set_step_errors(metrics.step_errors.load());
        s.set_desync_events(metrics.desync_events.load());
        s.set_connections(static_cast<uint32_t>(metrics.connections_open.load()));
        s.set_registered_slots(static_cast<uint32_t>(slots.registered_count()));
        s.set_tp(group_limits.distribution.tp);
        s.set_vocab_size(group_limits.limits.vocab_size);
        s.set_max_batch(group_limits.limits.max_batch);
        s.set_max_tokens_per_req(group_limits.limits.max_tokens_per_req);
        s.set_max_slots(group_limits.limits.max_slots);
        s.set_protocol_version(kProtocolVersion);
        for (fault_kind kind : kAllFaultKinds) {
            const gateway_metrics::fault_counts& c = metrics.faults[static_cast<size_t>(kind)];
            wire::FaultCounts& f = *s.add_faults();
            f.set_kind(fault_kind_name(kind));
            f.set_injected(c.injected.load());
            f.set_detected(c.detected.load());
            f.set_masked(c.masked.load());
            f.set_repaired(c.repaired.load());
            f.set_failed_steps(c.failed_steps.load());
        }
    });
}

// On the dispatcher: validate, fill the logits, submit; the completion thread answers.
void server::impl::run_step(const std::shared_ptr<connection_base>& conn, uint64_t seq,
                            std::shared_ptr<wire::Request> request, clock_type::time_point arrived) {
    const uint64_t id = request->request_id();
    auto step = std::make_shared<prepared_step>();
    wire::Error error;
    if (!prepare_step(std::move(request), group_limits, slots, model, *step, error)) {
        ++metrics.step_errors;
        return conn->deliver(seq, error_frame(id, error), false);
    }
    const int32_t bs = step->request.batch_size();
    const int32_t n = step->request.tokens_per_req;
    std::shared_ptr<fault_ledger> step_ledger = current_ledger();
    auto future = std::make_shared<std::future<step_reply>>(ranks.submit(step->request));
    // `step` keeps the logits alive until the ranks have answered.
    completer->push([this, conn, seq, id, step, future, arrived, bs, n, step_ledger] {
        const step_reply reply = future->get();
        const connection_step_faults connection_faults =
            connection_faults_at(step_ledger->plan(), record_faults(*step_ledger, reply, arrived));
        if (!reply.result.is_ok()) {
            ++metrics.step_errors;
            if (reply.result.code != status_code::invalid_argument) ++metrics.rank_failures;
            metrics.desync_events += reply.desyncs.size();
            return send_step_reply(*conn, seq, error_frame(id, error_of(reply.result)), connection_faults);
        }
        const std::vector<int32_t>& packed = reply.outputs.packed;
        const int32_t* accept_length = packed.data() + static_cast<size_t>(bs) * n;
        for (int32_t b = 0; b < bs; ++b) {
            slots.commit(step->request.slots[static_cast<size_t>(b)], step->generations[static_cast<size_t>(b)],
                         packed.data() + static_cast<size_t>(b) * n, accept_length[b]);
            metrics.accept_length.observe(accept_length[b]);
        }
        std::string frame = reply_frame(id, [&](wire::Reply& r) {
            wire::StepReply& s = *r.mutable_step();
            s.set_step_id(reply.step_id);
            s.mutable_predict()->Add(packed.begin(), packed.begin() + static_cast<std::ptrdiff_t>(bs) * n);
            s.mutable_accept_length()->Add(accept_length, accept_length + bs);
            s.mutable_logprobs()->Add(reply.outputs.logprobs.begin(), reply.outputs.logprobs.end());
            for (int32_t b = 0; b < bs; ++b) {
                if (reply.outputs.row_error[static_cast<size_t>(b)] != 0) s.add_row_errors(b);
            }
            s.set_desync_events(static_cast<uint32_t>(reply.desyncs.size()));
        });
        ++metrics.steps;
        metrics.desync_events += reply.desyncs.size();
        metrics.step_latency.observe(std::chrono::duration<double>(clock_type::now() - arrived).count());
        metrics.observe_ranks(reply.rank_timing);
        send_step_reply(*conn, seq, std::move(frame), connection_faults);
    });
}

status server::impl::start() {
    if (std::string e = validate_gateway_config(config); !e.empty()) return status::invalid(e);
    if (model != nullptr && model->vocab_size() != group_limits.limits.vocab_size) {
        return status::invalid(fmt::format("gateway.model vocabulary = {}: expected the group's vocab_size = {}",
                                           model->vocab_size(), group_limits.limits.vocab_size));
    }
    boost::system::error_code ec;
    auto listen = [&](tcp::acceptor& acceptor, int32_t port, const char* key) -> status {
        const asio::ip::address address =
            asio::ip::make_address(config.listen_address == "localhost" ? "127.0.0.1" : config.listen_address, ec);
        if (ec)
            return status::invalid(fmt::format("gateway.listen_address = '{}': expected an IP address ({})",
                                               config.listen_address, ec.message()));
        const tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
        acceptor.open(endpoint.protocol(), ec);
        if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
        if (!ec) acceptor.bind(endpoint, ec);
        if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
        if (ec)
            return {status_code::internal, fmt::format("cannot listen on {}:{} ({} = {}): {}", config.listen_address,
                                                       port, key, port, ec.message())};
        return status::success();
    };
    if (!config.listen_address.empty()) {
        if (status s = listen(tcp_acceptor, config.port, "gateway.port"); !s.is_ok()) return s;
        bound_tcp_port = tcp_acceptor.local_endpoint().port();
        accept(tcp_acceptor);
    }
    if (!config.unix_socket.empty()) {
        // A socket file left by an earlier run is replaced; any other file is an error.
        struct stat existing {};
        if (::stat(config.unix_socket.c_str(), &existing) == 0 && S_ISSOCK(existing.st_mode))
            ::unlink(config.unix_socket.c_str());
        const unix_socket::endpoint endpoint(config.unix_socket);
        unix_acceptor.open(endpoint.protocol(), ec);
        if (!ec) unix_acceptor.bind(endpoint, ec);
        if (!ec) unix_acceptor.listen(asio::socket_base::max_listen_connections, ec);
        if (ec)
            return {status_code::internal,
                    fmt::format("cannot listen on gateway.unix_socket = '{}': {}", config.unix_socket, ec.message())};
        accept(unix_acceptor);
    }
    if (config.metrics_port >= 0 && !config.listen_address.empty()) {
        if (status s = listen(http_acceptor, config.metrics_port, "gateway.metrics_port"); !s.is_ok()) return s;
        bound_metrics_port = http_acceptor.local_endpoint().port();
        accept_http();
    }
    dispatcher = std::make_unique<job_queue>();
    completer = std::make_unique<job_queue>();
    for (int32_t i = 0; i < config.io_threads; ++i) io_threads.emplace_back([this] { io.run(); });
    gateway_log().info("serving: tcp {}:{}, unix socket '{}', metrics port {}", config.listen_address, bound_tcp_port,
                       config.unix_socket, bound_metrics_port);
    return status::success();
}

void server::impl::stop() {
    std::lock_guard<std::mutex> lock(stop_mutex);
    if (stopped) return;
    stopped = true;
    // Stop the io threads first, so nothing hands the queues new work; then answer what the
    // queues hold (those replies are dropped with the connections).
    work.reset();
    io.stop();
    for (std::thread& t : io_threads) t.join();
    boost::system::error_code ignored;
    tcp_acceptor.close(ignored);
    unix_acceptor.close(ignored);
    http_acceptor.close(ignored);
    if (dispatcher) dispatcher->stop();
    if (completer) completer->stop();
    if (!config.unix_socket.empty()) ::unlink(config.unix_socket.c_str());
}

server::server(const gateway_config& config, group& ranks, const logits_source* model)
    : impl_(std::make_unique<impl>(config, ranks, model)) {}
server::~server() { stop(); }
status server::start() { return impl_->start(); }
void server::stop() { impl_->stop(); }
uint16_t server::tcp_port() const { return impl_->bound_tcp_port; }
uint16_t server::metrics_port() const { return impl_->bound_metrics_port; }
const gateway_metrics& server::metrics() const { return impl_->metrics; }

}  // namespace ds::gateway

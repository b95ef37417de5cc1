#include "gateway/connection.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <deque>
#include <map>
#include <optional>
#include <utility>

#include "gateway/authentication.h"
#include "gateway/log.h"
#include "gateway/replies.h"

namespace ds::gateway {

namespace {

using tcp = asio::ip::tcp;
using unix_socket = asio::local::stream_protocol;
using std::chrono::milliseconds;

std::atomic<uint64_t> last_connection_id{0};

std::string peer_name(const tcp::socket& s) {
    boost::system::error_code ec;
    const tcp::endpoint e = s.remote_endpoint(ec);
    return ec ? "tcp peer" : fmt::format("{}:{}", e.address().to_string(), e.port());
}
std::string peer_name(const unix_socket::socket&) { return "unix socket peer"; }

// A deadline the connection's state sets: when, and what the client failed to do by then.
struct deadline {
    clock_type::time_point at;
    const char* key;  // the gateway.* key that sets it
    int32_t ms;
    const char* missed;
};

// All of a connection's state is touched on its strand only.
template <class Socket>
class connection final : public connection_base {
   public:
    // Reading pauses while this many requests of the connection wait for their replies.
    static constexpr uint64_t kMaxInFlight = 4096;
    static constexpr std::chrono::seconds kLinger{2};

    connection(Socket socket, const connection_services& services)
        : socket_(std::move(socket)),
          strand_(asio::make_strand(services.io)),
          linger_timer_(strand_),
          watchdog_(strand_),
          services_(services),
          config_(services.config),
          reader_(static_cast<uint32_t>(std::min(config_.max_frame_bytes, kMaxAuthFrameBytes)),
                  "an Auth frame, before authentication"),
          id_(++last_connection_id),
          authenticated_(config_.secret.empty()),
          peer_(peer_name(socket_)) {
        if (authenticated_) reader_.limit(static_cast<uint32_t>(config_.max_frame_bytes), "max_frame_bytes");
    }

    ~connection() override {
        --services_.metrics.connections_open;
        services_.budget.give_back(held_bytes_);
        services_.budget.leave();
    }

    void start() {
        ++services_.metrics.connections_accepted;
        ++services_.metrics.connections_open;
        asio::dispatch(strand_, [self = shared()] {
            self->last_activity_ = clock_type::now();
            self->read();
            self->watch();
        });
    }

    uint64_t id() const override { return id_; }

    void deliver(uint64_t seq, std::string frame, bool close_after) override {
        asio::post(strand_, [self = shared(), seq, frame = std::move(frame), close_after]() mutable {
            self->ready_.emplace(seq, std::make_pair(std::move(frame), close_after));
            self->flush();
        });
    }

    void deliver_late(uint64_t seq, std::string frame, milliseconds delay) override {
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

    bool paused() const {
        return next_seq_ - next_to_send_ >= kMaxInFlight ||
               in_flight_bytes_ >= static_cast<uint64_t>(config_.max_connection_bytes);
    }

    void read() {
        if (reading_ || read_done_ || closed_ || paused()) return;
        // A frame's clock runs while it can be read: not while reading was paused.
        if (reader_.buffered() > 0) frame_started_ = clock_type::now();
        reading_ = true;
        socket_.async_read_some(asio::buffer(chunk_),
                                asio::bind_executor(strand_, [self = shared()](boost::system::error_code ec, size_t n) {
                                    self->reading_ = false;
                                    // Read already ended by a limit: what came is dropped.
                                    if (self->read_done_) return;
                                    self->on_read(ec, n);
                                }));
    }

    void on_read(boost::system::error_code ec, size_t n) {
        if (closed_) return;
        if (ec) return on_read_error(ec);
        if (!take_budget(n)) return;
        const bool frame_was_open = reader_.buffered() > 0;
        reader_.append(chunk_.data(), n);
        const auto arrived = clock_type::now();
        if (!frame_was_open) frame_started_ = arrived;
        if (!take_frames(arrived)) return;
        settle_budget();
        read();
        watch();
    }

    // Hands over every whole frame buffered; false when one ended the connection.
    bool take_frames(clock_type::time_point arrived) {
        const uint8_t* payload = nullptr;
        size_t size = 0;
        wire::Error error;
        for (;;) {
            const frame_reader::result r = reader_.next(payload, size, error);
            if (r == frame_reader::result::need_more) return true;
            if (r == frame_reader::result::error) return reject(0, error), false;
            auto request = std::make_shared<wire::Request>();
            if (!decode_request(payload, size, *request, error)) return reject(request->request_id(), error), false;
            if (!authenticated_ && !authenticate(*request)) return false;
            frame_started_ = arrived;  // the next frame, if any of it came with this one
            last_activity_ = arrived;
            request_bytes_.push_back(size);
            in_flight_bytes_ += size;
            services_.sink.handle(shared_from_this(), next_seq_++, std::move(request), arrived);
        }
    }

    void on_read_error(boost::system::error_code ec) {
        read_done_ = true;
        if (ec == asio::error::eof && reader_.buffered() > 0) {
            reject(0, reader_.truncated_error());
        } else if (ec != asio::error::eof) {
            close();
        } else {
            flush();  // a half-closed client still gets its replies
        }
    }

    // The first request of a connection to a server with a secret; false (and rejected) unless
    // it is an Auth frame with the secret.
    bool authenticate(const wire::Request& request) {
        wire::Error error;
        if (!check_authentication(request, config_.secret, error)) {
            gateway_log().warn("rejected a connection from {}: {}", peer_, error.message());
            reject(request.request_id(), error);
            return false;
        }
        authenticated_ = true;
        reader_.limit(static_cast<uint32_t>(config_.max_frame_bytes), "max_frame_bytes");
        return true;
    }

    // Takes `bytes` just read from the server's buffered-bytes budget; false (and rejected) when
    // they would pass it.
    bool take_budget(size_t bytes) {
        if (services_.budget.take(bytes)) {
            held_bytes_ += bytes;
            return true;
        }
        ++services_.metrics.limits_hit;
        gateway_log().warn("closed the connection from {}: gateway.max_buffered_bytes = {} reached", peer_,
                           services_.budget.max_bytes());
        reject(0, make_error(wire::Error::LIMIT_EXCEEDED, "",
                             fmt::format("the server buffers gateway.max_buffered_bytes = {} bytes of unfinished "
                                         "frames and unanswered requests: try again later",
                                         services_.budget.max_bytes())));
        return false;
    }

    // Gives back what the connection no longer holds: frames answered, headers read.
    void settle_budget() {
        const uint64_t holding = reader_.buffered() + in_flight_bytes_;
        if (holding >= held_bytes_) return;
        services_.budget.give_back(held_bytes_ - holding);
        held_bytes_ = holding;
    }

    // Answers with `error` after the replies already owed, then closes; reads nothing more.
    void reject(uint64_t request_id, const wire::Error& error) {
        ++services_.metrics.frames_rejected;
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
        settle_budget();
        if (writing_) return;
        if (outbox_.empty()) {
            if (closing_) {
                linger();
            } else if (read_done_ && next_to_send_ == next_seq_) {
                close();
            }
            return;
        }
        write_outbox();
    }

    void write_outbox() {
        writing_ = true;
        write_started_ = clock_type::now();
        sending_ = std::move(outbox_);
        outbox_.clear();
        asio::async_write(socket_, asio::buffer(sending_),
                          asio::bind_executor(strand_, [self = shared()](boost::system::error_code ec, size_t) {
                              self->writing_ = false;
                              if (ec) return self->close();
                              self->last_activity_ = clock_type::now();
                              self->flush();
                              self->read();  // resumes a paused reader
                              self->watch();
                          }));
        watch();
    }

    // The deadline the connection's state sets, if any: none while it lingers, or while it waits
    // for the group to answer its requests.
    std::optional<deadline> current_deadline() const {
        if (closed_ || lingering_) return std::nullopt;
        if (writing_)
            return deadline{write_started_ + milliseconds(config_.write_timeout_ms), "write_timeout_ms",
                            config_.write_timeout_ms, "take a reply"};
        if (!authenticated_)
            return deadline{accepted_at_ + milliseconds(config_.auth_timeout_ms), "auth_timeout_ms",
                            config_.auth_timeout_ms, "authenticate"};
        if (reading_ && reader_.buffered() > 0)
            return deadline{frame_started_ + milliseconds(config_.read_timeout_ms), "read_timeout_ms",
                            config_.read_timeout_ms, "finish a frame"};
        if (!read_done_ && next_seq_ == next_to_send_ && config_.idle_timeout_ms > 0)
            return deadline{last_activity_ + milliseconds(config_.idle_timeout_ms), "idle_timeout_ms",
                            config_.idle_timeout_ms, "send a request"};
        return std::nullopt;
    }

    // Arms the watchdog for the state's deadline, unless it fires before that anyway; without a
    // deadline it looks again after a while.
    void watch() {
        const std::optional<deadline> d = current_deadline();
        const clock_type::time_point at = d ? d->at : clock_type::now() + milliseconds(config_.read_timeout_ms);
        if (watchdog_armed_ && watchdog_at_ <= at) return;
        watchdog_armed_ = true;
        watchdog_at_ = at;
        watchdog_.expires_at(at);
        watchdog_.async_wait(asio::bind_executor(strand_, [self = shared()](boost::system::error_code ec) {
            if (ec == asio::error::operation_aborted) return;  // re-armed earlier
            self->watchdog_armed_ = false;
            self->on_watchdog();
        }));
    }

    void on_watchdog() {
        if (closed_ || lingering_) return;
        const std::optional<deadline> d = current_deadline();
        if (d && clock_type::now() >= d->at) return expire(*d);
        watch();
    }

    void expire(const deadline& d) {
        ++services_.metrics.limits_hit;
        const std::string what = fmt::format("the client did not {} within gateway.{} = {} ms", d.missed, d.key, d.ms);
        gateway_log().warn("closed the connection from {}: {}", peer_, what);
        if (writing_) return close();  // it does not read: an error reply would not reach it
        boost::system::error_code ignored;
        socket_.cancel(ignored);  // the pending read, whose completion then finds read_done_
        reject(0, make_error(wire::Error::LIMIT_EXCEEDED, "", what));
    }

    // After an error reply: stop sending, then read and drop what the client still sends until it
    // closes (or kLinger passes), so closing does not reset the connection before the client has
    // read the error.
    void linger() {
        if (lingering_ || closed_) return;
        lingering_ = true;
        watchdog_.cancel();
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
        watchdog_.cancel();
        closed_ = true;
        boost::system::error_code ignored;
        socket_.shutdown(Socket::shutdown_both, ignored);
        socket_.close(ignored);
        services_.sink.closed(id_);
    }

    Socket socket_;
    asio::strand<asio::io_context::executor_type> strand_;
    asio::steady_timer linger_timer_;
    asio::steady_timer watchdog_;
    connection_services services_;
    const gateway_config& config_;
    frame_reader reader_;
    std::array<uint8_t, 16384> chunk_{};
    const uint64_t id_;
    bool authenticated_;
    std::string peer_;
    uint64_t next_seq_ = 0;                                   // the number the next request gets
    uint64_t next_to_send_ = 0;                               // the request whose reply goes out next
    std::deque<size_t> request_bytes_;                        // frame sizes of requests next_to_send_ ... next_seq_ - 1
    uint64_t in_flight_bytes_ = 0;                            // their sum: the parsed requests the server holds
    uint64_t held_bytes_ = 0;                                 // taken from the server's buffered-bytes budget
    std::map<uint64_t, std::pair<std::string, bool>> ready_;  // replies waiting for earlier ones
    std::string outbox_;
    std::string sending_;
    const clock_type::time_point accepted_at_ = clock_type::now();
    clock_type::time_point frame_started_;  // the first byte of the frame being read
    clock_type::time_point last_activity_;  // the last frame read or reply written
    clock_type::time_point write_started_;
    clock_type::time_point watchdog_at_;
    bool watchdog_armed_ = false;
    bool reading_ = false;
    bool read_done_ = false;
    bool writing_ = false;
    bool closing_ = false;  // an error reply is queued: close after it
    bool lingering_ = false;
    bool closed_ = false;
};

// Answers a connection over gateway.max_connections with its error, without reading from it.
template <class Socket>
void refuse(Socket& socket, const connection_services& services) {
    const uint64_t refused = ++services.metrics.connections_refused;
    const int64_t limit = services.budget.max_connections();
    if (refused % 1000 == 1)  // a flood would flood the log
        gateway_log().warn("refused a connection: gateway.max_connections = {} are open ({} refused so far)", limit,
                           refused);
    const std::string frame = error_frame(
        0, make_error(wire::Error::LIMIT_EXCEEDED, "",
                      fmt::format("gateway.max_connections = {} connections are open: try again later", limit)));
    boost::system::error_code ignored;
    socket.non_blocking(true, ignored);
    socket.write_some(asio::buffer(frame), ignored);
    socket.shutdown(Socket::shutdown_both, ignored);
    socket.close(ignored);
}

template <class Socket>
void start(Socket socket, const connection_services& services) {
    if (!services.budget.admit()) return refuse(socket, services);
    std::make_shared<connection<Socket>>(std::move(socket), services)->start();
}

}  // namespace

void start_connection(tcp::socket socket, const connection_services& services) {
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    start(std::move(socket), services);
}

void start_connection(unix_socket::socket socket, const connection_services& services) {
    start(std::move(socket), services);
}

}  // namespace ds::gateway

#include "gateway/connection.h"

#include <fmt/format.h>

#include <array>
#include <deque>
#include <map>
#include <utility>

#include "gateway/log.h"
#include "gateway/replies.h"

namespace ds::gateway {

namespace {

using tcp = asio::ip::tcp;
using unix_socket = asio::local::stream_protocol;

// Compares without an early exit, so the time taken does not reveal a matching prefix.
bool same_secret(const std::string& given, const std::string& secret) {
    if (given.size() != secret.size()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ secret[i]);
    return diff == 0;
}

std::string peer_name(const tcp::socket& s) {
    boost::system::error_code ec;
    const tcp::endpoint e = s.remote_endpoint(ec);
    return ec ? "tcp peer" : fmt::format("{}:{}", e.address().to_string(), e.port());
}
std::string peer_name(const unix_socket::socket&) { return "unix socket peer"; }

// All of a connection's state is touched on its strand only.
template <class Socket>
class connection final : public connection_base {
   public:
    // Reading pauses while this many requests of the connection, or requests of this many
    // maximum-size frames, wait for their replies: the memory a client can make the server hold.
    static constexpr uint64_t kMaxInFlight = 4096;
    static constexpr uint64_t kMaxInFlightFrames = 4;
    static constexpr std::chrono::seconds kLinger{2};

    connection(Socket socket, const connection_services& services)
        : socket_(std::move(socket)),
          strand_(asio::make_strand(services.io)),
          linger_timer_(strand_),
          services_(services),
          reader_(static_cast<uint32_t>(services.config.max_frame_bytes)),
          authenticated_(services.config.secret.empty()),
          peer_(peer_name(socket_)) {}

    ~connection() override { --services_.metrics.connections_open; }

    void start() {
        ++services_.metrics.connections_accepted;
        ++services_.metrics.connections_open;
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
            in_flight_bytes_ >= kMaxInFlightFrames * static_cast<uint64_t>(services_.config.max_frame_bytes);
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
        if (ec) return on_read_error(ec);
        reader_.append(chunk_.data(), n);
        const auto arrived = clock_type::now();
        const uint8_t* payload = nullptr;
        size_t size = 0;
        wire::Error error;
        for (;;) {
            const frame_reader::result r = reader_.next(payload, size, error);
            if (r == frame_reader::result::need_more) break;
            if (r == frame_reader::result::error) return reject(0, error);
            auto request = std::make_shared<wire::Request>();
            if (!decode_request(payload, size, *request, error)) return reject(request->request_id(), error);
            if (!authenticated_ && !authenticate(*request)) return;
            request_bytes_.push_back(size);
            in_flight_bytes_ += size;
            services_.sink.handle(shared_from_this(), next_seq_++, std::move(request), arrived);
        }
        read();
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
        if (!request.has_auth() || !same_secret(request.auth().secret(), services_.config.secret)) {
            gateway_log().warn("rejected an unauthenticated connection from {}", peer_);
            reject(request.request_id(), make_error(wire::Error::UNAUTHENTICATED, "auth",
                                                    "this server needs an Auth frame with the shared secret first"));
            return false;
        }
        authenticated_ = true;
        return true;
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
        sending_ = std::move(outbox_);
        outbox_.clear();
        asio::async_write(socket_, asio::buffer(sending_),
                          asio::bind_executor(strand_, [self = shared()](boost::system::error_code ec, size_t) {
                              self->writing_ = false;
                              if (ec) return self->close();
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
    connection_services services_;
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

template <class Socket>
void start(Socket socket, const connection_services& services) {
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

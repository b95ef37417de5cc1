// One scheduler connection (TCP or Unix socket): reads frames, authenticates, hands each request
// to the server's request handlers, and writes the replies in request order whatever order they
// complete in. Reading pauses while too many requests wait for their replies (backpressure); after
// an error reply the connection lingers, draining what the client still sends, so that the client
// reads the error instead of a reset. Its limits (docs/gateway.md, "Limits"): admission
// (gateway.max_connections), the bytes it may buffer, and the deadlines of authentication, of a
// frame, of a reply's write and of idleness.
#pragma once

#include <boost/asio.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "config/gateway_config.h"
#include "gateway/admission.h"
#include "gateway/metrics.h"
#include "gateway/protocol.h"

namespace ds::gateway {

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;

// A connection as the request handlers see it: replies may be delivered from any thread.
class connection_base : public std::enable_shared_from_this<connection_base> {
   public:
    virtual ~connection_base() = default;
    // Unique among this process's connections, never 0.
    virtual uint64_t id() const = 0;
    // Queues the reply of request number `seq`; `close_after`: close once it has been written.
    virtual void deliver(uint64_t seq, std::string frame, bool close_after) = 0;
    // deliver() after `delay` (slow_connection): the connection's later replies wait behind it.
    virtual void deliver_late(uint64_t seq, std::string frame, std::chrono::milliseconds delay) = 0;
    // Closes the connection now (cut_connection); the replies it still owes are dropped.
    virtual void cut() = 0;
};

// Where a connection hands its authenticated requests (gateway/handlers.h); every request handed
// over is answered exactly once through deliver() or deliver_late(), or dropped by cut().
class request_sink {
   public:
    virtual void handle(const std::shared_ptr<connection_base>& conn, uint64_t seq,
                        std::shared_ptr<wire::Request> request, clock_type::time_point arrived) = 0;
    // The connection `connection_id` is closed: nothing more comes from it.
    virtual void closed(uint64_t connection_id) = 0;

   protected:
    ~request_sink() = default;
};

// What a connection uses of its server; all of it outlives the connection.
struct connection_services {
    asio::io_context& io;
    const gateway_config& config;
    gateway_metrics& metrics;
    connection_budget& budget;
    request_sink& sink;
};

// Serves an accepted socket until the client or the server closes it; refuses it (LIMIT_EXCEEDED)
// when gateway.max_connections are open.
void start_connection(asio::ip::tcp::socket socket, const connection_services& services);
void start_connection(asio::local::stream_protocol::socket socket, const connection_services& services);

}  // namespace ds::gateway

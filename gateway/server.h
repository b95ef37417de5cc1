// The scheduler gateway (docs/protocol.md, docs/gateway.md): a Boost.Asio server on TCP and a Unix
// socket in front of a ds::group, plus a small HTTP listener for /metrics and /healthz. It wires
// the parts: connections (gateway/connection.h), the request handlers with their dispatcher and
// completion threads (gateway/handlers.h), the HTTP endpoint (gateway/http_endpoint.h).
//
// Threads: `io_threads` Asio threads read and write frames and never wait for a step; the
// dispatcher and the completion thread of the request handlers.
#pragma once

#include <cstdint>
#include <memory>

#include <distsample/group.h>

#include "config/gateway_config.h"
#include "gateway/metrics.h"
#include "sources/logits_source.h"

namespace ds::gateway {

class server {
   public:
    // `ranks` and `model` (null: steps must carry their logits) must outlive the server; the
    // model's vocabulary must be the group's.
    server(const gateway_config& config, group& ranks, const logits_source* model);
    ~server();
    server(const server&) = delete;
    server& operator=(const server&) = delete;

    // Binds the listeners and starts serving; an error names the listener or the config key.
    status start();
    // Stops the listeners and the io threads, waits for the steps in flight (their replies are
    // dropped: the connections close). Idempotent; not from an io thread.
    void stop();

    // The bound ports (useful with port 0); 0 when that listener is off.
    uint16_t tcp_port() const;
    uint16_t metrics_port() const;
    const gateway_metrics& metrics() const;

   private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace ds::gateway

// The gateway's HTTP endpoint on the metrics port: one request per connection, GET /metrics
// (Prometheus text) or GET /healthz (200 "ok" or 503 with the group's health message), then close.
// At most gateway.max_http_connections at a time (more get 503 at once); the request must arrive
// within gateway.read_timeout_ms and the response be taken within gateway.write_timeout_ms.
#pragma once

#include <boost/asio.hpp>

#include <atomic>
#include <cstdint>

#include <distsample/group.h>

#include "config/gateway_config.h"
#include "gateway/job_queue.h"
#include "gateway/metrics.h"

namespace ds::gateway {

// What an HTTP session uses of its server; all of it outlives the session.
struct http_services {
    const gateway_config& config;
    gateway_metrics& metrics;
    std::atomic<int32_t>& sessions_open;
    group& ranks;
    job_queue& dispatcher;  // group::health waits for the ranks: it runs there, not on an io thread
};

void start_http_session(boost::asio::ip::tcp::socket socket, const http_services& services);

}  // namespace ds::gateway

// A C++ client of the distsample gateway (proto/distsample.proto). One connection, blocking I/O:
// `call` sends a request and waits for its reply; `send` and `receive` pipeline (send many, then
// receive their replies in the same order). Not thread-safe: use one client per thread.
//
//   std::unique_ptr<ds::client::gateway_client> c;
//   ds::status s = ds::client::gateway_client::connect("127.0.0.1:7700", "", c);  // or "unix:/path"
//   int32_t slot = 0;
//   s = c->register_request(params, history, slot);   // the server picks the slot
//   wire::StepReply out;
//   s = c->step(step, /*verify=*/true, out);
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gateway/protocol.h"
#include "kernels/sampling_types.h"

namespace ds::client {

namespace wire = distsample::wire;

class gateway_client {
   public:
    // `address` is "host:port" (TCP) or "unix:/path". With a `secret`, an Auth frame goes first.
    // `out` is set only on success.
    static status connect(const std::string& address, const std::string& secret, std::unique_ptr<gateway_client>& out,
                          uint32_t max_frame_bytes = 16u << 20);
    ~gateway_client();
    gateway_client(const gateway_client&) = delete;
    gateway_client& operator=(const gateway_client&) = delete;

    // Pipelining: stamps the version and the next request id on `request`, sends it, returns the id.
    status send(wire::Request& request, uint64_t& request_id);
    // The next reply, in the order the requests were sent.
    status receive(wire::Reply& reply);
    // send + receive; an error reply becomes a status (see status_of).
    status call(wire::Request& request, wire::Reply& reply);

    status register_request(const wire::SamplingParams& params, const std::vector<int32_t>& history, int32_t& slot);
    status release(int32_t slot);
    status step(const wire::Step& step, bool verify, wire::StepReply& out);
    status stats(wire::StatsReply& out);

    // Ok, or the reply's error as a status whose message is "CODE field: message".
    static status status_of(const wire::Reply& reply);

   private:
    struct impl;
    explicit gateway_client(std::unique_ptr<impl> state);
    std::unique_ptr<impl> impl_;
};

}  // namespace ds::client

// A rank process's end of the answer lane (actors/answer_lane.h): through the lane's local socket
// and a shared-memory ring when the coordinator's process is on this host, else over TCP.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "actors/answer_ring.h"
#include "actors/rank_core.h"
#include "transport/socket_io.h"

namespace ds {

// Where a rank finds the lane: what the form_msg offers.
struct answer_lane_address {
    std::string host;
    uint16_t port = 0;
    uint64_t secret = 0;
    std::string local_name;  // the local socket's abstract name; empty: TCP only
};

// A rank's end: its path to the coordinator's lane for one epoch.
class answer_sender {
   public:
    // Through the lane's local socket and a shared-memory ring when the coordinator's process is on
    // this host (and `local` allows it), else over TCP; connected and greeted within `timeout`.
    static status connect(const answer_lane_address& lane, int32_t rank, std::chrono::milliseconds timeout,
                          std::unique_ptr<answer_sender>& out, bool local = true);
    // Sends a successful result (outputs present), within the timeout.
    status send(const rank_result& result);
    // Whether answers go through shared memory.
    bool shares_memory() const { return ring_ != nullptr; }

   private:
    answer_sender(net::unique_fd fd, std::unique_ptr<answer_ring> ring, std::chrono::milliseconds timeout)
        : fd_(std::move(fd)), ring_(std::move(ring)), timeout_(timeout) {}
    static status connect_local(const answer_lane_address& lane, int32_t rank, std::chrono::milliseconds timeout,
                                std::unique_ptr<answer_sender>& out);

    net::unique_fd fd_;  // the TCP connection, or the local socket that stays open beside the ring
    std::unique_ptr<answer_ring> ring_;
    std::chrono::milliseconds timeout_;
    std::string frame_;  // reused: over TCP the length, then the body; through the ring the body
};

}  // namespace ds

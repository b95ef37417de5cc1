// A TCP rendezvous for the bootstrap exchange (bootstrap.h). One process (rank 0, a coordinator or
// a test) runs a tcp_rendezvous; every rank connects a tcp_bootstrap to it, sends its rank and
// blob, and reads back all blobs once every rank has arrived. One exchange per rendezvous.
//
// Wire format (host byte order: the ranks are processes of one build):
//   rank → server:  u32 magic, i32 rank, i32 world_size, u64 length, length bytes
//   server → rank:  world_size × (u64 length, length bytes), in rank order
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "transport/bootstrap.h"

namespace ds {

class tcp_rendezvous {
   public:
    tcp_rendezvous() = default;
    ~tcp_rendezvous();
    tcp_rendezvous(const tcp_rendezvous&) = delete;
    tcp_rendezvous& operator=(const tcp_rendezvous&) = delete;

    // Listens on host:port (port 0: an ephemeral port, see port()).
    status listen(const std::string& host, uint16_t port);
    uint16_t port() const { return port_; }

    // Accepts world_size ranks, each exactly once, and answers every one with all blobs.
    // Fails (and closes every connection, so the ranks fail too) on a bad or duplicate rank or
    // when not every rank has arrived within `timeout`, naming the missing ranks.
    status serve(int32_t world_size, std::chrono::milliseconds timeout);

   private:
    int listen_fd_ = -1;
    uint16_t port_ = 0;
};

class tcp_bootstrap final : public bootstrap {
   public:
    // Connects (retrying until `timeout`, so ranks may start before the rendezvous) to host:port.
    tcp_bootstrap(std::string host, uint16_t port, int32_t rank, int32_t world_size, std::chrono::milliseconds timeout);

    int32_t rank() const override { return rank_; }
    int32_t world_size() const override { return world_size_; }
    status exchange(const std::string& mine, std::vector<std::string>& all) override;

   private:
    std::string host_;
    uint16_t port_;
    int32_t rank_;
    int32_t world_size_;
    std::chrono::milliseconds timeout_;
};

struct host_port {
    std::string host;
    uint16_t port = 0;
};

// "HOST:PORT" → host and port (decimal digits only), or an invalid_argument status saying why.
result<host_port> parse_host_port(const std::string& text);

}  // namespace ds

// The ucx transport for ranks that are threads of one process (`transport = ucx` in an embedded
// group, `distsample step --transport ucx`): one ucx_endpoint per rank, each with its own UCX
// context and worker, meeting through a TCP rendezvous on 127.0.0.1. The same code path as rank
// processes, so the coordinator's tests exercise it; between threads `local` is the faster choice.
#pragma once

#include <memory>
#include <vector>

#include "transport/transport_group.h"
#include "transport/ucx/ucx_transport.h"

namespace ds {

class ucx_group final : public transport_group {
   public:
    // Connects config.world_size endpoints (bounded by config.timeout).
    static status create(const transport_config& config, const ucx_endpoint_options& options,
                         std::unique_ptr<ucx_group>& out);

    int32_t world_size() const override { return static_cast<int32_t>(endpoints_.size()); }
    const char* backend_name() const override { return "ucx"; }
    ucx_endpoint& endpoint(int32_t rank) override { return *endpoints_.at(static_cast<size_t>(rank)); }
    void enter_epoch(int32_t rank, uint64_t epoch) override { endpoint(rank).set_epoch(epoch); }
    void abort(const std::string& reason) override;
    // Each rank's endpoint enters the epoch itself (enter_epoch): the endpoints are not shared.
    void begin_epoch(uint64_t) override {}
    std::vector<int32_t> missing_ranks() override;

   private:
    std::vector<std::unique_ptr<ucx_endpoint>> endpoints_;
};

}  // namespace ds

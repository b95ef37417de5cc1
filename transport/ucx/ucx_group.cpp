#include "transport/ucx/ucx_group.h"

#include <thread>

#include "transport/tcp_bootstrap.h"

namespace ds {

status ucx_group::create(const transport_config& config, const ucx_endpoint_options& options,
                         std::unique_ptr<ucx_group>& out) {
    DS_TRY(config.validate());
    tcp_rendezvous rendezvous;
    if (status s = rendezvous.listen("127.0.0.1", 0); !s.is_ok()) return s;
    const auto world = static_cast<size_t>(config.world_size);
    std::unique_ptr<ucx_group> group(new ucx_group());
    group->endpoints_.resize(world);
    std::vector<status> results(world);
    // Every endpoint's creation waits for all the others: one thread each.
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < config.world_size; ++r) {
        threads.emplace_back([&, r] {
            tcp_bootstrap boot("127.0.0.1", rendezvous.port(), r, config.world_size, config.timeout);
            results[static_cast<size_t>(r)] =
                ucx_endpoint::create(config, options, boot, group->endpoints_[static_cast<size_t>(r)]);
        });
    }
    const status served = rendezvous.serve(config.world_size, config.timeout);
    for (std::thread& t : threads) t.join();
    for (const status& s : results) {
        if (!s.is_ok()) return s;
    }
    if (!served.is_ok()) return served;
    out = std::move(group);
    return status::success();
}

void ucx_group::abort(const std::string& reason) {
    for (const auto& endpoint : endpoints_) endpoint->abort(reason.c_str());
}

std::vector<int32_t> ucx_group::missing_ranks() {
    std::vector<int32_t> missing;
    bool anyone_waits = false;
    for (size_t r = 0; r < endpoints_.size(); ++r) {
        if (endpoints_[r]->in_collective()) {
            anyone_waits = true;
        } else {
            missing.push_back(static_cast<int32_t>(r));
        }
    }
    return anyone_waits ? missing : std::vector<int32_t>{};
}

}  // namespace ds

// `distsample config check FILE`: the effective configuration (the group's keys and the
// "gateway" and "topology" sections), or the first error naming the key.
#include <iostream>

#include "cli/commands.h"
#include "config/capacity.h"
#include "config/config_file.h"
#include "config/gateway_config.h"
#include "config/topology_config.h"

namespace ds::cli {

int run_config_check_command(const group_options& options) {
    group_config config;
    gateway_config gateway;
    topology_config topology;
    auto load = [&]() -> status {
        DS_TRY(load_group_config(options.config_file, options.overrides, config));
        DS_TRY(validate_group_config(config));
        DS_TRY(check_memory_budget(config, 1));  // one rank's buffers (a rank process)
        DS_TRY(load_gateway_config(options.config_file, options.overrides, gateway));
        DS_TRY(validate_gateway_config(gateway));
        DS_TRY(load_topology_config(options.config_file, options.overrides, topology));
        return validate_topology_config(topology, config.distribution.tp);
    };
    if (status s = load(); !s.is_ok()) {
        std::cerr << "error: " << s.message << '\n';
        return 2;
    }
    nlohmann::json out = group_config_to_json(config);
    out["gateway"] = gateway_config_to_json(gateway);
    out["topology"] = topology_config_to_json(topology);
    std::cout << out.dump(2) << '\n';
    return 0;
}

}  // namespace ds::cli

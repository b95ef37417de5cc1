// `distsample config check FILE`: the effective configuration (the group's keys and the
// "gateway" and "topology" sections), or the first error naming the key.
#include <iostream>

#include "cli/commands.h"
#include "config/config_file.h"
#include "config/gateway_config.h"
#include "config/topology_config.h"

namespace ds::cli {

int run_config_check_command(const group_options& options) {
    group_config config;
    gateway_config gateway;
    topology_config topology;
    std::string e = load_group_config(options.config_file, options.overrides, config);
    if (e.empty()) e = validate_group_config(config);
    if (e.empty()) e = load_gateway_config(options.config_file, options.overrides, gateway);
    if (e.empty()) e = validate_gateway_config(gateway);
    if (e.empty()) e = load_topology_config(options.config_file, options.overrides, topology);
    if (e.empty()) e = validate_topology_config(topology, config.tp);
    if (!e.empty()) {
        std::cerr << "error: " << e << '\n';
        return 2;
    }
    nlohmann::json out = group_config_to_json(config);
    out["gateway"] = gateway_config_to_json(gateway);
    out["topology"] = topology_config_to_json(topology);
    std::cout << out.dump(2) << '\n';
    return 0;
}

}  // namespace ds::cli

// `distsample config check FILE`: the effective configuration, or the first error naming the key.
#include <iostream>

#include "cli/commands.h"
#include "config/config_file.h"

namespace ds::cli {

int run_config_check_command(const group_options& options) {
    group_config config;
    std::string e = load_group_config(options.config_file, options.overrides, config);
    if (e.empty()) e = validate_group_config(config);
    if (!e.empty()) {
        std::cerr << "error: " << e << '\n';
        return 2;
    }
    std::cout << group_config_to_json(config).dump(2) << '\n';
    return 0;
}

}  // namespace ds::cli

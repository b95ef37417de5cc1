// The effective group configuration, built in one place, later sources winning:
//   1. the defaults of group_config,
//   2. a JSON file (one object; keys below),
//   3. DISTSAMPLE_<KEY> environment variables (DISTSAMPLE_TP=2, DISTSAMPLE_MODE=sharded, ...),
//   4. `key=value` overrides from the command line.
// docs/configuration.md lists the keys: the group's at the top level, the fault plan's in the
// "faults" object (DISTSAMPLE_FAULTS_<KEY>, faults.<key>=value). Every error names the key, the
// value, where it came from and what was expected.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "config/config_keys.h"
#include "config/group_config.h"

namespace ds {

// Fills `config` from the sources above; `file` may be empty (no file). Returns ok, or the first
// error. Each value is checked on its own; callers that fit sizes to their input (vocab_size,
// max_batch, ...) run validate_group_config afterwards.
status load_group_config(const std::string& file, const std::vector<std::string>& overrides, group_config& config);
// The same with the JSON as text in place of the file (or the file, as above).
status load_group_config(const config_keys::json_source& source, const std::vector<std::string>& overrides,
                         group_config& config);

// Every key with its effective value.
nlohmann::json group_config_to_json(const group_config& config);

// Ok unless a DISTSAMPLE_* variable in the environment is none that distsample reads (a misspelt
// one would be ignored); the error names the nearest valid name. load_group_config checks first.
status check_environment_names();

}  // namespace ds

// The effective group configuration, built in one place (docs/configuration.md), later sources winning:
//   1. the defaults of group_config,
//   2. a JSON file (one object; keys below),
//   3. DISTSAMPLE_<KEY> environment variables (DISTSAMPLE_TP=2, DISTSAMPLE_MODE=sharded, ...),
//   4. `key=value` overrides from the command line.
// Keys: tp, vocab_size, max_batch, max_tokens_per_req, max_slots, max_penalty_tokens,
// max_logit_bias, threads_per_rank, backend, transport, ucx_device_memory, mode, rank0_policy, step_timeout_ms,
// transport_timeout_ms; and in the "faults" object (DISTSAMPLE_FAULTS_<KEY>, faults.<key>=value):
// seed, inject (a list of fault texts, config/fault_plan.h; from the environment or the command
// line, ';'-separated texts that add to the list), payload_checksums. Every error names the key,
// the value, where it came from and what was expected.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "config/group_config.h"

namespace ds {

// Fills `config` from the sources above; `file` may be empty (no file). Returns an empty string,
// or the first error. Each value is checked on its own; callers that fit sizes to their input
// (vocab_size, max_batch, ...) run validate_group_config afterwards.
std::string load_group_config(const std::string& file, const std::vector<std::string>& overrides, group_config& config);

// Every key with its effective value.
nlohmann::json group_config_to_json(const group_config& config);

}  // namespace ds

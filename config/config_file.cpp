#include "config/config_file.h"

#include "config/config_keys.h"

namespace ds {

namespace {

using json = nlohmann::json;
using namespace config_keys;
using group_key = key_entry<group_config>;

group_key millis_key(const char* key, std::chrono::milliseconds group_config::*field) {
    return {key, [field](const group_config& c) { return json((c.*field).count()); },
            [field](const std::string& k, const raw_value& v, group_config& c) {
                int64_t value = 0;
                std::string e = read_int(k, v, 1, 3'600'000, value);
                if (e.empty()) c.*field = std::chrono::milliseconds(value);
                return e;
            }};
}

const std::vector<group_key>& keys() {
    static const std::vector<group_key> table = {
        int_key<group_config>("tp", &group_config::tp, 1, 1024),
        int_key<group_config>("vocab_size", &group_config::vocab_size, 1, 1 << 24),
        int_key<group_config>("max_batch", &group_config::max_batch, 1, 1 << 16),
        int_key<group_config>("max_tokens_per_req", &group_config::max_tokens_per_req, 1, 64),
        int_key<group_config>("max_slots", &group_config::max_slots, 2, 1 << 20),
        int_key<group_config>("max_penalty_tokens", &group_config::max_penalty_tokens, 0, 1 << 20),
        int_key<group_config>("max_logit_bias", &group_config::max_logit_bias, 0, 1 << 20),
        int_key<group_config>("threads_per_rank", &group_config::threads_per_rank, 0, 1024),
        {"backend", [](const group_config& c) { return json(c.backend); },
         [](const std::string& k, const raw_value& v, group_config& c) { return read_choice(k, v, {"cpu", "cuda"}, c.backend); }},
        {"transport", [](const group_config& c) { return json(c.transport); },
         // Whether this build has the backend is checked when the group starts (transport_factory.h).
         [](const std::string& k, const raw_value& v, group_config& c) {
             return read_choice(k, v, {"auto", "local", "ucx", "nccl"}, c.transport);
         }},
        {"mode", [](const group_config& c) { return json(mode_name(c.mode)); },
         [](const std::string& k, const raw_value& v, group_config& c) {
             std::string name;
             std::string e = read_choice(k, v, {"swap", "sharded", "gathered"}, name);
             if (e.empty()) parse_mode(name, c.mode);
             return e;
         }},
        {"rank0_policy", [](const group_config& c) { return json(policy_name(c.policy)); },
         [](const std::string& k, const raw_value& v, group_config& c) {
             std::string name;
             std::string e = read_choice(k, v, {"always", "never", "on_mismatch"}, name);
             if (e.empty()) parse_policy(name, c.policy);
             return e;
         }},
        millis_key("step_timeout_ms", &group_config::step_timeout),
        millis_key("transport_timeout_ms", &group_config::transport_timeout),
    };
    return table;
}

}  // namespace

std::string load_group_config(const std::string& file, const std::vector<std::string>& overrides, group_config& config) {
    return config_keys::load("", keys(), file, overrides, config);
}

json group_config_to_json(const group_config& config) { return config_keys::to_json(keys(), config); }

}  // namespace ds

#include "config/config_file.h"

#include "config/config_keys.h"

#include <algorithm>
#include <cstdint>

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

// true or false: a JSON boolean in a file, the word from the environment or a flag.
group_key bool_key(const char* key, bool group_config::*field) {
    return {key, [field](const group_config& c) { return json(c.*field); },
            [field](const std::string& k, const raw_value& v, group_config& c) {
                if (v.value.is_boolean()) {
                    c.*field = v.value.get<bool>();
                    return std::string{};
                }
                std::string word;
                std::string e = v.text ? read_choice(k, v, {"true", "false"}, word) : bad(k, v, "true or false");
                if (e.empty()) c.*field = word == "true";
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
         [](const std::string& k, const raw_value& v, group_config& c) {
             return read_choice(k, v, {"cpu", "cuda"}, c.backend);
         }},
        {"transport", [](const group_config& c) { return json(c.transport); },
         // Whether this build has the backend is checked when the group starts (transport_factory.h).
         [](const std::string& k, const raw_value& v, group_config& c) {
             return read_choice(k, v, {"auto", "local", "ucx", "nccl"}, c.transport);
         }},
        {"ucx_device_memory", [](const group_config& c) { return json(ucx_memory_mode_name(c.ucx_device_memory)); },
         // Whether `direct` can work is known once UCX is up (transport/ucx_memory_path.h).
         [](const std::string& k, const raw_value& v, group_config& c) {
             std::string name;
             std::string e = read_choice(k, v, {"auto", "direct", "staged"}, name);
             if (e.empty()) parse_ucx_memory_mode(name, c.ucx_device_memory);
             return e;
         }},
        bool_key("ucx_peer_error_handling", &group_config::ucx_peer_error_handling),
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
        int_key<group_config>("scheduler_threads", &group_config::scheduler_threads, 1, kMaxSchedulerThreads),
        int_key<group_config>("scheduler_spin_us", &group_config::scheduler_spin_us, 0, kMaxSpinMicroseconds),
        int_key<group_config>("reply_spin_us", &group_config::reply_spin_us, 0, kMaxSpinMicroseconds),
        int_key<group_config>("rank_spin_us", &group_config::rank_spin_us, 0, kMaxSpinMicroseconds),
    };
    return table;
}

// The "faults" section. `inject` is a list of fault texts (fault_plan.h) in a file; a value from
// the environment or the command line adds its faults, separated by ';', so --fault repeats.
std::string read_fault_specs(const std::string& key, const raw_value& v, fault_plan& plan) {
    const std::string expected = "fault texts kind:rank=R[:steps=A-B][:p=P][:ms=D]";
    std::vector<std::string> texts;
    if (v.text) {
        const std::string& all = v.value.get_ref<const std::string&>();
        for (size_t begin = 0; begin <= all.size();) {
            const size_t end = std::min(all.find(';', begin), all.size());
            if (end > begin) texts.push_back(all.substr(begin, end - begin));
            begin = end + 1;
        }
    } else {
        if (!v.value.is_array()) return bad(key, v, "a list of " + expected);
        for (const json& item : v.value) {
            if (!item.is_string()) return bad(key, v, "a list of " + expected);
            texts.push_back(item.get<std::string>());
        }
        plan.faults.clear();
    }
    for (const std::string& text : texts) {
        fault_spec spec;
        if (std::string e = parse_fault_spec(text, spec); !e.empty()) return bad(key, v, expected + " (" + e + ")");
        plan.faults.push_back(spec);
    }
    return {};
}

const std::vector<group_key>& fault_keys() {
    static const std::vector<group_key> table = {
        {"seed", [](const group_config& c) { return json(c.faults.seed); },
         [](const std::string& k, const raw_value& v, group_config& c) {
             int64_t value = 0;
             std::string e = read_int(k, v, 0, INT64_MAX, value);
             if (e.empty()) c.faults.seed = static_cast<uint64_t>(value);
             return e;
         }},
        {"inject",
         [](const group_config& c) {
             json texts = json::array();
             for (const fault_spec& f : c.faults.faults) texts.push_back(format_fault_spec(f));
             return texts;
         },
         [](const std::string& k, const raw_value& v, group_config& c) { return read_fault_specs(k, v, c.faults); }},
        bool_key("payload_checksums", &group_config::payload_checksums),
    };
    return table;
}

}  // namespace

std::string load_group_config(const std::string& file, const std::vector<std::string>& overrides,
                              group_config& config) {
    std::string e = config_keys::load("", keys(), file, overrides, config);
    return e.empty() ? config_keys::load("faults", fault_keys(), file, overrides, config) : e;
}

json group_config_to_json(const group_config& config) {
    json out = config_keys::to_json(keys(), config);
    out["faults"] = config_keys::to_json(fault_keys(), config);
    return out;
}

}  // namespace ds

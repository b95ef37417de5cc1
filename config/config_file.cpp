#include "config/config_file.h"

#include "config/config_keys.h"

#include <algorithm>
#include <cstdint>

namespace ds {

namespace {

using json = nlohmann::json;
using namespace config_keys;
using group_key = key_entry<group_config>;

template <class Field>
group_key millis_key(const char* key, Field field) {
    return {key, [field](const group_config& c) { return json(std::invoke(field, c).count()); },
            [field](const std::string& k, const raw_value& v, group_config& c) {
                int64_t value = 0;
                status s = read_int(k, v, 1, 3'600'000, value);
                if (s.is_ok()) std::invoke(field, c) = std::chrono::milliseconds(value);
                return s;
            }};
}

// true or false: a JSON boolean in a file, the word from the environment or a flag.
template <class Field>
group_key bool_key(const char* key, Field field) {
    return {key, [field](const group_config& c) { return json(std::invoke(field, c)); },
            [field](const std::string& k, const raw_value& v, group_config& c) {
                if (v.value.is_boolean()) {
                    std::invoke(field, c) = v.value.get<bool>();
                    return status::success();
                }
                std::string word;
                status s = v.text ? read_choice(k, v, {"true", "false"}, word) : bad(k, v, "true or false");
                if (s.is_ok()) std::invoke(field, c) = word == "true";
                return s;
            }};
}

// A named choice (config/choices.h): the name in the file, its enum in the program.
template <class Enum, std::size_t N, class Field>
group_key choice_key(const char* key, Field field, const std::array<Enum, N>& all, const char* (*name_of)(Enum)) {
    return {key, [field, name_of](const group_config& c) { return json(name_of(std::invoke(field, c))); },
            [field, all, name_of](const std::string& k, const raw_value& v, group_config& c) {
                std::string name;
                DS_TRY(read_choice(k, v, choice_names(all, name_of), name));
                for (Enum value : all) {
                    if (name == name_of(value)) std::invoke(field, c) = value;
                }
                return status::success();
            }};
}

const std::vector<group_key>& keys() {
    static const std::vector<group_key> table = {
        int_key<group_config>(
            "tp", [](auto& c) -> auto& { return c.distribution.tp; }, 1, 1024),
        int_key<group_config>(
            "vocab_size", [](auto& c) -> auto& { return c.limits.vocab_size; }, 1, 1 << 24),
        int_key<group_config>(
            "max_batch", [](auto& c) -> auto& { return c.limits.max_batch; }, 1, 1 << 16),
        int_key<group_config>(
            "max_tokens_per_req", [](auto& c) -> auto& { return c.limits.max_tokens_per_req; }, 1, 64),
        int_key<group_config>(
            "max_slots", [](auto& c) -> auto& { return c.limits.max_slots; }, 2, 1 << 20),
        int_key<group_config>(
            "max_penalty_tokens", [](auto& c) -> auto& { return c.limits.max_penalty_tokens; }, 0, 1 << 20),
        int_key<group_config>(
            "max_logit_bias", [](auto& c) -> auto& { return c.limits.max_logit_bias; }, 0, 1 << 20),
        int_key<group_config>(
            "threads_per_rank", [](auto& c) -> auto& { return c.tuning.threads_per_rank; }, 0, 1024),
        choice_key(
            "backend", [](auto& c) -> auto& { return c.backend; }, kAllBackends, backend_name),
        // Whether this build has the backend is checked when the group starts (transport_factory.h).
        choice_key(
            "transport", [](auto& c) -> auto& { return c.transport.kind; }, kAllTransports, transport_name),
        // Whether `direct` can work is known once UCX is up (transport/ucx_memory_path.h).
        choice_key(
            "ucx_device_memory", [](auto& c) -> auto& { return c.transport.ucx.device_memory; }, kAllUcxMemoryModes,
            ucx_memory_mode_name),
        bool_key(
            "ucx_peer_error_handling", [](auto& c) -> auto& { return c.transport.ucx.peer_error_handling; }),
        choice_key(
            "mode", [](auto& c) -> auto& { return c.distribution.mode; }, kAllModes, mode_name),
        choice_key(
            "rank0_policy", [](auto& c) -> auto& { return c.distribution.policy; }, kAllPolicies, policy_name),
        millis_key(
            "step_timeout_ms", [](auto& c) -> auto& { return c.distribution.step_timeout; }),
        millis_key(
            "transport_timeout_ms", [](auto& c) -> auto& { return c.transport.timeout; }),
        int_key<group_config>(
            "scheduler_threads", [](auto& c) -> auto& { return c.tuning.scheduler_threads; }, 1, kMaxSchedulerThreads),
        int_key<group_config>(
            "scheduler_spin_us", [](auto& c) -> auto& { return c.tuning.scheduler_spin_us; }, 0, kMaxSpinMicroseconds),
        int_key<group_config>(
            "reply_spin_us", [](auto& c) -> auto& { return c.tuning.reply_spin_us; }, 0, kMaxSpinMicroseconds),
        int_key<group_config>(
            "rank_spin_us", [](auto& c) -> auto& { return c.tuning.rank_spin_us; }, 0, kMaxSpinMicroseconds),
    };
    return table;
}

// The "faults" section. `inject` is a list of fault texts (fault_plan.h) in a file; a value from
// the environment or the command line adds its faults, separated by ';', so --fault repeats.
status read_fault_specs(const std::string& key, const raw_value& v, fault_plan& plan) {
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
        result<fault_spec> spec = parse_fault_spec(text);
        if (!spec.is_ok()) return bad(key, v, expected + " (" + spec.error().message + ")");
        plan.faults.push_back(*spec);
    }
    return status::success();
}

const std::vector<group_key>& fault_keys() {
    static const std::vector<group_key> table = {
        {"seed", [](const group_config& c) { return json(c.faults.seed); },
         [](const std::string& k, const raw_value& v, group_config& c) {
             int64_t value = 0;
             status s = read_int(k, v, 0, INT64_MAX, value);
             if (s.is_ok()) c.faults.seed = static_cast<uint64_t>(value);
             return s;
         }},
        {"inject",
         [](const group_config& c) {
             json texts = json::array();
             for (const fault_spec& f : c.faults.faults) texts.push_back(format_fault_spec(f));
             return texts;
         },
         [](const std::string& k, const raw_value& v, group_config& c) { return read_fault_specs(k, v, c.faults); }},
        bool_key(
            "payload_checksums", [](auto& c) -> auto& { return c.transport.payload_checksums; }),
    };
    return table;
}

}  // namespace

status load_group_config(const std::string& file, const std::vector<std::string>& overrides, group_config& config) {
    DS_TRY(config_keys::load("", keys(), file, overrides, config));
    return config_keys::load("faults", fault_keys(), file, overrides, config);
}

json group_config_to_json(const group_config& config) {
    json out = config_keys::to_json(keys(), config);
    out["faults"] = config_keys::to_json(fault_keys(), config);
    return out;
}

}  // namespace ds

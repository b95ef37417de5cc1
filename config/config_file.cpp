#include "config/config_file.h"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <functional>

namespace ds {

namespace {

using json = nlohmann::json;

// A value as it arrived: JSON from the file, text from the environment or the command line.
struct raw_value {
    json value;
    bool text = false;  // from the environment or a flag: parse numbers out of the string
    std::string origin;
};

std::string describe(const raw_value& v) { return v.text ? fmt::format("'{}'", v.value.get<std::string>()) : v.value.dump(); }

std::string bad(const std::string& key, const raw_value& v, const std::string& expected) {
    return fmt::format("config key '{}' = {} (from {}): expected {}", key, describe(v), v.origin, expected);
}

// An integer in [lo, hi] from JSON or text.
std::string read_int(const std::string& key, const raw_value& v, int64_t lo, int64_t hi, int64_t& out) {
    const std::string expected = fmt::format("an integer in [{}, {}]", lo, hi);
    if (v.text) {
        const std::string& s = v.value.get_ref<const std::string&>();
        char* end = nullptr;
        errno = 0;
        const long long parsed = std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || *end != '\0' || errno != 0) return bad(key, v, expected);
        out = parsed;
    } else {
        if (!v.value.is_number_integer()) return bad(key, v, expected);
        out = v.value.get<int64_t>();
    }
    if (out < lo || out > hi) return bad(key, v, expected);
    return {};
}

std::string read_choice(const std::string& key, const raw_value& v, const std::vector<std::string>& choices, std::string& out) {
    std::string expected = "one of";
    for (const std::string& c : choices) expected += fmt::format(" '{}'", c);
    if (!v.value.is_string()) return bad(key, v, expected);
    out = v.value.get<std::string>();
    for (const std::string& c : choices) {
        if (out == c) return {};
    }
    return bad(key, v, expected);
}

struct key_entry {
    const char* key;
    std::function<json(const group_config&)> get;
    std::function<std::string(const std::string&, const raw_value&, group_config&)> set;
};

key_entry int_key(const char* key, int32_t group_config::*field, int64_t lo, int64_t hi) {
    return {key, [field](const group_config& c) { return json(c.*field); },
            [field, lo, hi](const std::string& k, const raw_value& v, group_config& c) {
                int64_t value = 0;
                std::string e = read_int(k, v, lo, hi, value);
                if (e.empty()) c.*field = static_cast<int32_t>(value);
                return e;
            }};
}

key_entry millis_key(const char* key, std::chrono::milliseconds group_config::*field) {
    return {key, [field](const group_config& c) { return json((c.*field).count()); },
            [field](const std::string& k, const raw_value& v, group_config& c) {
                int64_t value = 0;
                std::string e = read_int(k, v, 1, 3'600'000, value);
                if (e.empty()) c.*field = std::chrono::milliseconds(value);
                return e;
            }};
}

const std::vector<key_entry>& keys() {
    static const std::vector<key_entry> table = {
        int_key("tp", &group_config::tp, 1, 1024),
        int_key("vocab_size", &group_config::vocab_size, 1, 1 << 24),
        int_key("max_batch", &group_config::max_batch, 1, 1 << 16),
        int_key("max_tokens_per_req", &group_config::max_tokens_per_req, 1, 64),
        int_key("max_slots", &group_config::max_slots, 2, 1 << 20),
        int_key("max_penalty_tokens", &group_config::max_penalty_tokens, 0, 1 << 20),
        int_key("max_logit_bias", &group_config::max_logit_bias, 0, 1 << 20),
        int_key("threads_per_rank", &group_config::threads_per_rank, 0, 1024),
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

const key_entry* find_key(const std::string& key) {
    for (const key_entry& e : keys()) {
        if (key == e.key) return &e;
    }
    return nullptr;
}

std::string unknown_key(const std::string& key, const std::string& origin) {
    std::string known;
    for (const key_entry& e : keys()) known += fmt::format("{}{}", known.empty() ? "" : ", ", e.key);
    return fmt::format("config key '{}' (from {}) is not known; expected one of: {}", key, origin, known);
}

std::string env_name(const char* key) {
    std::string name = "DISTSAMPLE_";
    for (const char* c = key; *c != '\0'; ++c) name += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
    return name;
}

}  // namespace

std::string load_group_config(const std::string& file, const std::vector<std::string>& overrides, group_config& config) {
    if (!file.empty()) {
        std::ifstream in(file);
        if (!in) return fmt::format("config file '{}': cannot be opened", file);
        json doc;
        try {
            doc = json::parse(in);
        } catch (const json::parse_error& e) {
            return fmt::format("config file '{}': not valid JSON ({})", file, e.what());
        }
        if (!doc.is_object()) return fmt::format("config file '{}': expected one JSON object", file);
        for (const auto& [key, value] : doc.items()) {
            const key_entry* entry = find_key(key);
            if (entry == nullptr) return unknown_key(key, file);
            if (std::string e = entry->set(key, raw_value{value, false, file}, config); !e.empty()) return e;
        }
    }
    for (const key_entry& entry : keys()) {
        const std::string name = env_name(entry.key);
        if (const char* value = std::getenv(name.c_str())) {
            if (std::string e = entry.set(entry.key, raw_value{json(value), true, name}, config); !e.empty()) return e;
        }
    }
    for (const std::string& item : overrides) {
        const size_t eq = item.find('=');
        if (eq == std::string::npos || eq == 0) return fmt::format("override '{}': expected key=value", item);
        const std::string key = item.substr(0, eq);
        const key_entry* entry = find_key(key);
        if (entry == nullptr) return unknown_key(key, "the command line");
        if (std::string e = entry->set(key, raw_value{json(item.substr(eq + 1)), true, "the command line"}, config); !e.empty()) {
            return e;
        }
    }
    return {};
}

json group_config_to_json(const group_config& config) {
    json out = json::object();
    for (const key_entry& entry : keys()) out[entry.key] = entry.get(config);
    return out;
}

}  // namespace ds

// The machinery behind config_file.h and gateway_config.h: a table of keys per configuration
// struct, and one loader that reads a table's keys from the sources in order (defaults, JSON file,
// DISTSAMPLE_* environment, key=value overrides), naming key, value, source and expectation on
// every error. A table lives in a section of the file: "" is the top level (the group's keys),
// "gateway" is the file's "gateway" object, with DISTSAMPLE_GATEWAY_<KEY> variables and
// "gateway.<key>=value" overrides.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/status.h"

namespace ds::config_keys {

// A value as it arrived: JSON from the file, text from the environment or the command line.
struct raw_value {
    nlohmann::json value;
    bool text = false;  // from the environment or a flag: parse numbers out of the string
    std::string origin;
};

// The sections besides the top level: "faults", "gateway", "topology".
const std::vector<std::string>& sections();
// DISTSAMPLE_<SECTION>_<KEY>, or DISTSAMPLE_<KEY> at the top level.
std::string env_name(const std::string& section, const std::string& key);

// An invalid_argument status naming the key, the value (quoted short), where it came from and
// `expected`.
status bad(const std::string& key, const raw_value& v, const std::string& expected);
status read_int(const std::string& key, const raw_value& v, int64_t lo, int64_t hi, int64_t& out);
status read_choice(const std::string& key, const raw_value& v, const std::vector<std::string>& choices,
                   std::string& out);
status read_string(const std::string& key, const raw_value& v, std::string& out);

template <class Config>
struct key_entry {
    const char* key;
    std::function<nlohmann::json(const Config&)> get;
    std::function<status(const std::string&, const raw_value&, Config&)> set;
};

// `field` names where a key lives in Config: a member pointer, or a generic lambda
// `[](auto& c) -> auto& { return c.part.field; }` for a key inside one of its parts.
template <class Config, class Field>
key_entry<Config> int_key(const char* key, Field field, int64_t lo, int64_t hi) {
    return {key, [field](const Config& c) { return nlohmann::json(std::invoke(field, c)); },
            [field, lo, hi](const std::string& k, const raw_value& v, Config& c) {
                int64_t value = 0;
                status s = read_int(k, v, lo, hi, value);
                auto& target = std::invoke(field, c);
                if (s.is_ok()) target = static_cast<std::remove_reference_t<decltype(target)>>(value);
                return s;
            }};
}

template <class Config, class Field>
key_entry<Config> string_key(const char* key, Field field) {
    return {key, [field](const Config& c) { return nlohmann::json(std::invoke(field, c)); },
            [field](const std::string& k, const raw_value& v, Config& c) {
                return read_string(k, v, std::invoke(field, c));
            }};
}

// true or false: a JSON boolean in a file, the word from the environment or a flag.
template <class Config, class Field>
key_entry<Config> bool_key(const char* key, Field field) {
    return {key, [field](const Config& c) { return nlohmann::json(std::invoke(field, c)); },
            [field](const std::string& k, const raw_value& v, Config& c) {
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

// The JSON source: a file to read (empty: none), or, when `text` is not empty, the document itself
// as a binding passes it (include/distsample/distsample_rank_c.h); errors name the file, or
// "the config JSON".
struct json_source {
    std::string file;
    std::string text;
};

// Reads the keys `names` of `section` from the sources; `set(index, key, value)` parses one into
// the configuration. Returns ok or the first error.
status load_section(const std::string& section, const std::vector<std::string>& names,
                    const std::function<status(size_t, const std::string&, const raw_value&)>& set,
                    const json_source& source, const std::vector<std::string>& overrides);

template <class Config>
status load(const std::string& section, const std::vector<key_entry<Config>>& table, const json_source& source,
            const std::vector<std::string>& overrides, Config& config) {
    std::vector<std::string> names;
    for (const key_entry<Config>& e : table) names.emplace_back(e.key);
    return load_section(
        section, names,
        [&](size_t i, const std::string& key, const raw_value& v) { return table[i].set(key, v, config); }, source,
        overrides);
}

template <class Config>
nlohmann::json to_json(const std::vector<key_entry<Config>>& table, const Config& config) {
    nlohmann::json out = nlohmann::json::object();
    for (const key_entry<Config>& entry : table) out[entry.key] = entry.get(config);
    return out;
}

}  // namespace ds::config_keys

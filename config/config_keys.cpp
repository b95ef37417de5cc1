#include "config/config_keys.h"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>

#include "config/json_input.h"

namespace ds::config_keys {

namespace {

using json = nlohmann::json;

bool is_section(const std::string& name) {
    for (const std::string& s : sections()) {
        if (s == name) return true;
    }
    return false;
}

std::string describe(const raw_value& v) {
    return v.text ? quote_text(v.value.get_ref<const std::string&>()) : quote_json(v.value);
}

// "-12", "7": what strtoll would also take with a leading space or '+' is refused.
bool is_decimal(const std::string& s) {
    const size_t digits = s.rfind('-', 0) == 0 ? 1 : 0;
    return s.size() > digits && s.find_first_not_of("0123456789", digits) == std::string::npos;
}

std::string source_name(const json_source& source) {
    return source.text.empty() ? fmt::format("config file '{}'", source.file) : "the config JSON";
}

result<json> parse_source(const json_source& source) {
    if (!source.text.empty()) return parse_json(source.text);
    std::ifstream in(source.file);
    if (!in) return status::invalid("cannot be opened");
    return read_json(in);
}

// The source's document (one JSON object), or null when there is none.
status read_document(const json_source& source, json& doc) {
    if (source.text.empty() && source.file.empty()) return status::success();
    result<json> parsed = parse_source(source);
    if (!parsed.is_ok()) return status::invalid(fmt::format("{}: {}", source_name(source), parsed.error().message));
    doc = std::move(parsed).value();
    if (!doc.is_object()) return status::invalid(fmt::format("{}: expected one JSON object", source_name(source)));
    return status::success();
}

}  // namespace

const std::vector<std::string>& sections() {
    static const std::vector<std::string> names = {"faults", "gateway", "topology"};
    return names;
}

std::string env_name(const std::string& section, const std::string& key) {
    std::string name = "DISTSAMPLE_";
    for (char c : section.empty() ? key : section + "_" + key)
        name += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return name;
}

status bad(const std::string& key, const raw_value& v, const std::string& expected) {
    return status::invalid(
        fmt::format("config key '{}' = {} (from {}): expected {}", key, describe(v), v.origin, expected));
}

status read_int(const std::string& key, const raw_value& v, int64_t lo, int64_t hi, int64_t& out) {
    const std::string expected = fmt::format("an integer in [{}, {}]", lo, hi);
    if (v.text) {
        const std::string& s = v.value.get_ref<const std::string&>();
        char* end = nullptr;
        errno = 0;
        const long long parsed = std::strtoll(s.c_str(), &end, 10);
        if (!is_decimal(s) || *end != '\0' || errno != 0) return bad(key, v, expected);
        out = parsed;
    } else {
        if (!v.value.is_number_integer()) return bad(key, v, expected);
        out = v.value.get<int64_t>();
    }
    if (out < lo || out > hi) return bad(key, v, expected);
    return status::success();
}

status read_choice(const std::string& key, const raw_value& v, const std::vector<std::string>& choices,
                   std::string& out) {
    std::string expected = "one of";
    for (const std::string& c : choices) expected += fmt::format(" '{}'", c);
    if (!v.value.is_string()) return bad(key, v, expected);
    out = v.value.get<std::string>();
    for (const std::string& c : choices) {
        if (out == c) return status::success();
    }
    return bad(key, v, expected);
}

status read_string(const std::string& key, const raw_value& v, std::string& out) {
    if (!v.value.is_string()) return bad(key, v, "a string");
    out = v.value.get<std::string>();
    return status::success();
}

status load_section(const std::string& section, const std::vector<std::string>& names,
                    const std::function<status(size_t, const std::string&, const raw_value&)>& set,
                    const json_source& source, const std::vector<std::string>& overrides) {
    const std::string prefix = section.empty() ? "" : section + ".";
    auto find = [&](const std::string& key) -> size_t {
        for (size_t i = 0; i < names.size(); ++i) {
            if (names[i] == key) return i;
        }
        return names.size();
    };
    // Lists this section's keys; the top level also names the sections.
    auto unknown = [&](const std::string& key, const std::string& origin) {
        std::string known;
        for (const std::string& n : names) known += fmt::format("{}{}{}", known.empty() ? "" : ", ", prefix, n);
        if (section.empty()) {
            known += "; or a key of a section:";
            for (const std::string& s : sections()) known += fmt::format(" {}.<key>", s);
        }
        return status::invalid(fmt::format("config key {} (from {}) is not known; expected one of: {}",
                                           quote_text(prefix + key), origin, known));
    };
    auto apply = [&](const std::string& key, const raw_value& v) -> status {
        const size_t i = find(key);
        if (i == names.size()) return unknown(key, v.origin);
        return set(i, prefix + key, v);
    };

    json doc;
    DS_TRY(read_document(source, doc));
    if (!doc.is_null()) {
        const std::string origin = source.text.empty() ? source.file : "the config JSON";
        const json* keys = &doc;
        if (!section.empty()) {
            const auto it = doc.find(section);
            keys = it == doc.end() ? nullptr : &*it;
            if (keys != nullptr && !keys->is_object())
                return status::invalid(fmt::format("{}: '{}' must be a JSON object", source_name(source), section));
        }
        if (keys != nullptr) {
            for (const auto& [key, value] : keys->items()) {
                if (section.empty() && is_section(key)) continue;
                DS_TRY(apply(key, raw_value{value, false, origin}));
            }
        }
    }
    for (const std::string& key : names) {
        const std::string name = env_name(section, key);
        if (const char* value = std::getenv(name.c_str())) {
            DS_TRY(apply(key, raw_value{json(value), true, name}));
        }
    }
    for (const std::string& item : overrides) {
        const size_t eq = item.find('=');
        if (eq == std::string::npos || eq == 0)
            return status::invalid(fmt::format("override '{}': expected key=value", item));
        std::string key = item.substr(0, eq);
        const size_t dot = key.find('.');
        const std::string item_section = dot == std::string::npos ? "" : key.substr(0, dot);
        if (item_section != section) {
            // Another section's key, or a bad one: the top-level loader reports unknown sections.
            if (section.empty() && !is_section(item_section)) return unknown(key, "the command line");
            continue;
        }
        if (!section.empty()) key = key.substr(dot + 1);
        DS_TRY(apply(key, raw_value{json(item.substr(eq + 1)), true, "the command line"}));
    }
    return status::success();
}

}  // namespace ds::config_keys

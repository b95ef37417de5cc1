#include "config/topology_config.h"

#include <fmt/format.h>

#include "config/config_keys.h"

namespace ds {

namespace {

using json = nlohmann::json;
using namespace config_keys;
using topology_key = key_entry<topology_config>;

// The items of a list key: a JSON array in the file, comma-separated text elsewhere.
std::string read_items(const std::string& key, const raw_value& v, const std::string& expected,
                       std::vector<raw_value>& items) {
    items.clear();
    if (v.text) {
        const std::string& all = v.value.get_ref<const std::string&>();
        for (size_t begin = 0; begin < all.size();) {
            const size_t end = std::min(all.find(',', begin), all.size());
            items.push_back(raw_value{json(all.substr(begin, end - begin)), true, v.origin});
            begin = end + 1;
        }
        return {};
    }
    if (!v.value.is_array()) return bad(key, v, expected);
    for (const json& item : v.value) items.push_back(raw_value{item, false, v.origin});
    return {};
}

topology_key millis_key(const char* key, std::chrono::milliseconds topology_config::*field, int64_t lo) {
    return {key, [field](const topology_config& c) { return json((c.*field).count()); },
            [field, lo](const std::string& k, const raw_value& v, topology_config& c) {
                int64_t value = 0;
                std::string e = read_int(k, v, lo, 3'600'000, value);
                if (e.empty()) c.*field = std::chrono::milliseconds(value);
                return e;
            }};
}

const std::vector<topology_key>& keys() {
    static const std::vector<topology_key> table = {
        string_key<topology_config>("coordinator", &topology_config::coordinator),
        int_key<topology_config>("rendezvous_port", &topology_config::rendezvous_port, 0, 65535),
        {"hosts", [](const topology_config& c) { return json(c.hosts); },
         [](const std::string& k, const raw_value& v, topology_config& c) {
             std::vector<raw_value> items;
             if (std::string e = read_items(k, v, "a list of host addresses, one per rank", items); !e.empty())
                 return e;
             c.hosts.clear();
             for (size_t i = 0; i < items.size(); ++i) {
                 std::string host;
                 if (read_string(k, items[i], host).empty() && !host.empty()) {
                     c.hosts.push_back(host);
                     continue;
                 }
                 return bad(fmt::format("{}[{}]", k, i), items[i], "a host address (not empty)");
             }
             return std::string{};
         }},
        {"devices", [](const topology_config& c) { return json(c.devices); },
         [](const std::string& k, const raw_value& v, topology_config& c) {
             std::vector<raw_value> items;
             if (std::string e = read_items(k, v, "a list of CUDA device indices, one per rank", items); !e.empty())
                 return e;
             c.devices.clear();
             for (size_t i = 0; i < items.size(); ++i) {
                 int64_t device = 0;
                 if (std::string e = read_int(fmt::format("{}[{}]", k, i), items[i], 0, 1023, device); !e.empty())
                     return e;
                 c.devices.push_back(static_cast<int32_t>(device));
             }
             return std::string{};
         }},
        string_key<topology_config>("ucx_tls", &topology_config::ucx_tls),
        string_key<topology_config>("ucx_net_devices", &topology_config::ucx_net_devices),
        millis_key("join_timeout_ms", &topology_config::join_timeout, 1),
        millis_key("heartbeat_ms", &topology_config::heartbeat, 10),
        millis_key("connection_timeout_ms", &topology_config::connection_timeout, 20),
        {"logits_source", [](const topology_config& c) { return json(c.logits_source); },
         [](const std::string& k, const raw_value& v, topology_config& c) {
             return read_choice(k, v, {"wire", "synthetic", "ngram"}, c.logits_source);
         }},
        int_key<topology_config>("model_seed", &topology_config::model_seed, 0, 1 << 30),
        string_key<topology_config>("corpus", &topology_config::corpus),
    };
    return table;
}

}  // namespace

std::string load_topology_config(const std::string& file, const std::vector<std::string>& overrides,
                                 topology_config& config) {
    return config_keys::load("topology", keys(), file, overrides, config);
}

std::string validate_topology_config(const topology_config& config, int32_t tp) {
    auto per_rank = [tp](const char* key, size_t count) -> std::string {
        if (count == 0 || count == static_cast<size_t>(tp)) return {};
        return fmt::format("topology.{} has {} entries: expected one per rank (tp = {}) or none", key, count, tp);
    };
    if (std::string e = per_rank("hosts", config.hosts.size()); !e.empty()) return e;
    if (std::string e = per_rank("devices", config.devices.size()); !e.empty()) return e;
    if (config.heartbeat >= config.connection_timeout) {
        return fmt::format("topology.heartbeat_ms = {}: expected less than topology.connection_timeout_ms ({})",
                           config.heartbeat.count(), config.connection_timeout.count());
    }
    return {};
}

json topology_config_to_json(const topology_config& config) { return config_keys::to_json(keys(), config); }

}  // namespace ds

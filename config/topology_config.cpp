#include "config/topology_config.h"

#include <fmt/format.h>

#include "config/config_keys.h"

namespace ds {

namespace {

using json = nlohmann::json;
using namespace config_keys;
using topology_key = key_entry<topology_config>;

// The items of a list key: a JSON array in the file, comma-separated text elsewhere.
status read_items(const std::string& key, const raw_value& v, const std::string& expected,
                  std::vector<raw_value>& items) {
    items.clear();
    if (v.text) {
        const std::string& all = v.value.get_ref<const std::string&>();
        for (size_t begin = 0; begin < all.size();) {
            const size_t end = std::min(all.find(',', begin), all.size());
            items.push_back(raw_value{json(all.substr(begin, end - begin)), true, v.origin});
            begin = end + 1;
        }
        return status::success();
    }
    if (!v.value.is_array()) return bad(key, v, expected);
    for (const json& item : v.value) items.push_back(raw_value{item, false, v.origin});
    return status::success();
}

topology_key millis_key(const char* key, std::chrono::milliseconds topology_config::*field, int64_t lo) {
    return {key, [field](const topology_config& c) { return json((c.*field).count()); },
            [field, lo](const std::string& k, const raw_value& v, topology_config& c) {
                int64_t value = 0;
                status s = read_int(k, v, lo, 3'600'000, value);
                if (s.is_ok()) c.*field = std::chrono::milliseconds(value);
                return s;
            }};
}

const std::vector<topology_key>& keys() {
    static const std::vector<topology_key> table = {
        string_key<topology_config>("coordinator", &topology_config::coordinator),
        int_key<topology_config>("rendezvous_port", &topology_config::rendezvous_port, 0, 65535),
        int_key<topology_config>("answer_port", &topology_config::answer_port, -1, 65535),
        bool_key<topology_config>("answer_shared_memory", &topology_config::answer_shared_memory),
        {"hosts", [](const topology_config& c) { return json(c.hosts); },
         [](const std::string& k, const raw_value& v, topology_config& c) {
             std::vector<raw_value> items;
             DS_TRY(read_items(k, v, "a list of host addresses, one per rank", items));
             c.hosts.clear();
             for (size_t i = 0; i < items.size(); ++i) {
                 std::string host;
                 if (read_string(k, items[i], host).is_ok() && !host.empty()) {
                     c.hosts.push_back(host);
                     continue;
                 }
                 return bad(fmt::format("{}[{}]", k, i), items[i], "a host address (not empty)");
             }
             return status::success();
         }},
        {"devices", [](const topology_config& c) { return json(c.devices); },
         [](const std::string& k, const raw_value& v, topology_config& c) {
             std::vector<raw_value> items;
             DS_TRY(read_items(k, v, "a list of CUDA device indices, one per rank", items));
             c.devices.clear();
             for (size_t i = 0; i < items.size(); ++i) {
                 int64_t device = 0;
                 DS_TRY(read_int(fmt::format("{}[{}]", k, i), items[i], 0, 1023, device));
                 c.devices.push_back(static_cast<int32_t>(device));
             }
             return status::success();
         }},
        string_key<topology_config>("ucx_tls", &topology_config::ucx_tls),
        string_key<topology_config>("ucx_net_devices", &topology_config::ucx_net_devices),
        millis_key("join_timeout_ms", &topology_config::join_timeout, 1),
        millis_key("heartbeat_ms", &topology_config::heartbeat, 10),
        millis_key("connection_timeout_ms", &topology_config::connection_timeout, 20),
        {"logits_source", [](const topology_config& c) { return json(c.logits_source); },
         [](const std::string& k, const raw_value& v, topology_config& c) {
             return read_choice(k, v, {"wire", "synthetic", "ngram", "worker"}, c.logits_source);
         }},
        int_key<topology_config>("model_seed", &topology_config::model_seed, 0, 1 << 30),
        string_key<topology_config>("corpus", &topology_config::corpus),
    };
    return table;
}

}  // namespace

status load_topology_config(const std::string& file, const std::vector<std::string>& overrides,
                            topology_config& config) {
    return load_topology_config(config_keys::json_source{file, {}}, overrides, config);
}

status load_topology_config(const config_keys::json_source& source, const std::vector<std::string>& overrides,
                            topology_config& config) {
    return config_keys::load("topology", keys(), source, overrides, config);
}

status validate_topology_config(const topology_config& config, int32_t tp) {
    auto per_rank = [tp](const char* key, size_t count) {
        if (count == 0 || count == static_cast<size_t>(tp)) return status::success();
        return status::invalid(
            fmt::format("topology.{} has {} entries: expected one per rank (tp = {}) or none", key, count, tp));
    };
    DS_TRY(per_rank("hosts", config.hosts.size()));
    DS_TRY(per_rank("devices", config.devices.size()));
    if (config.heartbeat >= config.connection_timeout) {
        return status::invalid(
            fmt::format("topology.heartbeat_ms = {}: expected less than topology.connection_timeout_ms ({})",
                        config.heartbeat.count(), config.connection_timeout.count()));
    }
    return status::success();
}

json topology_config_to_json(const topology_config& config) { return config_keys::to_json(keys(), config); }

}  // namespace ds

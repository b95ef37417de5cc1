#include "config/gateway_config.h"

#include <fmt/format.h>

#include "config/config_keys.h"

namespace ds {

namespace {

using namespace config_keys;
using gateway_key = key_entry<gateway_config>;

gateway_key choice_key(const char* key, std::string gateway_config::*field, std::vector<std::string> choices) {
    return {key, [field](const gateway_config& c) { return nlohmann::json(c.*field); },
            [field, choices](const std::string& k, const raw_value& v, gateway_config& c) {
                return read_choice(k, v, choices, c.*field);
            }};
}

const std::vector<gateway_key>& keys() {
    static const std::vector<gateway_key> table = {
        string_key<gateway_config>("listen_address", &gateway_config::listen_address),
        int_key<gateway_config>("port", &gateway_config::port, 0, 65535),
        string_key<gateway_config>("unix_socket", &gateway_config::unix_socket),
        {"secret", [](const gateway_config& c) { return nlohmann::json(c.secret.empty() ? "" : "***"); },
         [](const std::string& k, const raw_value& v, gateway_config& c) { return read_string(k, v, c.secret); }},
        int_key<gateway_config>("max_frame_bytes", &gateway_config::max_frame_bytes, 64, 1 << 30),
        int_key<gateway_config>("metrics_port", &gateway_config::metrics_port, -1, 65535),
        int_key<gateway_config>("io_threads", &gateway_config::io_threads, 1, 64),
        choice_key("model", &gateway_config::model, {"synthetic", "ngram", "none"}),
        string_key<gateway_config>("corpus", &gateway_config::corpus),
        int_key<gateway_config>("model_seed", &gateway_config::model_seed, 0, 1 << 30),
        int_key<gateway_config>("max_connections", &gateway_config::max_connections, 1, 1 << 20),
        int_key<gateway_config>("max_http_connections", &gateway_config::max_http_connections, 1, 1 << 16),
        int_key<gateway_config>("max_buffered_bytes", &gateway_config::max_buffered_bytes, 1 << 16, INT32_MAX),
        int_key<gateway_config>("max_connection_bytes", &gateway_config::max_connection_bytes, 64, INT32_MAX),
        int_key<gateway_config>("auth_timeout_ms", &gateway_config::auth_timeout_ms, 1, 3'600'000),
        int_key<gateway_config>("read_timeout_ms", &gateway_config::read_timeout_ms, 1, 3'600'000),
        int_key<gateway_config>("write_timeout_ms", &gateway_config::write_timeout_ms, 1, 3'600'000),
        int_key<gateway_config>("idle_timeout_ms", &gateway_config::idle_timeout_ms, 0, 86'400'000),
    };
    return table;
}

}  // namespace

status load_gateway_config(const std::string& file, const std::vector<std::string>& overrides, gateway_config& config) {
    DS_TRY(config_keys::load("gateway", keys(), {file, {}}, overrides, config));
    // A server on a free port takes a free metrics port too, unless one was chosen.
    if (config.port == 0 && config.metrics_port == kDefaultMetricsPort) config.metrics_port = 0;
    return status::success();
}

bool is_loopback_address(const std::string& address) {
    return address == "localhost" || address == "::1" || address.rfind("127.", 0) == 0;
}

status validate_gateway_config(const gateway_config& config) {
    if (config.listen_address.empty() && config.unix_socket.empty()) {
        return status::invalid(
            "gateway.listen_address and gateway.unix_socket are both empty: expected at least one listener");
    }
    if (!config.listen_address.empty() && !is_loopback_address(config.listen_address) && config.secret.empty()) {
        return status::invalid(
            "gateway.listen_address = '" + config.listen_address +
            "' is not a loopback address: expected gateway.secret to be set (shared-secret authentication)");
    }
    if (config.secret.size() > static_cast<size_t>(kMaxSecretBytes)) {
        return status::invalid("gateway.secret: " + std::to_string(config.secret.size()) + " bytes: expected at most " +
                               std::to_string(kMaxSecretBytes));
    }
    if (config.max_buffered_bytes < config.max_frame_bytes) {
        return status::invalid("gateway.max_buffered_bytes = " + std::to_string(config.max_buffered_bytes) +
                               ": expected at least gateway.max_frame_bytes = " +
                               std::to_string(config.max_frame_bytes) + " (one whole frame)");
    }
    return status::success();
}

status check_model_against_ranks(const gateway_config& gateway, const topology_config& topology) {
    if (!topology.ranks_make_logits() || gateway.model == "none") return status::success();
    return status::invalid(fmt::format(
        "gateway.model = {}: expected none, as topology.logits_source = {} has the rank processes make their own "
        "logits (set gateway.model = none, or topology.logits_source = wire to send the gateway's rows)",
        gateway.model, topology.logits_source));
}

nlohmann::json gateway_config_to_json(const gateway_config& config) { return config_keys::to_json(keys(), config); }

}  // namespace ds

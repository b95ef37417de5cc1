// The gateway's settings (docs/configuration.md), in the "gateway" section of the same configuration as
// the group (config/config_keys.h): the file's "gateway" object, DISTSAMPLE_GATEWAY_<KEY>
// variables, then "gateway.<key>=value" overrides, then the flags of `distsample serve`.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace ds {

struct gateway_config {
    std::string listen_address = "127.0.0.1";  // TCP bind address; empty = no TCP listener
    int32_t port = 7700;                       // 0 = any free port (printed at start)
    std::string unix_socket;                   // path of a Unix socket listener; empty = none
    std::string secret;                        // shared secret; required for non-loopback binds
    int32_t max_frame_bytes = 16 << 20;        // larger frames close the connection
    int32_t metrics_port = 9464;               // HTTP /metrics and /healthz on listen_address; -1 = off, 0 = any
    int32_t io_threads = 2;
    std::string model = "synthetic";  // logits of steps without a payload: synthetic, ngram, none
    std::string corpus = "/usr/share/common-licenses/GPL-3";  // the ngram model's text
    int32_t model_seed = 1;                                   // the synthetic model's seed
};

// Fills `config` from the gateway section of the sources; "" or the first error.
std::string load_gateway_config(const std::string& file, const std::vector<std::string>& overrides,
                                gateway_config& config);

// Checks the combination: a non-loopback listen address needs a secret. "" when usable.
std::string validate_gateway_config(const gateway_config& config);

bool is_loopback_address(const std::string& address);

// Every key with its effective value (the secret shown as "***" when set).
nlohmann::json gateway_config_to_json(const gateway_config& config);

}  // namespace ds

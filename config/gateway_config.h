// The gateway's settings (docs/gateway.md, docs/configuration.md), in the "gateway" section of the
// same configuration as the group (config/config_keys.h): the file's "gateway" object,
// DISTSAMPLE_GATEWAY_<KEY> variables, then "gateway.<key>=value" overrides, then the flags of
// `distsample serve`.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "config/topology_config.h"
#include "core/status.h"

namespace ds {

inline constexpr int32_t kDefaultMetricsPort = 9464;
// Frames before authentication are at most this long: an Auth frame with the longest secret.
inline constexpr int32_t kMaxSecretBytes = 1024;
inline constexpr int32_t kMaxAuthFrameBytes = kMaxSecretBytes + 64;

struct gateway_config {
    std::string listen_address = "127.0.0.1";  // TCP bind address; empty = no TCP listener
    int32_t port = 7700;                       // 0 = any free port (printed at start)
    std::string unix_socket;                   // path of a Unix socket listener; empty = none
    std::string secret;                        // shared secret; required for non-loopback binds and fault injection
    int32_t max_frame_bytes = 16 << 20;        // larger frames close the connection
    // HTTP /metrics and /healthz on listen_address; -1 = off, 0 = any (also when port = 0 and this
    // is left at its default, so that two servers on free ports do not collide here)
    int32_t metrics_port = kDefaultMetricsPort;
    int32_t io_threads = 2;
    // What one client can make the server hold (docs/gateway.md, "Limits"):
    int32_t max_connections = 256;            // TCP and Unix socket together; more are refused
    int32_t max_http_connections = 16;        // on the metrics port
    int32_t max_buffered_bytes = 256 << 20;   // unfinished frames and unanswered requests, all connections
    int32_t max_connection_bytes = 64 << 20;  // unanswered requests of one connection: reading pauses
    int32_t auth_timeout_ms = 5000;           // with a secret: from accepting to the Auth frame
    int32_t read_timeout_ms = 30000;          // from a frame's first byte to its last (an HTTP request too)
    int32_t write_timeout_ms = 30000;         // for the client to take a reply (an HTTP response too)
    int32_t idle_timeout_ms = 600000;         // nothing asked and nothing owed; 0 = never closed for idleness
    std::string model = "synthetic";          // logits of steps without a payload: synthetic, ngram, none
    std::string corpus = "/usr/share/common-licenses/GPL-3";  // the ngram model's text
    int32_t model_seed = 1;                                   // the synthetic model's seed
};

// Fills `config` from the gateway section of the sources, or says what the first error is.
status load_gateway_config(const std::string& file, const std::vector<std::string>& overrides, gateway_config& config);

// Checks the combination: a non-loopback listen address needs a secret, the secret fits an Auth
// frame, one frame fits the buffered-bytes budget.
status validate_gateway_config(const gateway_config& config);

// A gateway in front of rank processes that make their own logits (topology.logits_source is not
// wire) has no model of its own: gateway.model must be none, else the two would disagree about
// where a step's rows come from (docs/gateway.md, Rank processes).
status check_model_against_ranks(const gateway_config& gateway, const topology_config& topology);

bool is_loopback_address(const std::string& address);

// Every key with its effective value (the secret shown as "***" when set).
nlohmann::json gateway_config_to_json(const gateway_config& config);

}  // namespace ds

// Where the processes of a multi-process group run and how they meet (docs/deployment.md), in the
// "topology" section of the same configuration as the group (config/config_keys.h): the file's
// "topology" object, DISTSAMPLE_TOPOLOGY_<KEY> variables, then "topology.<key>=value" overrides,
// then the flags of `distsample coordinator` and `distsample rank` (--listen, --coordinator, --rank).
// List keys (hosts, devices) take a JSON array in the file and comma-separated text elsewhere.
// The transport backend itself is the group's key `transport`; ucx_tls and ucx_net_devices pick
// what UCX uses under it.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "config/config_keys.h"
#include "core/status.h"

namespace ds {

struct topology_config {
    std::string coordinator = "127.0.0.1:7710";  // HOST:PORT the coordinator listens on and the ranks join
    int32_t rendezvous_port = 0;  // each epoch's transport rendezvous, on the coordinator's host; 0 = any free port
    int32_t answer_port = 0;      // the ranks' answer lane, on the coordinator's host; 0 = any free port, -1 = none
    bool answer_shared_memory = true;  // ranks on the coordinator's host answer through shared memory, not TCP
    std::vector<std::string>
        hosts;  // per rank: its host's address; a rank process without --rank takes the one that is local
    std::vector<int32_t> devices;  // per rank: its CUDA device (CUDA_VISIBLE_DEVICES of the rank process)
    std::string ucx_tls;           // UCX_TLS of the rank processes (e.g. "tcp"); empty: UCX's choice
    std::string ucx_net_devices;   // UCX_NET_DEVICES of the rank processes (e.g. "eth0"); empty: all
    std::chrono::milliseconds join_timeout{10000};       // a rank reaching the coordinator and being accepted
    std::chrono::milliseconds heartbeat{250};            // CAF middleman heartbeat between the processes
    std::chrono::milliseconds connection_timeout{2000};  // a peer silent this long is gone (its rank fails)
    // Where a rank process gets its logits: "wire" (in each step message from the coordinator:
    // tests, small V) or its own model, "synthetic" (sources/synthetic_logits.h, model_seed) or
    // "ngram" (sources/ngram_lm.h, trained on corpus), which makes the rows of a step from the
    // request's context as the gateway's model does (gateway.model); the step then carries none.
    // "worker": the ranks live inside model workers, which hand in their shards
    // (include/distsample/rank.h); not for `distsample rank`.
    std::string logits_source = "wire";
    int32_t model_seed = 1;
    std::string corpus = "/usr/share/common-licenses/GPL-3";

    bool ranks_make_logits() const { return logits_source != "wire"; }
};

// Fills `config` from the topology section of the sources; ok or the first error.
status load_topology_config(const std::string& file, const std::vector<std::string>& overrides,
                            topology_config& config);
// The same with the JSON as text in place of the file (config/config_keys.h).
status load_topology_config(const config_keys::json_source& source, const std::vector<std::string>& overrides,
                            topology_config& config);

// Checks the combination against the group's `tp`: hosts and devices have one entry per rank (or
// none), the heartbeat is shorter than the connection timeout.
status validate_topology_config(const topology_config& config, int32_t tp);

// Every key with its effective value.
nlohmann::json topology_config_to_json(const topology_config& config);

}  // namespace ds

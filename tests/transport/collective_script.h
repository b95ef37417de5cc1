// A fixed sequence of every collective of the transport interface on deterministic per-rank data,
// run by the transport tests on several backends (threads of the local transport, UCX threads,
// UCX processes, NCCL processes on GPUs) so their results can be compared byte for byte.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "transport/transport.h"

namespace ds {

// The group a script run of `world` ranks is sized for: V = 16 * world.
transport_config script_transport_config(int32_t world = 4);

// Where the script keeps the shards it swaps: host memory by default, or device memory through
// these two calls for a transport that swaps GPU logits (nccl).
struct script_device_memory {
    std::function<status(const void* host, std::size_t bytes, std::shared_ptr<void>& device)> upload;
    std::function<status(const logits_view& rows, void* host)> download;  // dense rows
};

// Runs the script on `endpoint`; `transcript` receives every result in call order.
status run_collective_script(transport& endpoint, std::vector<unsigned char>& transcript,
                             const script_device_memory* device = nullptr);

// The transcripts of every rank of the local transport (threads): what other backends must match.
status local_script_transcripts(int32_t world, std::vector<std::vector<unsigned char>>& transcripts);

}  // namespace ds

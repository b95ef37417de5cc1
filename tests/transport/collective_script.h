// A fixed sequence of every collective of the transport interface on deterministic per-rank data,
// run by the transport tests on several backends (threads of the local transport, UCX threads,
// UCX processes) so their results can be compared byte for byte.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/transport.h"

namespace ds {

// The group every script run is sized for: 4 ranks, V = 64.
transport_config script_transport_config();

// Runs the script on `endpoint`; `transcript` receives every result in call order.
status run_collective_script(transport& endpoint, std::vector<unsigned char>& transcript);

}  // namespace ds

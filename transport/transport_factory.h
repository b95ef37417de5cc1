// The one place a transport is chosen (docs/architecture.md, Transports): `auto | local | ucx |
// nccl`, from group_config::transport.kind, which config_file.h loads from a file,
// DISTSAMPLE_TRANSPORT, --set or --transport. Asking for a backend this build or this layout
// cannot use fails at start-up with a message saying why and what to set instead.
//
//              ranks as threads of one process     rank processes
//   auto       local                               ucx
//   local      local                               error: use ucx
//   ucx        ucx_group (ucx between threads)     ucx
//   nccl       error: one process per GPU          nccl (error when not built)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/bootstrap.h"
#include "transport/transport.h"
#include "transport/transport_group.h"

namespace ds {

// The backends this build has, e.g. {"local", "ucx"}.
std::vector<std::string> built_transports();

// A group of config.world_size ranks as threads of this process; `ucx` is for the ucx backend.
status make_transport_group(transport_kind kind, const transport_config& config, const ucx_endpoint_options& ucx,
                            std::unique_ptr<transport_group>& out);

// This rank's endpoint of a group of rank processes meeting through `boot`.
status make_rank_transport(transport_kind kind, const transport_config& config, const ucx_endpoint_options& ucx,
                           bootstrap& boot, std::unique_ptr<transport>& out);

}  // namespace ds

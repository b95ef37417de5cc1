// The Stats reply: the gateway's counters, the group's limits and the fault counts per kind.
#pragma once

#include <distsample/group.h>

#include "gateway/metrics.h"
#include "gateway/protocol.h"
#include "gateway/steps.h"

namespace ds::gateway {

void fill_stats(const gateway_metrics& metrics, const slot_table& slots, const group_config& limits,
                wire::StatsReply& out);

}  // namespace ds::gateway

#include "gateway/stats.h"

namespace ds::gateway {

void fill_stats(const gateway_metrics& metrics, const slot_table& slots, const group_config& limits,
                wire::StatsReply& out) {
    out.set_steps(metrics.steps.load());
    out.set_step_errors(metrics.step_errors.load());
    out.set_desync_events(metrics.desync_events.load());
    out.set_connections(static_cast<uint32_t>(metrics.connections_open.load()));
    out.set_registered_slots(static_cast<uint32_t>(slots.registered_count()));
    out.set_tp(limits.distribution.tp);
    out.set_vocab_size(limits.limits.vocab_size);
    out.set_max_batch(limits.limits.max_batch);
    out.set_max_tokens_per_req(limits.limits.max_tokens_per_req);
    out.set_max_slots(limits.limits.max_slots);
    out.set_protocol_version(kProtocolVersion);
    for (fault_kind kind : kAllFaultKinds) {
        const gateway_metrics::fault_counts& c = metrics.faults[static_cast<size_t>(kind)];
        wire::FaultCounts& f = *out.add_faults();
        f.set_kind(fault_kind_name(kind));
        f.set_injected(c.injected.load());
        f.set_detected(c.detected.load());
        f.set_masked(c.masked.load());
        f.set_repaired(c.repaired.load());
        f.set_failed_steps(c.failed_steps.load());
    }
}

}  // namespace ds::gateway

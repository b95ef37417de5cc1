// Fault injection through the gateway (docs/gateway.md, "Fault injection"): an Inject request's
// plan, and the ledger that accounts for what the current plan injected into each step the
// gateway answers (actors/fault_report.h), for the fault counts in /metrics and Stats.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>

#include <distsample/group.h>

#include "actors/fault_report.h"
#include "gateway/metrics.h"
#include "gateway/protocol.h"

namespace ds::gateway {

// The plan an Inject request asks for (a Clear asks for the empty plan); false with a BAD_FIELD
// error naming faults[i] when one does not parse.
bool requested_fault_plan(const wire::Request& request, fault_plan& plan, wire::Error& error);

class fault_accounting {
   public:
    fault_accounting(const fault_plan& plan, rank0_policy policy);

    // The plan in force for steps submitted from now on.
    void replace(const fault_plan& plan);
    std::shared_ptr<fault_ledger> current() const;

    // On the completion thread, in submission order: every submitted step took the group's next
    // id, and an answered step says its own. Records the step's faults into `step_ledger` (the
    // ledger of the plan it was submitted under) and `metrics`; returns the step's id.
    uint64_t record(fault_ledger& step_ledger, const step_reply& reply, std::chrono::steady_clock::time_point arrived,
                    gateway_metrics& metrics);

   private:
    rank0_policy policy_;
    mutable std::mutex mutex_;
    std::shared_ptr<fault_ledger> ledger_;
    uint64_t next_step_id_ = 1;  // the group's id of the next step to complete (completion thread only)
};

}  // namespace ds::gateway

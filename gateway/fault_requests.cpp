#include "gateway/fault_requests.h"

#include <fmt/format.h>

namespace ds::gateway {

bool requested_fault_plan(const wire::Request& request, fault_plan& plan, wire::Error& error) {
    plan = fault_plan{};
    if (!request.has_inject()) return true;
    plan.seed = request.inject().seed();
    for (int i = 0; i < request.inject().faults_size(); ++i) {
        result<fault_spec> spec = parse_fault_spec(request.inject().faults(i));
        if (!spec.is_ok()) {
            error = make_error(wire::Error::BAD_FIELD, fmt::format("faults[{}]", i), spec.error().message);
            return false;
        }
        plan.faults.push_back(*spec);
    }
    return true;
}

fault_accounting::fault_accounting(const fault_plan& plan, rank0_policy policy)
    : policy_(policy), ledger_(std::make_shared<fault_ledger>(plan, policy)) {}

void fault_accounting::replace(const fault_plan& plan) {
    auto ledger = std::make_shared<fault_ledger>(plan, policy_);
    std::lock_guard<std::mutex> lock(mutex_);
    ledger_ = std::move(ledger);
}

std::shared_ptr<fault_ledger> fault_accounting::current() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return ledger_;
}

uint64_t fault_accounting::record(fault_ledger& step_ledger, const step_reply& reply,
                                  std::chrono::steady_clock::time_point arrived, gateway_metrics& metrics) {
    const uint64_t id = reply.result.is_ok() ? reply.step_id : next_step_id_;
    next_step_id_ = id + 1;
    if (step_ledger.plan().empty()) return id;
    const int64_t latency_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - arrived).count();
    metrics.observe_faults(step_ledger.record(id, reply, latency_ns));
    return id;
}

}  // namespace ds::gateway

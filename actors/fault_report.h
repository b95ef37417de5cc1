// The fault report (issue 7): what became of every fault a plan injected. A caller that runs
// steps under a fault plan records each answered step here; since the plan says which faults
// fired where (config/fault_plan.h), every injected fault is accounted for as detected (a desync
// event or a failed step naming its rank) or masked by design (a delay within the timeout, a
// fault in a step that failed for another fault), and every event no fault explains is counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <distsample/group.h>

namespace ds {

struct fault_record {
    uint64_t step = 0;
    int32_t rank = 0;
    fault_kind kind = fault_kind::alter_token;
    bool detected = false;
    bool masked = false;       // by design; neither detected nor masked: the fault went unseen
    bool repaired = false;     // the step was answered with outputs every rank committed alike
    bool failed_step = false;  // the step failed because of this fault
    int32_t first_row = -1;    // desyncs: the first differing request
    std::string action;        // what the policy did, or why the fault was masked
    int64_t latency_ns = 0;    // detected: from submission to the step's reply
};

struct fault_kind_summary {
    fault_kind kind = fault_kind::alter_token;
    int64_t injected = 0;
    int64_t detected = 0;
    int64_t masked = 0;
    int64_t repaired = 0;
    int64_t failed_steps = 0;
    int64_t worst_latency_ns = 0;
};

// Per kind, in kAllFaultKinds order.
std::vector<fault_kind_summary> summarize_faults(const std::vector<fault_record>& records);
// One line per kind: injected, detected, masked, repaired, failed steps, worst latency.
std::string fault_table(const std::vector<fault_kind_summary>& summary);
// Every record, the summary and the unexplained events; latencies left out when `with_latency`
// is false (a replay gives the same report but not the same timings).
std::string fault_report_json(const std::vector<fault_record>& records, const std::vector<std::string>& unexplained, bool with_latency);
// Reads what fault_report_json wrote; empty on success, else what is wrong.
std::string parse_fault_report_json(const std::string& text, std::vector<fault_record>& records, std::vector<std::string>& unexplained);

class fault_ledger {
   public:
    fault_ledger(fault_plan plan, rank0_policy policy);

    // Accounts for the faults the plan injected into step `step_id`, answered by `reply`
    // `latency_ns` after its submission.
    void record(uint64_t step_id, const step_reply& reply, int64_t latency_ns);

    const std::vector<fault_record>& records() const { return records_; }
    // Desync events and failed steps that no injected fault explains.
    const std::vector<std::string>& unexplained() const { return unexplained_; }
    std::vector<fault_kind_summary> summary() const { return summarize_faults(records_); }
    std::string table() const { return fault_table(summary()); }
    std::string json(bool with_latency) const { return fault_report_json(records_, unexplained_, with_latency); }

   private:
    fault_plan plan_;
    rank0_policy policy_;
    std::vector<fault_record> records_;
    std::vector<std::string> unexplained_;
};

}  // namespace ds

// The fault report (docs/faults.md, The fault report): what became of every fault a plan injected. A caller that runs
// steps under a fault plan records each answered step here; since the plan says which faults
// fired where (config/fault_plan.h), every injected fault is accounted for as detected (a desync
// event or a failed step naming its rank) or masked by design (a delay within the timeout, a
// fault in a step that failed for another fault), and every event no fault explains is counted.
// The counts cover the whole run; the records are the latest `kept` ones (a gateway records
// every step for as long as it runs).
#pragma once

#include <cstdint>
#include <deque>
#include <set>
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

// Adds what became of one injected fault to a kind's counters (a fault_kind_summary, or the
// gateway's atomic counters).
template <class Counters>
void add_fault_outcome(Counters& c, const fault_record& r) {
    ++c.injected;
    c.detected += r.detected ? 1 : 0;
    c.masked += r.masked ? 1 : 0;
    c.repaired += r.repaired ? 1 : 0;
    c.failed_steps += r.failed_step ? 1 : 0;
}

// A report: the counts per kind over every step recorded, and the latest records and
// unexplained events (a long run keeps only the most recent, so its memory stays flat).
struct fault_report {
    std::vector<fault_kind_summary> summary;  // per kind, in kAllFaultKinds order
    std::deque<fault_record> records;
    std::deque<std::string> unexplained;  // desync events and failed steps that no injected fault explains
    int64_t records_left_out = 0;         // older records no longer kept
    int64_t unexplained_left_out = 0;
};

// Zero counts for every kind, in kAllFaultKinds order.
std::vector<fault_kind_summary> empty_fault_summary();
// One line per kind: injected, detected, masked, repaired, failed steps, worst latency.
std::string fault_table(const std::vector<fault_kind_summary>& summary);
// The summary, every record kept and the unexplained events; latencies left out when
// `with_latency` is false (a replay gives the same report but not the same timings).
std::string fault_report_json(const fault_report& report, bool with_latency);
// Reads what fault_report_json wrote (a report whose summary is empty gets one counted from its
// records), or says what is wrong.
status parse_fault_report_json(const std::string& text, fault_report& report);

// How many records and unexplained events a ledger keeps by default.
inline constexpr std::size_t kKeptFaultRecords = 4096;

class fault_ledger {
   public:
    fault_ledger(fault_plan plan, rank0_policy policy, std::size_t kept = kKeptFaultRecords);

    // Accounts for the faults the plan injected into step `step_id`, answered by `reply`
    // `latency_ns` after its submission; returns that step's records.
    std::vector<fault_record> record(uint64_t step_id, const step_reply& reply, int64_t latency_ns);

    const fault_plan& plan() const { return plan_; }
    const fault_report& report() const { return report_; }
    const std::deque<fault_record>& records() const { return report_.records; }
    const std::deque<std::string>& unexplained() const { return report_.unexplained; }
    const std::vector<fault_kind_summary>& summary() const { return report_.summary; }
    std::string table() const { return fault_table(report_.summary); }
    std::string json(bool with_latency) const { return fault_report_json(report_, with_latency); }

   private:
    // The plan's faults that fire at step `step_id`, not yet judged.
    std::vector<fault_record> fired(uint64_t step_id) const;
    // What fault `r` did to the step: detected (repaired or not), masked, or not detected. True
    // when it explains the step's failure; the desync events it explains go into `explained_events`.
    bool judge(fault_record& r, const step_reply& reply, const std::set<int32_t>& blamed,
               std::set<int32_t>& explained_events) const;
    void judge_caught_desync(fault_record& r, const std::vector<const desync_event*>& events) const;
    void keep_unexplained(std::string event);

    fault_plan plan_;
    rank0_policy policy_;
    std::size_t kept_;
    fault_report report_;
};

}  // namespace ds

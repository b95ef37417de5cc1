#include "actors/fault_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <set>

namespace ds {

namespace {

// The ranks a failed step's message names ("step 7: rank 2 did not answer ..."): the coordinator's
// errors name the rank they blame, and a reply carries no other field for it.
std::set<int32_t> ranks_named(const std::string& message) {
    static const std::string word = "rank ";
    std::set<int32_t> ranks;
    for (size_t at = message.find(word); at != std::string::npos; at = message.find(word, at + 1)) {
        const size_t digits = at + word.size();
        size_t end = digits;
        while (end < message.size() && end - digits < 6 && std::isdigit(static_cast<unsigned char>(message[end])))
            ++end;
        if (end > digits) ranks.insert(std::stoi(message.substr(digits, end - digits)));
    }
    return ranks;
}

bool can_fail_a_step(fault_kind kind) {
    return kind == fault_kind::hang || kind == fault_kind::crash || kind == fault_kind::delay_kernel ||
           kind == fault_kind::delay_transport || kind == fault_kind::corrupt_payload ||
           kind == fault_kind::alter_logit || kind == fault_kind::drop_put || kind == fault_kind::duplicate_put ||
           kind == fault_kind::drop_control;
}

void count_record(std::vector<fault_kind_summary>& summary, const fault_record& r) {
    fault_kind_summary& s = summary[static_cast<size_t>(r.kind)];
    add_fault_outcome(s, r);
    s.worst_latency_ns = std::max(s.worst_latency_ns, r.latency_ns);
}

bool is_desync(fault_kind kind) { return kind == fault_kind::alter_token || kind == fault_kind::alter_accept_length; }

// Faults the output digests catch, and which desync events they explain: a rank's own change
// shows at that rank (or, for rank 0, the reference, at every other rank); a stale duplicate of
// a rank's payload shows at the peer that received it (or, for rank 0, at every other rank).
bool digest_catches(fault_kind kind) {
    return is_desync(kind) || kind == fault_kind::corrupt_payload || kind == fault_kind::duplicate_put;
}
bool explains_event(const fault_record& fault, const desync_event& e) {
    return fault.kind == fault_kind::duplicate_put || e.rank == fault.rank || fault.rank == 0;
}

// Why a fault that neither failed its step nor showed as a desync is harmless, or empty.
const char* masked_by_design(fault_kind kind) {
    switch (kind) {
        case fault_kind::delay_kernel:
        case fault_kind::delay_transport: return "masked: the delay stayed within the timeouts";
        case fault_kind::duplicate_put: return "masked: the stale copy carried the same bytes as the fresh payload";
        case fault_kind::duplicate_control:
            return "masked: the rank refused the repeated step by its id and CAF dropped the second reply, which the "
                   "coordinator "
                   "no longer awaited";
        case fault_kind::slow_connection: return "masked: the gateway sent the reply late by the delay";
        default: return "";
    }
}

}  // namespace

fault_ledger::fault_ledger(fault_plan plan, rank0_policy policy, std::size_t kept)
    : plan_(std::move(plan)), policy_(policy), kept_(kept) {
    report_.summary = empty_fault_summary();
}

void fault_ledger::keep_unexplained(std::string event) {
    report_.unexplained.push_back(std::move(event));
    if (report_.unexplained.size() > kept_) {
        report_.unexplained.pop_front();
        ++report_.unexplained_left_out;
    }
}

std::vector<fault_record> fault_ledger::fired(uint64_t step_id) const {
    std::vector<fault_record> injected;
    for (std::size_t i = 0; i < plan_.faults.size(); ++i) {
        if (!fault_fires(plan_, i, step_id)) continue;
        fault_record r;
        r.step = step_id;
        r.rank = plan_.faults[i].rank;
        r.kind = plan_.faults[i].kind;
        injected.push_back(r);
    }
    return injected;
}

// A desync the digests caught in an answered step: repaired with rank 0's outputs unless rank 0's
// are the altered ones.
void fault_ledger::judge_caught_desync(fault_record& r, const std::vector<const desync_event*>& events) const {
    r.detected = true;
    r.first_row = events.front()->first_row;
    // Rank 0's outputs are the answer: wrong when rank 0 altered them or received the stale
    // copy (then the duplicating rank, which received nothing stale, differs from it).
    const bool reference_wrong =
        r.kind == fault_kind::duplicate_put
            ? std::any_of(events.begin(), events.end(), [&](const desync_event* e) { return e->rank == r.rank; })
            : r.rank == 0;
    if (reference_wrong) {
        r.action = "answered with rank 0's outputs, which are the altered ones (rank 0 is the reference)";
    } else {
        r.repaired = true;
        r.action = policy_ == rank0_policy::always ? "rank 0's outputs answered and committed (policy always)"
                                                   : "repaired with rank 0's outputs (policy on_mismatch)";
    }
}

bool fault_ledger::judge(fault_record& r, const step_reply& reply, const std::set<int32_t>& blamed,
                         std::set<int32_t>& explained_events) const {
    const bool ok = reply.result.is_ok();
    bool explains_failure = false;
    // A desync of rank 0, the reference, shows as every other rank differing from it.
    std::vector<const desync_event*> events;
    for (const desync_event& e : reply.desyncs) {
        if (explains_event(r, e)) events.push_back(&e);
    }
    if (ok && digest_catches(r.kind) && !events.empty()) {
        judge_caught_desync(r, events);
        for (const desync_event* e : events) explained_events.insert(e->rank);
    } else if (!ok && blamed.count(r.rank) != 0 && (can_fail_a_step(r.kind) || is_desync(r.kind))) {
        r.detected = true;
        r.failed_step = true;
        explains_failure = true;
        r.action = r.kind == fault_kind::alter_logit
                       ? fmt::format(
                             "step failed, nothing committed: rank {}'s shard changed after it was handed in, and the "
                             "rank sampling that row would have used it ({})",
                             r.rank, reply.result.message)
                       : fmt::format("step failed: {}", reply.result.message);
    } else if (!ok) {
        r.masked = true;
        r.action = "masked: the step failed for another fault";
    } else if (*masked_by_design(r.kind) != '\0') {
        r.masked = true;
        r.action = masked_by_design(r.kind);
    } else {
        r.action = "NOT DETECTED";
    }
    if (r.kind == fault_kind::cut_connection && ok) {
        // The client sees it at once: its connection closes instead of the reply.
        r.detected = true;
        r.action =
            "the gateway closed the connection instead of replying; the ranks answered and committed the step, its "
            "reply was dropped and counted";
    }
    return explains_failure;
}

std::vector<fault_record> fault_ledger::record(uint64_t step_id, const step_reply& reply, int64_t latency_ns) {
    std::vector<fault_record> injected = fired(step_id);
    const bool ok = reply.result.is_ok();
    const std::set<int32_t> blamed = ok ? std::set<int32_t>{} : ranks_named(reply.result.message);
    std::set<int32_t> explained_events;  // ranks of desync events some fault explains
    bool failure_explained = false;
    for (fault_record& r : injected) {
        failure_explained = judge(r, reply, blamed, explained_events) || failure_explained;
        if (r.detected) r.latency_ns = latency_ns;
    }
    for (const desync_event& e : reply.desyncs) {
        if (explained_events.count(e.rank) == 0) {
            keep_unexplained(fmt::format("step {}: desync of rank {} at request {} with no fault injected", step_id,
                                         e.rank, e.first_row));
        }
    }
    if (!ok && !failure_explained &&
        std::none_of(injected.begin(), injected.end(), [](const fault_record& r) { return r.detected; })) {
        keep_unexplained(fmt::format("step {} failed with no fault to blame: {}", step_id, reply.result.message));
    }
    for (const fault_record& r : injected) {
        count_record(report_.summary, r);
        report_.records.push_back(r);
        if (report_.records.size() > kept_) {
            report_.records.pop_front();
            ++report_.records_left_out;
        }
    }
    return injected;
}

std::vector<fault_kind_summary> empty_fault_summary() {
    std::vector<fault_kind_summary> out;
    for (fault_kind kind : kAllFaultKinds) {
        fault_kind_summary s;
        s.kind = kind;
        out.push_back(s);
    }
    return out;
}

std::string fault_table(const std::vector<fault_kind_summary>& summary) {
    std::string text =
        fmt::format("| {:<20} | {:>8} | {:>8} | {:>6} | {:>8} | {:>12} | {:>22} |\n", "fault kind", "injected",
                    "detected", "masked", "repaired", "failed steps", "worst detection (ms)");
    text += fmt::format("|{:-<22}|{:->10}|{:->10}|{:->8}|{:->10}|{:->14}|{:->24}|\n", "", "", "", "", "", "", "");
    for (const fault_kind_summary& s : summary) {
        text += fmt::format("| {:<20} | {:>8} | {:>8} | {:>6} | {:>8} | {:>12} | {:>22.2f} |\n",
                            fault_kind_name(s.kind), s.injected, s.detected, s.masked, s.repaired, s.failed_steps,
                            static_cast<double>(s.worst_latency_ns) / 1e6);
    }
    return text;
}

std::string fault_report_json(const fault_report& report, bool with_latency) {
    nlohmann::json events = nlohmann::json::array();
    for (const fault_record& r : report.records) {
        nlohmann::json e = {{"step", r.step},
                            {"rank", r.rank},
                            {"kind", fault_kind_name(r.kind)},
                            {"detected", r.detected},
                            {"masked", r.masked},
                            {"repaired", r.repaired},
                            {"failed_step", r.failed_step},
                            {"first_row", r.first_row},
                            {"action", r.action}};
        if (with_latency) e["latency_ns"] = r.latency_ns;
        events.push_back(std::move(e));
    }
    nlohmann::json kinds = nlohmann::json::array();
    for (const fault_kind_summary& s : report.summary) {
        nlohmann::json k = {{"kind", fault_kind_name(s.kind)}, {"injected", s.injected},
                            {"detected", s.detected},          {"masked", s.masked},
                            {"repaired", s.repaired},          {"failed_steps", s.failed_steps}};
        if (with_latency) k["worst_latency_ns"] = s.worst_latency_ns;
        kinds.push_back(std::move(k));
    }
    return nlohmann::json{{"events", events},
                          {"summary", kinds},
                          {"unexplained", report.unexplained},
                          {"events_left_out", report.records_left_out},
                          {"unexplained_left_out", report.unexplained_left_out}}
        .dump(2);
}

status parse_fault_report_json(const std::string& text, fault_report& report) {
    report = fault_report{};
    report.summary = empty_fault_summary();
    try {
        const nlohmann::json doc = nlohmann::json::parse(text);
        for (const nlohmann::json& e : doc.at("events")) {
            fault_record r;
            r.step = e.at("step").get<uint64_t>();
            r.rank = e.at("rank").get<int32_t>();
            const std::string kind = e.at("kind").get<std::string>();
            const result<fault_kind> parsed = parse_fault_kind(kind);
            if (!parsed.is_ok())
                return status::invalid(fmt::format("event of step {}: unknown fault kind '{}'", r.step, kind));
            r.kind = *parsed;
            r.detected = e.at("detected").get<bool>();
            r.masked = e.at("masked").get<bool>();
            r.repaired = e.at("repaired").get<bool>();
            r.failed_step = e.at("failed_step").get<bool>();
            r.first_row = e.at("first_row").get<int32_t>();
            r.action = e.at("action").get<std::string>();
            r.latency_ns = e.value("latency_ns", int64_t{0});
            report.records.push_back(std::move(r));
        }
        for (const nlohmann::json& k : doc.at("summary")) {
            const std::string name = k.at("kind").get<std::string>();
            const result<fault_kind> kind = parse_fault_kind(name);
            if (!kind.is_ok()) return status::invalid(fmt::format("summary: unknown fault kind '{}'", name));
            fault_kind_summary& s = report.summary[static_cast<size_t>(*kind)];
            s.injected = k.at("injected").get<int64_t>();
            s.detected = k.at("detected").get<int64_t>();
            s.masked = k.at("masked").get<int64_t>();
            s.repaired = k.at("repaired").get<int64_t>();
            s.failed_steps = k.at("failed_steps").get<int64_t>();
            s.worst_latency_ns = k.value("worst_latency_ns", int64_t{0});
        }
        if (doc.at("summary").empty()) {
            for (const fault_record& r : report.records) count_record(report.summary, r);
        }
        for (const nlohmann::json& u : doc.at("unexplained")) report.unexplained.push_back(u.get<std::string>());
        report.records_left_out = doc.value("events_left_out", int64_t{0});
        report.unexplained_left_out = doc.value("unexplained_left_out", int64_t{0});
    } catch (const nlohmann::json::exception& e) {
        return status::invalid(fmt::format("not a fault report ({})", e.what()));
    }
    return status::success();
}

}  // namespace ds

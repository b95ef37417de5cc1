#include "gateway/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace ds::gateway {

histogram::histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1) {}

void histogram::observe(double value) {
    const size_t bucket = static_cast<size_t>(std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) -
                                              upper_bounds_.begin());
    std::lock_guard<std::mutex> lock(mutex_);
    ++counts_[bucket];
    sum_ += value;
    ++count_;
}

void histogram::render(const std::string& name, const std::string& help, std::string& out,
                       const std::string& labels) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!help.empty()) out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    const std::string prefix = labels.empty() ? "" : labels + ",";
    const std::string own = labels.empty() ? "" : "{" + labels + "}";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < upper_bounds_.size(); ++i) {
        cumulative += counts_[i];
        out += fmt::format("{}_bucket{{{}le=\"{}\"}} {}\n", name, prefix, upper_bounds_[i], cumulative);
    }
    out += fmt::format("{}_bucket{{{}le=\"+Inf\"}} {}\n{}_sum{} {}\n{}_count{} {}\n", name, prefix, count_, name, own,
                       sum_, name, own, count_);
}

gateway_metrics::gateway_metrics(int32_t tp) {
    for (int32_t r = 0; r < tp; ++r) ranks.push_back(std::make_unique<rank_histograms>());
}

void gateway_metrics::observe_ranks(const std::vector<step_timing>& timing) {
    for (size_t r = 0; r < timing.size() && r < ranks.size(); ++r) {
        ranks[r]->compute.observe(static_cast<double>(timing[r].rank_step_ns - timing[r].rank_transport_ns) * 1e-9);
        ranks[r]->transport.observe(static_cast<double>(timing[r].rank_transport_ns) * 1e-9);
    }
}

void gateway_metrics::observe_faults(const std::vector<fault_record>& step_faults) {
    for (const fault_record& r : step_faults) {
        add_fault_outcome(faults[static_cast<size_t>(r.kind)], r);
    }
}

std::string gateway_metrics::render() const {
    std::string out;
    auto counter = [&out](const char* name, const char* help, uint64_t value) {
        out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, value);
    };
    counter("distsample_steps_total", "Steps answered with outputs.", steps.load());
    counter("distsample_step_errors_total", "Steps answered with an error.", step_errors.load());
    counter("distsample_desync_events_total", "Ranks whose outputs differed from rank 0's.", desync_events.load());
    counter("distsample_rank_failures_total", "Steps failed by a timeout or a failed rank.", rank_failures.load());
    counter("distsample_frames_rejected_total",
            "Frames that closed their connection (malformed, too large, wrong version, unauthenticated).",
            frames_rejected.load());
    counter("distsample_connections_accepted_total", "Scheduler connections accepted.", connections_accepted.load());
    counter("distsample_connections_refused_total",
            "Connections refused at accept: gateway.max_connections or gateway.max_http_connections were open.",
            connections_refused.load());
    counter("distsample_limits_hit_total",
            "Connections closed by a limit: a deadline (auth, read, write, idle) or gateway.max_buffered_bytes.",
            limits_hit.load());
    counter("distsample_replies_dropped_total",
            "Answered steps whose reply was dropped: a cut_connection fault closed their connection.",
            replies_dropped.load());
    out += fmt::format(
        "# HELP distsample_connections_open Scheduler connections open.\n# TYPE distsample_connections_open gauge\n"
        "distsample_connections_open {}\n",
        connections_open.load());
    const struct {
        const char* name;
        const char* help;
        std::atomic<uint64_t> fault_counts::*count;
    } fault_families[] = {
        {"distsample_faults_injected_total", "Faults a fault plan injected, per kind.", &fault_counts::injected},
        {"distsample_faults_detected_total",
         "Injected faults detected (a desync event or a failed step naming the rank), per kind.",
         &fault_counts::detected},
        {"distsample_faults_masked_total", "Injected faults masked by design (harmless), per kind.",
         &fault_counts::masked},
        {"distsample_faults_repaired_total",
         "Injected faults whose step was answered with outputs every rank committed alike, per kind.",
         &fault_counts::repaired},
        {"distsample_faults_failed_steps_total", "Steps failed because of an injected fault, per kind.",
         &fault_counts::failed_steps}};
    for (const auto& family : fault_families) {
        out += fmt::format("# HELP {} {}\n# TYPE {} counter\n", family.name, family.help, family.name);
        for (fault_kind kind : kAllFaultKinds) {
            out += fmt::format("{}{{kind=\"{}\"}} {}\n", family.name, fault_kind_name(kind),
                               (faults[static_cast<size_t>(kind)].*family.count).load());
        }
    }
    step_latency.render("distsample_step_latency_seconds", "From a step's frame arriving to its reply.", out);
    accept_length.render("distsample_accept_length", "Tokens emitted per request per step (accepted drafts + 1).", out);
    const std::pair<const char*, const char*> families[] = {
        {"distsample_rank_compute_seconds", "A rank's step time outside transport collectives."},
        {"distsample_rank_transport_seconds", "A rank's time inside transport collectives."}};
    for (const auto& [name, help] : families) {
        for (size_t r = 0; r < ranks.size(); ++r) {
            const histogram& h = name == families[0].first ? ranks[r]->compute : ranks[r]->transport;
            h.render(name, r == 0 ? help : "", out, fmt::format("rank=\"{}\"", r));
        }
    }
    return out;
}

}  // namespace ds::gateway

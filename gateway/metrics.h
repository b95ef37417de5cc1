// The gateway's Prometheus metrics, rendered in the text exposition format for GET /metrics.
// Counters are atomics; histograms take a lock (they are observed by the one completion thread).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <distsample/group.h>

#include "actors/fault_report.h"

namespace ds::gateway {

class histogram {
   public:
    explicit histogram(std::vector<double> upper_bounds);
    void observe(double value);
    // Appends the _bucket, _sum and _count lines of `name`, with `labels` (`key="value"`) on
    // each; the # HELP / # TYPE header only when `help` is not empty.
    void render(const std::string& name, const std::string& help, std::string& out,
                const std::string& labels = "") const;

   private:
    std::vector<double> upper_bounds_;
    mutable std::mutex mutex_;
    std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
    double sum_ = 0.0;
    uint64_t count_ = 0;
};

struct gateway_metrics {
    std::atomic<uint64_t> steps{0};        // answered with outputs
    std::atomic<uint64_t> step_errors{0};  // answered with an error
    std::atomic<uint64_t> desync_events{0};
    std::atomic<uint64_t> rank_failures{0};    // steps failed by a timeout or a failed rank
    std::atomic<uint64_t> frames_rejected{0};  // malformed, oversized, wrong version, unauthenticated
    std::atomic<uint64_t> connections_accepted{0};
    std::atomic<int64_t> connections_open{0};
    std::atomic<uint64_t> connections_refused{0};  // at accept: too many open (scheduler and HTTP)
    std::atomic<uint64_t> limits_hit{0};           // closed by a deadline or the buffered-bytes budget
    std::atomic<uint64_t> replies_dropped{0};      // answered steps whose connection a cut_connection fault closed
    // Seconds from a step's frame arriving to its reply being queued.
    histogram step_latency{
        {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1.0}};
    histogram accept_length{{1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32, 64}};
    // Per rank (step_reply.rank_timing): compute (its step minus its collectives) and transport
    // (time inside collectives).
    struct rank_histograms {
        histogram compute{{10e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 50e-3, 250e-3}};
        histogram transport{{10e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 50e-3, 250e-3}};
    };
    std::vector<std::unique_ptr<rank_histograms>> ranks;
    // Per fault kind (in kAllFaultKinds order), what became of the injected faults
    // (actors/fault_report.h): counted over every step the gateway answered under a fault plan.
    struct fault_counts {
        std::atomic<uint64_t> injected{0};
        std::atomic<uint64_t> detected{0};
        std::atomic<uint64_t> masked{0};
        std::atomic<uint64_t> repaired{0};
        std::atomic<uint64_t> failed_steps{0};
    };
    std::array<fault_counts, std::size(kAllFaultKinds)> faults;

    explicit gateway_metrics(int32_t tp);
    void observe_ranks(const std::vector<step_timing>& timing);
    void observe_faults(const std::vector<fault_record>& step_faults);
    std::string render() const;
};

}  // namespace ds::gateway

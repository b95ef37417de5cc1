// Exact sharded mode against the vocab swap on the GPU (docs/benchmarks.md): TP = 4 rank threads
// of one process share one GPU, CUDA backend, local transport; each rank's shard of a verify
// step's logits lies in device memory, as a model's LM head leaves it. pad_bs = 64, N = 4,
// V = 128256, over the synthetic target and draft of bench/verify_workload.h. Per parameter mix
// and mode: step latency p50 / p99 at the caller and the bytes the ranks receive per step, with
// sharded's ratios to swap from the same run. Prints why and exits 0 without a GPU.
//
//   bench_gpu_modes [--steps N]
#include <distsample/group.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/percentiles.h"
#include "bench/verify_workload.h"
#include "core/clock.h"
#include "kernels/device_memory.h"

namespace {

using ds::bench::of;
using ds::bench::percentiles;

constexpr int32_t kTp = 4;
constexpr int32_t kBatch = 64;
constexpr int32_t kN = 4;
constexpr int32_t kVocab = 128256;
constexpr int kWarmup = 3;

struct mix {
    const char* name;
    float temperature;  // < 0: the workload's own parameters
    int32_t top_k;
    float top_p;
};

const mix kMixes[] = {{"workload mix", -1.0f, -1, 1.0f},
                      {"greedy", 0.0f, -1, 1.0f},
                      {"T=0.8 only", 0.8f, -1, 1.0f},
                      {"T=0.8 top-k 50 top-p 0.9", 0.8f, 50, 0.9f}};

struct measured {
    percentiles latency_us;
    double received_bytes = 0;
};

// Every rank's shard of the workload's rows, copied into device memory.
struct device_shards {
    std::vector<ds::cuda_allocation> memory;
    std::vector<ds::logits_view> views;

    ds::status upload(const workload& w) {
        const int32_t shard = w.vocab / kTp;
        const int64_t rows = int64_t{w.batch} * w.n;
        const size_t row_bytes = static_cast<size_t>(shard) * sizeof(float);
        memory.resize(kTp);
        for (int32_t r = 0; r < kTp; ++r) {
            ds::cuda_allocation& m = memory[static_cast<size_t>(r)];
            DS_TRY(
                ds::cuda_allocation::allocate(ds::cuda_memory_kind::device, row_bytes * static_cast<size_t>(rows), m));
            DS_TRY(ds::copy_rows(m.data(), row_bytes, w.logits.data() + static_cast<size_t>(r) * shard,
                                 static_cast<size_t>(w.vocab) * sizeof(float), row_bytes, static_cast<size_t>(rows)));
            views.push_back(ds::logits_view{m.data(), ds::logits_dtype::f32, rows, shard, shard, true});
        }
        return ds::status::success();
    }
};

ds::status run_mode(const workload& w, const device_shards& shards, const mix& m, ds::dist_mode mode, int steps,
                    measured& out) {
    ds::group_config config;
    config.backend = ds::backend_kind::cuda;
    config.distribution.tp = kTp;
    config.distribution.mode = mode;
    config.limits.vocab_size = w.vocab;
    config.limits.max_batch = w.batch;
    config.limits.max_tokens_per_req = w.n;
    config.limits.max_slots = w.batch + 1;
    std::unique_ptr<ds::group> group;
    DS_TRY(ds::group::create(config, group));
    for (int32_t b = 0; b < w.batch; ++b) {
        ds::sampling_params p = w.params[static_cast<size_t>(b)];
        if (m.temperature >= 0.0f) {
            p.temperature = m.temperature;
            p.top_k = m.top_k;
            p.top_p = m.top_p;
        }
        DS_TRY(group->register_request(b + 1, p));
    }
    std::vector<double> latency;
    for (int i = 0; i < kWarmup + steps; ++i) {
        ds::step_request request = w.request(kTp);
        request.shards = shards.views;
        const int64_t start = ds::steady_now_ns();
        const ds::step_reply reply = group->step(std::move(request));
        const int64_t end = ds::steady_now_ns();
        DS_TRY(reply.result);
        if (i < kWarmup) continue;
        latency.push_back(static_cast<double>(end - start) * 1e-3);
        out.received_bytes = 0;
        for (const ds::step_timing& t : reply.rank_timing)
            out.received_bytes += static_cast<double>(t.rank_received_bytes);
    }
    out.latency_us = of(latency);
    return ds::status::success();
}

}  // namespace

int main(int argc, char** argv) {
    int steps = 30;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--steps") == 0) steps = std::max(1, std::atoi(argv[i + 1]));
    }
    const workload w(kBatch, kN, kVocab);
    device_shards shards;
    if (ds::status s = shards.upload(w); !s.is_ok()) {
        fmt::print("bench_gpu_modes: no GPU to run on ({})\n", s.message);
        return 0;
    }
    fmt::print(
        "TP={} rank threads on one GPU, CUDA backend, local transport, shards in device memory; "
        "pad_bs={} N={} V={}, {} steps per case (µs, bytes received by all ranks per step)\n\n",
        kTp, kBatch, kN, kVocab, steps);
    fmt::print("{:<26} {:>12} {:>12} {:>14} {:>12} {:>12} {:>14} {:>12} {:>10}\n", "mix", "swap p50", "swap p99",
               "swap bytes", "sharded p50", "sharded p99", "sharded bytes", "time ratio", "bytes %");
    for (const mix& m : kMixes) {
        measured swap, sharded;
        ds::status s = run_mode(w, shards, m, ds::dist_mode::swap, steps, swap);
        if (s.is_ok()) s = run_mode(w, shards, m, ds::dist_mode::sharded, steps, sharded);
        if (!s.is_ok()) {
            fmt::print("{:<26} failed: {}\n", m.name, s.message);
            return 1;
        }
        fmt::print("{:<26} {:>12.1f} {:>12.1f} {:>14.0f} {:>12.1f} {:>12.1f} {:>14.0f} {:>12.3f} {:>9.3f}%\n", m.name,
                   swap.latency_us.p50, swap.latency_us.p99, swap.received_bytes, sharded.latency_us.p50,
                   sharded.latency_us.p99, sharded.received_bytes, sharded.latency_us.p50 / swap.latency_us.p50,
                   100.0 * sharded.received_bytes / swap.received_bytes);
    }
    return 0;
}

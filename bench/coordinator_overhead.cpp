// Coordinator overhead per step (docs/benchmarks.md): TP = 4 rank actors on the local transport, bs = 64,
// N = 4, V = 32000, CPU backend. Two figures per mode, p50 and p99:
//   coordinator overhead = step latency (submit -> reply, at the caller) - the slowest rank's
//       time inside its step (measured in the rank): the actors, the coordinator and the futures;
//   distributed overhead = step latency - the same per-rank kernels called directly (TP threads,
//       each verifying its bs/TP requests on full-vocab rows, no actors, no transport): adds the
//       transport (vocab swap copies, collectives) and the sharded algorithm's extra passes.
// The whole batch on one backend thread is timed too, for scale. A tiny step (bs = 4, N = 1,
// greedy), at TP = 4 and at TP = 2 (no more rank threads than cores on a 2-core machine), shows
// the messaging cost without the rank threads competing for the cores. Each swap case runs twice:
// with the default configuration (threads sleep when idle) and with `spin_us` = kSpinUs as
// scheduler_spin_us, reply_spin_us and rank_spin_us (idle threads poll first;
// config/group_config.h); the bs 64 step also with kStepSpinUs, longer than the step, which
// needs a core per polling thread (TP + 2) to mean anything. The
// coordinator overhead is printed against its target (p50 <= 50 us, p99 <= 200 us). No GPU
// is needed. Last, the bytes each mode's
// collectives move per step at a large shape (pad_bs = 64, N = 4, V = 128256, TP = 4), from the
// ranks' transport counters: exact sharded mode against the vocab swap.
#include <benchmark/benchmark.h>
#include <distsample/group.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/percentiles.h"
#include "bench/verify_workload.h"
#include "core/clock.h"
#include "kernels/sampling_backend.h"

namespace {

using ds::bench::of;
using ds::bench::percentiles;

constexpr int32_t kTp = 4;
constexpr int32_t kBatch = 64;
constexpr int32_t kN = 4;
constexpr int32_t kVocab = 32000;
constexpr int32_t kLargeVocab = 128256;
constexpr int32_t kSpinUs = 2000;
// Longer than the bs 64 step takes on 16 cores (about 75 ms), so no thread sleeps during it.
constexpr int32_t kStepSpinUs = 250'000;
constexpr double kTargetP50Us = 50;
constexpr double kTargetP99Us = 200;

const workload& shared_workload(int32_t batch = kBatch, int32_t n = kN, int32_t vocab = kVocab) {
    static std::map<std::tuple<int32_t, int32_t, int32_t>, std::unique_ptr<workload>> made;
    std::unique_ptr<workload>& w = made[{batch, n, vocab}];
    if (!w) w = std::make_unique<workload>(batch, n, vocab);
    return *w;
}

std::map<ds::dist_mode, percentiles>& latencies() {
    static std::map<ds::dist_mode, percentiles> by_mode;
    return by_mode;
}

std::vector<std::string>& report() {
    static std::vector<std::string> lines;
    return lines;
}

// A group of `tp` rank threads for `w`'s shape with every request registered, or null after
// telling `state` why not.
std::unique_ptr<ds::group> make_group(benchmark::State& state, const workload& w, ds::dist_mode mode, int32_t tp,
                                      int32_t spin_us = 0) {
    ds::group_config config;
    config.tuning.scheduler_spin_us = spin_us;
    config.tuning.reply_spin_us = spin_us;
    config.tuning.rank_spin_us = spin_us;
    config.distribution.tp = tp;
    config.limits.vocab_size = w.vocab;
    config.limits.max_batch = w.batch;
    config.limits.max_tokens_per_req = w.n;
    config.limits.max_slots = w.batch + 1;
    config.distribution.mode = mode;
    std::unique_ptr<ds::group> group;
    if (ds::status s = ds::group::create(config, group); !s.is_ok()) {
        state.SkipWithError(s.message.c_str());
        return nullptr;
    }
    for (int32_t b = 0; b < w.batch; ++b) {
        if (!group->register_request(b + 1, w.params[static_cast<size_t>(b)]).is_ok()) {
            state.SkipWithError("register failed");
            return nullptr;
        }
    }
    return group;
}

// The hops of a step, in order, from the caller's submit to its return: the time between
// consecutive hop_ends (ranks start and answer in parallel: the latest of each counts).
const std::vector<const char*> kHops = {
    "caller->coordinator", "plan",         "send->last rank began", "last rank's step", "->last result filed",
    "->digests compared",  "->future set", "->caller woke"};

std::vector<int64_t> hop_ends(int64_t start, const ds::step_reply& reply, int64_t end) {
    return {start,
            reply.timeline.received_at_ns,
            reply.timeline.dispatched_at_ns,
            reply.timing.rank_began_at_ns,
            reply.timing.rank_answered_at_ns,
            reply.timeline.results_in_at_ns,
            reply.timeline.answered_at_ns,
            reply.timeline.delivered_at_ns,
            end};
}

void BM_CoordinatorStep(benchmark::State& state) {
    const auto mode = static_cast<ds::dist_mode>(state.range(0));
    const workload& w = shared_workload(static_cast<int32_t>(state.range(1)), static_cast<int32_t>(state.range(2)));
    const auto spin_us = static_cast<int32_t>(state.range(4));
    const std::unique_ptr<ds::group> group = make_group(state, w, mode, static_cast<int32_t>(state.range(3)), spin_us);
    if (!group) return;
    const ds::group_config& config = group->config();
    std::vector<double> latency_us, overhead_us, transport_us;
    std::vector<std::vector<double>> hop_us(kHops.size());
    latency_us.reserve(state.max_iterations);
    for (auto _ : state) {
        ds::step_request request = w.request(config.distribution.tp);  // built outside the timed region
        const int64_t start = ds::steady_now_ns();
        const ds::step_reply reply = group->step(std::move(request));
        const int64_t end = ds::steady_now_ns();
        const double latency = static_cast<double>(end - start) * 1e-3;
        if (!reply.result.is_ok()) {
            state.SkipWithError(reply.result.message.c_str());
            return;
        }
        state.SetIterationTime(latency * 1e-6);
        latency_us.push_back(latency);
        overhead_us.push_back(latency - static_cast<double>(reply.timing.rank_step_ns) * 1e-3);
        transport_us.push_back(static_cast<double>(reply.timing.rank_transport_ns) * 1e-3);
        const std::vector<int64_t> passed = hop_ends(start, reply, end);
        for (size_t h = 0; h < kHops.size(); ++h)
            hop_us[h].push_back(static_cast<double>(passed[h + 1] - passed[h]) * 1e-3);
    }
    const percentiles l = of(latency_us), o = of(overhead_us), t = of(transport_us);
    std::string hops;
    for (size_t h = 0; h < kHops.size(); ++h)
        hops += fmt::format("{}{} {:.1f}", h == 0 ? "" : ", ", kHops[h], of(hop_us[h]).p50);
    state.counters["latency_p50_us"] = l.p50;
    state.counters["coordinator_p50_us"] = o.p50;
    state.counters["coordinator_p99_us"] = o.p99;
    const bool full = w.batch == kBatch && config.distribution.tp == kTp;
    if (full && spin_us == 0) latencies()[mode] = l;
    auto against = [](double value, double target) {
        return fmt::format("{:7.1f} us ({:4.2f}x target {:3.0f}: {})", value, value / target, target,
                           value <= target ? "met" : "NOT met");
    };
    report().push_back(
        fmt::format("{:<9} {} spin {:4} us: step latency p50 {:9.1f} us  p99 {:9.1f} us | coordinator overhead p50 {}  "
                    "p99 {} | rank time in collectives p50 {:8.1f} us",
                    ds::mode_name(mode), fmt::format("TP={} bs={:<2} N={}", config.distribution.tp, w.batch, w.n),
                    spin_us, l.p50, l.p99, against(o.p50, kTargetP50Us), against(o.p99, kTargetP99Us), t.p50));
    report().push_back(fmt::format("          hops p50 (us): {}", hops));
}

// The parameter mixes BM_BytesPerStep runs: the workload's own (greedy / T = 0.8 / top-p 0.9 /
// top-k 40 by request) and three where every request samples alike.
enum class param_mix { workload, top_k_50_top_p_0_9, temperature_only, greedy };

const char* mix_name(param_mix mix) {
    switch (mix) {
        case param_mix::workload: return "workload mix";
        case param_mix::top_k_50_top_p_0_9: return "T=0.8 top-k 50 top-p 0.9";
        case param_mix::temperature_only: return "T=0.8 only";
        case param_mix::greedy: return "greedy";
    }
    return "?";
}

ds::sampling_params in_mix(ds::sampling_params p, param_mix mix) {
    if (mix == param_mix::workload) return p;
    p.temperature = mix == param_mix::greedy ? 0.0f : 0.8f;
    p.top_k = mix == param_mix::top_k_50_top_p_0_9 ? 50 : -1;
    p.top_p = mix == param_mix::top_k_50_top_p_0_9 ? 0.9f : 1.0f;
    return p;
}

// Bytes the ranks' collectives receive from their peers per step (all ranks together), at issue
// 5's shape, per parameter mix; printed against swap mode's for the same mix.
void BM_BytesPerStep(benchmark::State& state) {
    static std::map<std::pair<param_mix, ds::dist_mode>, double> bytes_by_mode;
    const auto mode = static_cast<ds::dist_mode>(state.range(0));
    const auto mix = static_cast<param_mix>(state.range(1));
    const workload& w = shared_workload(kBatch, kN, kLargeVocab);
    const std::unique_ptr<ds::group> group = make_group(state, w, mode, kTp);
    if (!group) return;
    for (int32_t b = 0; mix != param_mix::workload && b < w.batch; ++b) {
        if (!group->release(b + 1).is_ok() ||
            !group->register_request(b + 1, in_mix(w.params[static_cast<size_t>(b)], mix)).is_ok()) {
            state.SkipWithError("re-register failed");
            return;
        }
    }
    double bytes = 0;
    for (auto _ : state) {
        const ds::step_reply reply = group->step(w.request(kTp));
        if (!reply.result.is_ok()) {
            state.SkipWithError(reply.result.message.c_str());
            return;
        }
        bytes = 0;
        for (const ds::step_timing& t : reply.rank_timing) bytes += static_cast<double>(t.rank_received_bytes);
    }
    bytes_by_mode[{mix, mode}] = bytes;
    state.counters["received_bytes_per_step"] = bytes;
    const auto swap = bytes_by_mode.find({mix, ds::dist_mode::swap});
    const std::string against_swap = swap != bytes_by_mode.end() && swap->second > 0
                                         ? fmt::format("= {:.2f} % of swap's", 100.0 * bytes / swap->second)
                                         : "";
    report().push_back(fmt::format("{:<9} {:<24} TP={} bs={} N={} V={}: the ranks receive {:>9.0f} bytes per step {}",
                                   ds::mode_name(mode), mix_name(mix), kTp, kBatch, kN, kLargeVocab, bytes,
                                   against_swap));
}

// The kernels alone. `ranks` backends, each verifying `requests` requests (its share of the
// batch) on full-vocab rows, on one thread each: ranks = TP gives the per-rank kernels of a
// batch-DP step; ranks = 1 with the whole batch is the undistributed baseline.
void BM_DirectKernels(benchmark::State& state) {
    const auto ranks = static_cast<int32_t>(state.range(0));
    const int32_t requests = kBatch / ranks;
    const workload& w = shared_workload();
    ds::kernel_config config;
    config.vocab_size = kVocab;
    config.max_batch = requests;
    config.max_tokens_per_req = kN;
    config.max_slots = kBatch + 1;
    config.threads = 1;
    struct rank_kernel {
        std::unique_ptr<ds::sampling_backend> backend;
        std::vector<int32_t> packed, accept_index;
        std::vector<float> logprobs;
        std::vector<uint8_t> row_error;
        ds::step_input in;
        ds::status result;
    };
    std::vector<rank_kernel> kernels(static_cast<size_t>(ranks));
    for (int32_t r = 0; r < ranks; ++r) {
        rank_kernel& k = kernels[static_cast<size_t>(r)];
        if (!ds::make_backend(ds::backend_kind::cpu, config, k.backend).is_ok()) {
            state.SkipWithError("backend");
            return;
        }
        for (int32_t b = 0; b < kBatch; ++b)
            (void)k.backend->pool().register_request(b + 1, w.params[static_cast<size_t>(b)]);
        k.packed.resize(static_cast<size_t>(requests) * (kN + 1));
        k.accept_index.resize(static_cast<size_t>(requests) * kN);
        k.logprobs.resize(static_cast<size_t>(requests) * kN);
        k.row_error.resize(static_cast<size_t>(requests));
        const int32_t first = r * requests;
        k.in.logits = w.view(first, requests);
        k.in.slots = w.slots.data() + first;
        k.in.positions = w.positions.data() + first;
        k.in.batch_size = requests;
        k.in.tokens_per_req = kN;
        k.in.candidates = w.candidates.data() + static_cast<size_t>(first) * kN;
    }
    auto run = [](rank_kernel& k) {
        k.result = k.backend->verify(
            k.in, ds::step_output{k.packed.data(), k.accept_index.data(), k.logprobs.data(), k.row_error.data()});
    };
    std::vector<double> micros;
    for (auto _ : state) {
        const auto start = std::chrono::steady_clock::now();
        std::vector<std::thread> threads;
        for (size_t r = 1; r < kernels.size(); ++r) threads.emplace_back(run, std::ref(kernels[r]));
        run(kernels[0]);
        for (std::thread& t : threads) t.join();
        const double elapsed =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
        for (const rank_kernel& k : kernels) {
            if (!k.result.is_ok()) {
                state.SkipWithError(k.result.message.c_str());
                return;
            }
        }
        state.SetIterationTime(elapsed * 1e-6);
        micros.push_back(elapsed);
    }
    const percentiles p = of(micros);
    if (ranks == kTp) {
        for (const auto& [mode, l] : latencies()) {
            report().push_back(fmt::format(
                "{:<9} distributed overhead (step latency - direct per-rank kernels): p50 {:9.1f} us  p99 {:9.1f} us",
                ds::mode_name(mode), l.p50 - p.p50, l.p99 - p.p99));
        }
    }
    report().push_back(fmt::format("direct    {} thread(s) x verify of {} requests: p50 {:9.1f} us  p99 {:9.1f} us",
                                   ranks, requests, p.p50, p.p99));
}

BENCHMARK(BM_CoordinatorStep)
    ->ArgNames({"mode", "bs", "n", "tp", "spin_us"})
    ->Args({static_cast<int>(ds::dist_mode::swap), kBatch, kN, kTp, 0})
    ->Args({static_cast<int>(ds::dist_mode::swap), kBatch, kN, kTp, kSpinUs})
    ->Args({static_cast<int>(ds::dist_mode::swap), kBatch, kN, kTp, kStepSpinUs})
    ->Args({static_cast<int>(ds::dist_mode::sharded), kBatch, kN, kTp, 0})
    ->Args({static_cast<int>(ds::dist_mode::sharded), kBatch, kN, kTp, kStepSpinUs})
    ->Args({static_cast<int>(ds::dist_mode::gathered), kBatch, kN, kTp, 0})
    ->Args({static_cast<int>(ds::dist_mode::swap), 4, 1, kTp, 0})
    ->Args({static_cast<int>(ds::dist_mode::swap), 4, 1, kTp, kSpinUs})
    ->Args({static_cast<int>(ds::dist_mode::sharded), 4, 1, kTp, 0})
    ->Args({static_cast<int>(ds::dist_mode::swap), 4, 1, 2, 0})
    ->Args({static_cast<int>(ds::dist_mode::swap), 4, 1, 2, kSpinUs})
    ->Args({static_cast<int>(ds::dist_mode::sharded), 4, 1, 2, 0})
    ->Iterations(100)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_BytesPerStep)
    ->ArgNames({"mode", "mix"})
    ->Args({static_cast<int>(ds::dist_mode::swap), static_cast<int>(param_mix::workload)})
    ->Args({static_cast<int>(ds::dist_mode::sharded), static_cast<int>(param_mix::workload)})
    ->Args({static_cast<int>(ds::dist_mode::gathered), static_cast<int>(param_mix::workload)})
    ->Args({static_cast<int>(ds::dist_mode::swap), static_cast<int>(param_mix::top_k_50_top_p_0_9)})
    ->Args({static_cast<int>(ds::dist_mode::sharded), static_cast<int>(param_mix::top_k_50_top_p_0_9)})
    ->Args({static_cast<int>(ds::dist_mode::swap), static_cast<int>(param_mix::temperature_only)})
    ->Args({static_cast<int>(ds::dist_mode::sharded), static_cast<int>(param_mix::temperature_only)})
    ->Args({static_cast<int>(ds::dist_mode::swap), static_cast<int>(param_mix::greedy)})
    ->Args({static_cast<int>(ds::dist_mode::sharded), static_cast<int>(param_mix::greedy)})
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DirectKernels)
    ->ArgName("ranks")
    ->Arg(kTp)
    ->Arg(1)
    ->Iterations(100)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    fmt::print("\nTP={} bs={} N={} V={}, CPU backend, local transport (modes: 0 = gathered, 1 = swap, 2 = sharded)\n",
               kTp, kBatch, kN, kVocab);

    for (const std::string& line : report()) fmt::print("{}\n", line);
    return 0;
}

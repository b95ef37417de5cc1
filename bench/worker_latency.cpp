// Where a step's time goes when the ranks live inside model workers (include/distsample/rank.h,
// docs/benchmarks.md): a coordinator (the group the gateway runs) and TP worker processes, each
// of which takes the step's description, runs a stand-in forward (a sleep, as while a GPU
// computes, then its vocab shard of the synthetic model's rows), hands the shard in and waits for
// the agreed outputs. Per step, p50 and p99 of:
//   plan delivery      submit -> the last worker holds the step's description (the plan travels
//                      while the model runs, so it must arrive well inside the forward);
//   critical path      the last worker's provide_logits -> the reply at the caller, split into
//                      the hand-off (-> that worker's rank begins sampling), that rank's sampling
//                      (its engine step: kernels and collectives, all after the last shard is in),
//                      the other ranks' tail (-> the last rank's answer: ranks that finish their
//                      kernels later on a shared GPU) and -> the reply (the answer's way to the
//                      coordinator's process, reading and filing it, settling the step, the
//                      caller's wake-up);
//   overhead           the hand-off + the last answer -> the reply (target: <= 50 us at p50), and
//                      critical path - that rank's sampling, which also counts the other ranks' tail;
// four times: the ranks' answers on the answer lane (actors/answer_lane.h) read by the caller's
// thread waiting in group::step (through shared memory, the workers being on this host), the same
// over TCP, then read by the lane's own thread (the caller waits on group::submit's future), then
// over CAF only;
// and, in the same run, the same step on rank threads of one process (local transport, the rows
// handed in by the caller), submit -> reply, with its ranks' sampling time. All processes run on
// this host, so their steady clocks agree. With --backend cuda the ranks sample on the GPU and each
// worker's forward ends with its shard in device memory (copied there as an LM head would leave
// it), which it hands in as a device pointer; the rank threads get device shards too.
//
//   bench_worker_latency [--steps 300] [--mode sharded] [--batch 4] [--n 4] [--vocab 4096]
//                        [--forward-us 2000] [--backend cpu|cuda] [--spin-us 0] [--rank-spin-us 0]
//                        [--reply-spin-us 0] [--scheduler-spin-us 0]
#include <distsample/group.h>
#include <distsample/rank.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench/loopback_port.h"
#include "bench/percentiles.h"
#include "bench/worker_latency_workload.h"
#include "config/choices.h"
#include "core/clock.h"
#include "examples/tp_workers/worker_rows.h"

namespace {

using ds::bench::of;
using ds::bench::percentiles;

using ds::bench::kWorkerTp;
using ds::bench::make_config;
using ds::bench::make_model;
using ds::bench::make_step;
using ds::bench::request_params;
using ds::bench::run_worker;
using ds::bench::shard_memory;
using ds::bench::worker_record;
using options = ds::bench::worker_options;

constexpr int kWarmup = 20;

void print_row(const std::string& what, const std::vector<double>& us, const std::string& note = "") {
    const percentiles p = of(us);
    fmt::print("| {:<54} | {:>9.1f} | {:>9.1f} | {}\n", what, p.p50, p.p99, note);
}

double us_of(int64_t ns) { return static_cast<double>(ns) * 1e-3; }

// How the ranks' answers reach the caller.
enum class answer_path {
    caller_reads_lane,  // the answer lane, read by the caller's thread in group::step
    caller_reads_tcp,   // the same with the ranks' answers over TCP instead of shared memory
    lane_thread,        // the answer lane, read by its own thread; the caller waits on the future
    caf_only,           // no answer lane
};

const char* path_name(answer_path path) {
    switch (path) {
        case answer_path::caller_reads_lane: return "on the answer lane, read by the caller's thread";
        case answer_path::caller_reads_tcp: return "on the answer lane over TCP, read by the caller's thread";
        case answer_path::lane_thread: return "on the answer lane, read by its own thread";
        case answer_path::caf_only: return "over CAF only (no answer lane)";
    }
    return "";
}

// group::step without the caller reading the lane: submit, poll the future for reply_spin_us, wait.
ds::step_reply submit_and_wait(ds::group& group, const options& o) {
    std::future<ds::step_reply> reply = group.submit(make_step(o));
    const auto poll_until = std::chrono::steady_clock::now() + std::chrono::microseconds(o.reply_spin_us);
    while (std::chrono::steady_clock::now() < poll_until &&
           reply.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    }
    return reply.get();
}

// What the caller saw of a step, by step id.
struct caller_record {
    int64_t submitted_ns, replied_ns, ranks_answered_ns;
    ds::step_timeline timeline;
    std::vector<ds::step_timing> ranks;
};

// What the workers saw of a step: the latest description taken and shard handed in.
struct worker_latest {
    int64_t got_ns = 0, provided_ns = 0;
    int32_t provider = 0;  // the rank whose shard came last
};

// The coordinator's group over the workers that join on `port`: the measured steps, and in
// `received_bytes` what all ranks received over the transport in the last one.
std::map<uint64_t, caller_record> drive_steps(const options& o, answer_path path, uint16_t port,
                                              int64_t& received_bytes) {
    std::map<uint64_t, caller_record> submitted;
    ds::topology_config topology;
    topology.logits_source = "worker";
    topology.answer_port = path == answer_path::caf_only ? -1 : 0;
    topology.answer_shared_memory = path != answer_path::caller_reads_tcp;
    std::unique_ptr<ds::group> group;
    ds::status s = ds::group::create_with_rank_processes(make_config(o, true), topology, "127.0.0.1", port, group);
    if (s.is_ok()) s = group->wait_for_ranks(std::chrono::seconds(30));
    const std::vector<ds::sampling_params> params = request_params(o);
    for (int32_t b = 0; s.is_ok() && b < o.batch; ++b) s = group->register_request(b + 1, params[b]);
    rusage before{}, after{};
    for (int i = 0; s.is_ok() && i < kWarmup + o.steps; ++i) {
        if (i == kWarmup) ::getrusage(RUSAGE_THREAD, &before);
        const int64_t t0 = ds::steady_now_ns();
        const ds::step_reply reply =
            path == answer_path::lane_thread ? submit_and_wait(*group, o) : group->step(make_step(o));
        const int64_t t1 = ds::steady_now_ns();
        s = reply.result;
        if (i < kWarmup) continue;
        submitted[reply.step_id] = {t0, t1, reply.timing.rank_answered_at_ns, reply.timeline, reply.rank_timing};
        received_bytes = 0;
        for (const ds::step_timing& t : reply.rank_timing) received_bytes += t.rank_received_bytes;
    }
    // The calling thread (the one that reads the answer lane when the caller reads it): page
    // faults and context switches per step, which a microsecond-scale path cannot afford.
    if (::getrusage(RUSAGE_THREAD, &after) == 0 && !submitted.empty()) {
        const auto per_step = [&](long a, long b) { return static_cast<double>(b - a) / submitted.size(); };
        fmt::print(
            "the calling thread per step: {:.2f} minor page faults, {:.2f} voluntary and {:.2f} involuntary "
            "context switches\n",
            per_step(before.ru_minflt, after.ru_minflt), per_step(before.ru_nvcsw, after.ru_nvcsw),
            per_step(before.ru_nivcsw, after.ru_nivcsw));
    }
    if (!s.is_ok()) fmt::print(stderr, "workers: {}\n", s.message);
    return submitted;  // the group stops; the workers' ranks leave and they exit
}

// Every worker's records from its pipe, by step id; the workers reaped.
std::map<uint64_t, worker_latest> collect_workers(const int (&pipes)[kWorkerTp][2],
                                                  const std::vector<pid_t>& children) {
    std::map<uint64_t, worker_latest> last;
    for (int32_t r = 0; r < kWorkerTp; ++r) {
        worker_record record;
        while (::read(pipes[r][0], &record, sizeof record) == static_cast<ssize_t>(sizeof record)) {
            worker_latest& l = last[record.step];
            l.got_ns = std::max(l.got_ns, record.got_ns);
            if (record.provided_ns > l.provided_ns) {
                l.provided_ns = record.provided_ns;
                l.provider = r;
            }
        }
        ::close(pipes[r][0]);
    }
    for (pid_t pid : children) {
        ::kill(pid, SIGTERM);
        ::waitpid(pid, nullptr, 0);
    }
    return last;
}

// Per step, in µs, the hops of the critical path; false when no step has both sides' records.
bool print_breakdown(const options& o, answer_path path, const std::map<uint64_t, caller_record>& submitted,
                     const std::map<uint64_t, worker_latest>& last) {
    // The last shard's rank began sampling at its answer less its engine step (what follows the
    // engine, a digest of the outputs, takes about a microsecond).
    std::vector<double> delivery, critical, handoff, sampling, collectives, others, to_reply, to_arrival, to_filed,
        to_settled, to_caller, overhead, overhead_all, arrival_spread, first_received, first_read, last_received,
        last_read, filing_spread;
    const auto by_arrival = [](const ds::step_timing& a, const ds::step_timing& b) {
        return a.arrived_at_ns < b.arrived_at_ns;
    };
    const auto by_filing = [](const ds::step_timing& a, const ds::step_timing& b) {
        return a.filed_at_ns < b.filed_at_ns;
    };
    for (const auto& [step, caller] : submitted) {
        const auto found = last.find(step);
        if (found == last.end() || static_cast<size_t>(found->second.provider) >= caller.ranks.size()) continue;
        const worker_latest& l = found->second;
        const ds::step_timing& provider = caller.ranks[static_cast<size_t>(l.provider)];
        delivery.push_back(us_of(l.got_ns - caller.submitted_ns));
        critical.push_back(us_of(caller.replied_ns - l.provided_ns));
        handoff.push_back(us_of(provider.rank_answered_at_ns - provider.rank_step_ns - l.provided_ns));
        sampling.push_back(us_of(provider.rank_step_ns));
        collectives.push_back(us_of(provider.rank_transport_ns));
        others.push_back(us_of(caller.ranks_answered_ns - provider.rank_answered_at_ns));
        to_reply.push_back(us_of(caller.replied_ns - caller.ranks_answered_ns));
        to_arrival.push_back(us_of(caller.timeline.result_arrived_at_ns - caller.ranks_answered_ns));
        to_filed.push_back(us_of(caller.timeline.results_in_at_ns - caller.timeline.result_arrived_at_ns));
        to_settled.push_back(us_of(caller.timeline.delivered_at_ns - caller.timeline.results_in_at_ns));
        const auto [first_arrived, last_arrived] =
            std::minmax_element(caller.ranks.begin(), caller.ranks.end(), by_arrival);
        const auto [first_filed, last_filed] = std::minmax_element(caller.ranks.begin(), caller.ranks.end(), by_filing);
        arrival_spread.push_back(us_of(last_arrived->arrived_at_ns - first_arrived->arrived_at_ns));
        if (first_filed->received_at_ns > 0 && last_filed->received_at_ns > 0) {
            first_received.push_back(us_of(first_filed->received_at_ns - first_filed->arrived_at_ns));
            first_read.push_back(us_of(first_filed->filed_at_ns - first_filed->received_at_ns));
            last_received.push_back(us_of(last_filed->received_at_ns - last_filed->arrived_at_ns));
        }
        last_read.push_back(us_of(last_filed->filed_at_ns - last_filed->arrived_at_ns));
        filing_spread.push_back(us_of(last_filed->filed_at_ns - first_filed->filed_at_ns));
        to_caller.push_back(us_of(caller.replied_ns - caller.timeline.delivered_at_ns));
        overhead.push_back(handoff.back() + to_reply.back());
        overhead_all.push_back(critical.back() - sampling.back());
    }
    if (delivery.empty()) return false;
    fmt::print("| **the ranks' answers {}** | | |\n", path_name(path));
    print_row("workers: submit -> the last worker holds the plan", delivery,
              fmt::format("(the forward takes {} us)", o.forward_us));
    print_row("workers: last provide_logits -> reply (critical path)", critical);
    print_row("  -> its rank begins sampling (the hand-off)", handoff);
    print_row("  -> that rank answers (its kernels + collectives)", sampling);
    print_row("     of them: collectives", collectives);
    print_row("  -> the last rank answers (others still sampling)", others);
    print_row("  -> the reply at the caller", to_reply);
    print_row("     of it: the answer's way to this process", to_arrival);
    print_row("     reading, checking and filing it", to_filed);
    print_row("       the ranks' answers: first arrival -> last", arrival_spread);
    if (!last_received.empty()) {
        // The reader's wake-up (poll returning) to the first read (its recv, or its copy out of
        // the shared-memory ring), then one answer's decoding, check and filing: what the reading
        // costs before any queueing behind other answers.
        print_row("       the first-filed answer: its arrival -> read", first_received);
        print_row("       the first-filed answer: read -> filed", first_read);
        print_row("       the last-filed answer: its arrival -> read", last_received);
    }
    print_row("       the last-filed answer: its arrival -> filed", last_read);
    print_row("       first answer filed -> last filed", filing_spread);
    print_row("     the board settling the step", to_settled);
    print_row("     the caller taking the reply", to_caller);
    const percentiles over = of(overhead);
    print_row("overhead: the hand-off + last answer -> reply", overhead,
              fmt::format("target <= 50 us at p50: {}", over.p50 <= 50.0 ? "met" : "NOT met"));
    print_row("critical path - that rank's kernels + collectives", overhead_all, "(also counts the other ranks' tail)");
    std::fflush(stdout);  // before the next group's log lines, which do not go through this buffer
    return true;
}

// The coordinator's side with TP forked workers, the ranks' answers taken as `path` says; prints
// the breakdown and sets `bytes` to what the ranks received over the transport in a step (all
// ranks). False when no step completed.
bool bench_workers(const options& o, answer_path path, int64_t& bytes) {
    const uint16_t port = free_port();
    int pipes[kWorkerTp][2];
    std::vector<pid_t> children;
    for (int32_t r = 0; r < kWorkerTp; ++r) {
        if (::pipe(pipes[r]) != 0) std::exit(1);
        const pid_t pid = ::fork();
        if (pid == 0) {
            ::close(pipes[r][0]);
            run_worker(o, r, port, pipes[r][1]);
        }
        ::close(pipes[r][1]);
        children.push_back(pid);
    }
    const std::map<uint64_t, caller_record> submitted = drive_steps(o, path, port, bytes);
    if (!print_breakdown(o, path, submitted, collect_workers(pipes, children))) {
        fmt::print(stderr, "workers: no step completed\n");
        return false;
    }
    return true;
}

// The same step on rank threads of one process, the rows handed in by the caller. False when no
// step completed.
bool bench_threads(const options& o) {
    const ds::synthetic_lm model = make_model(o);
    ds::step_request step = make_step(o);
    const std::vector<float> rows = ds::example::model_rows(model, step.slots, step.positions, step.candidates, o.n);
    const int32_t shard_vocab = o.vocab / kWorkerTp;
    std::vector<shard_memory> memory(kWorkerTp);
    ds::status s = ds::status::success();
    for (int32_t r = 0; s.is_ok() && r < kWorkerTp; ++r) {
        ds::logits_view shard;
        s = memory[r].prepare(o, int64_t{o.batch} * o.n, shard_vocab);
        if (s.is_ok())
            s = memory[r].place(rows.data(), int64_t{o.batch} * o.n, o.vocab, r * shard_vocab, shard_vocab, shard);
        step.shards.push_back(shard);
    }
    std::unique_ptr<ds::group> group;
    if (s.is_ok()) s = ds::group::create(make_config(o, false), group);
    const std::vector<ds::sampling_params> params = request_params(o);
    for (int32_t b = 0; s.is_ok() && b < o.batch; ++b) s = group->register_request(b + 1, params[b]);
    std::vector<double> latency, sampling;
    for (int i = 0; s.is_ok() && i < kWarmup + o.steps; ++i) {
        const int64_t t0 = ds::steady_now_ns();
        const ds::step_reply reply = group->step(step);
        const int64_t t1 = ds::steady_now_ns();
        s = reply.result;
        if (i < kWarmup) continue;
        latency.push_back(us_of(t1 - t0));
        sampling.push_back(us_of(reply.timing.rank_step_ns));
    }
    if (!s.is_ok()) fmt::print(stderr, "threads: {}\n", s.message);
    if (latency.empty()) return false;
    print_row("rank threads, one process: submit -> reply", latency);
    print_row("  of it: ranks' sampling (kernels + collectives)", sampling);
    return true;
}

int32_t spin_of(const char* value) { return std::clamp(std::atoi(value), 0, 1000000); }

}  // namespace

int main(int argc, char** argv) {
    options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        const char* value = argv[i + 1];
        if (flag == "--steps")
            o.steps = std::max(1, std::atoi(value));
        else if (flag == "--mode")
            o.mode = value;
        else if (flag == "--batch")
            o.batch = std::max(1, std::atoi(value));
        else if (flag == "--n")
            o.n = std::max(1, std::atoi(value));
        else if (flag == "--vocab")
            o.vocab = std::max(kWorkerTp, std::atoi(value) / kWorkerTp * kWorkerTp);
        else if (flag == "--forward-us")
            o.forward_us = std::max<int64_t>(0, std::atoll(value));
        else if (flag == "--spin-us")
            o.rank_spin_us = o.reply_spin_us = o.scheduler_spin_us = spin_of(value);
        else if (flag == "--rank-spin-us")
            o.rank_spin_us = spin_of(value);
        else if (flag == "--reply-spin-us")
            o.reply_spin_us = spin_of(value);
        else if (flag == "--scheduler-spin-us")
            o.scheduler_spin_us = spin_of(value);
        else if (flag == "--backend") {
            const ds::result<ds::backend_kind> backend = ds::parse_backend_kind(value);
            if (!backend.is_ok()) {
                fmt::print(stderr, "{}\n", backend.error().message);
                return 2;
            }
            o.backend = *backend;
        }
    }
    fmt::print(
        "TP = {} worker processes (rank API, UCX, {} backend{}), {} mode, bs = {}, N = {}, V = {}, {} steps "
        "after {} warm-up, spin (rank, reply, scheduler) {}, {}, {} us, {} cores\n\n",
        kWorkerTp, ds::backend_name(o.backend),
        o.backend == ds::backend_kind::cuda ? ", shards handed in from device memory" : "", o.mode, o.batch, o.n,
        o.vocab, o.steps, kWarmup, o.rank_spin_us, o.reply_spin_us, o.scheduler_spin_us,
        std::thread::hardware_concurrency());
    fmt::print("| {:<54} | {:>9} | {:>9} |\n|---|---:|---:|\n", "per step (µs)", "p50", "p99");
    int64_t bytes = 0;
    // Forks first, while this process has no threads (each group's threads end with the group).
    bool workers = true;
    for (const answer_path path : {answer_path::caller_reads_lane, answer_path::caller_reads_tcp,
                                   answer_path::lane_thread, answer_path::caf_only})
        workers = workers && bench_workers(o, path, bytes);
    const bool threads = bench_threads(o);
    fmt::print("\nbytes the worker ranks received per step over the transport (all ranks): {}\n", bytes);
    return workers && threads ? 0 : 1;
}

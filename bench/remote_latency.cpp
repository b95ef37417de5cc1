// Step latency through rank processes (CAF middleman, ucx between the ranks) against rank threads
// of one process (the embedded group, on the local and on the ucx transport): p50 and p99 of a
// small sample step (TP = 4, bs = 4, V = 4096, CPU backend), submit -> reply at the caller.
// The 4 rank processes are forked from this one before it starts any thread. They make their own
// logits (the synthetic model, topology.logits_source): their step messages carry none, as in a
// deployment; the in-process ranks read the same model's rows in place.
//
//   bench_remote_latency [steps=300] [mode=swap]
#include <distsample/group.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <caf/io/all.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "actors/coordinator_actor.h"
#include "actors/rank_process.h"
#include "actors/remote_ranks.h"
#include "bench/loopback_port.h"
#include "sources/synthetic_logits.h"

namespace {

using clock_type = std::chrono::steady_clock;

constexpr int32_t kTp = 4;
constexpr int32_t kBatch = 4;
constexpr int32_t kVocab = 4096;

ds::group_config bench_config(const std::string& mode, ds::transport_kind transport) {
    ds::group_config config;
    config.distribution.tp = kTp;
    config.limits.vocab_size = kVocab;
    config.limits.max_batch = kBatch;
    config.limits.max_tokens_per_req = 1;
    config.limits.max_slots = kBatch + 1;
    config.transport.kind = transport;
    const ds::result<ds::dist_mode> parsed = ds::parse_mode(mode);
    if (!parsed.is_ok()) {
        fmt::print(stderr, "{}\n", parsed.error().message);
        std::exit(2);
    }
    config.distribution.mode = *parsed;
    return config;
}

struct step_data {
    std::vector<float> logits;
    ds::step_request request;
};

step_data make_step() {
    ds::synthetic_lm_config lm;
    lm.vocab_size = kVocab;
    const ds::synthetic_lm model(lm);
    step_data d;
    d.logits.resize(static_cast<size_t>(kBatch) * kVocab);
    for (int32_t b = 0; b < kBatch; ++b) {
        model.logits(model.prompt(b), d.logits.data() + static_cast<size_t>(b) * kVocab);
        d.request.slots.push_back(b + 1);
        d.request.positions.push_back(10 + b);
    }
    d.request.kind = ds::step_kind::sample;
    d.request.shards =
        ds::split_vocab(ds::logits_view{d.logits.data(), ds::logits_dtype::f32, kBatch, kVocab, kVocab}, kTp);
    return d;
}

ds::sampling_params params_of(int32_t b) {
    ds::sampling_params p;
    p.temperature = 0.8f;
    p.top_p = 0.9f;
    p.seed = static_cast<uint64_t>(b + 1);
    return p;
}

// A request's history: its context for the ranks' model (two tokens, like a prompt).
std::vector<int32_t> history_of(int32_t b) { return {b + 1, 7 * b + 3}; }

void print_row(const std::string& path, std::vector<double> us) {
    std::sort(us.begin(), us.end());
    auto at = [&us](double q) {
        return us[std::min(us.size() - 1, static_cast<size_t>(q * static_cast<double>(us.size())))];
    };
    fmt::print("| {:<44} | {:>8.1f} | {:>8.1f} | {:>6} |\n", path, at(0.5), at(0.99), us.size());
}

void bench_in_process(const std::string& mode, ds::transport_kind transport, int steps) {
    std::unique_ptr<ds::group> group;
    if (ds::status s = ds::group::create(bench_config(mode, transport), group); !s.is_ok()) {
        fmt::print(stderr, "in-process group ({}): {}\n", ds::transport_name(transport), s.message);
        return;
    }
    for (int32_t b = 0; b < kBatch; ++b) {
        if (ds::status s = group->register_request(b + 1, params_of(b)); !s.is_ok()) std::exit(1);
    }
    const step_data d = make_step();
    std::vector<double> us;
    for (int i = 0; i < steps + 20; ++i) {
        const auto t0 = clock_type::now();
        const ds::step_reply reply = group->step(d.request);
        const auto t1 = clock_type::now();
        if (!reply.result.is_ok()) {
            fmt::print(stderr, "in-process step: {}\n", reply.result.message);
            std::exit(1);
        }
        if (i >= 20) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    print_row(fmt::format("rank threads, one process ({})", ds::transport_name(transport)), std::move(us));
}

// Sends `msg` to the coordinator and waits for its answer.
template <class Answer, class Msg>
ds::status ask(caf::scoped_actor& self, const ds::coordinator_actor_type& coordinator, Msg msg) {
    ds::status result;
    self->request(coordinator, std::chrono::seconds{20}, std::move(msg))
        .receive([](Answer&) {}, [&](caf::error& e) { result = ds::to_status(e, "coordinator"); });
    return result;
}

void bench_rank_processes(const std::string& mode, int steps) {
    const ds::group_config config = bench_config(mode, ds::transport_kind::ucx);
    const uint16_t port = free_port();
    std::vector<pid_t> children;
    for (int32_t r = 0; r < kTp; ++r) {
        const pid_t pid = ::fork();
        if (pid == 0) {
            // Never destroyed: the child ends right after (see run_rank_process).
            auto* cfg = new caf::actor_system_config;
            auto* system = new caf::actor_system{ds::configure_remote_actor_system(*cfg)};
            ds::synthetic_lm_config lm;
            lm.vocab_size = kVocab;
            const ds::synthetic_lm model(lm);
            ds::rank_process_options process;
            process.supplier = ds::make_model_supplier(model, r, config.limits.max_slots);
            const ds::status s =
                ds::run_rank_process(*system, config, r, "127.0.0.1", port, ds::topology_config{}, std::move(process));
            ::_exit(s.is_ok() ? 0 : 1);
        }
        children.push_back(pid);
    }
    {
        caf::actor_system_config cfg;
        caf::actor_system system{ds::configure_remote_actor_system(cfg)};
        ds::remote_ranks remote;
        if (ds::status s = ds::publish_remote_ranks(system, config, "127.0.0.1", port, remote); !s.is_ok()) {
            fmt::print(stderr, "{}\n", s.message);
            std::exit(1);
        }
        const auto coordinator = ds::spawn_coordinator_actor(system, config, remote.proxies, *remote.transport,
                                                             ds::logits_origin::made_by_ranks);
        caf::scoped_actor self{system};
        // Wait for the group to form (registrations fail fast until then).
        const auto deadline = clock_type::now() + std::chrono::seconds{20};
        while (!ask<ds::op_ack>(self, coordinator, ds::register_msg{1, params_of(0), history_of(0)}).is_ok()) {
            if (clock_type::now() > deadline) {
                fmt::print(stderr, "the rank processes did not form a group\n");
                std::exit(1);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds{50});
        }
        for (int32_t b = 1; b < kBatch; ++b) {
            if (!ask<ds::op_ack>(self, coordinator, ds::register_msg{b + 1, params_of(b), history_of(b)}).is_ok())
                std::exit(1);
        }
        ds::step_request own_logits = make_step().request;
        own_logits.shards.clear();  // the ranks make them
        auto request = std::make_shared<const ds::step_request>(own_logits);
        std::vector<double> us;
        for (int i = 0; i < steps + 20; ++i) {
            const auto t0 = clock_type::now();
            const ds::status s = ask<ds::step_answer>(self, coordinator, ds::submit_msg{request});
            const auto t1 = clock_type::now();
            if (!s.is_ok()) {
                fmt::print(stderr, "remote step: {}\n", s.message);
                std::exit(1);
            }
            if (i >= 20) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
        print_row("rank processes (middleman, ucx, own logits)", std::move(us));
        self->send_exit(coordinator, caf::exit_reason::user_shutdown);
        for (const auto& proxy : remote.proxies) self->send_exit(proxy, caf::exit_reason::user_shutdown);
        self->send_exit(remote.membership, caf::exit_reason::user_shutdown);
    }
    // The ranks leave when the coordinator is gone; make sure of it.
    for (pid_t pid : children) {
        ::kill(pid, SIGTERM);
        ::waitpid(pid, nullptr, 0);
    }
}

}  // namespace

int main(int argc, char** argv) {
    const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
    const std::string mode = argc > 2 ? argv[2] : "swap";
    fmt::print("sample step, TP = {}, bs = {}, V = {}, mode {}, CPU backend, {} steps (after 20 warm-up)\n\n", kTp,
               kBatch, kVocab, mode, steps);
    fmt::print("| {:<44} | {:>8} | {:>8} | {:>6} |\n|---|---:|---:|---:|\n", "ranks", "p50 µs", "p99 µs", "steps");
    // Forks first, while this process has no threads.
    bench_rank_processes(mode, steps);
    bench_in_process(mode, ds::transport_kind::local, steps);
    bench_in_process(mode, ds::transport_kind::ucx, steps);
    return 0;
}

#include "actors/rank_process.h"

#include <fmt/format.h>
#include <caf/io/all.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "actors/forwarding.h"
#include "actors/log.h"
#include "actors/messages.h"
#include "actors/rank_actor.h"

namespace ds {

namespace {

// What the coordinator talks to: forwards every message to the rank's detached worker, in order.
// The worker takes a new fault plan only after the step it is running, which may be asleep in a
// delay of the old plan: the front wakes that delay first (core/wakeable_sleep.h).
rank_actor_type::behavior_type rank_process_front(rank_actor_type::pointer self, rank_actor_type worker,
                                                  std::shared_ptr<wakeable_sleep> delays) {
    self->link_to(worker);  // each ends with the other
    auto forward = [self, worker](auto& msg) { self->delegate(worker, std::move(msg)); };
    return {
        forwarding<form_msg, op_ack>(forward),
        forwarding<register_msg, op_ack>(forward),
        forwarding<release_msg, op_ack>(forward),
        forwarding<health_msg, op_ack>(forward),
        forwarding<fault_msg, op_ack>(forward),
        forwarding<step_msg, rank_result>(forward),
        [self, worker](commit_msg& m) { self->send(worker, std::move(m)); },
        [forward, delays](fault_plan_msg& m) -> caf::result<op_ack> {
            delays->wake_all();
            forward(m);
            return caf::delegated<op_ack>{};
        },
    };
}

// The coordinator may start after its ranks: retry until the join timeout.
caf::expected<caf::actor> connect(caf::actor_system& system, const std::string& host, uint16_t port,
                                  std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        auto coordinator = system.middleman().remote_actor(host, port);
        if (coordinator || std::chrono::steady_clock::now() >= deadline) return coordinator;
        std::this_thread::sleep_for(std::chrono::milliseconds{100});
    }
}

// Whether a coordinator still runs at host:port, asked until `wait` has passed: its membership
// actor answers a join (a join with no rank, which it refuses: any answer shows it is there). A
// coordinator shutting down may still accept a connection, but its actor is gone.
bool coordinator_still_runs(caf::actor_system& system, const std::string& host, uint16_t port,
                            std::chrono::milliseconds wait) {
    caf::scoped_actor self{system};
    const auto deadline = std::chrono::steady_clock::now() + wait;
    bool answered = false;
    while (!answered && std::chrono::steady_clock::now() < deadline) {
        caf::strong_actor_ptr found;
        self->request(system.middleman().actor_handle(), wait, caf::connect_atom::value, host, port)
            .receive([&](const caf::node_id&, caf::strong_actor_ptr& handle,
                         const std::set<std::string>&) { found = std::move(handle); },
                     [](caf::error&) {});
        if (found) {
            self->request(caf::actor_cast<caf::actor>(found), wait, join_msg{-1, 0, 0, dist_mode::swap, {}})
                .receive([&](op_ack&) { answered = true; },
                         [&](caf::error& e) {
                             answered = e != caf::sec::request_receiver_down && e != caf::sec::request_timeout;
                         });
        }
        if (!answered) std::this_thread::sleep_for(std::chrono::milliseconds{100});
    }
    return answered;
}

// Set by SIGCONT: this process was stopped, and its heartbeats with it.
std::atomic<bool> continued_after_stop{false};

void note_continued(int) { continued_after_stop.store(true); }

// The coordinator's actor is gone: it shut down, or it dropped this process (its heartbeats
// stopped, e.g. while the process was stopped) and runs on without it: evicted.
status why_the_coordinator_left(caf::actor_system& system, int32_t rank, const std::string& host, uint16_t port,
                                const caf::error& reason, const topology_config& topology) {
    if (reason != caf::exit_reason::user_shutdown &&
        (continued_after_stop.load() || coordinator_still_runs(system, host, port, topology.connection_timeout))) {
        return {status_code::aborted,
                fmt::format("rank {}: evicted by the coordinator at {}:{}, which dropped this process ({}; e.g. it "
                            "was stopped past topology.connection_timeout_ms): exiting to be restarted",
                            rank, host, port, caf::to_string(reason))};
    }
    rank_log().info("rank {}: the coordinator at {}:{} has shut down ({})", rank, host, port, caf::to_string(reason));
    return status::success();
}

}  // namespace

void set_ucx_environment(const topology_config& topology) {
    if (!topology.ucx_tls.empty()) ::setenv("UCX_TLS", topology.ucx_tls.c_str(), 1);
    if (!topology.ucx_net_devices.empty()) ::setenv("UCX_NET_DEVICES", topology.ucx_net_devices.c_str(), 1);
}

status run_rank_process(caf::actor_system& system, const group_config& config, int32_t rank, const std::string& host,
                        uint16_t port, const topology_config& topology, rank_process_options options) {
    auto coordinator = connect(system, host, port, topology.join_timeout);
    if (!coordinator) {
        return {status_code::aborted, fmt::format("rank {}: cannot reach the coordinator at {}:{}: {}", rank, host,
                                                  port, caf::to_string(coordinator.error()))};
    }
    struct sigaction on_continue {};
    on_continue.sa_handler = note_continued;
    on_continue.sa_flags = SA_RESTART;
    ::sigaction(SIGCONT, &on_continue, nullptr);
    auto delays = std::make_shared<wakeable_sleep>();
    auto core = std::make_shared<rank_core>(config, rank, rank_host::process, delays, std::move(options.supplier));
    auto worker = spawn_rank_actor(system, std::move(core));
    auto front = system.spawn(rank_process_front, worker, delays);
    caf::scoped_actor self{system};
    status result;
    self->request(*coordinator, topology.join_timeout,
                  join_msg{rank, config.distribution.tp, config.limits.vocab_size, config.distribution.mode,
                           caf::actor_cast<caf::actor>(front)})
        .receive([](op_ack&) {},
                 [&](caf::error& e) {
                     result = to_status(e, fmt::format("rank {}: the coordinator did not answer the join", rank));
                 });
    if (result.is_ok()) {
        rank_log().info("rank {} joined the coordinator at {}:{}", rank, host, port);
        self->monitor(*coordinator);
        if (options.joined) options.joined(caf::actor_cast<caf::actor>(self));
        caf::error reason;
        bool left = false;
        self->receive([&](caf::down_msg& d) { reason = d.reason; }, [&](leave_atom) { left = true; });
        if (!left) result = why_the_coordinator_left(system, rank, host, port, reason, topology);
    }
    self->send_exit(worker, caf::exit_reason::user_shutdown);
    self->wait_for(worker);  // its endpoint is closed
    return result;
}

}  // namespace ds

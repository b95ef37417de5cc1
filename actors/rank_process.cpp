#include "actors/rank_process.h"

#include <fmt/format.h>
#include <caf/io/all.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "actors/deliver_again.h"
#include "actors/forwarding.h"
#include "actors/log.h"
#include "actors/messages.h"
#include "actors/rank_engine.h"
#include "config/fault_plan.h"
#include "transport/faulty_transport.h"
#include "transport/tcp_bootstrap.h"
#include "transport/transport_factory.h"

namespace ds {

namespace {

struct rank_process_state {
    std::shared_ptr<wakeable_sleep> delays;  // the plan's delays sleep here (rank_process_front wakes them)
    std::unique_ptr<transport> endpoint;
    std::unique_ptr<faulty_transport> faulty;  // wraps *endpoint, for the plan's transport faults
    std::unique_ptr<rank_engine> engine;       // uses *faulty: reset first
    fault_plan plan;
    std::vector<caf::response_promise> unanswered;  // steps swallowed by a hang fault, dropped at the next form
    uint64_t last_step_id = 0;                      // the latest step this process received
    const logits_source* source = nullptr;          // null: the logits come with each step
    std::vector<uint64_t> contexts;                 // by slot: the source's context of the request
    std::vector<float> source_row;                  // one full-vocab row of the source
    std::vector<uint8_t> own_logits;                // this rank's shard of the current step, from the source
    dist_step last_step;                            // kept for its commit
    step_outputs last_outputs;
    static inline const char* name = "distsample.rank_process";
};

using rank_process_actor = remote_rank_actor_type::stateful_pointer<rank_process_state>;

// Rank `rank`'s shard of the step's rows from `source` (see rank_process.h), f32.
void make_shard(const logits_source& source, const std::vector<uint64_t>& contexts, const dist_step& step, int32_t rank,
                std::vector<float>& row, std::vector<uint8_t>& out) {
    const int32_t n = step.plan.tokens_per_req;
    const auto shard_vocab = static_cast<size_t>(step.plan.shard_vocab);
    row.resize(static_cast<size_t>(source.vocab_size()));
    out.resize(static_cast<size_t>(step.plan.bs) * static_cast<size_t>(n) * shard_vocab * sizeof(float));
    auto* shard = reinterpret_cast<float*>(out.data());
    for (int32_t b = 0; b < step.plan.bs; ++b) {
        uint64_t context = contexts[static_cast<size_t>(step.slots[static_cast<size_t>(b)])];
        for (int32_t j = 0; j < n; ++j) {
            const size_t at = static_cast<size_t>(b) * static_cast<size_t>(n) + static_cast<size_t>(j);
            if (j > 0) context = logits_source::next_context(context, step.candidates[at]);
            source.logits(context, row.data());
            std::copy_n(row.data() + static_cast<size_t>(step.plan.vocab_begin(rank)), shard_vocab,
                        shard + at * shard_vocab);
        }
    }
}

uint64_t context_of(const std::vector<int32_t>& tokens) {
    uint64_t context = 0;
    for (int32_t token : tokens) context = logits_source::next_context(context, token);
    return context;
}

// Drops the old endpoint and builds one through the epoch's rendezvous, then a fresh engine.
status form(rank_process_state& st, const group_config& config, int32_t rank, const form_msg& m) {
    st.engine.reset();
    st.faulty.reset();
    st.endpoint.reset();
    st.unanswered.clear();  // the coordinator gave up on them before it formed a new epoch
    tcp_bootstrap boot(m.host, m.port, rank, config.distribution.tp, config.transport.timeout);
    DS_TRY(make_rank_transport(config.transport.kind, rank_transport_config(config), rank_ucx_options(config), boot,
                               st.endpoint));
    st.faulty = std::make_unique<faulty_transport>(*st.endpoint, config.transport.payload_checksums,
                                                   config.transport.timeout, st.delays);
    auto engine = std::make_unique<rank_engine>(config, rank, *st.faulty);
    if (!engine->init_status().is_ok()) return engine->init_status();
    st.contexts.assign(static_cast<size_t>(config.limits.max_slots), 0);
    for (const register_msg& r : m.registrations) {
        if (status s = engine->register_request(r.slot, r.params, r.history); !s.is_ok()) return s;
        st.contexts[static_cast<size_t>(r.slot)] = context_of(r.history);
    }
    st.engine = std::move(engine);
    return status::success();
}

// The plan's faults for this step, as in-process ranks apply them (actors/rank_actor.cpp), then the
// step. The caller handles crash (before) and hang (after: the answer is never sent).
remote_result run_step(rank_process_state& st, int32_t rank, int32_t vocab, const rank_step_faults& faults,
                       const armed_transport_faults& transport_faults, uint64_t plan_epoch, remote_step_msg& m) {
    remote_result result;
    result.rank = rank;
    result.step_id = m.step.id;
    status s =
        st.engine ? status::success() : status{status_code::aborted, "no transport endpoint: the group is not formed"};
    if (s.is_ok() && st.source != nullptr) {
        if (!m.logits.empty()) {
            s = status::invalid(fmt::format(
                "the step carries {} bytes of logits, but this rank makes its own (topology.logits_source): "
                "expected the same topology.logits_source at the coordinator",
                m.logits.size()));
        } else {
            make_shard(*st.source, st.contexts, m.step, rank, st.source_row, st.own_logits);
            m.dtype = logits_dtype::f32;
        }
    }
    const std::vector<uint8_t>& logits = st.source != nullptr ? st.own_logits : m.logits;
    const size_t row_bytes = static_cast<size_t>(m.step.plan.shard_vocab) * dtype_size(m.dtype);
    if (s.is_ok() && (row_bytes == 0 || logits.size() % row_bytes != 0)) {
        s = status::invalid(
            fmt::format("logits: {} bytes is not a whole number of {}-byte shard rows", logits.size(), row_bytes));
    }
    if (s.is_ok()) {
        const auto rows = static_cast<int64_t>(logits.size() / row_bytes);
        m.step.shards.assign(static_cast<size_t>(m.step.plan.tp), logits_view{});
        m.step.shards[static_cast<size_t>(rank)] =
            logits_view{logits.data(), m.dtype, rows, m.step.plan.shard_vocab, m.step.plan.shard_vocab};
        // Armed before the kernel delay, so that the endpoint counts it in how late the rank is.
        st.faulty->arm(transport_faults, plan_epoch);
        if (faults.kernel_delay_ms > 0)
            st.delays->sleep_for(std::chrono::milliseconds(faults.kernel_delay_ms), plan_epoch);
        s = st.engine->run(m.step, result.outputs);
        if (s.is_ok())
            alter_outputs(faults.alter_token, faults.alter_accept_length, vocab, m.step.plan.tokens_per_req,
                          result.outputs);
        result.timing =
            step_timing{st.engine->last_run_ns(), st.engine->last_transport_ns(), st.engine->last_received_bytes()};
    }
    result.code = static_cast<int32_t>(s.code);
    result.message = s.message;
    if (s.is_ok()) {
        result.digest = result.outputs.digest();
        m.step.shards.clear();  // they point into the message or own_logits
        st.last_step = std::move(m.step);
        st.last_outputs = result.outputs;
    }
    return result;
}

remote_rank_actor_type::behavior_type rank_process_behavior(rank_process_actor self, group_config config, int32_t rank,
                                                            const logits_source* source,
                                                            std::shared_ptr<wakeable_sleep> delays) {
    self->state.source = source;
    self->state.delays = std::move(delays);
    auto ack = [rank](const status& s) -> caf::result<op_ack> {
        if (!s.is_ok()) return make_caf_error(status{s.code, fmt::format("rank {}: {}", rank, s.message)});
        return op_ack{rank};
    };
    auto engine_call = [self, ack](auto call) -> caf::result<op_ack> {
        if (!self->state.engine)
            return ack(status{status_code::aborted, "no transport endpoint: the group is not formed"});
        return ack(call(*self->state.engine));
    };
    return {
        [self, config, rank, ack](form_msg& m) -> caf::result<op_ack> {
            status s = form(self->state, config, rank, m);
            if (s.is_ok()) rank_log().info("rank {}: formed epoch {}", rank, m.epoch);
            return ack(s.is_ok() ? s : status{s.code, fmt::format("epoch {}: {}", m.epoch, s.message)});
        },
        [self, engine_call](register_msg& m) -> caf::result<op_ack> {
            return engine_call([self, &m](rank_engine& e) {
                status s = e.register_request(m.slot, m.params, m.history);
                if (s.is_ok()) self->state.contexts[static_cast<size_t>(m.slot)] = context_of(m.history);
                return s;
            });
        },
        [self, engine_call](release_msg& m) -> caf::result<op_ack> {
            return engine_call([self, &m](rank_engine& e) {
                status s = e.release(m.slot);
                if (s.is_ok()) self->state.contexts[static_cast<size_t>(m.slot)] = 0;
                return s;
            });
        },
        [engine_call](health_msg&) -> caf::result<op_ack> {
            return engine_call([](rank_engine& e) { return e.init_status(); });
        },
        [self, rank, vocab = config.limits.vocab_size,
         drop_wait = drop_put_wait(config)](remote_step_msg& m) -> caf::result<remote_result> {
            rank_process_state& st = self->state;
            if (m.step.id <= st.last_step_id) return repeated_step(rank, m.step.id, st.last_step_id);
            const uint64_t plan_epoch = st.delays->epoch();  // before the plan: a later one wakes its delays
            const rank_step_faults faults = faults_at(st.plan, rank, m.step.id);
            if (faults.crash) {
                rank_log().warn("rank {}: fault plan: crash at step {}", rank, m.step.id);
                rank_log().flush();
                ::_exit(3);
            }
            // A dropped message never reached the rank: it neither runs nor answers the step.
            if (faults.drop_control) {
                rank_log().warn("rank {}: fault plan: step {} dropped (not run, not answered)", rank, m.step.id);
                return caf::delegated<remote_result>{};
            }
            st.last_step_id = m.step.id;
            if (faults.duplicate_control) deliver_again(self, m);
            const armed_transport_faults transport_faults = transport_faults_at(
                st.plan, faults, rank, st.faulty ? st.faulty->world_size() : 0, m.step.id, drop_wait);
            const remote_result result = run_step(st, rank, vocab, faults, transport_faults, plan_epoch, m);
            if (faults.hang) {
                // The step ran, so the peers' collectives completed: over UCX a peer that never
                // enters them looks slow, not gone, and the peers' timeouts would blame themselves.
                rank_log().warn("rank {}: fault plan: hang at step {} (not answered)", rank, result.step_id);
                st.unanswered.push_back(self->make_response_promise());
                return caf::delegated<remote_result>{};
            }
            return result;
        },
        [self, rank](remote_fault_plan_msg& m) -> caf::result<op_ack> {
            fault_plan plan;
            plan.seed = m.seed;
            for (const std::string& text : m.faults) {
                result<fault_spec> spec = parse_fault_spec(text);
                if (!spec.is_ok())
                    return make_caf_error(status::invalid(fmt::format("rank {}: {}", rank, spec.error().message)));
                plan.faults.push_back(*spec);
            }
            self->state.plan = std::move(plan);
            return op_ack{rank};
        },
        [self, rank](remote_commit_msg& m) {
            rank_process_state& st = self->state;
            if (!st.engine || m.step_id != st.last_step.id) return;
            const step_outputs& agreed = m.own ? st.last_outputs : m.agreed;
            status s = st.engine->commit(st.last_step, agreed);
            if (!s.is_ok()) rank_log().error("rank {}: commit of step {} failed: {}", rank, m.step_id, s.message);
            // The accepted tokens extend each request's context (gateway/steps.cpp commits the same).
            const int32_t n = st.last_step.plan.tokens_per_req;
            for (int32_t b = 0; s.is_ok() && b < agreed.batch_size(); ++b) {
                uint64_t& context = st.contexts[static_cast<size_t>(st.last_step.slots[static_cast<size_t>(b)])];
                const int32_t accepted =
                    agreed.packed[static_cast<size_t>(agreed.batch_size()) * static_cast<size_t>(n) +
                                  static_cast<size_t>(b)];
                for (int32_t i = 0; i < accepted; ++i) {
                    context = logits_source::next_context(
                        context,
                        agreed.packed[static_cast<size_t>(b) * static_cast<size_t>(n) + static_cast<size_t>(i)]);
                }
            }
        },
    };
}

// What the coordinator talks to: forwards every message to the rank's detached worker, in order.
// The worker takes a new fault plan only after the step it is running, which may be asleep in a
// delay of the old plan: the front wakes that delay first (core/wakeable_sleep.h).
remote_rank_actor_type::behavior_type rank_process_front(remote_rank_actor_type::pointer self,
                                                         remote_rank_actor_type worker,
                                                         std::shared_ptr<wakeable_sleep> delays) {
    self->link_to(worker);  // each ends with the other
    auto forward = [self, worker](auto& msg) { self->delegate(worker, std::move(msg)); };
    return {
        forwarding<form_msg, op_ack>(forward),
        forwarding<register_msg, op_ack>(forward),
        forwarding<release_msg, op_ack>(forward),
        forwarding<health_msg, op_ack>(forward),
        forwarding<remote_step_msg, remote_result>(forward),
        [self, worker](remote_commit_msg& m) { self->send(worker, std::move(m)); },
        [forward, delays](remote_fault_plan_msg& m) -> caf::result<op_ack> {
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

status run_rank_process(caf::actor_system& system, const group_config& config, int32_t rank, const std::string& host,
                        uint16_t port, const topology_config& topology, const logits_source* source) {
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
    auto worker = system.spawn<caf::detached>(rank_process_behavior, config, rank, source, delays);
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
        caf::error reason;
        self->receive([&](caf::down_msg& d) { reason = d.reason; });
        result = why_the_coordinator_left(system, rank, host, port, reason, topology);
    }
    self->send_exit(worker, caf::exit_reason::user_shutdown);
    self->wait_for(worker);  // its endpoint is closed
    return result;
}

}  // namespace ds

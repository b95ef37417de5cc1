// The rank API (include/distsample/rank.h): a rank process (actors/rank_process.h) run on a thread
// of the model worker, whose logits come through a worker_handoff.
#include <distsample/rank.h>

#include <fmt/format.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include "actors/rank_process.h"
#include "actors/remote_ranks.h"
#include "actors/worker_handoff.h"
#include "transport/tcp_bootstrap.h"

namespace ds {

status worker_rank_config::check() const {
    DS_TRY(validate_group_config(group));
    DS_TRY(validate_topology_config(topology, group.distribution.tp));
    if (topology.logits_source != "worker") {
        return status::invalid(fmt::format("topology.logits_source = {}: expected worker (the coordinator's too)",
                                           topology.logits_source));
    }
    if (rank < 0 || rank >= group.distribution.tp) {
        return status::invalid(
            fmt::format("rank = {}: expected a rank in [0, {}) (distribution.tp)", rank, group.distribution.tp));
    }
    if (logits_timeout.count() < 1 || logits_timeout > group.distribution.step_timeout) {
        return status::invalid(fmt::format("logits_timeout = {} ms: expected in [1, {}] (distribution.step_timeout_ms)",
                                           logits_timeout.count(), group.distribution.step_timeout.count()));
    }
    const result<host_port> address = parse_host_port(coordinator);
    if (!address.is_ok()) return status::invalid("coordinator: " + address.error().message);
    return status::success();
}

struct worker_rank::impl {
    std::shared_ptr<worker_handoff> handoff;
    std::thread serving;  // runs run_rank_process until the coordinator is gone or the rank leaves
    caf::actor leave;     // set once joined
    // CAF 0.17's teardown can wait forever for an actor the middleman sent to a coordinator that
    // is gone (actors/rank_process.h): the system is kept until the process ends.
    caf::actor_system* system = nullptr;
};

namespace {

// Hands the rank core the handoff's steps; the handoff itself stays with the worker.
class handoff_supplier final : public shard_supplier {
   public:
    explicit handoff_supplier(std::shared_ptr<worker_handoff> handoff) : handoff_(std::move(handoff)) {}
    status with_shard(const dist_step& step, const shard_work& work) override {
        return handoff_->with_shard(step, work);
    }
    void on_register(int32_t, const std::vector<int32_t>&) override {}  // the worker knows its requests
    void on_commit(const dist_step& step, const step_outputs& outputs) override { handoff_->on_commit(step, outputs); }

   private:
    std::shared_ptr<worker_handoff> handoff_;
};

// Never destroyed, as `distsample rank`'s: destroying one at exit, after some of CAF's own statics,
// frees memory twice (a Python worker that left its group aborted at exit).
caf::actor_system* kept_actor_system(const topology_config& topology) {
    static std::mutex mutex;  // CAF sets a system up one at a time
    std::lock_guard<std::mutex> lock(mutex);
    auto* config = new caf::actor_system_config;
    return new caf::actor_system(configure_remote_actor_system(*config, topology));
}

}  // namespace

worker_rank::worker_rank(std::unique_ptr<impl> state) : impl_(std::move(state)) {}

status worker_rank::join(const worker_rank_config& config, std::unique_ptr<worker_rank>& out) {
    DS_TRY(config.check());
    const host_port coordinator = parse_host_port(config.coordinator).value();
    set_ucx_environment(config.topology);
    auto state = std::make_unique<impl>();
    state->handoff = std::make_shared<worker_handoff>(config.rank, config.logits_timeout,
                                                      std::chrono::microseconds(config.group.tuning.rank_spin_us));
    state->system = kept_actor_system(config.topology);
    // The serving thread says once whether the join succeeded.
    auto joined = std::make_shared<std::promise<status>>();
    auto told = std::make_shared<std::atomic<bool>>(false);
    std::future<status> join_result = joined->get_future();
    rank_process_options options;
    options.supplier = std::make_unique<handoff_supplier>(state->handoff);
    impl* s = state.get();
    options.joined = [s, joined, told](const caf::actor& leave) {
        s->leave = leave;
        if (!told->exchange(true)) joined->set_value(status::success());
    };
    state->serving = std::thread([s, config, coordinator, joined, told, options = std::move(options)]() mutable {
        status why = run_rank_process(*s->system, config.group, config.rank, coordinator.host, coordinator.port,
                                      config.topology, std::move(options));
        s->handoff->close(why);
        if (!told->exchange(true)) joined->set_value(why);
    });
    const status result = join_result.get();
    if (!result.is_ok()) {
        state->serving.join();
        return result;
    }
    out.reset(new worker_rank(std::move(state)));
    return status::success();
}

worker_rank::~worker_rank() {
    if (impl_->leave) caf::anon_send(impl_->leave, leave_atom::value);
    if (impl_->serving.joinable()) impl_->serving.join();
}

status worker_rank::next_step(std::chrono::milliseconds wait, worker_step& out) {
    return impl_->handoff->next_step(wait, out);
}

status worker_rank::provide_logits(uint64_t step_id, const logits_view& shard) {
    return impl_->handoff->provide(step_id, shard);
}

status worker_rank::outputs(uint64_t step_id, std::chrono::milliseconds wait, step_outputs& out) {
    return impl_->handoff->outputs(step_id, wait, out);
}

}  // namespace ds

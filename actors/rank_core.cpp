#include "actors/rank_core.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace ds {

void alter_outputs(bool token, bool accept_length, int32_t vocab, int32_t n, step_outputs& out) {
    const int32_t bs = out.batch_size();
    if (bs == 0) return;
    if (token) out.packed[0] = (out.packed[0] + 1) % vocab;
    if (accept_length) {
        int32_t& length = out.packed[static_cast<size_t>(bs) * static_cast<size_t>(n)];
        length = length == 1 ? 2 : 1;
    }
}

std::chrono::milliseconds drop_put_wait(const group_config& config) {
    return std::min(config.distribution.step_timeout, config.transport.timeout) + std::chrono::milliseconds(20);
}

namespace {

const fault_plan no_faults;

// The transport faults of step `step` on rank `rank` of `world`: its own, and the stale
// duplicate of the previous rank's payload when that rank's duplicate_put fires. A rank whose put
// is dropped gives up after `drop_wait`.
armed_transport_faults transport_faults_at(const fault_plan& plan, const rank_step_faults& own, int32_t rank,
                                           int32_t world, uint64_t step, std::chrono::milliseconds drop_wait) {
    armed_transport_faults armed;
    armed.delay_ms = own.transport_delay_ms;
    armed.corrupt = own.corrupt_payload;
    armed.corrupt_seed = step;
    armed.alter_logit = own.alter_logit;
    armed.drop_put_ms = own.drop_put ? static_cast<int32_t>(drop_wait.count()) : 0;
    for (std::size_t i = 0; i < plan.faults.size(); ++i) {
        const fault_spec& f = plan.faults[i];
        if (f.kind == fault_kind::duplicate_put && f.rank != rank && world > 0 && (f.rank + 1) % world == rank &&
            fault_fires(plan, i, step)) {
            armed.stale_put_from = f.rank;
            break;
        }
    }
    return armed;
}

uint64_t context_of(const std::vector<int32_t>& tokens) {
    uint64_t context = 0;
    for (int32_t token : tokens) context = logits_source::next_context(context, token);
    return context;
}

class model_supplier final : public shard_supplier {
   public:
    model_supplier(const logits_source& model, int32_t rank, int32_t max_slots)
        : model_(model), rank_(rank), contexts_(static_cast<size_t>(max_slots), 0) {}

    status with_shard(const dist_step& step, const shard_work& work) override {
        const int32_t n = step.plan.tokens_per_req;
        const auto shard_vocab = static_cast<size_t>(step.plan.shard_vocab);
        row_.resize(static_cast<size_t>(model_.vocab_size()));
        rows_.resize(static_cast<size_t>(step.plan.bs) * static_cast<size_t>(n) * shard_vocab);
        for (int32_t b = 0; b < step.plan.bs; ++b) {
            uint64_t context = contexts_[static_cast<size_t>(step.slots[static_cast<size_t>(b)])];
            for (int32_t j = 0; j < n; ++j) {
                const size_t at = static_cast<size_t>(b) * static_cast<size_t>(n) + static_cast<size_t>(j);
                if (j > 0) context = logits_source::next_context(context, step.candidates[at]);
                model_.logits(context, row_.data());
                std::copy_n(row_.data() + static_cast<size_t>(step.plan.vocab_begin(rank_)), shard_vocab,
                            rows_.data() + at * shard_vocab);
            }
        }
        const int64_t rows = int64_t{step.plan.bs} * n;
        return work(logits_view{rows_.data(), logits_dtype::f32, rows, step.plan.shard_vocab, step.plan.shard_vocab});
    }
    void on_register(int32_t slot, const std::vector<int32_t>& history) override {
        contexts_[static_cast<size_t>(slot)] = context_of(history);
    }
    // The accepted tokens extend each request's context (gateway/steps.cpp commits the same).
    void on_commit(const dist_step& step, const step_outputs& outputs) override {
        const auto n = static_cast<size_t>(step.plan.tokens_per_req);
        const auto bs = static_cast<size_t>(outputs.batch_size());
        for (size_t b = 0; b < bs; ++b) {
            const int32_t accepted = outputs.packed[bs * n + b];
            uint64_t& context = contexts_[static_cast<size_t>(step.slots[b])];
            for (int32_t i = 0; i < accepted; ++i)
                context = logits_source::next_context(context, outputs.packed[b * n + static_cast<size_t>(i)]);
        }
    }

   private:
    const logits_source& model_;
    int32_t rank_;
    std::vector<uint64_t> contexts_;  // by slot
    std::vector<float> row_;          // one full-vocab row of the model
    std::vector<float> rows_;         // this rank's shard of the current step
};

}  // namespace

std::unique_ptr<shard_supplier> make_model_supplier(const logits_source& model, int32_t rank, int32_t max_slots) {
    return std::make_unique<model_supplier>(model, rank, max_slots);
}

rank_core::rank_core(const group_config& config, int32_t rank, rank_host host, std::shared_ptr<wakeable_sleep> delays,
                     std::unique_ptr<shard_supplier> supplier)
    : config_(config), rank_(rank), host_(host), delays_(std::move(delays)), supplier_(std::move(supplier)) {}

rank_core::~rank_core() { detach(); }

status rank_core::attach(transport_group& group) {
    detach();
    group_ = &group;
    endpoint_ = std::make_unique<faulty_transport>(group.endpoint(rank_), config_.transport.payload_checksums,
                                                   config_.transport.timeout, delays_);
    engine_ = std::make_unique<rank_engine>(config_, rank_, *endpoint_);
    return engine_->init_status();
}

status rank_core::attach(std::unique_ptr<transport> endpoint) {
    detach();
    owned_ = std::move(endpoint);
    endpoint_ = std::make_unique<faulty_transport>(*owned_, config_.transport.payload_checksums,
                                                   config_.transport.timeout, delays_);
    engine_ = std::make_unique<rank_engine>(config_, rank_, *endpoint_);
    return engine_->init_status();
}

void rank_core::detach() {
    engine_.reset();  // uses the endpoint
    endpoint_.reset();
    owned_.reset();
    group_ = nullptr;
    last_step_.reset();
    last_outputs_.reset();
}

status rank_core::health() const {
    if (!engine_) return {status_code::aborted, "no transport endpoint: the group is not formed"};
    return engine_->init_status();
}

status rank_core::register_request(int32_t slot, const sampling_params& params, const std::vector<int32_t>& history) {
    DS_TRY(health());
    DS_TRY(engine_->register_request(slot, params, history));
    if (supplier_) supplier_->on_register(slot, history);
    return status::success();
}

status rank_core::release(int32_t slot) {
    DS_TRY(health());
    DS_TRY(engine_->release(slot));
    if (supplier_) supplier_->on_register(slot, {});
    return status::success();
}

void rank_core::set_fault_plan(std::shared_ptr<const fault_plan> plan) { plan_ = std::move(plan); }

step_admission rank_core::admit(uint64_t step_id) {
    step_admission a;
    if (step_id <= last_step_id_) {
        a.refusal = {status_code::aborted, fmt::format("step {} repeated after step {}", step_id, last_step_id_)};
        return a;
    }
    a.plan_epoch = delays_->epoch();  // before the plan: a later one wakes its delays
    const fault_plan& plan = plan_ ? *plan_ : no_faults;
    a.faults = faults_at(plan, rank_, step_id);
    const rank_fault hook = std::exchange(hook_, rank_fault::none);  // the hooks fire once
    a.faults.alter_token = a.faults.alter_token || hook == rank_fault::alter_token;
    a.faults.hang = a.faults.hang || hook == rank_fault::stall;
    a.crash = a.faults.crash && host_ == rank_host::process;
    a.drop = a.faults.drop_control;
    if (a.crash || a.drop) return a;
    last_step_id_ = step_id;
    a.deliver_again = a.faults.duplicate_control;
    a.answer = !a.faults.hang;
    a.run = a.answer || host_ == rank_host::process;
    const int32_t world = endpoint_ ? endpoint_->world_size() : 0;
    a.transport_faults = transport_faults_at(plan, a.faults, rank_, world, step_id, drop_put_wait(config_));
    return a;
}

status rank_core::with_shard_of(const dist_step& step, const shard_payload& payload,
                                const shard_supplier::shard_work& work) {
    if (!step.shards.empty()) return work(step.shards[static_cast<size_t>(rank_)]);
    if (supplier_) {
        if (!payload.bytes.empty()) {
            return status::invalid(fmt::format(
                "the step carries {} bytes of logits, but this rank makes its own (topology.logits_source): "
                "expected the same topology.logits_source at the coordinator",
                payload.bytes.size()));
        }
        return supplier_->with_shard(step, work);
    }
    const size_t row_bytes = static_cast<size_t>(step.plan.shard_vocab) * dtype_size(payload.dtype);
    const size_t rows = static_cast<size_t>(step.plan.bs) * static_cast<size_t>(step.plan.tokens_per_req);
    if (row_bytes == 0 || payload.bytes.size() != rows * row_bytes) {
        return status::invalid(
            fmt::format("logits: {} bytes: expected {} shard rows of {} bytes", payload.bytes.size(), rows, row_bytes));
    }
    return work(logits_view{payload.bytes.data(), payload.dtype, static_cast<int64_t>(rows), step.plan.shard_vocab,
                            step.plan.shard_vocab});
}

status rank_core::run_engine(const dist_step& step, const logits_view& shard, const step_admission& a,
                             step_outputs& out) {
    // Armed before the kernel delay, so that the endpoint counts it in how late the rank is.
    endpoint_->arm(a.transport_faults, a.plan_epoch);
    if (a.faults.kernel_delay_ms > 0)
        delays_->sleep_for(std::chrono::milliseconds(a.faults.kernel_delay_ms), a.plan_epoch);
    return engine_->run(step, shard, out);
}

void rank_core::finish(const std::shared_ptr<const dist_step>& step, const step_admission& a, status s,
                       std::shared_ptr<step_outputs> outputs, rank_result& result) {
    if (s.is_ok()) {
        alter_outputs(a.faults.alter_token, a.faults.alter_accept_length, config_.limits.vocab_size,
                      step->plan.tokens_per_req, *outputs);
        result.digest = outputs->digest();
        result.outputs = outputs;
        last_step_ = step;
        last_outputs_ = std::move(outputs);
    }
    if (engine_) {
        result.timing =
            step_timing{engine_->last_run_ns(), engine_->last_transport_ns(), engine_->last_received_bytes(), 0, 0};
    }
    result.code = static_cast<int32_t>(s.code);
    result.message = std::move(s.message);
}

rank_result rank_core::run(std::shared_ptr<const dist_step> step, const shard_payload& payload, const step_admission& a,
                           const result_callback& on_result) {
    rank_result result;
    result.rank = rank_;
    result.step_id = step->id;
    bool finished = false;
    // The rest of the step, on the thread that has the shard.
    auto work = [&](const logits_view& shard) -> status {
        auto outputs = std::make_shared<step_outputs>();
        status s = run_engine(*step, shard, a, *outputs);
        const status ran = s;
        finish(step, a, std::move(s), std::move(outputs), result);
        finished = true;
        if (on_result) on_result(result);
        return ran;
    };
    status s = health();
    if (s.is_ok()) {
        if (group_ != nullptr) group_->enter_epoch(rank_, step->id);
        s = with_shard_of(*step, payload, work);
    }
    if (!finished) {
        finish(step, a, std::move(s), nullptr, result);
        if (on_result) on_result(result);
    }
    return result;
}

status rank_core::commit(uint64_t step_id, const step_outputs* agreed) {
    if (!engine_ || !last_step_ || last_step_->id != step_id) return status::success();
    const step_outputs& outputs = agreed != nullptr ? *agreed : *last_outputs_;
    DS_TRY(engine_->commit(*last_step_, outputs));
    if (supplier_) supplier_->on_commit(*last_step_, outputs);
    return status::success();
}

}  // namespace ds

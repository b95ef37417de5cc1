// The step handlers of request_handlers (gateway/handlers.h): check and submit on the dispatcher
// (or inline), answer on the completion thread.
#include <algorithm>

#include "gateway/handlers.h"
#include "gateway/replies.h"

namespace ds::gateway {

namespace {

// Model logits an io thread may compute itself; bigger model steps go to the dispatcher's thread.
constexpr int64_t kInlineModelLogits = 65536;

}  // namespace

void request_handlers::on_step(const connection_ptr& conn, uint64_t seq, const request_ptr& request,
                               clock_type::time_point arrived) {
    const wire::Step& step = request->has_verify_step() ? request->verify_step() : request->sample_step();
    const int64_t model_logits =
        step.logits_size() > 0 || logits_ != logits_supplier::frame_or_model
            ? 0
            : int64_t{step.slots_size()} * std::max(1, step.tokens_per_req()) * limits_.limits.vocab_size;
    auto job = [this, conn, seq, request, arrived] { submit_step(conn, seq, request, arrived); };
    if (model_logits <= kInlineModelLogits) {
        dispatcher_.run_or_push(std::move(job));
    } else {
        dispatcher_.push(std::move(job));
    }
}

void request_handlers::submit_step(const connection_ptr& conn, uint64_t seq, request_ptr request,
                                   clock_type::time_point arrived) {
    const uint64_t id = request->request_id();
    auto step = std::make_shared<prepared_step>();
    wire::Error error;
    if (!prepare_step(std::move(request), limits_, slots_, logits_, model_, *step, error)) {
        ++metrics_.step_errors;
        return conn->deliver(seq, error_frame(id, error), false);
    }
    std::shared_ptr<fault_ledger> step_ledger = faults_.current();
    auto future = std::make_shared<std::future<step_reply>>(ranks_.submit(step->request));
    // `step` keeps the logits alive until the ranks have answered.
    completer_.push([this, conn, seq, id, step, future, arrived, step_ledger] {
        const step_reply reply = ranks_.wait(*future);
        const uint64_t step_id = faults_.record(*step_ledger, reply, arrived, metrics_);
        answer_step(conn, seq, id, *step, reply, *step_ledger, step_id, arrived);
    });
}

void request_handlers::answer_step(const connection_ptr& conn, uint64_t seq, uint64_t request_id,
                                   const prepared_step& step, const step_reply& reply, const fault_ledger& step_ledger,
                                   uint64_t step_id, clock_type::time_point arrived) {
    const connection_step_faults connection_faults = connection_faults_at(step_ledger.plan(), step_id);
    metrics_.desync_events += reply.desyncs.size();
    if (!reply.result.is_ok()) {
        ++metrics_.step_errors;
        if (reply.result.code != status_code::invalid_argument) ++metrics_.rank_failures;
        return send_step_reply(*conn, seq, error_frame(request_id, error_of(reply.result)), connection_faults);
    }
    const int32_t bs = step.request.batch_size();
    const int32_t n = step.request.tokens_per_req;
    const std::vector<int32_t>& packed = reply.outputs.packed;
    const int32_t* accept_length = packed.data() + static_cast<size_t>(bs) * n;
    for (int32_t b = 0; b < bs; ++b) {
        slots_.commit(step.request.slots[static_cast<size_t>(b)], step.generations[static_cast<size_t>(b)],
                      packed.data() + static_cast<size_t>(b) * n, accept_length[b]);
        metrics_.accept_length.observe(accept_length[b]);
    }
    std::string frame = reply_frame(request_id, [&](wire::Reply& r) {
        wire::StepReply& s = *r.mutable_step();
        s.set_step_id(reply.step_id);
        s.mutable_predict()->Add(packed.begin(), packed.begin() + static_cast<std::ptrdiff_t>(bs) * n);
        s.mutable_accept_length()->Add(accept_length, accept_length + bs);
        s.mutable_logprobs()->Add(reply.outputs.logprobs.begin(), reply.outputs.logprobs.end());
        for (int32_t b = 0; b < bs; ++b) {
            if (reply.outputs.row_error[static_cast<size_t>(b)] != 0) s.add_row_errors(b);
        }
        s.set_desync_events(static_cast<uint32_t>(reply.desyncs.size()));
    });
    ++metrics_.steps;
    metrics_.step_latency.observe(std::chrono::duration<double>(clock_type::now() - arrived).count());
    metrics_.observe_ranks(reply.rank_timing);
    send_step_reply(*conn, seq, std::move(frame), connection_faults);
}

void request_handlers::send_step_reply(connection_base& conn, uint64_t seq, std::string frame,
                                       const connection_step_faults& faults) {
    if (faults.cut) {
        ++metrics_.replies_dropped;
        return conn.cut();
    }
    if (faults.reply_delay_ms > 0)
        return conn.deliver_late(seq, std::move(frame), std::chrono::milliseconds(faults.reply_delay_ms));
    conn.deliver(seq, std::move(frame), false);
}

}  // namespace ds::gateway

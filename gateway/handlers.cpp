#include "gateway/handlers.h"

#include <fmt/format.h>

#include <vector>

#include "gateway/replies.h"
#include "gateway/stats.h"

namespace ds::gateway {

namespace {

logits_supplier supplier_of(const group& ranks, const logits_source* model) {
    if (ranks.ranks_make_logits()) return logits_supplier::ranks;
    return model != nullptr ? logits_supplier::frame_or_model : logits_supplier::frame;
}

}  // namespace

request_handlers::request_handlers(const gateway_config& config, group& ranks, const logits_source* model,
                                   gateway_metrics& metrics, job_queue& dispatcher, job_queue& completer)
    : config_(config),
      ranks_(ranks),
      limits_(ranks.config()),
      model_(model),
      logits_(supplier_of(ranks, model)),
      metrics_(metrics),
      dispatcher_(dispatcher),
      completer_(completer),
      slots_(limits_.limits.max_slots),
      faults_(limits_.faults, limits_.distribution.policy) {}

void request_handlers::handle(const connection_ptr& conn, uint64_t seq, request_ptr request,
                              clock_type::time_point arrived) {
    const uint64_t id = request->request_id();
    switch (request->body_case()) {
        case wire::Request::kAuth: return conn->deliver(seq, ok_frame(id), false);
        case wire::Request::kSampleStep:
        case wire::Request::kVerifyStep: return on_step(conn, seq, request, arrived);
        case wire::Request::kRegister:
            return dispatcher_.push([this, conn, seq, request] { on_register(conn, seq, *request); });
        case wire::Request::kRelease:
            return dispatcher_.push([this, conn, seq, request] { on_release(conn, seq, *request); });
        case wire::Request::kHealth: return dispatcher_.push([this, conn, seq, id] { on_health(conn, seq, id); });
        case wire::Request::kStats:
            return dispatcher_.push([this, conn, seq, id] {
                conn->deliver(
                    seq,
                    reply_frame(id, [&](wire::Reply& r) { fill_stats(metrics_, slots_, limits_, *r.mutable_stats()); }),
                    false);
            });
        case wire::Request::kInject:
        case wire::Request::kClear:
            // On the dispatcher, so the plan applies from the next step this gateway submits.
            return dispatcher_.push([this, conn, seq, request] { on_faults(conn, seq, *request); });
        case wire::Request::BODY_NOT_SET: break;  // decode_request rejected it already
    }
}

void request_handlers::closed(uint64_t connection_id) {
    // After the connection's registrations still queued, which would otherwise own slots again.
    dispatcher_.push([this, connection_id] { slots_.disown(connection_id); });
}

bool request_handlers::registration_slot(const wire::Register& m, uint64_t owner, int32_t& slot,
                                         wire::Error& error) const {
    slot = m.slot();
    if (slot == 0) {
        slot = slots_.free_slot();
        if (slot == 0) {
            error = make_error(wire::Error::NO_FREE_SLOT, "slot",
                               fmt::format("all {} slots are registered", slots_.max_slots() - 1));
            return false;
        }
    } else if (slot < 1 || slot >= slots_.max_slots()) {
        error = make_error(wire::Error::BAD_FIELD, "slot",
                           fmt::format("slot = {}: expected 0 (any) or 1 to {}", slot, slots_.max_slots() - 1));
        return false;
    } else if (const uint64_t holder = slots_.owner(slot); holder != 0 && holder != owner) {
        error = make_error(wire::Error::BAD_FIELD, "slot",
                           fmt::format("slot = {}: another connection holds it (registered there, not released): "
                                       "expected a slot of this connection, or 0 for a free one",
                                       slot));
        return false;
    }
    for (int i = 0; i < m.history_size(); ++i) {
        if (m.history(i) < 0 || m.history(i) >= limits_.limits.vocab_size) {
            error = make_error(wire::Error::BAD_FIELD, fmt::format("history[{}]", i),
                               fmt::format("history[{}] = {}: expected a token id in [0, {})", i, m.history(i),
                                           limits_.limits.vocab_size));
            return false;
        }
    }
    return true;
}

void request_handlers::on_register(const connection_ptr& conn, uint64_t seq, const wire::Request& request) {
    const wire::Register& m = request.register_();
    const uint64_t id = request.request_id();
    int32_t slot = 0;
    wire::Error error;
    if (!registration_slot(m, conn->id(), slot, error)) return conn->deliver(seq, error_frame(id, error), false);
    const std::vector<int32_t> history(m.history().begin(), m.history().end());
    if (status s = ranks_.register_request(slot, params_of(m.params()), history); !s.is_ok())
        return conn->deliver(seq, error_frame(id, error_of(s)), false);
    slots_.set(slot, history, conn->id());
    conn->deliver(seq,
                  reply_frame(id,
                              [&](wire::Reply& r) {
                                  r.mutable_registered()->set_scheduler_request_id(m.scheduler_request_id());
                                  r.mutable_registered()->set_slot(slot);
                              }),
                  false);
}

void request_handlers::on_release(const connection_ptr& conn, uint64_t seq, const wire::Request& request) {
    const int32_t slot = request.release().slot();
    const uint64_t id = request.request_id();
    if (!slots_.registered(slot)) {
        return conn->deliver(seq,
                             error_frame(id, make_error(wire::Error::UNKNOWN_SLOT, "slot",
                                                        fmt::format("slot {} is not registered", slot))),
                             false);
    }
    if (status s = ranks_.release(slot); !s.is_ok()) return conn->deliver(seq, error_frame(id, error_of(s)), false);
    slots_.release(slot);
    conn->deliver(seq, ok_frame(id), false);
}

void request_handlers::on_health(const connection_ptr& conn, uint64_t seq, uint64_t request_id) {
    const status s = ranks_.health();
    conn->deliver(seq,
                  reply_frame(request_id,
                              [&](wire::Reply& r) {
                                  r.mutable_health()->set_ok(s.is_ok());
                                  r.mutable_health()->set_message(s.message);
                              }),
                  false);
}

void request_handlers::on_faults(const connection_ptr& conn, uint64_t seq, const wire::Request& request) {
    const uint64_t id = request.request_id();
    // Faults stall and falsify the group: only a client holding the secret may inject them.
    if (config_.secret.empty()) {
        return conn->deliver(
            seq,
            error_frame(id, make_error(wire::Error::FORBIDDEN, request.has_inject() ? "inject" : "clear",
                                       "fault injection needs a server with a shared secret "
                                       "(gateway.secret): this one has none")),
            false);
    }
    fault_plan plan;
    wire::Error error;
    if (!requested_fault_plan(request, plan, error)) return conn->deliver(seq, error_frame(id, error), false);
    if (status s = ranks_.set_fault_plan(plan); !s.is_ok())
        return conn->deliver(seq, error_frame(id, error_of(s)), false);
    faults_.replace(plan);
    conn->deliver(seq, ok_frame(id), false);
}

}  // namespace ds::gateway

// The gateway's request handlers, one per request type. Register, release, health, stats and
// fault injection run on the dispatcher, in arrival order (the group calls block on the ranks). A
// step is checked and submitted on the dispatcher too, or on the io thread itself when nothing is
// queued before it and its model logits are few; the completion thread waits for the steps'
// futures in submission order (the group answers in that order) and queues their replies.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include <distsample/group.h>

#include "config/gateway_config.h"
#include "gateway/connection.h"
#include "gateway/fault_requests.h"
#include "gateway/job_queue.h"
#include "gateway/metrics.h"
#include "gateway/steps.h"
#include "sources/logits_source.h"

namespace ds::gateway {

class request_handlers final : public request_sink {
   public:
    // Everything passed in outlives the handlers; `model` may be null (steps carry their logits,
    // or the ranks make them: group::ranks_make_logits).
    request_handlers(const gateway_config& config, group& ranks, const logits_source* model, gateway_metrics& metrics,
                     job_queue& dispatcher, job_queue& completer);

    void handle(const std::shared_ptr<connection_base>& conn, uint64_t seq, std::shared_ptr<wire::Request> request,
                clock_type::time_point arrived) override;
    void closed(uint64_t connection_id) override;

   private:
    using connection_ptr = std::shared_ptr<connection_base>;
    using request_ptr = std::shared_ptr<wire::Request>;

    void on_register(const connection_ptr& conn, uint64_t seq, const wire::Request& request);
    void on_release(const connection_ptr& conn, uint64_t seq, const wire::Request& request);
    void on_health(const connection_ptr& conn, uint64_t seq, uint64_t request_id);
    void on_faults(const connection_ptr& conn, uint64_t seq, const wire::Request& request);
    // The slot a Register of connection `owner` asks for (0: the lowest free one), checked with
    // its history: a slot another open connection registered is refused, not taken over.
    bool registration_slot(const wire::Register& m, uint64_t owner, int32_t& slot, wire::Error& error) const;

    // step_handler.cpp: on the io thread, then on the dispatcher (submit_step) and the completion
    // thread (answer_step).
    void on_step(const connection_ptr& conn, uint64_t seq, const request_ptr& request, clock_type::time_point arrived);
    void submit_step(const connection_ptr& conn, uint64_t seq, request_ptr request, clock_type::time_point arrived);
    void answer_step(const connection_ptr& conn, uint64_t seq, uint64_t request_id, const prepared_step& step,
                     const step_reply& reply, const fault_ledger& step_ledger, uint64_t step_id,
                     clock_type::time_point arrived);
    // A step's reply, through the connection faults that fire on it: the step itself was
    // answered and counted either way.
    void send_step_reply(connection_base& conn, uint64_t seq, std::string frame, const connection_step_faults& faults);

    const gateway_config& config_;
    group& ranks_;
    group_config limits_;
    const logits_source* model_;
    logits_supplier logits_;
    gateway_metrics& metrics_;
    job_queue& dispatcher_;
    job_queue& completer_;
    slot_table slots_;
    fault_accounting faults_;
};

}  // namespace ds::gateway

// Every message the actors exchange, registered in one CAF type-ID block (CAF 0.17.6), and the
// mapping between ds::status and caf::error.
//
// One family of messages runs between the coordinator and its ranks, whether a rank is a thread
// of this process or a process of its own (docs/architecture.md, Ranks in other processes). In
// one process they travel by shared pointer (a rank thread reads the caller's logits in place and
// its outputs are not copied); to another process CAF serializes them, the shared values by value
// (the inspect functions below), and a step then carries its rank's logits in `payload`.
#pragma once

#include <caf/all.hpp>

#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <distsample/group.h>
#include <distsample/testing.h>
#include "actors/dist_step.h"
#include "actors/rank_core.h"

namespace ds {

struct register_msg {
    int32_t slot = 0;
    sampling_params params;
    std::vector<int32_t> history;
};

struct release_msg {
    int32_t slot = 0;
};

struct fault_msg {
    int32_t rank = 0;
    rank_fault fault = rank_fault::none;
};

// Replaces a rank's fault plan (config/fault_plan.h); answered with op_ack. Travels between
// processes as the seed and the fault texts.
struct fault_plan_msg {
    std::shared_ptr<const fault_plan> plan;
};

// Is the rank usable (its backend built)? Answered with op_ack or the rank's error.
struct health_msg {};

struct op_ack {
    int32_t rank = 0;
};

struct desync_query {};

struct desync_log {
    std::vector<desync_event> events;
};

class step_board;

// Coordinator -> rank: run a planned step, answered with a rank_result (actors/rank_core.h).
// `payload`: the rank's shard rows when they travel with the step (a rank process whose logits
// the coordinator has); a rank thread reads `step->shards`. A rank of this process files a
// successful result on `board` (actors/step_board.h) before answering; `board` never leaves the
// process.
struct step_msg {
    std::shared_ptr<const dist_step> step;
    shard_payload payload;
    std::shared_ptr<step_board> board;
};

// Coordinator -> ranks: step `step_id`'s outputs to add to the penalty counts (null: the rank's own).
struct commit_msg {
    uint64_t step_id = 0;
    std::shared_ptr<const step_outputs> agreed;
};

// Client -> coordinator, and the answer.
struct submit_msg {
    std::shared_ptr<const step_request> request;
};

// The library caller's end of a submitted step: the coordinator fulfils it once, itself, so no
// actor stands between the caller and the coordinator (each one would add a mailbox hop each way).
// Dropped unanswered (the coordinator stopped with the step queued or running), it answers with an
// error: no caller waits forever.
class step_reply_sink {
   public:
    step_reply_sink() = default;
    step_reply_sink(const step_reply_sink&) = delete;
    step_reply_sink& operator=(const step_reply_sink&) = delete;
    ~step_reply_sink();

    std::future<step_reply> future() { return promise_.get_future(); }
    // Called on the answering thread once the reply is set: a caller that waits elsewhere than
    // on the future (actors/answer_lane.h, read_until) is told to look. Set before submission.
    void on_answer(std::function<void()> hook) { on_answer_ = std::move(hook); }
    void answer(step_reply reply);
    void fail(status why);

   private:
    std::promise<step_reply> promise_;
    std::function<void()> on_answer_;
    bool answered_ = false;
};

// Library caller -> the coordinator: a step answered through `reply`. The coordinator's mailbox
// keeps each caller thread's submission order.
struct caller_submit_msg {
    std::shared_ptr<const step_request> request;
    std::shared_ptr<step_reply_sink> reply;
};

struct step_answer {
    uint64_t step_id = 0;
    std::shared_ptr<const step_outputs> outputs;
    std::vector<desync_event> desyncs;
    step_timing timing;                    // the slowest rank's
    std::vector<step_timing> rank_timing;  // every rank's
    step_timeline timeline;
};

// Rank process -> the coordinator's membership actor: rank `rank` (actor `handle`) joins. `tp` and
// `vocab_size` and `mode` are checked against the coordinator's; a mismatch is refused naming the
// field.
struct join_msg {
    int32_t rank = 0;
    int32_t tp = 0;
    int32_t vocab_size = 0;
    dist_mode mode = dist_mode::swap;
    caf::actor handle;
};

// Coordinator -> every rank process: build a new transport endpoint through the TCP rendezvous
// host:port (one per epoch, transport/tcp_bootstrap.h), then register `registrations`.
struct form_msg {
    uint64_t epoch = 0;
    std::string host;
    uint16_t port = 0;
    std::vector<register_msg> registrations;
    uint16_t answer_port = 0;  // the answer lane on `host` (actors/answer_lane.h); 0: none
    uint64_t answer_secret = 0;
    std::string answer_local;  // the lane's local socket, for ranks on `host`'s host; empty: none
};

// CAF's error for a failed status (category "distsample", code = status_code, context = message).
caf::error make_caf_error(const status& s);
// The status of a caf::error: ours map back exactly; a request timeout becomes timeout with
// message `what`; CAF's other errors (actor down, ...) become aborted, `what` then CAF's words.
status to_status(const caf::error& e, const std::string& what);

// Registers the type-ID block and sizes the shared scheduler for the coordinator's few actors.
caf::actor_system_config& configure_actor_system(caf::actor_system_config& cfg, const scheduler_config& scheduler = {});

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, logit_bias_entry& x) {
    return f(caf::meta::type_name("logit_bias_entry"), x.token, x.bias);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_params& x) {
    return f(caf::meta::type_name("sampling_params"), x.temperature, x.top_k, x.top_p, x.min_p, x.seed,
             x.presence_penalty, x.frequency_penalty, x.repetition_penalty, x.logit_bias);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, register_msg& x) {
    return f(caf::meta::type_name("register_msg"), x.slot, x.params, x.history);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, release_msg& x) {
    return f(caf::meta::type_name("release_msg"), x.slot);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fault_msg& x) {
    return f(caf::meta::type_name("fault_msg"), x.rank, x.fault);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, health_msg&) {
    return f(caf::meta::type_name("health_msg"));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, op_ack& x) {
    return f(caf::meta::type_name("op_ack"), x.rank);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, desync_query&) {
    return f(caf::meta::type_name("desync_query"));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, desync_event& x) {
    return f(caf::meta::type_name("desync_event"), x.step, x.rank, x.first_row);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, desync_log& x) {
    return f(caf::meta::type_name("desync_log"), x.events);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_plan& x) {
    return f(caf::meta::type_name("step_plan"), x.bs, x.tp, x.pad_bs, x.reqs_per_rank, x.tokens_per_req, x.shard_vocab);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, verify_thresholds& x) {
    return f(caf::meta::type_name("verify_thresholds"), x.single, x.acc);
}

// Every field but `shards` (pointers into this process): a remote step carries its rank's rows.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dist_step& x) {
    return f(caf::meta::type_name("dist_step"), x.id, x.kind, x.plan, x.slots, x.positions, x.candidates, x.bitmask,
             x.coins, x.final_coins, x.thresholds);
}

// Logprobs travel as their bits: CAF 0.17 packs floats in a way that loses NaN (unused entries).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_outputs& x) {
    std::vector<uint32_t> bits(x.logprobs.size());
    if (!bits.empty()) std::memcpy(bits.data(), x.logprobs.data(), bits.size() * sizeof(float));
    return f(caf::meta::type_name("step_outputs"), x.packed, x.accept_index, bits, x.row_error,
             caf::meta::load_callback([&x, &bits]() -> caf::error {
                 x.logprobs.resize(bits.size());
                 if (!bits.empty()) std::memcpy(x.logprobs.data(), bits.data(), bits.size() * sizeof(float));
                 return caf::none;
             }));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_timing& x) {
    return f(caf::meta::type_name("step_timing"), x.rank_step_ns, x.rank_transport_ns, x.rank_received_bytes,
             x.rank_began_at_ns, x.rank_answered_at_ns, x.arrived_at_ns, x.received_at_ns, x.filed_at_ns);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_msg& x) {
    return f(caf::meta::type_name("join_msg"), x.rank, x.tp, x.vocab_size, x.mode, x.handle);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, form_msg& x) {
    return f(caf::meta::type_name("form_msg"), x.epoch, x.host, x.port, x.registrations, x.answer_port, x.answer_secret,
             x.answer_local);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_payload& x) {
    return f(caf::meta::type_name("shard_payload"), x.dtype, x.bytes);
}

// A shared value between processes: a presence flag and the value (a copy when saving: only
// messages that leave the process are serialized).
template <class T>
struct shared_value {
    std::shared_ptr<const T>& pointer;
    bool present = pointer != nullptr;
    T value = pointer ? *pointer : T{};

    caf::error restore() {
        pointer = present ? std::make_shared<const T>(std::move(value)) : nullptr;
        return caf::none;
    }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_msg& x) {
    shared_value<dist_step> step{x.step};
    return f(caf::meta::type_name("step_msg"), step.present, step.value, x.payload,
             caf::meta::load_callback([&step] { return step.restore(); }));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_result& x) {
    shared_value<step_outputs> outputs{x.outputs};
    return f(caf::meta::type_name("rank_result"), x.rank, x.step_id, x.code, x.message, x.digest, outputs.present,
             outputs.value, x.timing, caf::meta::load_callback([&outputs] { return outputs.restore(); }));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, commit_msg& x) {
    shared_value<step_outputs> agreed{x.agreed};
    return f(caf::meta::type_name("commit_msg"), x.step_id, agreed.present, agreed.value,
             caf::meta::load_callback([&agreed] { return agreed.restore(); }));
}

// The plan's seed and fault texts; a text this rank cannot parse fails the message.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fault_plan_msg& x) {
    uint64_t seed = x.plan ? x.plan->seed : 0;
    std::vector<std::string> texts;
    if (x.plan) {
        for (const fault_spec& spec : x.plan->faults) texts.push_back(format_fault_spec(spec));
    }
    return f(caf::meta::type_name("fault_plan_msg"), seed, texts, caf::meta::load_callback([&]() -> caf::error {
                 auto plan = std::make_shared<fault_plan>();
                 plan->seed = seed;
                 for (const std::string& text : texts) {
                     result<fault_spec> spec = parse_fault_spec(text);
                     if (!spec.is_ok()) return make_caf_error(spec.error());
                     plan->faults.push_back(*spec);
                 }
                 x.plan = std::move(plan);
                 return caf::none;
             }));
}

}  // namespace ds

// The one type-ID block of distsample.
CAF_BEGIN_TYPE_ID_BLOCK(distsample, caf::first_custom_type_id)
CAF_ADD_TYPE_ID(distsample, (ds::register_msg))
CAF_ADD_TYPE_ID(distsample, (ds::release_msg))
CAF_ADD_TYPE_ID(distsample, (ds::fault_msg))
CAF_ADD_TYPE_ID(distsample, (ds::health_msg))
CAF_ADD_TYPE_ID(distsample, (ds::op_ack))
CAF_ADD_TYPE_ID(distsample, (ds::desync_query))
CAF_ADD_TYPE_ID(distsample, (ds::desync_event))
CAF_ADD_TYPE_ID(distsample, (ds::desync_log))
CAF_ADD_TYPE_ID(distsample, (ds::step_msg))
CAF_ADD_TYPE_ID(distsample, (ds::rank_result))
CAF_ADD_TYPE_ID(distsample, (ds::commit_msg))
CAF_ADD_TYPE_ID(distsample, (ds::submit_msg))
CAF_ADD_TYPE_ID(distsample, (ds::step_answer))
CAF_ADD_TYPE_ID(distsample, (ds::caller_submit_msg))
CAF_ADD_TYPE_ID(distsample, (ds::fault_plan_msg))
CAF_ADD_TYPE_ID(distsample, (ds::join_msg))
CAF_ADD_TYPE_ID(distsample, (ds::form_msg))
CAF_END_TYPE_ID_BLOCK(distsample)

// Process-local messages (they carry shared pointers): never serialized.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(ds::submit_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(ds::step_answer)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(ds::caller_submit_msg)

namespace ds {

// The typed interfaces of the actors (checked at compile time by CAF). A rank, a thread of this
// process or a process of its own, takes the one family; form_msg only means something to a rank
// process (a rank thread has its endpoint for the group's lifetime).
using rank_actor_type =
    caf::typed_actor<caf::replies_to<form_msg>::with<op_ack>, caf::replies_to<register_msg>::with<op_ack>,
                     caf::replies_to<release_msg>::with<op_ack>, caf::replies_to<health_msg>::with<op_ack>,
                     caf::replies_to<fault_msg>::with<op_ack>, caf::replies_to<fault_plan_msg>::with<op_ack>,
                     caf::replies_to<step_msg>::with<rank_result>, caf::reacts_to<commit_msg>>;

// The coordinator to itself: look at the running step's deadline (actors/coordinator_actor.cpp).
using deadline_check_atom = caf::atom_constant<caf::atom("deadline")>;

using coordinator_actor_type =
    caf::typed_actor<caf::replies_to<submit_msg>::with<step_answer>, caf::reacts_to<caller_submit_msg>,
                     caf::replies_to<register_msg>::with<op_ack>, caf::replies_to<release_msg>::with<op_ack>,
                     caf::replies_to<health_msg>::with<op_ack>, caf::replies_to<desync_query>::with<desync_log>,
                     caf::replies_to<fault_msg>::with<op_ack>, caf::reacts_to<deadline_check_atom>>;

}  // namespace ds

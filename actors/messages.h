// Every message the actors exchange, registered in one CAF type-ID block (CAF 0.17.6), and the
// mapping between ds::status and caf::error.
//
// Messages that carry a shared_ptr (a planned step, a submitted step, agreed outputs) are
// process-local: the rank actors read the caller's logits in place. Ranks in other processes will
// get serialized forms of these; the value messages below are already inspectable.
#pragma once

#include <caf/all.hpp>

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "actors/dist_step.h"
#include <distsample/group.h>

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

// Replaces a rank's fault plan (config/fault_plan.h); answered with op_ack.
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

// Coordinator -> rank: run a planned step.
struct run_step_msg {
    std::shared_ptr<const dist_step> step;
};

// Rank -> coordinator: a rank's outputs (or why it failed) and their digest.
struct rank_result {
    int32_t rank = 0;
    uint64_t step_id = 0;
    int32_t code = 0;  // status_code
    std::string message;
    uint64_t digest = 0;
    std::shared_ptr<const step_outputs> outputs;
    step_timing timing;
};

// Coordinator -> ranks: the outputs to add to the penalty counts (null: the rank's own outputs).
struct commit_msg {
    std::shared_ptr<const dist_step> step;
    std::shared_ptr<const step_outputs> agreed;
};

// Client -> coordinator, and the answer.
struct submit_msg {
    std::shared_ptr<const step_request> request;
};

// Library caller -> its client actor: submit a step and fulfil `reply` with the answer. One client
// actor per group keeps the caller's submission order.
struct client_submit_msg {
    std::shared_ptr<const step_request> request;
    std::shared_ptr<std::promise<step_reply>> reply;
};

struct step_answer {
    uint64_t step_id = 0;
    std::shared_ptr<const step_outputs> outputs;
    std::vector<desync_event> desyncs;
    step_timing timing;                   // the slowest rank's
    std::vector<step_timing> rank_timing;  // every rank's
};

// CAF's error for a failed status (category "distsample", code = status_code, context = message).
caf::error make_caf_error(const status& s);
// The status of a caf::error: ours map back exactly; a request timeout becomes timeout with
// message `what`; CAF's other errors (actor down, ...) become aborted, `what` then CAF's words.
status to_status(const caf::error& e, const std::string& what);

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
CAF_ADD_TYPE_ID(distsample, (ds::run_step_msg))
CAF_ADD_TYPE_ID(distsample, (ds::rank_result))
CAF_ADD_TYPE_ID(distsample, (ds::commit_msg))
CAF_ADD_TYPE_ID(distsample, (ds::submit_msg))
CAF_ADD_TYPE_ID(distsample, (ds::step_answer))
CAF_ADD_TYPE_ID(distsample, (ds::client_submit_msg))
CAF_ADD_TYPE_ID(distsample, (ds::fault_plan_msg))
CAF_END_TYPE_ID_BLOCK(distsample)

// Process-local messages (they carry shared pointers): never serialized.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(ds::run_step_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(ds::rank_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(ds::commit_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(ds::submit_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(ds::step_answer)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(ds::client_submit_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(ds::fault_plan_msg)

namespace ds {

// The typed interfaces of the three actors (checked at compile time by CAF).
using rank_actor_type = caf::typed_actor<caf::replies_to<register_msg>::with<op_ack>,
                                         caf::replies_to<release_msg>::with<op_ack>,
                                         caf::replies_to<health_msg>::with<op_ack>,
                                         caf::replies_to<fault_msg>::with<op_ack>,
                                         caf::replies_to<fault_plan_msg>::with<op_ack>,
                                         caf::replies_to<run_step_msg>::with<rank_result>,
                                         caf::reacts_to<commit_msg>>;

using coordinator_actor_type = caf::typed_actor<caf::replies_to<submit_msg>::with<step_answer>,
                                                caf::replies_to<register_msg>::with<op_ack>,
                                                caf::replies_to<release_msg>::with<op_ack>,
                                                caf::replies_to<health_msg>::with<op_ack>,
                                                caf::replies_to<desync_query>::with<desync_log>,
                                                caf::replies_to<fault_msg>::with<op_ack>>;

// Turns library calls into ordered submissions (actors/group.cpp).
using client_actor_type = caf::typed_actor<caf::reacts_to<client_submit_msg>>;

}  // namespace ds

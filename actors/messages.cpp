#include "actors/messages.h"

#include <algorithm>

namespace ds {

namespace {

const caf::atom_value kCategory = caf::atom("distsample");

}  // namespace

step_reply_sink::~step_reply_sink() {
    if (!answered_) fail(status{status_code::aborted, "coordinator stopped before it answered the step"});
}

void step_reply_sink::answer(step_reply reply) {
    if (answered_) return;
    answered_ = true;
    promise_.set_value(std::move(reply));
}

void step_reply_sink::fail(status why) {
    step_reply reply;
    reply.result = std::move(why);
    answer(std::move(reply));
}

caf::error make_caf_error(const status& s) {
    return caf::error(static_cast<uint8_t>(s.code), kCategory, caf::make_message(s.message));
}

status to_status(const caf::error& e, const std::string& what) {
    if (!e) return status::success();
    if (e.category() == kCategory) {
        const caf::message& context = e.context();
        std::string message = context.match_elements<std::string>() ? context.get_as<std::string>(0) : what;
        return {static_cast<status_code>(e.code()), std::move(message)};
    }
    if (e == caf::sec::request_timeout) return {status_code::timeout, what};
    return {status_code::aborted, what + ": " + caf::to_string(e)};
}

caf::actor_system_config& configure_actor_system(caf::actor_system_config& cfg, const scheduler_config& scheduler) {
    cfg.add_message_types<caf::id_block::distsample>();
    // The shared scheduler only runs the coordinator and the client: one worker is plenty. CAF
    // counts polls, not time: an empty poll takes about 20 ns (18-24 ns measured on a 2-core EPYC
    // VM). No "moderate" polling: it sleeps `moderate-sleep-duration` (50 us plus the kernel's
    // timer slack) between polls, which a message arriving then waits out.
    constexpr int64_t kPollsPerMicrosecond = 50;
    cfg.set("scheduler.max-threads", scheduler.threads);
    cfg.set("work-stealing.aggressive-poll-attempts", std::max<int64_t>(1, int64_t{scheduler.spin_us} * kPollsPerMicrosecond));
    cfg.set("work-stealing.moderate-poll-attempts", 0);
    return cfg;
}

}  // namespace ds

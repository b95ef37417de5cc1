#include "actors/messages.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>

#include "actors/log.h"

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
    if (on_answer_) on_answer_();
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

// CAF's workers count polls of their job queue, not time, and a poll's cost differs between
// machines (measured 5 ns on a 2-core EPYC VM, 12 ns on the H200 host; a fixed 50 polls per
// microsecond let the coordinator's worker fall asleep mid-step, a thread wake-up per hop). So the
// count for `spin_us` is measured once per process: a throwaway actor system's one worker polls
// kCalibrationPolls times after running an actor that notes its thread's CPU clock, then sleeps;
// its CPU time meanwhile is the polls' time.
int64_t caf_polls_per_microsecond() {
    static const int64_t measured = [] {
        constexpr int64_t kCalibrationPolls = 1'000'000;
        constexpr int64_t kFallbackPollsPerMicrosecond = 50;  // the fixed count used before, if the measurement fails
        auto cpu_us = [](clockid_t clock) {
            timespec t{};
            ::clock_gettime(clock, &t);
            return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) * 1e-3;
        };
        caf::actor_system_config cfg;
        cfg.set("scheduler.max-threads", 1);
        cfg.set("work-stealing.aggressive-poll-attempts", kCalibrationPolls);
        cfg.set("work-stealing.moderate-poll-attempts", 0);
        caf::actor_system system{cfg};
        std::promise<clockid_t> worker_clock;
        std::future<clockid_t> noted = worker_clock.get_future();
        // The promise goes in as an argument: CAF 0.17 binds an empty argument pack through a
        // null pointer, which UBSan reports.
        system.spawn(
            [](caf::event_based_actor*, std::promise<clockid_t>* out) {
                clockid_t clock{};
                pthread_getcpuclockid(pthread_self(), &clock);
                out->set_value(clock);
            },
            &worker_clock);
        if (noted.wait_for(std::chrono::seconds(5)) != std::future_status::ready) return kFallbackPollsPerMicrosecond;
        const clockid_t clock = noted.get();
        const double start = cpu_us(clock);
        // Polling ends when the worker's CPU time stops growing (its relaxed sleeps wake it
        // briefly every 10 ms: allow for that).
        double last = start;
        for (int quiet = 0, round = 0; quiet < 3 && round < 2000; ++round) {
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            const double now = cpu_us(clock);
            quiet = now - last < 200.0 ? quiet + 1 : 0;
            last = now;
        }
        const double spun_us = last - start;
        return spun_us > 0
                   ? std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(kCalibrationPolls) / spun_us))
                   : kFallbackPollsPerMicrosecond;
    }();
    return measured;
}

caf::actor_system_config& configure_actor_system(caf::actor_system_config& cfg, const scheduler_config& scheduler) {
    cfg.add_message_types<caf::id_block::distsample>();
    // The shared scheduler only runs the coordinator (and, in a coordinator process, the
    // membership actor and the proxies): one worker is plenty. No "moderate" polling: it sleeps
    // `moderate-sleep-duration` (50 us plus the kernel's timer slack) between polls, which a
    // message arriving then waits out.
    cfg.set("scheduler.max-threads", scheduler.threads);
    int64_t polls = 1;
    if (scheduler.spin_us > 0) {
        polls = int64_t{scheduler.spin_us} * caf_polls_per_microsecond();
        coordinator_log().info(
            "scheduler: {} polls of the job queue per microsecond here; an idle worker polls {} times ({} us)",
            caf_polls_per_microsecond(), polls, scheduler.spin_us);
    }
    cfg.set("work-stealing.aggressive-poll-attempts", polls);
    cfg.set("work-stealing.moderate-poll-attempts", 0);
    return cfg;
}

}  // namespace ds

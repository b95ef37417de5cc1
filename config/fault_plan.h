// A fault plan (docs/faults.md): which faults to inject into which rank at which steps. Whether a
// fault fires on a step is a pure function of (plan seed, fault index, step id), so a run with the
// same plan and the same steps replays the same faults, whatever the timing.
//
// The command line and the library take one fault as text:
//   kind:rank=R[:steps=A-B][:p=P][:ms=D]   (connection faults take no rank)
// e.g. "alter_token:rank=2:steps=10-20", "hang:rank=1:p=0.001", "delay_kernel:rank=3:ms=50".
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/status.h"

namespace ds {

enum class fault_kind {
    alter_token,          // desync: the rank changes its first emitted token after sampling
    alter_accept_length,  // desync: the rank changes its first request's accept length
    delay_kernel,         // the rank sleeps `delay_ms` before running the step
    delay_transport,      // the rank sleeps `delay_ms` before its first collective of the step
    corrupt_payload,      // one bit of a peer's block flips in the rank's first checked collective
    hang,                 // the rank never answers the step
    alter_logit,          // the rank's shard gets one logit raised after the model handed it in, before sampling
    drop_put,             // the rank's outgoing payload of its first collective never reaches its peers
    duplicate_put,        // a stale copy of the rank's last payload reaches the next rank again
    drop_control,         // the rank drops the step message: it never runs or answers the step
    duplicate_control,    // the rank receives the step message twice and answers both
    slow_connection,  // the gateway holds the step's reply `delay_ms` (and the connection's later replies behind it)
    cut_connection,   // the gateway closes the step's connection once the step is answered, instead of replying
    crash,            // a rank process exits abruptly (_exit(3)) at the step; in-process ranks ignore it
};

// Faults of the scheduler connection: the gateway applies them (gateway/), the ranks ignore them,
// and they name no rank.
inline bool is_connection_fault(fault_kind kind) {
    return kind == fault_kind::slow_connection || kind == fault_kind::cut_connection;
}

inline constexpr fault_kind kAllFaultKinds[] = {fault_kind::alter_token,       fault_kind::alter_accept_length,
                                                fault_kind::delay_kernel,      fault_kind::delay_transport,
                                                fault_kind::corrupt_payload,   fault_kind::hang,
                                                fault_kind::alter_logit,       fault_kind::drop_put,
                                                fault_kind::duplicate_put,     fault_kind::drop_control,
                                                fault_kind::duplicate_control, fault_kind::slow_connection,
                                                fault_kind::cut_connection,    fault_kind::crash};

const char* fault_kind_name(fault_kind kind);
// An unknown name is an invalid_argument status listing the kinds.
result<fault_kind> parse_fault_kind(const std::string& name);

struct fault_spec {
    fault_kind kind = fault_kind::alter_token;
    int32_t rank = 0;
    uint64_t first_step = 1;  // step ids, inclusive
    uint64_t last_step = std::numeric_limits<uint64_t>::max();
    double probability = 1.0;  // per step in the range
    int32_t delay_ms = 0;      // delay_kernel, delay_transport, slow_connection
};

struct fault_plan {
    uint64_t seed = 0;
    std::vector<fault_spec> faults;

    bool empty() const { return faults.empty(); }
};

// Ok when usable, else an invalid_argument status naming the fault and the field.
status validate_fault_plan(const fault_plan& plan, int32_t tp);

// Parses "kind:rank=R[:steps=A-B][:p=P][:ms=D]", or says what is wrong.
result<fault_spec> parse_fault_spec(const std::string& text);
// The inverse of parse_fault_spec (defaults left out).
std::string format_fault_spec(const fault_spec& spec);

// Does fault `index` of `plan` fire on step `step`?
bool fault_fires(const fault_plan& plan, std::size_t index, uint64_t step);

// What a rank does wrong on one step: the union of the plan's faults that fire there.
struct rank_step_faults {
    bool alter_token = false;
    bool alter_accept_length = false;
    int32_t kernel_delay_ms = 0;
    int32_t transport_delay_ms = 0;
    bool corrupt_payload = false;
    bool hang = false;
    bool alter_logit = false;
    bool drop_put = false;
    bool duplicate_put = false;
    bool drop_control = false;
    bool duplicate_control = false;
    bool crash = false;

    bool any() const {
        return alter_token || alter_accept_length || kernel_delay_ms > 0 || transport_delay_ms > 0 || corrupt_payload ||
               hang || alter_logit || drop_put || duplicate_put || drop_control || duplicate_control || crash;
    }
};

rank_step_faults faults_at(const fault_plan& plan, int32_t rank, uint64_t step);

// What the gateway does wrong with one step's reply: the union of the connection faults that fire.
struct connection_step_faults {
    int32_t reply_delay_ms = 0;  // slow_connection
    bool cut = false;            // cut_connection
};

connection_step_faults connection_faults_at(const fault_plan& plan, uint64_t step);

}  // namespace ds

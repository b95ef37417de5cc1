#include "config/fault_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace ds {

const char* fault_kind_name(fault_kind kind) {
    switch (kind) {
        case fault_kind::alter_token: return "alter_token";
        case fault_kind::alter_accept_length: return "alter_accept_length";
        case fault_kind::delay_kernel: return "delay_kernel";
        case fault_kind::delay_transport: return "delay_transport";
        case fault_kind::corrupt_payload: return "corrupt_payload";
        case fault_kind::hang: return "hang";
        case fault_kind::alter_logit: return "alter_logit";
        case fault_kind::drop_put: return "drop_put";
        case fault_kind::duplicate_put: return "duplicate_put";
        case fault_kind::drop_control: return "drop_control";
        case fault_kind::duplicate_control: return "duplicate_control";
        case fault_kind::slow_connection: return "slow_connection";
        case fault_kind::cut_connection: return "cut_connection";
        case fault_kind::crash: return "crash";
    }
    return "unknown";
}

namespace {

std::string known_kinds() {
    std::string known;
    for (fault_kind k : kAllFaultKinds) known += fmt::format("{}{}", known.empty() ? "" : ", ", fault_kind_name(k));
    return known;
}

}  // namespace

result<fault_kind> parse_fault_kind(const std::string& name) {
    for (fault_kind k : kAllFaultKinds) {
        if (name == fault_kind_name(k)) return k;
    }
    return status::invalid(fmt::format("unknown kind '{}' (known: {})", name, known_kinds()));
}

status validate_fault_plan(const fault_plan& plan, int32_t tp) {
    for (std::size_t i = 0; i < plan.faults.size(); ++i) {
        const fault_spec& f = plan.faults[i];
        if (f.rank < 0 || f.rank >= tp)
            return status::invalid(fmt::format("faults[{}].rank = {}: expected a rank in [0, {})", i, f.rank, tp));
        if (f.first_step < 1 || f.last_step < f.first_step) {
            return status::invalid(
                fmt::format("faults[{}].steps = {}-{}: expected 1 <= first <= last", i, f.first_step, f.last_step));
        }
        if (!(f.probability >= 0.0 && f.probability <= 1.0)) {
            return status::invalid(
                fmt::format("faults[{}].p = {}: expected a probability in [0, 1]", i, f.probability));
        }
        const bool delays = f.kind == fault_kind::delay_kernel || f.kind == fault_kind::delay_transport ||
                            f.kind == fault_kind::slow_connection;
        if (delays ? f.delay_ms <= 0 : f.delay_ms != 0) {
            return status::invalid(fmt::format("faults[{}].ms = {}: {}", i, f.delay_ms,
                                               delays ? "expected a delay > 0" : "only delays take ms"));
        }
    }
    return status::success();
}

namespace {

// Decimal digits only, and refused (not clamped) past 2^64 - 1.
bool parse_u64(const std::string& s, uint64_t& out) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return false;
    errno = 0;
    out = std::strtoull(s.c_str(), nullptr, 10);
    return errno == 0;
}

// splitmix64: a well-mixed hash of (seed, index, step) for the per-step coin.
uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

}  // namespace

result<fault_spec> parse_fault_spec(const std::string& text) {
    fault_spec spec;
    std::vector<std::string> parts;
    for (std::size_t begin = 0;;) {
        const std::size_t end = text.find(':', begin);
        parts.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
        if (end == std::string::npos) break;
        begin = end + 1;
    }
    const result<fault_kind> kind = parse_fault_kind(parts[0]);
    if (!kind.is_ok()) return status::invalid(fmt::format("fault '{}': {}", text, kind.error().message));
    spec.kind = *kind;
    bool has_rank = false;
    for (std::size_t i = 1; i < parts.size(); ++i) {
        const std::size_t eq = parts[i].find('=');
        const std::string key = parts[i].substr(0, eq);
        const std::string value = eq == std::string::npos ? std::string{} : parts[i].substr(eq + 1);
        uint64_t number = 0;
        bool ok = true;
        if (key == "rank") {
            ok = parse_u64(value, number) && number < 1u << 20;
            spec.rank = static_cast<int32_t>(number);
            has_rank = true;
        } else if (key == "steps") {
            const std::size_t dash = value.find('-');
            uint64_t last = 0;
            ok = parse_u64(value.substr(0, dash), number) &&
                 (dash == std::string::npos ? (last = number, true) : parse_u64(value.substr(dash + 1), last));
            spec.first_step = number;
            spec.last_step = last;
        } else if (key == "p") {
            char* end = nullptr;
            spec.probability = std::strtod(value.c_str(), &end);
            // strtod alone would take " 0.5", "nan" and "0x1p-1".
            ok = !value.empty() && *end == '\0' && value.find_first_not_of("0123456789.eE+-") == std::string::npos;
        } else if (key == "ms") {
            ok = parse_u64(value, number) && number <= 3600000;
            spec.delay_ms = static_cast<int32_t>(number);
        } else {
            return status::invalid(
                fmt::format("fault '{}': unknown field '{}' (expected rank, steps, p, ms)", text, key));
        }
        if (!ok) return status::invalid(fmt::format("fault '{}': bad value '{}' for {}", text, value, key));
    }
    if (is_connection_fault(spec.kind) && has_rank)
        return status::invalid(fmt::format("fault '{}': a connection fault takes no rank", text));
    if (!is_connection_fault(spec.kind) && !has_rank)
        return status::invalid(fmt::format("fault '{}': rank=R is required", text));
    return spec;
}

std::string format_fault_spec(const fault_spec& spec) {
    std::string text = is_connection_fault(spec.kind)
                           ? std::string(fault_kind_name(spec.kind))
                           : fmt::format("{}:rank={}", fault_kind_name(spec.kind), spec.rank);
    const fault_spec defaults;
    if (spec.first_step != defaults.first_step || spec.last_step != defaults.last_step) {
        text += fmt::format(":steps={}-{}", spec.first_step, spec.last_step);
    }
    if (spec.probability != defaults.probability) text += fmt::format(":p={}", spec.probability);
    if (spec.delay_ms != 0) text += fmt::format(":ms={}", spec.delay_ms);
    return text;
}

bool fault_fires(const fault_plan& plan, std::size_t index, uint64_t step) {
    const fault_spec& f = plan.faults[index];
    if (step < f.first_step || step > f.last_step) return false;
    if (f.probability >= 1.0) return true;
    const uint64_t coin = mix(mix(plan.seed ^ mix(index)) ^ step);
    // The top 53 bits as a uniform double in [0, 1).
    return static_cast<double>(coin >> 11) * 0x1.0p-53 < f.probability;
}

rank_step_faults faults_at(const fault_plan& plan, int32_t rank, uint64_t step) {
    rank_step_faults out;
    for (std::size_t i = 0; i < plan.faults.size(); ++i) {
        const fault_spec& f = plan.faults[i];
        if (f.rank != rank || !fault_fires(plan, i, step)) continue;
        switch (f.kind) {
            case fault_kind::alter_token: out.alter_token = true; break;
            case fault_kind::alter_accept_length: out.alter_accept_length = true; break;
            case fault_kind::delay_kernel: out.kernel_delay_ms = std::max(out.kernel_delay_ms, f.delay_ms); break;
            case fault_kind::delay_transport:
                out.transport_delay_ms = std::max(out.transport_delay_ms, f.delay_ms);
                break;
            case fault_kind::corrupt_payload: out.corrupt_payload = true; break;
            case fault_kind::hang: out.hang = true; break;
            case fault_kind::alter_logit: out.alter_logit = true; break;
            case fault_kind::drop_put: out.drop_put = true; break;
            case fault_kind::duplicate_put: out.duplicate_put = true; break;
            case fault_kind::drop_control: out.drop_control = true; break;
            case fault_kind::duplicate_control: out.duplicate_control = true; break;
            case fault_kind::slow_connection:
            case fault_kind::cut_connection: break;  // the gateway's
            case fault_kind::crash: out.crash = true; break;
        }
    }
    return out;
}

connection_step_faults connection_faults_at(const fault_plan& plan, uint64_t step) {
    connection_step_faults out;
    for (std::size_t i = 0; i < plan.faults.size(); ++i) {
        const fault_spec& f = plan.faults[i];
        if (!is_connection_fault(f.kind) || !fault_fires(plan, i, step)) continue;
        if (f.kind == fault_kind::slow_connection) out.reply_delay_ms = std::max(out.reply_delay_ms, f.delay_ms);
        if (f.kind == fault_kind::cut_connection) out.cut = true;
    }
    return out;
}

}  // namespace ds

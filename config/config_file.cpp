#include "config/config_file.h"

#include "config/config_keys.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "config/gateway_config.h"
#include "config/json_input.h"
#include "config/topology_config.h"

extern char** environ;

namespace ds {

namespace {

using json = nlohmann::json;
using namespace config_keys;
using group_key = key_entry<group_config>;

template <class Field>
group_key millis_key(const char* key, Field field) {
    return {key, [field](const group_config& c) { return json(std::invoke(field, c).count()); },
            [field](const std::string& k, const raw_value& v, group_config& c) {
                int64_t value = 0;
                status s = read_int(k, v, 1, 3'600'000, value);
                if (s.is_ok()) std::invoke(field, c) = std::chrono::milliseconds(value);
                return s;
            }};
}

// A named choice (config/choices.h): the name in the file, its enum in the program.
template <class Enum, std::size_t N, class Field>
group_key choice_key(const char* key, Field field, const std::array<Enum, N>& all, const char* (*name_of)(Enum)) {
    return {key, [field, name_of](const group_config& c) { return json(name_of(std::invoke(field, c))); },
            [field, all, name_of](const std::string& k, const raw_value& v, group_config& c) {
                std::string name;
                DS_TRY(read_choice(k, v, choice_names(all, name_of), name));
                for (Enum value : all) {
                    if (name == name_of(value)) std::invoke(field, c) = value;
                }
                return status::success();
            }};
}

// The field `member` of the part `part` of a group_config, as the key makers take it.
template <class Part, class T>
auto in_part(Part group_config::*part, T Part::*member) {
    return [ part, member ](auto& c) -> auto& { return c.*part.*member; };
}

const std::vector<group_key>& keys() {
    using c = group_config;
    using limits = group_limits;
    using tuning = tuning_config;
    static const std::vector<group_key> table = {
        int_key<c>("tp", in_part(&c::distribution, &distribution_config::tp), 1, kMaxTp),
        int_key<c>("vocab_size", in_part(&c::limits, &limits::vocab_size), 1, kMaxVocabSize),
        int_key<c>("max_batch", in_part(&c::limits, &limits::max_batch), 1, kMaxBatchSize),
        int_key<c>("max_tokens_per_req", in_part(&c::limits, &limits::max_tokens_per_req), 1, kMaxTokensPerRequest),
        int_key<c>("max_slots", in_part(&c::limits, &limits::max_slots), 2, kMaxSlots),
        int_key<c>("max_penalty_tokens", in_part(&c::limits, &limits::max_penalty_tokens), 0, kMaxPenaltyTokens),
        int_key<c>("max_logit_bias", in_part(&c::limits, &limits::max_logit_bias), 0, kMaxLogitBias),
        int_key<c>("memory_budget_mib", in_part(&c::limits, &limits::memory_budget_mib), 0, kMaxMemoryBudgetMib),
        int_key<c>("threads_per_rank", in_part(&c::tuning, &tuning::threads_per_rank), 0, kMaxThreads),
        choice_key("backend", &c::backend, kAllBackends, backend_name),
        // Whether this build has the backend is checked when the group starts (transport_factory.h).
        choice_key("transport", in_part(&c::transport, &transport_options::kind), kAllTransports, transport_name),
        // Whether `direct` can work is known once UCX is up (transport/ucx_memory_path.h).
        choice_key(
            "ucx_device_memory", [](auto& g) -> auto& { return g.transport.ucx.device_memory; }, kAllUcxMemoryModes,
            ucx_memory_mode_name),
        bool_key<c>(
            "ucx_peer_error_handling", [](auto& g) -> auto& { return g.transport.ucx.peer_error_handling; }),
        choice_key("mode", in_part(&c::distribution, &distribution_config::mode), kAllModes, mode_name),
        choice_key("rank0_policy", in_part(&c::distribution, &distribution_config::policy), kAllPolicies, policy_name),
        millis_key("step_timeout_ms", in_part(&c::distribution, &distribution_config::step_timeout)),
        millis_key("transport_timeout_ms", in_part(&c::transport, &transport_options::timeout)),
        int_key<c>("scheduler_threads", in_part(&c::tuning, &tuning::scheduler_threads), 1, kMaxSchedulerThreads),
        int_key<c>("scheduler_spin_us", in_part(&c::tuning, &tuning::scheduler_spin_us), 0, kMaxSpinMicroseconds),
        int_key<c>("reply_spin_us", in_part(&c::tuning, &tuning::reply_spin_us), 0, kMaxSpinMicroseconds),
        int_key<c>("rank_spin_us", in_part(&c::tuning, &tuning::rank_spin_us), 0, kMaxSpinMicroseconds),
    };
    return table;
}

// The "faults" section. `inject` is a list of fault texts (fault_plan.h) in a file; a value from
// the environment or the command line adds its faults, separated by ';', so --fault repeats.
status read_fault_specs(const std::string& key, const raw_value& v, fault_plan& plan) {
    const std::string expected = "fault texts kind:rank=R[:steps=A-B][:p=P][:ms=D]";
    std::vector<std::string> texts;
    if (v.text) {
        const std::string& all = v.value.get_ref<const std::string&>();
        for (size_t begin = 0; begin <= all.size();) {
            const size_t end = std::min(all.find(';', begin), all.size());
            if (end > begin) texts.push_back(all.substr(begin, end - begin));
            begin = end + 1;
        }
    } else {
        if (!v.value.is_array()) return bad(key, v, "a list of " + expected);
        for (const json& item : v.value) {
            if (!item.is_string()) return bad(key, v, "a list of " + expected);
            texts.push_back(item.get<std::string>());
        }
        plan.faults.clear();
    }
    for (const std::string& text : texts) {
        result<fault_spec> spec = parse_fault_spec(text);
        if (!spec.is_ok()) return bad(key, v, expected + " (" + spec.error().message + ")");
        plan.faults.push_back(*spec);
    }
    return status::success();
}

const std::vector<group_key>& fault_keys() {
    static const std::vector<group_key> table = {
        {"seed", [](const group_config& c) { return json(c.faults.seed); },
         [](const std::string& k, const raw_value& v, group_config& c) {
             int64_t value = 0;
             status s = read_int(k, v, 0, INT64_MAX, value);
             if (s.is_ok()) c.faults.seed = static_cast<uint64_t>(value);
             return s;
         }},
        {"inject",
         [](const group_config& c) {
             json texts = json::array();
             for (const fault_spec& f : c.faults.faults) texts.push_back(format_fault_spec(f));
             return texts;
         },
         [](const std::string& k, const raw_value& v, group_config& c) { return read_fault_specs(k, v, c.faults); }},
        bool_key<group_config>("payload_checksums",
                               in_part(&group_config::transport, &transport_options::payload_checksums)),
    };
    return table;
}

// Edit distance, to suggest the name a misspelt one was meant to be.
size_t distance(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diagonal = above;
        }
    }
    return row[b.size()];
}

// Every DISTSAMPLE_* name distsample reads: the keys of every section, and the variables that are
// not config keys: the fault soak's report, the Python package's libraries (a worker that joins
// through distsample.WorkerRank has them set), its setup.py's build and its tests' CLI.
std::vector<std::string> known_variables() {
    std::vector<std::string> names = {"DISTSAMPLE_FAULT_REPORT", "DISTSAMPLE_LIBRARY",    "DISTSAMPLE_RANK_LIBRARY",
                                      "DISTSAMPLE_BUILD_DIR",    "DISTSAMPLE_CMAKE_ARGS", "DISTSAMPLE_CLI"};
    const json group = group_config_to_json(group_config{});
    for (const auto& [key, value] : group.items()) {
        if (!value.is_object()) {
            names.push_back(env_name("", key));
            continue;
        }
        for (const auto& item : value.items()) names.push_back(env_name(key, item.key()));
    }
    const json gateway = gateway_config_to_json(gateway_config{});
    for (const auto& item : gateway.items()) names.push_back(env_name("gateway", item.key()));
    const json topology = topology_config_to_json(topology_config{});
    for (const auto& item : topology.items()) names.push_back(env_name("topology", item.key()));
    return names;
}

}  // namespace

status check_environment_names() {
    static const std::vector<std::string> known = known_variables();
    for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
        const std::string name(*entry, std::strcspn(*entry, "="));
        if (name.rfind("DISTSAMPLE_", 0) != 0 || std::find(known.begin(), known.end(), name) != known.end()) continue;
        const auto nearest = std::min_element(known.begin(), known.end(), [&](const auto& a, const auto& b) {
            return distance(name, a) < distance(name, b);
        });
        return status::invalid(
            fmt::format("environment variable {} is not a distsample setting; did you mean {}? "
                        "(docs/configuration.md lists them)",
                        quote_text(name), *nearest));
    }
    return status::success();
}

status load_group_config(const std::string& file, const std::vector<std::string>& overrides, group_config& config) {
    return load_group_config(config_keys::json_source{file, {}}, overrides, config);
}

status load_group_config(const config_keys::json_source& source, const std::vector<std::string>& overrides,
                         group_config& config) {
    DS_TRY(check_environment_names());
    DS_TRY(config_keys::load("", keys(), source, overrides, config));
    return config_keys::load("faults", fault_keys(), source, overrides, config);
}

json group_config_to_json(const group_config& config) {
    json out = config_keys::to_json(keys(), config);
    out["faults"] = config_keys::to_json(fault_keys(), config);
    return out;
}

}  // namespace ds

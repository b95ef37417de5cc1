#include "config/choices.h"

#include <fmt/format.h>

namespace ds {

namespace {

// "'a' or 'b'" for two names, "one of 'a' 'b' 'c'" for more.
std::string allowed(const std::vector<std::string>& names) {
    if (names.size() == 2) return fmt::format("'{}' or '{}'", names[0], names[1]);
    std::string text = "one of";
    for (const std::string& n : names) text += fmt::format(" '{}'", n);
    return text;
}

template <class Enum, std::size_t N>
result<Enum> parse_choice(const char* key, std::string_view name, const std::array<Enum, N>& all,
                          const char* (*name_of)(Enum)) {
    for (Enum value : all) {
        if (name == name_of(value)) return value;
    }
    return status::invalid(fmt::format("{} = '{}': expected {}", key, name, allowed(choice_names(all, name_of))));
}

}  // namespace

const char* mode_name(dist_mode mode) {
    switch (mode) {
        case dist_mode::gathered: return "gathered";
        case dist_mode::swap: return "swap";
        case dist_mode::sharded: return "sharded";
    }
    return "unknown";
}

const char* policy_name(rank0_policy policy) {
    switch (policy) {
        case rank0_policy::always: return "always";
        case rank0_policy::never: return "never";
        case rank0_policy::on_mismatch: return "on_mismatch";
    }
    return "unknown";
}

const char* ucx_memory_mode_name(ucx_memory_mode mode) {
    switch (mode) {
        case ucx_memory_mode::automatic: return "auto";
        case ucx_memory_mode::direct: return "direct";
        case ucx_memory_mode::staged: return "staged";
    }
    return "unknown";
}

const char* backend_name(backend_kind backend) {
    switch (backend) {
        case backend_kind::cpu: return "cpu";
        case backend_kind::cuda: return "cuda";
    }
    return "unknown";
}

const char* transport_name(transport_kind transport) {
    switch (transport) {
        case transport_kind::automatic: return "auto";
        case transport_kind::local: return "local";
        case transport_kind::ucx: return "ucx";
        case transport_kind::nccl: return "nccl";
    }
    return "unknown";
}

result<dist_mode> parse_mode(std::string_view name) { return parse_choice("mode", name, kAllModes, mode_name); }

result<rank0_policy> parse_policy(std::string_view name) {
    return parse_choice("rank0_policy", name, kAllPolicies, policy_name);
}

result<ucx_memory_mode> parse_ucx_memory_mode(std::string_view name) {
    return parse_choice("ucx_device_memory", name, kAllUcxMemoryModes, ucx_memory_mode_name);
}

result<backend_kind> parse_backend_kind(std::string_view name) {
    return parse_choice("backend", name, kAllBackends, backend_name);
}

result<transport_kind> parse_transport_kind(std::string_view name) {
    return parse_choice("transport", name, kAllTransports, transport_name);
}

}  // namespace ds

// The configuration's named choices: enums inside the program, their names only at the config
// boundary (config_file.h parses each once) and in messages. Every parse error names the field,
// the value and the allowed names.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ds {

// How the ranks sample a step (docs/architecture.md, Modes).
enum class dist_mode {
    gathered,  // all-gather the full logits, every rank samples every row (reference)
    swap,      // all-to-all vocab swap, each rank verifies its requests, packed all-gather
    sharded,   // logits never move: ranks exchange maxima, masses and cut points
};

// What the coordinator does with the ranks' outputs (docs/architecture.md, Rank-0 policy and
// desync events). Every policy compares each rank's output digest with rank 0's and records a
// desync event on a difference.
enum class rank0_policy {
    always,       // answer with rank 0's outputs and make every rank commit them
    never,        // trust no rank: a difference fails the step with a `mismatch` error
    on_mismatch,  // answer with rank 0's outputs; repair the ranks only when they differ
};

// Where the ucx transport keeps the vocab swap's logits when a rank samples on the GPU
// (transport/ucx_memory_path.h resolves it once UCX is up).
enum class ucx_memory_mode {
    automatic,  // "auto": direct where UCX can move CUDA memory, else staged
    direct,     // put GPU memory to GPU memory (needs a UCX built with CUDA, e.g. libucx-cu13)
    staged,     // copy the shard to pinned host buffers; UCX moves host memory
};

// The sampling backend of every rank (kernels/sampling_backend.h builds it).
enum class backend_kind { cpu, cuda };

// The transport between the ranks (transport/transport_factory.h builds it).
enum class transport_kind {
    automatic,  // "auto": local for ranks as threads, ucx for rank processes
    local,
    ucx,
    nccl,
};

const char* mode_name(dist_mode mode);
const char* policy_name(rank0_policy policy);
const char* ucx_memory_mode_name(ucx_memory_mode mode);
const char* backend_name(backend_kind backend);
const char* transport_name(transport_kind transport);

// Each takes the name as the config key spells it; an unknown name is an invalid_argument status
// "<key> = '<name>': expected ..." listing the names.
result<dist_mode> parse_mode(std::string_view name);
result<rank0_policy> parse_policy(std::string_view name);
result<ucx_memory_mode> parse_ucx_memory_mode(std::string_view name);
result<backend_kind> parse_backend_kind(std::string_view name);
result<transport_kind> parse_transport_kind(std::string_view name);

// Every value of each choice, in the order errors list their names.
inline constexpr std::array kAllModes = {dist_mode::swap, dist_mode::sharded, dist_mode::gathered};
inline constexpr std::array kAllPolicies = {rank0_policy::always, rank0_policy::never, rank0_policy::on_mismatch};
inline constexpr std::array kAllUcxMemoryModes = {ucx_memory_mode::automatic, ucx_memory_mode::direct,
                                                  ucx_memory_mode::staged};
inline constexpr std::array kAllBackends = {backend_kind::cpu, backend_kind::cuda};
inline constexpr std::array kAllTransports = {transport_kind::automatic, transport_kind::local, transport_kind::ucx,
                                              transport_kind::nccl};

// The names of `all`, in its order (a config key's allowed values).
template <class Enum, std::size_t N>
std::vector<std::string> choice_names(const std::array<Enum, N>& all, const char* (*name_of)(Enum)) {
    std::vector<std::string> names;
    for (Enum value : all) names.emplace_back(name_of(value));
    return names;
}

}  // namespace ds

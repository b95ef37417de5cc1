// What a group configuration allocates, part by part, and the memory budget it must fit in
// (docs/configuration.md, "Limits"). Every rank allocates its buffers once, when the group starts,
// from the sizes below; the transport and the ranks size theirs with the same functions, so the
// estimate is the allocation, not a guess about it. A configuration above the budget is refused
// before anything is allocated, naming the fields of its largest part, instead of ending in
// bad_alloc (or in the kernel's out-of-memory killer) half way through the start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "config/group_config.h"
#include "core/status.h"

namespace ds {

// Rows one rank receives from the vocab swap: every row in gathered mode, its requests' rows in
// swap mode, none in sharded mode.
int64_t max_swap_rows(const group_config& config);
// Bytes one rank contributes to its largest collective: the sharded sampler's two 256-bin
// histograms per row (the swap and gathered collectives are smaller).
std::size_t max_collective_bytes(const group_config& config);

// One rank's buffers, in bytes.
struct rank_memory {
    uint64_t penalty_counts = 0;  // max_slots * max_penalty_tokens token counts
    uint64_t logit_biases = 0;    // max_slots * max_logit_bias entries, as requests register
    uint64_t samplers = 0;        // per CPU worker thread: scratch of vocab_size entries
    uint64_t swap_rows = 0;       // the vocab swap's receive buffer: max_swap_rows full-vocab rows
    uint64_t collectives = 0;     // tp blocks of max_collective_bytes
    uint64_t shard_rows = 0;      // sharded mode: the largest step's rows of this rank's shard

    uint64_t total() const;
};

// `cpu_threads`: what threads_per_rank = 0 resolves to (the host's cores).
rank_memory estimate_rank_memory(const group_config& config, int32_t cpu_threads);

// The budget: memory_budget_mib, or with 0 the host's physical memory.
uint64_t memory_budget_bytes(const group_config& config);

// Ok when `ranks_here` ranks of `config` (tp for a group in one process, 1 for a rank process)
// fit in the budget; else an invalid_argument status naming the fields of the largest part, the
// bytes needed and the budget.
status check_memory_budget(const group_config& config, int32_t ranks_here);

// "1.5 GiB", "640 KiB": bytes for people.
std::string format_bytes(uint64_t bytes);

}  // namespace ds

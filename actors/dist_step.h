// The data a distributed step carries between the coordinator and the rank actors. In one
// process these travel by shared pointer (the rank actors read the caller's logits in place);
// nothing here is a CAF type, so the rank engine and its tests do not need CAF.
#pragma once

#include <cstdint>
#include <vector>

#include "config/group_config.h"
#include "kernels/sampling_types.h"

namespace ds {

// A step as a client submits it. Every array is unpadded (bs requests); `shards[r]` is rank r's
// vocab shard of the bs * N logits rows and must stay valid until the step is answered.
struct step_request {
    step_kind kind = step_kind::sample;
    int32_t tokens_per_req = 1;       // N (1 for sample)
    std::vector<int32_t> slots;       // [bs]
    std::vector<int64_t> positions;   // [bs]
    std::vector<int32_t> candidates;  // [bs, N] verify only
    std::vector<uint32_t> bitmask;    // [bs * N, ceil(V/32)] or empty (all allowed)
    std::vector<double> coins;        // [bs, N-1] or empty (Philox coins)
    std::vector<double> final_coins;  // [bs] or empty (Philox draws)
    verify_thresholds thresholds;
    std::vector<logits_view> shards;  // [TP]

    int32_t batch_size() const { return static_cast<int32_t>(slots.size()); }
};

// Each request of a step has a slot of its own: two rows of one slot would both commit to that
// slot's penalty counts. Checked by the coordinator on every step (and by the gateway before it
// submits one); invalid naming the later of two equal entries, e.g. "slots[3] = 5: ...".
status check_distinct_slots(const std::vector<int32_t>& slots);

// Splits full-vocab rows into `tp` shard views (no copy: each view strides over the full rows).
std::vector<logits_view> split_vocab(const logits_view& full, int32_t tp);

// Outputs of a step for bs requests, owned.
struct step_outputs {
    std::vector<int32_t> packed;        // predict [bs*N] then accept_length [bs]
    std::vector<int32_t> accept_index;  // [bs*N]
    std::vector<float> logprobs;        // [bs*N]
    std::vector<uint8_t> row_error;     // [bs]

    void resize(int32_t bs, int32_t n);
    step_output view();
    int32_t batch_size() const { return static_cast<int32_t>(row_error.size()); }
    // core/digest.h's digest over every output (logprobs by their bits): equal outputs give equal
    // digests.
    uint64_t digest() const;
    // The first request whose outputs differ from `other`'s (predict row, accept index, accept
    // length, logprobs, error flag), or -1 when equal.
    int32_t first_difference(const step_outputs& other, int32_t n) const;
};

// A planned step as every rank receives it: the request's arrays padded to pad_bs (phantom
// requests use slot 0, position 0, candidates 0, all-allowed bitmask rows, coins 0).
struct dist_step {
    uint64_t id = 0;
    step_kind kind = step_kind::sample;
    step_plan plan;
    std::vector<int32_t> slots;
    std::vector<int64_t> positions;
    std::vector<int32_t> candidates;
    std::vector<uint32_t> bitmask;
    std::vector<double> coins;
    std::vector<double> final_coins;
    verify_thresholds thresholds;
    std::vector<logits_view> shards;

    // The step_input of requests [first, first + count) over `logits` (whose rows are theirs).
    step_input slice(int32_t first, int32_t count, const logits_view& logits) const;
};

// Pads `request` per `plan` into a dist_step.
dist_step make_dist_step(uint64_t id, const step_request& request, const step_plan& plan, int32_t vocab_size);

}  // namespace ds

// From wire messages to coordinator steps: the slots the gateway has registered (with each
// request's model context), a Step checked (check_step_shape, then its slots) and given its
// logits (the frame's payload, or the server's model), and group errors as wire errors.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <distsample/group.h>

#include "gateway/protocol.h"
#include "sources/logits_source.h"

namespace ds::gateway {

// Which slots are registered, by which connection, and each one's context for the server's model:
// its last two committed tokens (logits_source::next_context). Used from the dispatcher and
// completion threads.
class slot_table {
   public:
    explicit slot_table(int32_t max_slots) : slots_(static_cast<size_t>(max_slots)) {}

    // The lowest free slot >= 1, or 0 when every slot is taken.
    int32_t free_slot() const;
    // Registers `slot` for connection `owner`.
    void set(int32_t slot, const std::vector<int32_t>& history, uint64_t owner);
    // The open connection that registered the slot, or 0 (free, or its connection closed).
    uint64_t owner(int32_t slot) const;
    // The slots of connection `owner` stay registered, owned by none: another connection may
    // register them again (a scheduler that reconnects).
    void disown(uint64_t owner);
    // False when the slot was not registered.
    bool release(int32_t slot);
    bool registered(int32_t slot) const;
    uint64_t context(int32_t slot) const;
    // Changes with every registration and release of the slot.
    uint64_t generation(int32_t slot) const;
    // Appends emitted tokens to the context, unless the slot was registered again or released
    // since `generation` (a step in flight must not touch its successor's context).
    void commit(int32_t slot, uint64_t generation, const int32_t* tokens, int32_t count);
    int32_t registered_count() const;
    int32_t max_slots() const { return static_cast<int32_t>(slots_.size()); }

   private:
    struct entry {
        bool registered = false;
        uint64_t context = 0;
        uint64_t generation = 0;
        uint64_t owner = 0;
    };
    mutable std::mutex mutex_;
    std::vector<entry> slots_;
};

// A step ready for group::submit, with the memory its shards point into.
struct prepared_step {
    step_request request;
    std::shared_ptr<const wire::Request> frame;  // owns the payload logits, when there are any
    std::vector<float> model_logits;             // the server model's rows otherwise
    std::vector<uint64_t> generations;           // of each request's slot, for slot_table::commit
};

// Checks `frame`'s step (sample_step or verify_step) against the group's limits and the slot
// table (each slot registered, and once per step: check_distinct_slots), then fills the logits as
// `supplier` says: `model` (null unless supplier is frame_or_model) makes the rows a frame does
// not carry; the ranks' own model needs no shards. Returns false with a BAD_FIELD or UNKNOWN_SLOT
// error.
bool prepare_step(std::shared_ptr<const wire::Request> frame, const group_config& config, const slot_table& slots,
                  logits_supplier supplier, const logits_source* model, prepared_step& out, wire::Error& error);

// The error reply of a failed group call: invalid_argument -> BAD_FIELD naming the field (the
// message's leading name), timeout -> TIMEOUT, aborted or mismatch -> RANK_FAILURE.
wire::Error error_of(const status& s);

// Parameters from the wire; unset fields keep the neutral defaults.
sampling_params params_of(const wire::SamplingParams& p);

}  // namespace ds::gateway

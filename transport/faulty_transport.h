// A decorator that injects transport faults into any backend (docs/faults.md) and checks the payloads of
// the collectives whose result is a copy of what some rank sent.
//
// Faults are armed per step by the rank (from its fault plan): a delay before the step's first
// collective; a corruption that flips one bit of a peer's block in what this rank received from
// its first checked gather or broadcast (as a bad link or NIC would); one logit of this rank's
// shard raised after the model handed it in (alter_logit); this rank's payload of its first
// collective lost on the way (drop_put: the rank never joins it, its peers wait for it); a stale
// copy of a peer's previous payload arriving again in place of its fresh one (duplicate_put, on
// the receiving side).
//
// A rank that reaches its step's first collective more than the transport timeout after the step
// was armed (a kernel or transport delay, a stalled thread) fails that call at once instead of
// joining: its peers have given up on the collective by then, and a late put could land in the
// buffers of whatever they run next.
//
// Payload checksums (when enabled, on every rank of the group alike): after all_gather,
// gather_verify_outputs and broadcast, the ranks all-gather a checksum (core/digest.h) of what each sent,
// and each rank compares it with what it received; after swap_batch_vocab they all-gather one
// checksum per row of the shard as it was handed in, and each rank compares the slices it
// received. A difference fails the receiver's call with an `internal` status naming the sender,
// within the step. A duplicate with the same bytes as the fresh payload passes: it is harmless by
// design (the same bytes in the same place). all_reduce is not checked.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/wakeable_sleep.h"
#include "transport/transport.h"

namespace ds {

// The transport faults of one step, armed before its first collective.
struct armed_transport_faults {
    int32_t delay_ms = 0;  // sleep before the first collective
    bool corrupt = false;  // flip one bit (chosen from corrupt_seed) in the first checked gather
    uint64_t corrupt_seed = 0;
    bool alter_logit = false;     // raise row 0's first logit of the shard this rank sends
    int32_t drop_put_ms = 0;      // > 0: drop the first collective's payload and give up after this long
    int32_t stale_put_from = -1;  // a peer whose previous payload replaces its fresh one in the first checked gather
};

class faulty_transport final : public transport {
   public:
    // `transport_timeout`: how long the peers wait in a collective (transport_config::timeout).
    // The armed delays sleep on `delays` (a fresh one when null), so that a new fault plan can
    // wake the rank (core/wakeable_sleep.h).
    faulty_transport(transport& inner, bool checksums, std::chrono::milliseconds transport_timeout,
                     std::shared_ptr<wakeable_sleep> delays = nullptr);

    // At the start of each step, before anything that may delay it; `plan_epoch` is the delays'
    // epoch when the step read its plan: a wake after it ends the step's delays.
    void arm(const armed_transport_faults& faults, uint64_t plan_epoch = 0);

    int32_t rank() const override { return inner_.rank(); }
    int32_t world_size() const override { return inner_.world_size(); }
    bool swaps_device_logits() const override { return inner_.swaps_device_logits(); }
    status swap_batch_vocab(const logits_view& shard, int64_t first_row, int64_t row_count,
                            logits_view& full_rows) override;
    status gather_verify_outputs(const int32_t* block, std::size_t block_ints, int32_t* out) override;
    status all_gather(const void* in, std::size_t bytes, void* out) override;
    status all_reduce(uint64_t* data, std::size_t count, reduce_op op) override;
    status all_reduce(int64_t* data, std::size_t count, reduce_op op) override;
    status broadcast(void* data, std::size_t bytes, int32_t root) override;
    status barrier() override;
    void abort(const char* reason) override { inner_.abort(reason); }

   private:
    // Sleeps when a delay is armed; true (with `failed` the rank's failure) when this collective's
    // payload is to be dropped, or when it is the step's first and the rank is too late for it.
    bool before_collective(const char* what, status& failed);
    // Replaces (when armed) a peer's block with its stale copy, corrupts (when armed) and checks
    // `world_size` blocks of `bytes` each that ranks sent as `sent`.
    status check_gathered(const void* sent, std::size_t bytes, void* received, const char* what);
    // Checks the slices of `full_rows` (rows [first_row, first_row + row_count)) against the
    // senders' checksums of their shards' rows as handed in.
    status check_swapped(const logits_view& handed_in, int64_t first_row, const logits_view& full_rows);
    // A copy of `shard` with row 0's first logit raised to a value that dominates the row.
    logits_view altered_copy(const logits_view& shard);

    transport& inner_;
    bool checksums_;
    std::chrono::milliseconds transport_timeout_;
    std::shared_ptr<wakeable_sleep> delays_;
    uint64_t plan_epoch_ = 0;
    armed_transport_faults armed_;
    std::chrono::steady_clock::time_point armed_at_;
    bool awaiting_first_collective_ = false;    // armed, and no collective of the step entered yet
    std::vector<uint64_t> sent_sums_;           // one per rank, sized once
    std::vector<uint64_t> row_sums_;            // this rank's shard, one per row
    std::vector<uint64_t> gathered_row_sums_;   // every rank's row_sums_
    std::vector<unsigned char> altered_shard_;  // alter_logit's copy of the shard
    std::vector<unsigned char> last_received_;  // the previous checked gather, for duplicate_put
    std::size_t last_block_bytes_ = 0;
};

}  // namespace ds

// A decorator that injects transport faults into any backend (issue 7) and checks the payloads of
// the collectives whose result is a copy of what some rank sent.
//
// Faults are armed per step by the rank (from its fault plan): a delay before the step's first
// collective, and a corruption that flips one bit of a peer's block in what this rank received
// from its first checked collective (as a bad link or NIC would).
//
// Payload checksums (when enabled, on every rank of the group alike): after all_gather,
// gather_verify_outputs and broadcast, the ranks all-gather an FNV-1a checksum of what each sent,
// and each rank compares it with what it received; a difference fails the receiver's call with an
// `internal` status naming the sender, within the step. swap_batch_vocab and all_reduce are not
// checked.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/transport.h"

namespace ds {

class faulty_transport final : public transport {
   public:
    faulty_transport(transport& inner, bool checksums);

    // The faults of the next step: sleep `delay_ms` before its first collective; flip one bit
    // (chosen from `corrupt_seed`) in its first checked collective when `corrupt`.
    void arm(int32_t delay_ms, bool corrupt, uint64_t corrupt_seed);

    int32_t rank() const override { return inner_.rank(); }
    int32_t world_size() const override { return inner_.world_size(); }
    bool swaps_device_logits() const override { return inner_.swaps_device_logits(); }
    status swap_batch_vocab(const logits_view& shard, int64_t first_row, int64_t row_count, logits_view& full_rows) override;
    status gather_verify_outputs(const int32_t* block, std::size_t block_ints, int32_t* out) override;
    status all_gather(const void* in, std::size_t bytes, void* out) override;
    status all_reduce(uint64_t* data, std::size_t count, reduce_op op) override;
    status all_reduce(int64_t* data, std::size_t count, reduce_op op) override;
    status broadcast(void* data, std::size_t bytes, int32_t root) override;
    status barrier() override;
    void abort(const char* reason) override { inner_.abort(reason); }

   private:
    void delay_if_armed();
    // Corrupts (when armed) and checks `world_size` blocks of `bytes` each that ranks sent as `sent`.
    status check_gathered(const void* sent, std::size_t bytes, void* received, const char* what);

    transport& inner_;
    bool checksums_;
    int32_t delay_ms_ = 0;
    bool corrupt_ = false;
    uint64_t corrupt_seed_ = 0;
    std::vector<uint64_t> sent_sums_;  // one per rank, sized once
};

}  // namespace ds

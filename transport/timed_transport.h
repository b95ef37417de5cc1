// A decorator that forwards every call to another transport and adds up the time spent in it,
// so a rank can tell its own compute from waiting on and copying for its peers, and the bytes the
// calls bring this rank from its peers (what a network would carry, whatever the backend).
#pragma once

#include <chrono>

#include "transport/transport.h"

namespace ds {

class timed_transport final : public transport {
   public:
    explicit timed_transport(transport& inner) : inner_(inner) {}

    // Nanoseconds spent in collectives, and bytes received from peers, since the last reset.
    int64_t elapsed_ns() const { return elapsed_ns_; }
    int64_t received_bytes() const { return received_bytes_; }
    void reset() {
        elapsed_ns_ = 0;
        received_bytes_ = 0;
    }

    int32_t rank() const override { return inner_.rank(); }
    int32_t world_size() const override { return inner_.world_size(); }
    bool swaps_device_logits() const override { return inner_.swaps_device_logits(); }
    status swap_batch_vocab(const logits_view& shard, int64_t first_row, int64_t row_count,
                            logits_view& full_rows) override {
        // Every peer's vocab slice of the rows this rank takes.
        received(row_count * shard.vocab * static_cast<int64_t>(dtype_size(shard.dtype)));
        return timed([&] { return inner_.swap_batch_vocab(shard, first_row, row_count, full_rows); });
    }
    status gather_verify_outputs(const int32_t* block, std::size_t block_ints, int32_t* out) override {
        received(static_cast<int64_t>(block_ints * sizeof(int32_t)));
        return timed([&] { return inner_.gather_verify_outputs(block, block_ints, out); });
    }
    status all_gather(const void* in, std::size_t bytes, void* out) override {
        received(static_cast<int64_t>(bytes));
        return timed([&] { return inner_.all_gather(in, bytes, out); });
    }
    status all_reduce(uint64_t* data, std::size_t count, reduce_op op) override {
        received(static_cast<int64_t>(count * sizeof(uint64_t)));  // counted as an all-gather of the inputs
        return timed([&] { return inner_.all_reduce(data, count, op); });
    }
    status all_reduce(int64_t* data, std::size_t count, reduce_op op) override {
        received(static_cast<int64_t>(count * sizeof(int64_t)));
        return timed([&] { return inner_.all_reduce(data, count, op); });
    }
    status broadcast(void* data, std::size_t bytes, int32_t root) override {
        if (root != rank()) received_bytes_ += static_cast<int64_t>(bytes);
        return timed([&] { return inner_.broadcast(data, bytes, root); });
    }
    status barrier() override {
        return timed([&] { return inner_.barrier(); });
    }
    void abort(const char* reason) override { inner_.abort(reason); }

   private:
    // `bytes` from each peer.
    void received(int64_t bytes) { received_bytes_ += bytes * (world_size() - 1); }

    template <class Call>
    status timed(Call&& call) {
        const auto start = std::chrono::steady_clock::now();
        status s = call();
        elapsed_ns_ +=
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
        return s;
    }

    transport& inner_;
    int64_t elapsed_ns_ = 0;
    int64_t received_bytes_ = 0;
};

}  // namespace ds

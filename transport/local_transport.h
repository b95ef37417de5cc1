// The `local` transport: TP ranks as threads of one process, exchanging through shared memory.
// A local_group holds the shared state; each rank gets one local_endpoint. Data moves by each rank
// publishing a pointer, a barrier, every rank reading its peers' memory, and a second barrier
// (so nobody frees or overwrites what a peer is still reading).
//
// Buffers are allocated once at construction from the transport_config; every wait is bounded by
// its `timeout`; a timeout aborts the group so the other ranks wake up too.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/transport.h"
#include "transport/transport_group.h"

namespace ds {

class local_group;

class local_endpoint final : public transport {
   public:
    local_endpoint(local_group& group, int32_t rank);

    // The epoch this rank's next collectives belong to (set by the rank before a step).
    void set_epoch(uint64_t epoch) { epoch_ = epoch; }

    int32_t rank() const override { return rank_; }
    int32_t world_size() const override;

    status swap_batch_vocab(const logits_view& shard, int64_t first_row, int64_t row_count,
                            logits_view& full_rows) override;
    status gather_verify_outputs(const int32_t* block, std::size_t block_ints, int32_t* out) override;
    status all_gather(const void* in, std::size_t bytes, void* out) override;
    status all_reduce(uint64_t* data, std::size_t count, reduce_op op) override;
    status all_reduce(int64_t* data, std::size_t count, reduce_op op) override;
    status broadcast(void* data, std::size_t bytes, int32_t root) override;
    status barrier() override;
    void abort(const char* reason) override;

   private:
    template <class T>
    status reduce_impl(T* data, std::size_t count, reduce_op op);
    // Publishes `ptr`, waits for all, runs `read` (peers' pointers are valid), waits for all.
    template <class Read>
    status exchange(const void* ptr, Read&& read);

    local_group& group_;
    int32_t rank_;
    uint64_t epoch_ = 0;
    std::vector<unsigned char> swap_buffer_;        // max_swap_rows * V * 4 bytes
    std::vector<unsigned char> collective_buffer_;  // max_collective_bytes
};

class local_group final : public transport_group {
   public:
    explicit local_group(const transport_config& config);
    ~local_group() override;
    local_group(const local_group&) = delete;
    local_group& operator=(const local_group&) = delete;

    const transport_config& config() const { return config_; }
    int32_t world_size() const override { return config_.world_size; }
    const char* backend_name() const override { return "local"; }
    local_endpoint& endpoint(int32_t rank) override;
    void enter_epoch(int32_t rank, uint64_t epoch) override;

    void abort(const std::string& reason) override;
    // Also clears the barrier state; calls still waiting in an older epoch fail.
    void begin_epoch(uint64_t epoch) override;
    std::vector<int32_t> missing_ranks() override;

   private:
    friend class local_endpoint;

    // Waits until every rank of `epoch` has arrived (generation barrier).
    status arrive_and_wait(uint64_t epoch, int32_t rank);

    transport_config config_;
    std::vector<std::unique_ptr<local_endpoint>> endpoints_;
    std::vector<const void*> published_;  // per rank: what the current collective exposes

    std::mutex mutex_;
    std::condition_variable wake_;
    uint64_t epoch_ = 0;
    std::atomic<uint64_t> generation_{0};  // written under mutex_, also read while spinning
    int32_t arrived_ = 0;
    std::vector<uint8_t> waiting_;  // per rank: arrived at the current barrier
    bool aborted_ = false;
    std::string abort_reason_;
};

}  // namespace ds

#include "transport/local_transport.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace ds {

namespace {

constexpr int kSpinRounds = 100;

}  // namespace

local_group::local_group(const transport_config& config)
    : config_(config),
      published_(static_cast<size_t>(std::max(1, config.world_size)), nullptr),
      waiting_(static_cast<size_t>(std::max(1, config.world_size)), 0) {
    for (int32_t r = 0; r < config.world_size; ++r) endpoints_.push_back(std::make_unique<local_endpoint>(*this, r));
}

local_group::~local_group() = default;

local_endpoint& local_group::endpoint(int32_t rank) { return *endpoints_.at(static_cast<size_t>(rank)); }

void local_group::enter_epoch(int32_t rank, uint64_t epoch) { endpoint(rank).set_epoch(epoch); }

void local_group::abort(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!aborted_) {
        aborted_ = true;
        abort_reason_ = reason;
    }
    wake_.notify_all();
}

void local_group::begin_epoch(uint64_t epoch) {
    std::lock_guard<std::mutex> lock(mutex_);
    epoch_ = epoch;
    aborted_ = false;
    abort_reason_.clear();
    arrived_ = 0;
    std::fill(waiting_.begin(), waiting_.end(), 0);
    ++generation_;
    wake_.notify_all();
}

std::vector<int32_t> local_group::missing_ranks() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<int32_t> missing;
    if (arrived_ == 0) return missing;
    for (int32_t r = 0; r < config_.world_size; ++r) {
        if (!waiting_[static_cast<size_t>(r)]) missing.push_back(r);
    }
    return missing;
}

status local_group::arrive_and_wait(uint64_t epoch, int32_t rank) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto stale = [&] {
        return status{
            status_code::aborted,
            fmt::format("rank {}: collective of a finished step (epoch {}, group at {})", rank, epoch, epoch_)};
    };
    auto failed = [&] {
        return status{status_code::aborted, fmt::format("rank {}: transport aborted: {}", rank, abort_reason_)};
    };
    if (epoch != epoch_) return stale();
    if (aborted_) return failed();
    const uint64_t generation = generation_;
    waiting_[static_cast<size_t>(rank)] = 1;
    if (++arrived_ == config_.world_size) {
        arrived_ = 0;
        std::fill(waiting_.begin(), waiting_.end(), 0);
        ++generation_;
        wake_.notify_all();
        return status::success();
    }
    // Peers usually arrive within microseconds: yield-spin briefly before sleeping, because a
    // condition-variable wake-up costs tens of microseconds per rank.
    lock.unlock();
    for (int spin = 0; spin < kSpinRounds && generation_.load(std::memory_order_acquire) == generation; ++spin) {
        std::this_thread::yield();
    }
    lock.lock();
    wake_.wait_for(lock, config_.timeout, [&] { return generation_ != generation || aborted_ || epoch_ != epoch; });
    // Check the epoch first: begin_epoch also bumps the generation.
    if (epoch != epoch_) return stale();
    if (generation_ != generation) return status::success();
    if (aborted_) return failed();
    // Timed out: poison the group so the ranks that did arrive stop waiting as well.
    std::string missing;
    for (int32_t r = 0; r < config_.world_size; ++r) {
        if (!waiting_[static_cast<size_t>(r)]) missing += fmt::format("{}rank {}", missing.empty() ? "" : ", ", r);
    }
    aborted_ = true;
    abort_reason_ = fmt::format("rank {} waited {} ms in a collective for {}", rank, config_.timeout.count(), missing);
    wake_.notify_all();
    return {status_code::timeout, abort_reason_};
}

local_endpoint::local_endpoint(local_group& group, int32_t rank)
    : group_(group),
      rank_(rank),
      swap_buffer_(static_cast<size_t>(group.config_.max_swap_rows) * static_cast<size_t>(group.config_.vocab_size) *
                   4),
      collective_buffer_(group.config_.max_collective_bytes) {}

int32_t local_endpoint::world_size() const { return group_.config_.world_size; }

void local_endpoint::abort(const char* reason) { group_.abort(reason); }

template <class Read>
status local_endpoint::exchange(const void* ptr, Read&& read) {
    group_.published_[static_cast<size_t>(rank_)] = ptr;
    status s = group_.arrive_and_wait(epoch_, rank_);
    if (!s.is_ok()) return s;
    read(group_.published_);
    return group_.arrive_and_wait(epoch_, rank_);
}

status local_endpoint::swap_batch_vocab(const logits_view& shard, int64_t first_row, int64_t row_count,
                                        logits_view& full_rows) {
    const int32_t world = world_size();
    const int32_t vocab = group_.config_.vocab_size;
    const int32_t shard_vocab = vocab / world;
    if (status s = check_swap_shape(group_.config_, shard, first_row, row_count); !s.is_ok()) return s;
    const size_t element = dtype_size(shard.dtype);
    const size_t slice_bytes = static_cast<size_t>(shard_vocab) * element;
    unsigned char* dst = swap_buffer_.data();
    status s = exchange(&shard, [&](const std::vector<const void*>& peers) {
        for (int32_t peer = 0; peer < world; ++peer) {
            const logits_view& src = *static_cast<const logits_view*>(peers[static_cast<size_t>(peer)]);
            for (int64_t i = 0; i < row_count; ++i) {
                const int64_t row = first_row + i;
                unsigned char* out = dst + (static_cast<size_t>(i) * static_cast<size_t>(vocab) +
                                            static_cast<size_t>(peer) * shard_vocab) *
                                               element;
                if (row < src.rows) {
                    const auto* in = static_cast<const unsigned char*>(src.data) +
                                     static_cast<size_t>(row * src.row_stride) * element;
                    std::memcpy(out, in, slice_bytes);
                } else {
                    std::memset(out, 0, slice_bytes);  // phantom row: zeros (slot 0 decodes it greedily)
                }
            }
        }
    });
    if (!s.is_ok()) return s;
    full_rows = logits_view{dst, shard.dtype, row_count, vocab, vocab};
    return status::success();
}

status local_endpoint::all_gather(const void* in, std::size_t bytes, void* out) {
    return exchange(in, [&](const std::vector<const void*>& peers) {
        for (size_t peer = 0; peer < peers.size(); ++peer) {
            std::memcpy(static_cast<unsigned char*>(out) + peer * bytes, peers[peer], bytes);
        }
    });
}

status local_endpoint::gather_verify_outputs(const int32_t* block, std::size_t block_ints, int32_t* out) {
    return all_gather(block, block_ints * sizeof(int32_t), out);
}

template <class T>
status local_endpoint::reduce_impl(T* data, std::size_t count, reduce_op op) {
    const size_t bytes = count * sizeof(T);
    if (status s = check_collective_size(group_.config_, bytes, "all_reduce"); !s.is_ok()) return s;
    T* result = reinterpret_cast<T*>(collective_buffer_.data());
    status s = exchange(data, [&](const std::vector<const void*>& peers) {
        // Every rank reduces in rank order, so all get the same values.
        std::memcpy(result, peers[0], bytes);
        for (size_t peer = 1; peer < peers.size(); ++peer) {
            const T* other = static_cast<const T*>(peers[peer]);
            if (op == reduce_op::sum) {
                for (size_t i = 0; i < count; ++i) result[i] += other[i];
            } else {
                for (size_t i = 0; i < count; ++i) result[i] = std::max(result[i], other[i]);
            }
        }
    });
    if (!s.is_ok()) return s;
    std::memcpy(data, result, bytes);
    return status::success();
}

status local_endpoint::all_reduce(uint64_t* data, std::size_t count, reduce_op op) {
    return reduce_impl(data, count, op);
}
status local_endpoint::all_reduce(int64_t* data, std::size_t count, reduce_op op) {
    return reduce_impl(data, count, op);
}

status local_endpoint::broadcast(void* data, std::size_t bytes, int32_t root) {
    if (root < 0 || root >= world_size()) {
        return status::invalid(fmt::format("broadcast root = {}: expected a rank in [0, {})", root, world_size()));
    }
    if (status s = check_collective_size(group_.config_, bytes, "broadcast"); !s.is_ok()) return s;
    unsigned char* staging = collective_buffer_.data();
    status s = exchange(data, [&](const std::vector<const void*>& peers) {
        std::memcpy(staging, peers[static_cast<size_t>(root)], bytes);
    });
    if (!s.is_ok()) return s;
    if (rank_ != root) std::memcpy(data, staging, bytes);
    return status::success();
}

status local_endpoint::barrier() { return group_.arrive_and_wait(epoch_, rank_); }

}  // namespace ds

#include "transport/ucx/ucx_transport.h"

#include <fmt/format.h>
#include <poll.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "transport/remote_swap.h"
#include "transport/ucx/ucx_resources.h"

namespace ds {

namespace {

using clock = std::chrono::steady_clock;

// Checking the clock costs more than a progress call that finds nothing: look every so often.
constexpr int kProgressPerClockCheck = 64;
// Idle progress calls before a waiter sleeps on the worker's event descriptor: ranks usually
// answer within microseconds, but spinning ranks starve each other when they outnumber the cores.
constexpr int kBusySpins = 2000;
// The longest such sleep, so that abort() and the deadline are seen promptly.
constexpr int kSleepMs = 1;

// Every so many spins while busy-polling; every time once the waiter sleeps between polls.
bool time_to_check(int spin) { return spin % kProgressPerClockCheck == 0 || spin > kBusySpins; }

}  // namespace

void ucx_endpoint::abort(const char* reason) {
    (void)failure_.fail(status_code::aborted, fmt::format("rank {}: transport aborted: {}", rank_, reason));
}

status ucx_endpoint::put(int32_t peer, const void* data, std::size_t bytes, region to, std::size_t remote_offset,
                         bool from_device) {
    resources& u = *ucx_;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE;  // saves UCX looking the pointer up
    param.memory_type = from_device ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    const auto i = static_cast<size_t>(to);
    void* request = ucp_put_nbx(u.eps[static_cast<size_t>(peer)], data, bytes,
                                u.remote_base[i][static_cast<size_t>(peer)] + remote_offset,
                                u.rkeys[i][static_cast<size_t>(peer)], &param);
    if (UCS_PTR_IS_ERR(request)) {
        return failure_.fail(status_code::aborted, fmt::format("rank {}: put to rank {} failed: {}", rank_, peer,
                                                               ucs_status_string(UCS_PTR_STATUS(request))));
    }
    // The flush that follows completes it; the request is released on completion.
    if (request != nullptr) ucp_request_free(request);
    return status::success();
}

void ucx_endpoint::progress(int spins, bool sleep_when_idle) {
    resources& u = *ucx_;
    if (ucp_worker_progress(u.worker) != 0 || spins < kBusySpins) return;
    // Sending (flush) needs this thread as soon as the socket takes more: only yield the core.
    if (!sleep_when_idle) {
        std::this_thread::yield();
        return;
    }
    // Arm the worker (UCS_ERR_BUSY: events are already pending) and sleep until it has work.
    if (ucp_worker_arm(u.worker) == UCS_OK) {
        pollfd wake{u.event_fd, POLLIN, 0};
        ::poll(&wake, 1, kSleepMs);
    }
}

// One flush request per peer rather than the worker's one: when the deadline passes, the peers
// still holding this rank's puts unacknowledged are the ones to name (a peer that stopped
// progressing its worker, e.g. one that never entered the collective).
status ucx_endpoint::flush(const char* what) {
    resources& u = *ucx_;
    const int32_t world = config_.world_size;
    std::vector<void*>& pending = u.flush_requests;
    int32_t outstanding = 0;
    int32_t refused_peer = -1;  // a peer whose flush failed outright
    ucs_status_t refusal = UCS_OK;
    for (int32_t peer = 0; peer < world; ++peer) {
        pending[static_cast<size_t>(peer)] = nullptr;
        if (peer == rank_) continue;
        ucp_request_param_t param{};
        void* request = ucp_ep_flush_nbx(u.eps[static_cast<size_t>(peer)], &param);
        if (UCS_PTR_IS_PTR(request)) {
            pending[static_cast<size_t>(peer)] = request;
            ++outstanding;
        } else if (UCS_PTR_STATUS(request) != UCS_OK && refused_peer < 0) {
            refused_peer = peer;
            refusal = UCS_PTR_STATUS(request);
        }
    }
    const auto deadline = clock::now() + config_.timeout;
    for (int spin = 0; outstanding > 0 && refused_peer < 0; ++spin) {
        progress(spin, false);
        for (int32_t peer = 0; peer < world; ++peer) {
            void*& request = pending[static_cast<size_t>(peer)];
            if (request == nullptr) continue;
            const ucs_status_t result = ucp_request_check_status(request);
            if (result == UCS_INPROGRESS) continue;
            ucp_request_free(request);
            request = nullptr;
            --outstanding;
            if (result != UCS_OK) {
                refused_peer = peer;
                refusal = result;
            }
        }
        // A dead peer never acknowledges: its puts would hold the flush until the deadline.
        if (failure_.failed() || failed_peer() >= 0) break;
        if (time_to_check(spin) && clock::now() > deadline) break;
    }
    std::string unacknowledged;
    for (int32_t peer = 0; peer < world; ++peer) {
        void*& request = pending[static_cast<size_t>(peer)];
        if (request == nullptr) continue;
        unacknowledged += fmt::format("{}rank {}", unacknowledged.empty() ? "" : ", ", peer);
        ucp_request_free(request);  // released when it completes
        request = nullptr;
    }
    if (unacknowledged.empty() && refused_peer < 0) return status::success();
    if (status s = failure_.get(); !s.is_ok()) return s;
    if (const int32_t peer = failed_peer(); peer >= 0) return fail_for_peer(peer, what);
    if (refused_peer >= 0) {
        return failure_.fail(status_code::aborted, fmt::format("rank {}: {}: flushing puts to rank {} failed: {}",
                                                               rank_, what, refused_peer, ucs_status_string(refusal)));
    }
    return failure_.fail(status_code::timeout,
                         fmt::format("rank {}: {}: {} did not acknowledge this rank's puts within {} ms", rank_, what,
                                     unacknowledged, config_.timeout.count()));
}

int32_t ucx_endpoint::failed_peer() const {
    const std::vector<ucs_status_t>& peers = ucx_->peer_status;
    const auto found = std::find_if(peers.begin(), peers.end(), [](ucs_status_t st) { return st != UCS_OK; });
    return found == peers.end() ? -1 : static_cast<int32_t>(found - peers.begin());
}

status ucx_endpoint::fail_for_peer(int32_t peer, const char* what) {
    return failure_.fail(status_code::aborted,
                         fmt::format("rank {}: {}: rank {} failed ({})", rank_, what, peer,
                                     ucs_status_string(ucx_->peer_status[static_cast<size_t>(peer)])));
}

status ucx_endpoint::wait_for_flags(uint64_t sequence, const char* what) {
    resources& u = *ucx_;
    const int32_t world = config_.world_size;
    const auto* flags = reinterpret_cast<const uint64_t*>(control_at(flag_offset(0)));
    auto arrived = [&](int32_t peer) { return __atomic_load_n(&flags[peer], __ATOMIC_ACQUIRE) >= sequence; };
    const auto deadline = clock::now() + config_.timeout;
    for (int spin = 0;; ++spin) {
        bool all = true;
        for (int32_t peer = 0; peer < world && all; ++peer) all = peer == rank_ || arrived(peer);
        if (all) return status::success();
        if (status s = failure_.get(); !s.is_ok()) return s;
        // A failed peer only matters while its flag is missing (a peer that finished may leave).
        for (int32_t peer = 0; peer < world; ++peer) {
            if (peer != rank_ && u.peer_status[static_cast<size_t>(peer)] != UCS_OK && !arrived(peer)) {
                return fail_for_peer(peer, what);
            }
        }
        if (time_to_check(spin) && clock::now() > deadline) {
            std::string missing;
            for (int32_t peer = 0; peer < world; ++peer) {
                if (peer != rank_ && !arrived(peer))
                    missing += fmt::format("{}rank {}", missing.empty() ? "" : ", ", peer);
            }
            return failure_.fail(status_code::timeout, fmt::format("rank {} waited {} ms in {} for {}", rank_,
                                                                   config_.timeout.count(), what, missing));
        }
        progress(spin, true);
    }
}

void ucx_endpoint::set_epoch(uint64_t epoch) {
    if (epoch == epoch_) return;
    epoch_ = epoch;
    sequence_ = epoch << 32;
    if (failed_peer() >= 0) return;
    failure_.clear();
}

template <class IssuePuts>
status ucx_endpoint::collective(const char* what, IssuePuts&& issue_puts) {
    if (status s = failure_.get(); !s.is_ok()) return s;
    in_collective_.store(true, std::memory_order_release);
    struct leave_collective {
        std::atomic<bool>& flag;
        ~leave_collective() { flag.store(false, std::memory_order_release); }
    } leave{in_collective_};
    const uint64_t sequence = ++sequence_;
    const uint64_t parity = sequence & 1;
    if (status s = issue_puts(parity); !s.is_ok()) return s;
    // Remote completion of the data (and of the previous call's flags) before this call's flag.
    if (status s = flush(what); !s.is_ok()) return s;
    flag_source_[parity] = sequence;
    for (int32_t peer = 0; peer < config_.world_size; ++peer) {
        if (peer == rank_) continue;
        if (status s = put(peer, &flag_source_[parity], sizeof(uint64_t), region::control, flag_offset(rank_));
            !s.is_ok())
            return s;
    }
    return wait_for_flags(sequence, what);
}

status ucx_endpoint::all_gather(const void* in, std::size_t bytes, void* out) {
    if (status s = check_collective_size(config_, bytes, "all_gather"); !s.is_ok()) return s;
    status s = collective("all_gather", [&](uint64_t parity) {
        for (int32_t peer = 0; peer < config_.world_size; ++peer) {
            if (peer == rank_) continue;
            if (status p = put(peer, in, bytes, region::control, collective_offset(parity, rank_)); !p.is_ok())
                return p;
        }
        return status::success();
    });
    if (!s.is_ok()) return s;
    const uint64_t parity = sequence_ & 1;
    for (int32_t source = 0; source < config_.world_size; ++source) {
        const void* from = source == rank_ ? in : control_at(collective_offset(parity, source));
        std::memcpy(static_cast<unsigned char*>(out) + static_cast<std::size_t>(source) * bytes, from, bytes);
    }
    return status::success();
}

status ucx_endpoint::gather_verify_outputs(const int32_t* block, std::size_t block_ints, int32_t* out) {
    return all_gather(block, block_ints * sizeof(int32_t), out);
}

template <class T>
status ucx_endpoint::reduce_impl(T* data, std::size_t count, reduce_op op) {
    const std::size_t bytes = count * sizeof(T);
    if (status s = check_collective_size(config_, bytes, "all_reduce"); !s.is_ok()) return s;
    status s = collective("all_reduce", [&](uint64_t parity) {
        for (int32_t peer = 0; peer < config_.world_size; ++peer) {
            if (peer == rank_) continue;
            if (status p = put(peer, data, bytes, region::control, collective_offset(parity, rank_)); !p.is_ok())
                return p;
        }
        return status::success();
    });
    if (!s.is_ok()) return s;
    const uint64_t parity = sequence_ & 1;
    // Every rank reduces in rank order, element by element, so all get the same values.
    for (std::size_t i = 0; i < count; ++i) {
        T result{};
        for (int32_t source = 0; source < config_.world_size; ++source) {
            T value;
            if (source == rank_) {
                value = data[i];
            } else {
                std::memcpy(&value, control_at(collective_offset(parity, source) + i * sizeof(T)), sizeof(T));
            }
            result = source == 0            ? value
                     : op == reduce_op::sum ? static_cast<T>(result + value)
                                            : std::max(result, value);
        }
        data[i] = result;
    }
    return status::success();
}

status ucx_endpoint::all_reduce(uint64_t* data, std::size_t count, reduce_op op) {
    return reduce_impl(data, count, op);
}
status ucx_endpoint::all_reduce(int64_t* data, std::size_t count, reduce_op op) { return reduce_impl(data, count, op); }

status ucx_endpoint::broadcast(void* data, std::size_t bytes, int32_t root) {
    if (root < 0 || root >= config_.world_size) {
        return status::invalid(
            fmt::format("broadcast root = {}: expected a rank in [0, {})", root, config_.world_size));
    }
    if (status s = check_collective_size(config_, bytes, "broadcast"); !s.is_ok()) return s;
    status s = collective("broadcast", [&](uint64_t parity) {
        for (int32_t peer = 0; rank_ == root && peer < config_.world_size; ++peer) {
            if (peer == rank_) continue;
            if (status p = put(peer, data, bytes, region::control, collective_offset(parity, root)); !p.is_ok())
                return p;
        }
        return status::success();
    });
    if (!s.is_ok()) return s;
    if (rank_ != root) std::memcpy(data, control_at(collective_offset(sequence_ & 1, root)), bytes);
    return status::success();
}

status ucx_endpoint::barrier() {
    return collective("barrier", [](uint64_t) { return status::success(); });
}

status ucx_endpoint::swap_batch_vocab(const logits_view& shard, int64_t first_row, int64_t row_count,
                                      logits_view& full_rows) {
    const int32_t world = config_.world_size;
    const int32_t vocab = config_.vocab_size;
    const int32_t shard_vocab = vocab / world;
    if (status s = check_swap_shape(config_, shard, first_row, row_count); !s.is_ok()) return s;
    const bool device = swaps_device_logits();
    if (shard.on_device != device) {
        return {status_code::unsupported,
                fmt::format("ucx transport: logits.on_device = {}: this endpoint swaps {} memory (ucx_device_memory "
                            "resolved to {})",
                            shard.on_device, device ? "device" : "host", ucx_memory_path_name(memory_path_))};
    }
    std::vector<swap_request>& requests = ucx_->swap_requests;
    const swap_request mine = swap_request::of(shard, first_row, row_count);
    if (status s = all_gather(&mine, sizeof mine, requests.data()); !s.is_ok()) return s;
    if (status s = check_swap_requests(requests, mine, rank_); !s.is_ok()) return s;
    const std::size_t element = dtype_size(shard.dtype);
    const std::size_t slice_bytes = static_cast<std::size_t>(shard_vocab) * element;
    auto source_row = [&](int64_t row) {
        return static_cast<const unsigned char*>(shard.data) +
               static_cast<std::size_t>(row * shard.row_stride) * element;
    };
    auto slice_offset = [&](int64_t row_in_block, int32_t slice) {
        return (static_cast<std::size_t>(row_in_block) * static_cast<std::size_t>(vocab) +
                static_cast<std::size_t>(slice) * shard_vocab) *
               element;
    };
    status s = collective("swap_batch_vocab", [&](uint64_t parity) {
        for (int32_t peer = 0; peer < world; ++peer) {
            if (peer == rank_) continue;
            const swap_request& theirs = requests[static_cast<size_t>(peer)];
            // Phantom rows (past the real ones) are not sent: the receiver zeroes them.
            for (int64_t i = 0; i < theirs.real_requested_rows(); ++i) {
                if (status p = put(peer, source_row(theirs.first_row + i), slice_bytes, region::swap,
                                   swap_offset(parity) + slice_offset(i, rank_), device);
                    !p.is_ok()) {
                    return p;
                }
            }
        }
        return status::success();
    });
    if (!s.is_ok()) return s;
    // Local writes only after the wait: a late put of an aborted call can no longer land here.
    // This rank's own slice of its real rows, then zeros for the phantom rows (all past them).
    unsigned char* rows = swap_base_ + swap_offset(sequence_ & 1);
    const int64_t real_rows = std::clamp<int64_t>(shard.rows - first_row, 0, row_count);
    unsigned char* phantom = rows + slice_offset(real_rows, 0);
    const std::size_t phantom_bytes =
        static_cast<std::size_t>(row_count - real_rows) * static_cast<std::size_t>(vocab) * element;
    if (device) {
        s = copy_rows(rows + slice_offset(0, rank_), static_cast<std::size_t>(vocab) * element, source_row(first_row),
                      static_cast<std::size_t>(shard.row_stride) * element, slice_bytes,
                      static_cast<std::size_t>(real_rows));
        if (s.is_ok()) s = zero_device_bytes(phantom, phantom_bytes);
        if (!s.is_ok()) return failure_.fail(s.code, fmt::format("rank {}: swap_batch_vocab: {}", rank_, s.message));
    } else {
        for (int64_t i = 0; i < real_rows; ++i)
            std::memcpy(rows + slice_offset(i, rank_), source_row(first_row + i), slice_bytes);
        std::memset(phantom, 0, phantom_bytes);
    }
    full_rows = logits_view{rows, shard.dtype, row_count, vocab, vocab, device};
    return status::success();
}

}  // namespace ds

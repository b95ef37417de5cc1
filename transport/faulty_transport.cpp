#include "transport/faulty_transport.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/digest.h"

namespace ds {

namespace {

// 10000 in each dtype: far above any real logit, so the altered token dominates its row.
void write_dominant_logit(void* element, logits_dtype dtype) {
    switch (dtype) {
        case logits_dtype::f32: {
            const float value = 10000.0f;
            std::memcpy(element, &value, sizeof value);
            return;
        }
        case logits_dtype::bf16: {
            const uint16_t bits = 0x461c;  // 9984
            std::memcpy(element, &bits, sizeof bits);
            return;
        }
        case logits_dtype::f16: {
            const uint16_t bits = 0x70e2;  // 10000
            std::memcpy(element, &bits, sizeof bits);
            return;
        }
    }
}

}  // namespace

faulty_transport::faulty_transport(transport& inner, bool checksums, std::chrono::milliseconds transport_timeout,
                                   std::shared_ptr<wakeable_sleep> delays)
    : inner_(inner),
      checksums_(checksums),
      transport_timeout_(transport_timeout),
      delays_(delays ? std::move(delays) : std::make_shared<wakeable_sleep>()),
      sent_sums_(static_cast<std::size_t>(inner.world_size())) {}

void faulty_transport::arm(const armed_transport_faults& faults, uint64_t plan_epoch) {
    armed_ = faults;
    plan_epoch_ = plan_epoch;
    armed_at_ = std::chrono::steady_clock::now();
    awaiting_first_collective_ = true;
}

bool faulty_transport::before_collective(const char* what, status& failed) {
    if (armed_.delay_ms > 0) {
        delays_->sleep_for(std::chrono::milliseconds(armed_.delay_ms), plan_epoch_);
        armed_.delay_ms = 0;
    }
    if (awaiting_first_collective_) {
        awaiting_first_collective_ = false;
        const auto late =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - armed_at_);
        if (late > transport_timeout_) {
            armed_ = armed_transport_faults{};
            failed = {status_code::timeout,
                      fmt::format("rank {}: reached {} {} ms into its step, past the transport timeout ({} ms) "
                                  "after which its peers gave up on it: not joined",
                                  inner_.rank(), what, late.count(), transport_timeout_.count())};
            return true;
        }
    }
    if (armed_.drop_put_ms <= 0) return false;
    // The payload is lost: this rank never joins the collective, so its peers wait for it until
    // the coordinator's step timeout names it; the rank gives up when its own wait would have.
    delays_->sleep_for(std::chrono::milliseconds(armed_.drop_put_ms), plan_epoch_);
    armed_.drop_put_ms = 0;
    failed = {status_code::timeout,
              fmt::format("rank {}: its payload in {} was dropped; no peer answered", inner_.rank(), what)};
    return true;
}

status faulty_transport::check_gathered(const void* sent, std::size_t bytes, void* received, const char* what) {
    const int32_t world = inner_.world_size();
    auto* blocks = static_cast<unsigned char*>(received);
    if (armed_.stale_put_from >= 0 && armed_.stale_put_from < world && bytes > 0) {
        // The peer's previous payload, delivered again, lands over its fresh one.
        const auto peer = static_cast<std::size_t>(armed_.stale_put_from);
        armed_.stale_put_from = -1;
        if (last_block_bytes_ > 0)
            std::memcpy(blocks + peer * bytes, last_received_.data() + peer * last_block_bytes_,
                        std::min(bytes, last_block_bytes_));
    }
    if (armed_.corrupt && world > 1 && bytes > 0) {
        armed_.corrupt = false;
        const auto peer = static_cast<std::size_t>((inner_.rank() + 1) % world);
        const uint64_t bit = armed_.corrupt_seed % (bytes * 8);
        blocks[peer * bytes + bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    }
    last_received_.assign(blocks, blocks + bytes * static_cast<std::size_t>(world));
    last_block_bytes_ = bytes;
    if (!checksums_) return status::success();
    const uint64_t mine = digest_bytes(sent, bytes);
    if (status s = inner_.all_gather(&mine, sizeof mine, sent_sums_.data()); !s.is_ok()) return s;
    for (int32_t r = 0; r < world; ++r) {
        if (digest_bytes(blocks + static_cast<std::size_t>(r) * bytes, bytes) == sent_sums_[static_cast<std::size_t>(r)])
            continue;
        return {status_code::internal, fmt::format("the payload from rank {} failed its checksum in {}", r, what)};
    }
    return status::success();
}

logits_view faulty_transport::altered_copy(const logits_view& shard) {
    if (shard.rows == 0 || shard.vocab == 0) return shard;
    const std::size_t element = dtype_size(shard.dtype);
    // A shard's rows are strided views into the full rows: the last one ends after `vocab` values.
    const std::size_t bytes = (static_cast<std::size_t>(shard.rows - 1) * static_cast<std::size_t>(shard.row_stride) +
                               static_cast<std::size_t>(shard.vocab)) *
                              element;
    const auto* data = static_cast<const unsigned char*>(shard.data);
    altered_shard_.assign(data, data + bytes);
    write_dominant_logit(altered_shard_.data(), shard.dtype);
    logits_view altered = shard;
    altered.data = altered_shard_.data();
    return altered;
}

status faulty_transport::check_swapped(const logits_view& handed_in, int64_t first_row, const logits_view& full_rows) {
    const int32_t world = inner_.world_size();
    const std::size_t element = dtype_size(handed_in.dtype);
    const std::size_t slice_bytes = static_cast<std::size_t>(handed_in.vocab) * element;
    const auto rows = static_cast<std::size_t>(handed_in.rows);
    const auto* data = static_cast<const unsigned char*>(handed_in.data);
    row_sums_.resize(rows);
    for (std::size_t row = 0; row < rows; ++row) {
        row_sums_[row] = digest_bytes(data + row * static_cast<std::size_t>(handed_in.row_stride) * element, slice_bytes);
    }
    gathered_row_sums_.resize(rows * static_cast<std::size_t>(world));
    if (rows == 0) return status::success();
    if (status s = inner_.all_gather(row_sums_.data(), rows * sizeof(uint64_t), gathered_row_sums_.data()); !s.is_ok())
        return s;
    const auto* received = static_cast<const unsigned char*>(full_rows.data);
    for (int64_t i = 0; i < full_rows.rows && first_row + i < handed_in.rows; ++i) {
        const auto row = static_cast<std::size_t>(first_row + i);
        for (int32_t peer = 0; peer < world; ++peer) {
            const unsigned char* slice =
                received + (static_cast<std::size_t>(i) * static_cast<std::size_t>(full_rows.row_stride) +
                            static_cast<std::size_t>(peer) * static_cast<std::size_t>(handed_in.vocab)) *
                               element;
            if (digest_bytes(slice, slice_bytes) == gathered_row_sums_[static_cast<std::size_t>(peer) * rows + row]) continue;
            return {status_code::internal, fmt::format("the logits from rank {} (row {}) differ from its shard as "
                                                       "handed in: checksum failed in swap_batch_vocab",
                                                       peer, row)};
        }
    }
    return status::success();
}

status faulty_transport::swap_batch_vocab(const logits_view& shard, int64_t first_row, int64_t row_count,
                                          logits_view& full_rows) {
    status failed;
    if (before_collective("swap_batch_vocab", failed)) return failed;
    const bool alter = armed_.alter_logit;
    armed_.alter_logit = false;
    // Both read and write the logits on the host.
    if (shard.on_device && (alter || checksums_)) {
        return {status_code::unsupported,
                fmt::format("{} with device logits (a transport that swaps device memory): not supported",
                            alter ? "the alter_logit fault" : "faults.payload_checksums")};
    }
    if (status s = inner_.swap_batch_vocab(alter ? altered_copy(shard) : shard, first_row, row_count, full_rows);
        !s.is_ok())
        return s;
    return checksums_ ? check_swapped(shard, first_row, full_rows) : status::success();
}

status faulty_transport::gather_verify_outputs(const int32_t* block, std::size_t block_ints, int32_t* out) {
    status failed;
    if (before_collective("gather_verify_outputs", failed)) return failed;
    if (status s = inner_.gather_verify_outputs(block, block_ints, out); !s.is_ok()) return s;
    return check_gathered(block, block_ints * sizeof(int32_t), out, "gather_verify_outputs");
}

status faulty_transport::all_gather(const void* in, std::size_t bytes, void* out) {
    status failed;
    if (before_collective("all_gather", failed)) return failed;
    if (status s = inner_.all_gather(in, bytes, out); !s.is_ok()) return s;
    return check_gathered(in, bytes, out, "all_gather");
}

status faulty_transport::all_reduce(uint64_t* data, std::size_t count, reduce_op op) {
    status failed;
    if (before_collective("all_reduce", failed)) return failed;
    return inner_.all_reduce(data, count, op);
}

status faulty_transport::all_reduce(int64_t* data, std::size_t count, reduce_op op) {
    status failed;
    if (before_collective("all_reduce", failed)) return failed;
    return inner_.all_reduce(data, count, op);
}

status faulty_transport::broadcast(void* data, std::size_t bytes, int32_t root) {
    status failed;
    if (before_collective("broadcast", failed)) return failed;
    if (status s = inner_.broadcast(data, bytes, root); !s.is_ok()) return s;
    if (armed_.corrupt && inner_.rank() != root && bytes > 0) {
        armed_.corrupt = false;
        const uint64_t bit = armed_.corrupt_seed % (bytes * 8);
        static_cast<unsigned char*>(data)[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    }
    if (!checksums_) return status::success();
    // The root's checksum is what everyone should hold.
    const uint64_t mine = digest_bytes(data, bytes);
    if (status s = inner_.all_gather(&mine, sizeof mine, sent_sums_.data()); !s.is_ok()) return s;
    if (mine != sent_sums_[static_cast<std::size_t>(root)]) {
        return {status_code::internal, fmt::format("the payload from rank {} failed its checksum in broadcast", root)};
    }
    return status::success();
}

status faulty_transport::barrier() {
    status failed;
    if (before_collective("barrier", failed)) return failed;
    return inner_.barrier();
}

}  // namespace ds

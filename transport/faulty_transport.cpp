#include "transport/faulty_transport.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

namespace ds {

namespace {

uint64_t fnv1a(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    uint64_t h = 0xcbf29ce484222325ULL;
    for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

}  // namespace

faulty_transport::faulty_transport(transport& inner, bool checksums)
    : inner_(inner), checksums_(checksums), sent_sums_(static_cast<std::size_t>(inner.world_size())) {}

void faulty_transport::arm(int32_t delay_ms, bool corrupt, uint64_t corrupt_seed) {
    delay_ms_ = delay_ms;
    corrupt_ = corrupt;
    corrupt_seed_ = corrupt_seed;
}

void faulty_transport::delay_if_armed() {
    if (delay_ms_ <= 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    delay_ms_ = 0;
}

status faulty_transport::check_gathered(const void* sent, std::size_t bytes, void* received, const char* what) {
    const int32_t world = inner_.world_size();
    auto* blocks = static_cast<unsigned char*>(received);
    if (corrupt_ && world > 1 && bytes > 0) {
        corrupt_ = false;
        const auto peer = static_cast<std::size_t>((inner_.rank() + 1) % world);
        const uint64_t bit = corrupt_seed_ % (bytes * 8);
        blocks[peer * bytes + bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    }
    if (!checksums_) return status::success();
    const uint64_t mine = fnv1a(sent, bytes);
    if (status s = inner_.all_gather(&mine, sizeof mine, sent_sums_.data()); !s.is_ok()) return s;
    for (int32_t r = 0; r < world; ++r) {
        if (fnv1a(blocks + static_cast<std::size_t>(r) * bytes, bytes) == sent_sums_[static_cast<std::size_t>(r)]) continue;
        return {status_code::internal,
                fmt::format("the payload from rank {} failed its checksum in {}", r, what)};
    }
    return status::success();
}

status faulty_transport::swap_batch_vocab(const logits_view& shard, int64_t first_row, int64_t row_count, logits_view& full_rows) {
    delay_if_armed();
    return inner_.swap_batch_vocab(shard, first_row, row_count, full_rows);
}

status faulty_transport::gather_verify_outputs(const int32_t* block, std::size_t block_ints, int32_t* out) {
    delay_if_armed();
    if (status s = inner_.gather_verify_outputs(block, block_ints, out); !s.is_ok()) return s;
    return check_gathered(block, block_ints * sizeof(int32_t), out, "gather_verify_outputs");
}

status faulty_transport::all_gather(const void* in, std::size_t bytes, void* out) {
    delay_if_armed();
    if (status s = inner_.all_gather(in, bytes, out); !s.is_ok()) return s;
    return check_gathered(in, bytes, out, "all_gather");
}

status faulty_transport::all_reduce(uint64_t* data, std::size_t count, reduce_op op) {
    delay_if_armed();
    return inner_.all_reduce(data, count, op);
}

status faulty_transport::all_reduce(int64_t* data, std::size_t count, reduce_op op) {
    delay_if_armed();
    return inner_.all_reduce(data, count, op);
}

status faulty_transport::broadcast(void* data, std::size_t bytes, int32_t root) {
    delay_if_armed();
    if (status s = inner_.broadcast(data, bytes, root); !s.is_ok()) return s;
    if (corrupt_ && inner_.rank() != root && bytes > 0) {
        corrupt_ = false;
        const uint64_t bit = corrupt_seed_ % (bytes * 8);
        static_cast<unsigned char*>(data)[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    }
    if (!checksums_) return status::success();
    // The root's checksum is what everyone should hold.
    const uint64_t mine = fnv1a(data, bytes);
    if (status s = inner_.all_gather(&mine, sizeof mine, sent_sums_.data()); !s.is_ok()) return s;
    if (mine != sent_sums_[static_cast<std::size_t>(root)]) {
        return {status_code::internal, fmt::format("the payload from rank {} failed its checksum in broadcast", root)};
    }
    return status::success();
}

status faulty_transport::barrier() {
    delay_if_armed();
    return inner_.barrier();
}

}  // namespace ds

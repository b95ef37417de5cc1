#include "collective_script.h"

#include <cstring>
#include <numeric>
#include <string>

namespace ds {

namespace {

constexpr int32_t kWorld = 4;
constexpr int32_t kVocab = 64;
constexpr int64_t kRealRows = 7;  // padded to 8: rank 3's second swapped row is a phantom

template <class T>
void record(std::vector<unsigned char>& transcript, const T* data, std::size_t count) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(data);
    transcript.insert(transcript.end(), bytes, bytes + count * sizeof(T));
}

void record_rows(std::vector<unsigned char>& transcript, const logits_view& rows) {
    const std::size_t bytes = static_cast<std::size_t>(rows.rows) * static_cast<std::size_t>(rows.vocab) * dtype_size(rows.dtype);
    record(transcript, static_cast<const unsigned char*>(rows.data), bytes);
}

}  // namespace

transport_config script_transport_config() {
    transport_config config;
    config.world_size = kWorld;
    config.vocab_size = kVocab;
    config.max_swap_rows = 8;
    config.max_collective_bytes = 1024;
    config.timeout = std::chrono::milliseconds(5000);
    return config;
}

status run_collective_script(transport& endpoint, std::vector<unsigned char>& transcript) {
    const int32_t rank = endpoint.rank();
    const int32_t shard_vocab = kVocab / kWorld;

    // Rank r's shard: value = row * 1000 + global token id, so every element says where it is from.
    std::vector<float> shard(static_cast<std::size_t>(kRealRows) * shard_vocab);
    for (int64_t row = 0; row < kRealRows; ++row) {
        for (int32_t v = 0; v < shard_vocab; ++v) shard[static_cast<std::size_t>(row * shard_vocab + v)] = static_cast<float>(row * 1000 + rank * shard_vocab + v);
    }
    logits_view rows;
    // Batch-DP swap: rank r gets rows [2r, 2r + 2).
    const logits_view f32_shard{shard.data(), logits_dtype::f32, kRealRows, shard_vocab, shard_vocab};
    if (status s = endpoint.swap_batch_vocab(f32_shard, 2 * rank, 2, rows); !s.is_ok()) return s;
    record_rows(transcript, rows);
    // Gathered mode: every rank gets every row. 16-bit elements with a row stride above the shard.
    std::vector<uint16_t> halves(static_cast<std::size_t>(kRealRows) * (shard_vocab + 3));
    std::iota(halves.begin(), halves.end(), static_cast<uint16_t>(rank * 4096));
    const logits_view f16_shard{halves.data(), logits_dtype::f16, kRealRows, shard_vocab, shard_vocab + 3};
    if (status s = endpoint.swap_batch_vocab(f16_shard, 0, kRealRows, rows); !s.is_ok()) return s;
    record_rows(transcript, rows);

    std::vector<int32_t> block(9), blocks(9 * kWorld);
    std::iota(block.begin(), block.end(), rank * 100 - 3);
    if (status s = endpoint.gather_verify_outputs(block.data(), block.size(), blocks.data()); !s.is_ok()) return s;
    record(transcript, blocks.data(), blocks.size());

    const std::string odd = "rank-" + std::to_string(rank) + "-bytes";  // 12 bytes, not a multiple of 8
    std::vector<char> gathered(odd.size() * kWorld);
    if (status s = endpoint.all_gather(odd.data(), odd.size(), gathered.data()); !s.is_ok()) return s;
    record(transcript, gathered.data(), gathered.size());

    std::vector<uint64_t> masses = {uint64_t(rank) << 40, 7u * uint64_t(rank + 1), ~uint64_t(0) >> 3};
    if (status s = endpoint.all_reduce(masses.data(), masses.size(), reduce_op::sum); !s.is_ok()) return s;
    record(transcript, masses.data(), masses.size());
    std::vector<int64_t> keys = {-rank, rank * 17 - 40, int64_t(1) << (50 + rank)};
    if (status s = endpoint.all_reduce(keys.data(), keys.size(), reduce_op::max); !s.is_ok()) return s;
    record(transcript, keys.data(), keys.size());
    std::vector<int64_t> signed_sums = {-rank, 3};
    if (status s = endpoint.all_reduce(signed_sums.data(), signed_sums.size(), reduce_op::sum); !s.is_ok()) return s;
    record(transcript, signed_sums.data(), signed_sums.size());

    std::vector<unsigned char> payload(100, static_cast<unsigned char>(rank));
    if (status s = endpoint.broadcast(payload.data(), payload.size(), 2); !s.is_ok()) return s;
    record(transcript, payload.data(), payload.size());
    return endpoint.barrier();
}

}  // namespace ds

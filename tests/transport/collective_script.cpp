#include "collective_script.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>

#include "transport/local_transport.h"

namespace ds {

namespace {

constexpr int32_t kShardVocab = 16;

template <class T>
void record(std::vector<unsigned char>& transcript, const T* data, std::size_t count) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(data);
    transcript.insert(transcript.end(), bytes, bytes + count * sizeof(T));
}

status record_rows(std::vector<unsigned char>& transcript, const logits_view& rows,
                   const script_device_memory* device) {
    const std::size_t bytes =
        static_cast<std::size_t>(rows.rows) * static_cast<std::size_t>(rows.vocab) * dtype_size(rows.dtype);
    if (!rows.on_device) {
        record(transcript, static_cast<const unsigned char*>(rows.data), bytes);
        return status::success();
    }
    if (device == nullptr) return status::invalid("the transport returned device rows to a host-memory script");
    std::vector<unsigned char> host(bytes);
    if (status s = device->download(rows, host.data()); !s.is_ok()) return s;
    record(transcript, host.data(), host.size());
    return status::success();
}

// Swaps `shard` (host memory) from where the script keeps shards: a device copy when asked.
status swap_from(transport& endpoint, const script_device_memory* device, logits_view shard, std::size_t shard_bytes,
                 int64_t first_row, int64_t row_count, logits_view& rows, std::shared_ptr<void>& device_copy) {
    if (device != nullptr) {
        if (status s = device->upload(shard.data, shard_bytes, device_copy); !s.is_ok()) return s;
        shard.data = device_copy.get();
        shard.on_device = true;
    }
    return endpoint.swap_batch_vocab(shard, first_row, row_count, rows);
}

}  // namespace

transport_config script_transport_config(int32_t world) {
    transport_config config;
    config.world_size = world;
    config.vocab_size = kShardVocab * world;
    config.max_swap_rows = 2 * world;
    config.max_collective_bytes = 1024;
    config.timeout = std::chrono::milliseconds(5000);
    return config;
}

status local_script_transcripts(int32_t world, std::vector<std::vector<unsigned char>>& transcripts) {
    local_group group(script_transport_config(world));
    transcripts.assign(static_cast<std::size_t>(world), {});
    std::vector<status> results(static_cast<std::size_t>(world));
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < world; ++r) {
        threads.emplace_back([&, r] {
            results[static_cast<std::size_t>(r)] =
                run_collective_script(group.endpoint(r), transcripts[static_cast<std::size_t>(r)]);
        });
    }
    for (std::thread& t : threads) t.join();
    for (const status& s : results) {
        if (!s.is_ok()) return s;
    }
    return status::success();
}

status run_collective_script(transport& endpoint, std::vector<unsigned char>& transcript,
                             const script_device_memory* device) {
    const int32_t rank = endpoint.rank();
    const int32_t world = endpoint.world_size();
    const int32_t shard_vocab = kShardVocab;
    // Padded to 2 * world: the last rank's second swapped row is a phantom.
    const int64_t real_rows = 2 * world - 1;

    // Rank r's shard: value = row * 1000 + global token id, so every element says where it is from.
    std::vector<float> shard(static_cast<std::size_t>(real_rows) * shard_vocab);
    for (int64_t row = 0; row < real_rows; ++row) {
        for (int32_t v = 0; v < shard_vocab; ++v)
            shard[static_cast<std::size_t>(row * shard_vocab + v)] =
                static_cast<float>(row * 1000 + rank * shard_vocab + v);
    }
    logits_view rows;
    std::shared_ptr<void> device_shard;
    // Batch-DP swap: rank r gets rows [2r, 2r + 2).
    const logits_view f32_shard{shard.data(), logits_dtype::f32, real_rows, shard_vocab, shard_vocab};
    if (status s =
            swap_from(endpoint, device, f32_shard, shard.size() * sizeof(float), 2 * rank, 2, rows, device_shard);
        !s.is_ok())
        return s;
    if (status s = record_rows(transcript, rows, device); !s.is_ok()) return s;
    // Gathered mode: every rank gets every row. 16-bit elements with a row stride above the shard.
    std::vector<uint16_t> halves(static_cast<std::size_t>(real_rows) * (shard_vocab + 3));
    std::iota(halves.begin(), halves.end(), static_cast<uint16_t>(rank * 4096));
    const logits_view f16_shard{halves.data(), logits_dtype::f16, real_rows, shard_vocab, shard_vocab + 3};
    if (status s =
            swap_from(endpoint, device, f16_shard, halves.size() * sizeof(uint16_t), 0, real_rows, rows, device_shard);
        !s.is_ok())
        return s;
    if (status s = record_rows(transcript, rows, device); !s.is_ok()) return s;

    std::vector<int32_t> block(9), blocks(9 * static_cast<std::size_t>(world));
    std::iota(block.begin(), block.end(), rank * 100 - 3);
    if (status s = endpoint.gather_verify_outputs(block.data(), block.size(), blocks.data()); !s.is_ok()) return s;
    record(transcript, blocks.data(), blocks.size());

    const std::string odd = "rank-" + std::to_string(rank) + "-bytes";  // 12 bytes, not a multiple of 8
    std::vector<char> gathered(odd.size() * static_cast<std::size_t>(world));
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
    if (status s = endpoint.broadcast(payload.data(), payload.size(), std::min(2, world - 1)); !s.is_ok()) return s;
    record(transcript, payload.data(), payload.size());
    return endpoint.barrier();
}

}  // namespace ds

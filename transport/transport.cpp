#include "transport/transport.h"

#include <fmt/format.h>

namespace ds {

status transport_config::validate() const {
    if (world_size < 1) return status::invalid(fmt::format("world_size = {}: expected >= 1", world_size));
    if (vocab_size < 1 || vocab_size % world_size != 0) {
        return status::invalid(
            fmt::format("vocab_size = {}: expected a positive multiple of the TP degree {}", vocab_size, world_size));
    }
    if (max_swap_rows < 0) return status::invalid(fmt::format("max_swap_rows = {}: expected >= 0", max_swap_rows));
    if (timeout.count() <= 0) return status::invalid(fmt::format("timeout = {} ms: expected > 0", timeout.count()));
    return status::success();
}

status check_swap_shape(const transport_config& config, const logits_view& shard, int64_t first_row,
                        int64_t row_count) {
    const int32_t shard_vocab = config.vocab_size / config.world_size;
    if (shard.vocab != shard_vocab) {
        return status::invalid(fmt::format("shard.vocab = {}: expected V / TP = {}", shard.vocab, shard_vocab));
    }
    if (first_row < 0 || row_count < 0 || row_count > config.max_swap_rows) {
        return status::invalid(fmt::format("swap rows [{}, +{}): expected at most max_swap_rows = {}", first_row,
                                           row_count, config.max_swap_rows));
    }
    return status::success();
}

status check_collective_size(const transport_config& config, std::size_t bytes, const char* what) {
    if (bytes <= config.max_collective_bytes) return status::success();
    return status::invalid(fmt::format("{}: {} bytes exceed the transport's max_collective_bytes = {}", what, bytes,
                                       config.max_collective_bytes));
}

}  // namespace ds

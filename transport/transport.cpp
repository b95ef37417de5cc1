#include "transport/transport.h"

#include <fmt/format.h>

namespace ds {

std::string transport_config::validate() const {
    if (world_size < 1) return fmt::format("world_size = {}: expected >= 1", world_size);
    if (vocab_size < 1 || vocab_size % world_size != 0) {
        return fmt::format("vocab_size = {}: expected a positive multiple of the TP degree {}", vocab_size, world_size);
    }
    if (max_swap_rows < 0) return fmt::format("max_swap_rows = {}: expected >= 0", max_swap_rows);
    if (timeout.count() <= 0) return fmt::format("timeout = {} ms: expected > 0", timeout.count());
    return {};
}

}  // namespace ds

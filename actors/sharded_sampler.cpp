#include "actors/sharded_sampler.h"

namespace ds {

sharded_sampler::sharded_sampler(const group_config& config, int32_t rank)
    : config_(config), rank_(rank), shard_vocab_(config.vocab_size / config.tp), vocab_offset_(rank * shard_vocab_) {}

status sharded_sampler::run(const dist_step&, const param_pool&, transport&, step_outputs&) {
    return {status_code::unsupported, "sharded: not yet"};
}

}  // namespace ds

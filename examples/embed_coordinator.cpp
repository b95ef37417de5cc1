// Embedding the coordinator in a model runtime: TP = 2 ranks, each of which owns the logits of its
// own vocab shard (as a tensor-parallel LM head produces them). The runtime registers its
// requests once, then hands each step's per-rank shard pointers to the group and gets one reply:
// the same tokens a single full-vocab sampler would give.
#include <distsample/group.h>

#include <cstdio>
#include <vector>

int main() {
    ds::group_config config;
    config.distribution.tp = 2;
    config.limits.vocab_size = 8;
    config.limits.max_batch = 2;
    config.limits.max_tokens_per_req = 1;
    config.limits.max_slots = 4;
    config.distribution.mode = ds::dist_mode::sharded;  // logits never leave their rank
    std::unique_ptr<ds::group> group;
    if (ds::status s = ds::group::create(config, group); !s.is_ok()) {
        std::fprintf(stderr, "error: %s\n", s.message.c_str());
        return 1;
    }

    ds::sampling_params greedy;
    greedy.temperature = 0.0f;
    ds::sampling_params creative;
    creative.temperature = 0.8f;
    creative.top_p = 0.9f;
    creative.seed = 42;
    if (!group->register_request(1, greedy).is_ok() || !group->register_request(2, creative).is_ok()) return 1;

    // Two requests, one row each; rank 0 holds vocab ids 0-3, rank 1 holds 4-7.
    const std::vector<float> rank0_shard = {0.1f, 2.5f, 0.3f, 0.0f,   // request 0
                                            1.0f, 1.1f, 0.9f, 1.2f};  // request 1
    const std::vector<float> rank1_shard = {0.2f, 3.0f, 0.1f, 0.0f,   // request 0: id 5 is the max
                                            1.3f, 0.7f, 1.0f, 0.4f};  // request 1
    ds::step_request step;
    step.kind = ds::step_kind::sample;
    step.slots = {1, 2};
    step.positions = {17, 5};
    step.shards = {ds::logits_view{rank0_shard.data(), ds::logits_dtype::f32, 2, 4, 4},
                   ds::logits_view{rank1_shard.data(), ds::logits_dtype::f32, 2, 4, 4}};
    const ds::step_reply reply = group->step(step);
    if (!reply.result.is_ok()) {
        std::fprintf(stderr, "error: %s\n", reply.result.message.c_str());
        return 1;
    }
    for (int b = 0; b < 2; ++b) {
        std::printf("request %d (slot %d): token %d, logprob %.4f\n", b, step.slots[static_cast<size_t>(b)],
                    reply.outputs.packed[static_cast<size_t>(b)],
                    static_cast<double>(reply.outputs.logprobs[static_cast<size_t>(b)]));
    }
    return 0;
}

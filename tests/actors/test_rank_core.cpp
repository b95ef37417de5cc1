// The rank core (actors/rank_core.h) without an actor: repeats refused, hooks and faults decided
// per host, the model's shard and contexts, commits; and the one message family crossing a
// process boundary (CAF's binary serialization) with its shared values intact.
#include <gtest/gtest.h>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include <algorithm>
#include <memory>
#include <vector>

#include "actors/messages.h"
#include "actors/rank_core.h"
#include "sources/synthetic_logits.h"
#include "transport/transport_factory.h"

namespace ds {
namespace {

constexpr int32_t kVocab = 64;

group_config one_rank_config() {
    group_config config;
    config.distribution.tp = 1;
    config.limits.vocab_size = kVocab;
    config.limits.max_batch = 4;
    config.limits.max_slots = 8;
    config.transport.timeout = std::chrono::milliseconds{2000};
    return config;
}

std::shared_ptr<const dist_step> greedy_step(const group_config& config, uint64_t id, const std::vector<float>& rows) {
    step_request request;
    request.slots = {1};
    request.positions = {0};
    request.shards = {logits_view{rows.data(), logits_dtype::f32, 1, kVocab, kVocab}};
    result<step_plan> plan = plan_step(config, 1, 1);
    EXPECT_TRUE(plan.is_ok());
    return std::make_shared<const dist_step>(make_dist_step(id, request, plan.value(), kVocab));
}

struct one_rank {
    group_config config = one_rank_config();
    std::unique_ptr<transport_group> group;
    std::unique_ptr<rank_core> core;

    explicit one_rank(rank_host host, std::unique_ptr<shard_supplier> supplier = nullptr) {
        EXPECT_TRUE(make_transport_group(transport_kind::local, rank_transport_config(config), rank_ucx_options(config), group).is_ok());
        core = std::make_unique<rank_core>(config, 0, host, std::make_shared<wakeable_sleep>(), std::move(supplier));
        EXPECT_TRUE(core->attach(*group).is_ok());
        sampling_params greedy;
        greedy.temperature = 0.0f;
        EXPECT_TRUE(core->register_request(1, greedy, {}).is_ok());
    }
};

TEST(RankCore, RefusesARepeatedStepIdAndRunsTheNextOne) {
    one_rank r(rank_host::thread);
    std::vector<float> rows(kVocab, 0.0f);
    rows[9] = 5.0f;
    r.group->begin_epoch(3);  // as the coordinator does before it sends a step
    const step_admission first = r.core->admit(3);
    ASSERT_TRUE(first.refusal.is_ok());
    const rank_result result = r.core->run(greedy_step(r.config, 3, rows), {}, first);
    ASSERT_EQ(result.code, 0) << result.message;
    EXPECT_EQ(result.outputs->packed[0], 9);
    EXPECT_EQ(result.digest, result.outputs->digest());
    const step_admission again = r.core->admit(3);
    EXPECT_EQ(again.refusal.code, status_code::aborted);
    EXPECT_NE(again.refusal.message.find("step 3 repeated after step 3"), std::string::npos);
    EXPECT_TRUE(r.core->admit(4).refusal.is_ok());
}

TEST(RankCore, AStallHookFiresOnceAndAHangRunsTheStepOnlyInARankProcess) {
    one_rank thread(rank_host::thread);
    thread.core->set_hook(rank_fault::stall);
    const step_admission stalled = thread.core->admit(1);
    EXPECT_FALSE(stalled.answer);
    EXPECT_FALSE(stalled.run);
    EXPECT_TRUE(thread.core->admit(2).answer);

    one_rank process(rank_host::process);
    auto plan = std::make_shared<fault_plan>();
    plan->faults.push_back(fault_spec{fault_kind::hang, 0, 1, 1, 1.0, 0});
    plan->faults.push_back(fault_spec{fault_kind::crash, 0, 2, 2, 1.0, 0});
    process.core->set_fault_plan(plan);
    const step_admission hung = process.core->admit(1);
    EXPECT_FALSE(hung.answer);
    EXPECT_TRUE(hung.run);
    EXPECT_TRUE(process.core->admit(2).crash);
    thread.core->set_fault_plan(plan);
    EXPECT_FALSE(thread.core->admit(4).crash) << "a rank thread ignores crash";
}

TEST(RankCore, AModelRankMakesItsShardFromTheContextAndCommitsExtendIt) {
    synthetic_lm_config model_config;
    model_config.vocab_size = kVocab;
    const synthetic_lm model(model_config);
    one_rank r(rank_host::process, make_model_supplier(model, 0, 8));
    std::vector<float> row(kVocab);
    std::vector<int32_t> emitted;
    for (uint64_t id = 1; id <= 3; ++id) {
        step_request request;
        request.slots = {1};
        request.positions = {static_cast<int64_t>(id)};
        result<step_plan> plan = plan_step(r.config, 1, 1);
        ASSERT_TRUE(plan.is_ok());
        auto step = std::make_shared<const dist_step>(make_dist_step(id, request, plan.value(), kVocab));
        r.group->begin_epoch(id);
        const step_admission a = r.core->admit(id);
        const rank_result result = r.core->run(step, {}, a);
        ASSERT_EQ(result.code, 0) << result.message;
        // The greedy token of the model's row after the tokens committed so far.
        uint64_t context = 0;
        for (int32_t t : emitted) context = logits_source::next_context(context, t);
        model.logits(context, row.data());
        const auto best = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
        EXPECT_EQ(result.outputs->packed[0], best) << "step " << id;
        emitted.push_back(best);
        ASSERT_TRUE(r.core->commit(id, nullptr).is_ok());
    }
}

template <class T>
T round_trip(caf::actor_system& system, T value) {
    std::vector<char> bytes;
    caf::binary_serializer sink{system, bytes};
    EXPECT_FALSE(sink(value));
    T out;
    caf::binary_deserializer source{system, bytes};
    EXPECT_FALSE(source(out));
    return out;
}

TEST(RankMessages, TravelBetweenProcessesWithTheirSharedValues) {
    caf::actor_system_config cfg;
    caf::actor_system system{configure_actor_system(cfg)};
    const group_config config = one_rank_config();
    std::vector<float> rows(kVocab, 1.0f);
    step_msg step{greedy_step(config, 7, rows), shard_payload{logits_dtype::f32, {1, 2, 3, 4}}, nullptr};
    const step_msg step_back = round_trip(system, step);
    ASSERT_TRUE(step_back.step);
    EXPECT_EQ(step_back.step->id, 7u);
    EXPECT_EQ(step_back.step->slots, step.step->slots);
    EXPECT_TRUE(step_back.step->shards.empty()) << "pointers into this process stay here";
    EXPECT_EQ(step_back.payload.bytes, step.payload.bytes);

    auto outputs = std::make_shared<step_outputs>();
    outputs->resize(1, 1);
    outputs->packed = {5, 1};
    rank_result result{2, 7, 0, "", outputs->digest(), outputs, {}};
    const rank_result result_back = round_trip(system, result);
    ASSERT_TRUE(result_back.outputs);
    EXPECT_EQ(result_back.outputs->digest(), result.digest);

    EXPECT_FALSE(round_trip(system, commit_msg{7, nullptr}).agreed) << "null: the rank's own outputs";
    EXPECT_EQ(round_trip(system, commit_msg{7, outputs}).agreed->packed, outputs->packed);

    auto plan = std::make_shared<fault_plan>();
    plan->seed = 11;
    plan->faults.push_back(fault_spec{fault_kind::hang, 1, 2, 3, 0.5, 0});
    const fault_plan_msg plan_back = round_trip(system, fault_plan_msg{plan});
    ASSERT_TRUE(plan_back.plan);
    EXPECT_EQ(plan_back.plan->seed, 11u);
    ASSERT_EQ(plan_back.plan->faults.size(), 1u);
    EXPECT_EQ(format_fault_spec(plan_back.plan->faults[0]), format_fault_spec(plan->faults[0]));
}

}  // namespace
}  // namespace ds

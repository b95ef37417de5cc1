// pad_bs planning and the group's validation (docs/architecture.md, The coordinator).
#include <gtest/gtest.h>

#include "config/group_config.h"

namespace ds {
namespace {

group_config limits(int32_t tp, int32_t vocab = 96, int32_t max_batch = 10, int32_t max_n = 4) {
    group_config config;
    config.distribution.tp = tp;
    config.limits.vocab_size = vocab;
    config.limits.max_batch = max_batch;
    config.limits.max_tokens_per_req = max_n;
    return config;
}

// The plan, or the test fails with the error.
step_plan planned(const group_config& config, int32_t bs, int32_t n) {
    result<step_plan> plan = plan_step(config, bs, n);
    EXPECT_TRUE(plan.is_ok()) << plan.error().message;
    return plan.is_ok() ? *plan : step_plan{};
}

TEST(StepPlan, PadsToAMultipleOfTp) {
    const step_plan plan = planned(limits(4), 6, 3);
    EXPECT_EQ(plan.pad_bs, 8);
    EXPECT_EQ(plan.reqs_per_rank, 2);
    EXPECT_EQ(plan.phantom_rows(), 2);
    EXPECT_EQ(plan.first_request(3), 6);
    EXPECT_EQ(plan.shard_vocab, 24);
    EXPECT_EQ(plan.vocab_begin(2), 48);
}

TEST(StepPlan, BatchSmallerThanTpGivesOneRequestPerRank) {
    const step_plan plan = planned(limits(8), 3, 1);
    EXPECT_EQ(plan.pad_bs, 8);
    EXPECT_EQ(plan.reqs_per_rank, 1);
    EXPECT_EQ(plan.phantom_rows(), 5);
}

TEST(StepPlan, DivisibleBatchHasNoPhantoms) {
    const step_plan plan = planned(limits(3), 9, 2);
    EXPECT_EQ(plan.pad_bs, 9);
    EXPECT_EQ(plan.phantom_rows(), 0);
}

TEST(StepPlan, RejectsEmptyAndOversizedBatchesNamingTheField) {
    EXPECT_NE(plan_step(limits(4), 0, 1).error().message.find("batch_size = 0"), std::string::npos);
    EXPECT_NE(plan_step(limits(4), 11, 1).error().message.find("max_batch = 10"), std::string::npos);
    EXPECT_NE(plan_step(limits(4), 2, 5).error().message.find("tokens_per_req = 5"), std::string::npos);
    EXPECT_NE(plan_step(limits(4), 2, 0).error().message.find("tokens_per_req = 0"), std::string::npos);
}

TEST(StepPlan, MaxBatchPadsUpToMaxPadBs) {
    const step_plan plan = planned(limits(4), 10, 1);
    EXPECT_EQ(plan.pad_bs, 12);
    EXPECT_EQ(limits(4).max_pad_bs(), 12);
}

TEST(StepPlan, VocabMustDivideByTp) {
    EXPECT_NE(plan_step(limits(5, 96), 1, 1).error().message.find("vocab_size = 96: expected a multiple of tp = 5"),
              std::string::npos);
    EXPECT_NE(validate_group_config(limits(0)).message.find("tp = 0"), std::string::npos);
}

TEST(GroupConfig, ValidatesTimeoutsSlotsAndSchedulerKnobs) {
    group_config c;
    EXPECT_EQ(validate_group_config(c).message, "");
    c.limits.max_slots = 1;
    EXPECT_NE(validate_group_config(c).message.find("max_slots"), std::string::npos);
    c = group_config{};
    c.distribution.step_timeout = std::chrono::milliseconds(0);
    EXPECT_NE(validate_group_config(c).message.find("step_timeout"), std::string::npos);
    c = group_config{};
    c.tuning.scheduler_threads = 0;
    EXPECT_NE(validate_group_config(c).message.find("scheduler_threads = 0: expected an integer in [1, 256]"),
              std::string::npos);
    c = group_config{};
    c.tuning.scheduler_spin_us = -1;
    EXPECT_NE(validate_group_config(c).message.find("scheduler_spin_us = -1: expected an integer in [0, 1000000]"),
              std::string::npos);
    c = group_config{};
    c.tuning.reply_spin_us = 1'000'001;
    EXPECT_NE(validate_group_config(c).message.find("reply_spin_us = 1000001"), std::string::npos);
    c = group_config{};
    c.tuning.rank_spin_us = -5;
    EXPECT_NE(validate_group_config(c).message.find("rank_spin_us = -5: expected an integer in [0, 1000000]"),
              std::string::npos);
    const result<dist_mode> mode = parse_mode("sharded");
    ASSERT_TRUE(mode.is_ok());
    EXPECT_EQ(*mode, dist_mode::sharded);
    EXPECT_FALSE(parse_mode("scatter").is_ok());
}

}  // namespace
}  // namespace ds

// pad_bs planning and the group's validation (docs/architecture.md, The coordinator).
#include <gtest/gtest.h>

#include "config/group_config.h"

namespace ds {
namespace {

group_limits limits(int32_t tp, int32_t vocab = 96, int32_t max_batch = 10, int32_t max_n = 4) {
    return group_limits{tp, vocab, max_batch, max_n};
}

TEST(StepPlan, PadsToAMultipleOfTp) {
    step_plan plan;
    ASSERT_EQ(plan_step(limits(4), 6, 3, plan), "");
    EXPECT_EQ(plan.pad_bs, 8);
    EXPECT_EQ(plan.reqs_per_rank, 2);
    EXPECT_EQ(plan.phantom_rows(), 2);
    EXPECT_EQ(plan.first_request(3), 6);
    EXPECT_EQ(plan.shard_vocab, 24);
    EXPECT_EQ(plan.vocab_begin(2), 48);
}

TEST(StepPlan, BatchSmallerThanTpGivesOneRequestPerRank) {
    step_plan plan;
    ASSERT_EQ(plan_step(limits(8), 3, 1, plan), "");
    EXPECT_EQ(plan.pad_bs, 8);
    EXPECT_EQ(plan.reqs_per_rank, 1);
    EXPECT_EQ(plan.phantom_rows(), 5);
}

TEST(StepPlan, DivisibleBatchHasNoPhantoms) {
    step_plan plan;
    ASSERT_EQ(plan_step(limits(3), 9, 2, plan), "");
    EXPECT_EQ(plan.pad_bs, 9);
    EXPECT_EQ(plan.phantom_rows(), 0);
}

TEST(StepPlan, RejectsEmptyAndOversizedBatchesNamingTheField) {
    step_plan plan;
    EXPECT_NE(plan_step(limits(4), 0, 1, plan).find("batch_size = 0"), std::string::npos);
    EXPECT_NE(plan_step(limits(4), 11, 1, plan).find("max_batch = 10"), std::string::npos);
    EXPECT_NE(plan_step(limits(4), 2, 5, plan).find("tokens_per_req = 5"), std::string::npos);
    EXPECT_NE(plan_step(limits(4), 2, 0, plan).find("tokens_per_req = 0"), std::string::npos);
}

TEST(StepPlan, MaxBatchPadsUpToMaxPadBs) {
    step_plan plan;
    ASSERT_EQ(plan_step(limits(4), 10, 1, plan), "");
    EXPECT_EQ(plan.pad_bs, 12);
    EXPECT_EQ(limits(4).max_pad_bs(), 12);
}

TEST(StepPlan, VocabMustDivideByTp) {
    step_plan plan;
    EXPECT_NE(plan_step(limits(5, 96), 1, 1, plan).find("vocab_size = 96: expected a multiple of tp = 5"),
              std::string::npos);
    EXPECT_NE(validate_group_limits(limits(0)).find("tp = 0"), std::string::npos);
}

TEST(GroupConfig, ValidatesTimeoutsSlotsAndSchedulerKnobs) {
    group_config c;
    EXPECT_EQ(validate_group_config(c), "");
    c.max_slots = 1;
    EXPECT_NE(validate_group_config(c).find("max_slots"), std::string::npos);
    c = group_config{};
    c.step_timeout = std::chrono::milliseconds(0);
    EXPECT_NE(validate_group_config(c).find("step_timeout"), std::string::npos);
    c = group_config{};
    c.scheduler_threads = 0;
    EXPECT_NE(validate_group_config(c).find("scheduler_threads = 0: expected an integer in [1, 256]"),
              std::string::npos);
    c = group_config{};
    c.scheduler_spin_us = -1;
    EXPECT_NE(validate_group_config(c).find("scheduler_spin_us = -1: expected an integer in [0, 1000000]"),
              std::string::npos);
    c = group_config{};
    c.reply_spin_us = 1'000'001;
    EXPECT_NE(validate_group_config(c).find("reply_spin_us = 1000001"), std::string::npos);
    c = group_config{};
    c.rank_spin_us = -5;
    EXPECT_NE(validate_group_config(c).find("rank_spin_us = -5: expected an integer in [0, 1000000]"),
              std::string::npos);
    dist_mode mode{};
    EXPECT_TRUE(parse_mode("sharded", mode));
    EXPECT_EQ(mode, dist_mode::sharded);
    EXPECT_FALSE(parse_mode("scatter", mode));
}

}  // namespace
}  // namespace ds

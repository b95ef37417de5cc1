// The fault plan: its text form, its validation, and that whether a fault fires is a pure
// function of (seed, fault, step) with the configured rate; the config file's "faults" section.
#include "config/fault_plan.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "config/config_file.h"

namespace ds {
namespace {

// The spec, or the test fails with the error.
fault_spec parsed(const std::string& text) {
    result<fault_spec> spec = parse_fault_spec(text);
    EXPECT_TRUE(spec.is_ok()) << spec.error().message;
    return spec.is_ok() ? *spec : fault_spec{};
}

TEST(FaultPlan, ParsesAndFormatsTheTextForm) {
    fault_spec f = parsed("delay_kernel:rank=3:steps=10-20:p=0.5:ms=40");
    EXPECT_EQ(f.kind, fault_kind::delay_kernel);
    EXPECT_EQ(f.rank, 3);
    EXPECT_EQ(f.first_step, 10u);
    EXPECT_EQ(f.last_step, 20u);
    EXPECT_EQ(f.probability, 0.5);
    EXPECT_EQ(f.delay_ms, 40);
    EXPECT_EQ(format_fault_spec(f), "delay_kernel:rank=3:steps=10-20:p=0.5:ms=40");
    f = parsed("hang:rank=1:steps=7");
    EXPECT_EQ(f.first_step, 7u);
    EXPECT_EQ(f.last_step, 7u);
    f = parsed("slow_connection:steps=4:ms=250");
    EXPECT_EQ(f.kind, fault_kind::slow_connection);
    EXPECT_EQ(format_fault_spec(f), "slow_connection:steps=4-4:ms=250");
    for (fault_kind k : kAllFaultKinds) {
        const result<fault_kind> kind = parse_fault_kind(fault_kind_name(k));
        ASSERT_TRUE(kind.is_ok());
        EXPECT_EQ(*kind, k);
    }
}

TEST(FaultPlan, BadTextNamesWhatIsWrong) {
    EXPECT_NE(parse_fault_spec("melt:rank=1").error().message.find("unknown kind 'melt'"), std::string::npos);
    EXPECT_NE(parse_fault_spec("hang").error().message.find("rank=R is required"), std::string::npos);
    EXPECT_NE(parse_fault_spec("cut_connection:rank=1").error().message.find("a connection fault takes no rank"),
              std::string::npos);
    EXPECT_NE(parse_fault_spec("hang:rank=x").error().message.find("bad value 'x' for rank"), std::string::npos);
    EXPECT_NE(parse_fault_spec("hang:rank=1:when=now").error().message.find("unknown field 'when'"), std::string::npos);
    EXPECT_NE(parse_fault_spec("hang:rank=1:p=").error().message.find("for p"), std::string::npos);
}

TEST(FaultPlan, ValidationNamesTheFaultAndField) {
    fault_plan plan;
    plan.faults.push_back(fault_spec{fault_kind::hang, 4, 1, 10, 1.0, 0});
    EXPECT_NE(validate_fault_plan(plan, 4).message.find("faults[0].rank = 4"), std::string::npos);
    plan.faults[0] = fault_spec{fault_kind::hang, 1, 5, 4, 1.0, 0};
    EXPECT_NE(validate_fault_plan(plan, 4).message.find("faults[0].steps"), std::string::npos);
    plan.faults[0] = fault_spec{fault_kind::hang, 1, 1, 4, 1.5, 0};
    EXPECT_NE(validate_fault_plan(plan, 4).message.find("faults[0].p"), std::string::npos);
    plan.faults[0] = fault_spec{fault_kind::delay_kernel, 1, 1, 4, 1.0, 0};
    EXPECT_NE(validate_fault_plan(plan, 4).message.find("expected a delay"), std::string::npos);
    plan.faults[0].delay_ms = 5;
    EXPECT_EQ(validate_fault_plan(plan, 4).message, "");
}

TEST(FaultPlan, FiringIsAPureFunctionOfSeedFaultAndStepAtTheRate) {
    fault_plan plan;
    plan.seed = 42;
    plan.faults.push_back(fault_spec{fault_kind::alter_token, 1, 1, 1000000, 0.01, 0});
    plan.faults.push_back(fault_spec{fault_kind::alter_token, 2, 1, 1000000, 0.01, 0});
    int fired[2] = {0, 0};
    int both = 0;
    for (uint64_t step = 1; step <= 100000; ++step) {
        const bool a = fault_fires(plan, 0, step);
        const bool b = fault_fires(plan, 1, step);
        EXPECT_EQ(a, fault_fires(plan, 0, step));
        fired[0] += a;
        fired[1] += b;
        both += a && b;
    }
    // 1000 expected per fault, sd about 31; the two faults are independent (about 10 together).
    EXPECT_NEAR(fired[0], 1000, 150);
    EXPECT_NEAR(fired[1], 1000, 150);
    EXPECT_LT(both, 40);
    fault_plan other = plan;
    other.seed = 43;
    int same = 0;
    for (uint64_t step = 1; step <= 100000; ++step) same += fault_fires(plan, 0, step) && fault_fires(other, 0, step);
    EXPECT_LT(same, 40) << "another seed gives other steps";
    const rank_step_faults at = faults_at(plan, 1, 3);
    EXPECT_EQ(at.alter_token, fault_fires(plan, 0, 3));
    EXPECT_FALSE(faults_at(plan, 3, 3).any());
}

TEST(FaultConfig, TheFaultsSectionTheEnvironmentAndTheCommandLineAddUp) {
    const std::string path = ::testing::TempDir() + "fault_config.json";
    std::ofstream(path) << R"({"tp": 4, "faults": {"seed": 9, "payload_checksums": true,
                              "inject": ["hang:rank=1:steps=5", "alter_token:rank=2:p=0.01"]}})";
    setenv("DISTSAMPLE_FAULTS_INJECT", "delay_kernel:rank=3:ms=20", 1);
    group_config config;
    const std::string e =
        load_group_config(path, {"faults.inject=corrupt_payload:rank=0:steps=2-3", "faults.seed=11"}, config).message;
    unsetenv("DISTSAMPLE_FAULTS_INJECT");
    ASSERT_EQ(e, "");
    EXPECT_EQ(config.faults.seed, 11u);
    EXPECT_TRUE(config.transport.payload_checksums);
    ASSERT_EQ(config.faults.faults.size(), 4u);
    EXPECT_EQ(format_fault_spec(config.faults.faults[0]), "hang:rank=1:steps=5-5");
    EXPECT_EQ(format_fault_spec(config.faults.faults[1]), "alter_token:rank=2:p=0.01");
    EXPECT_EQ(format_fault_spec(config.faults.faults[2]), "delay_kernel:rank=3:ms=20");
    EXPECT_EQ(format_fault_spec(config.faults.faults[3]), "corrupt_payload:rank=0:steps=2-3");
    EXPECT_EQ(validate_group_config(config).message, "");
    EXPECT_EQ(group_config_to_json(config)["faults"]["inject"].size(), 4u);

    config = group_config{};
    const std::string bad = load_group_config("", {"faults.inject=melt:rank=1"}, config).message;
    EXPECT_NE(bad.find("config key 'faults.inject' = 'melt:rank=1' (from the command line)"), std::string::npos) << bad;
    config = group_config{};
    ASSERT_EQ(load_group_config("", {"tp=2", "faults.inject=hang:rank=2"}, config).message, "");
    EXPECT_NE(validate_group_config(config).message.find("faults[0].rank = 2"), std::string::npos);
    std::remove(path.c_str());
}

}  // namespace
}  // namespace ds

// Each fault kind through a group of 4 in-process ranks (swap mode, on_mismatch, payload
// checksums on): the fault is detected within its step (desync, corruption, altered logit, stale
// duplicate put) or within the step timeout (hang, delay beyond it, dropped put or step message),
// or is harmless by design (a repeated step message), the failure names the rank, every step gets
// exactly one reply,
// and the steps answered equal a fault-free group's, before and after the fault, so every rank's
// committed state stayed equal to rank 0's.
#include <gtest/gtest.h>

#include "actors/fault_report.h"
#include "faults/fault_harness.h"

namespace ds {
namespace {

using namespace faults_test;

constexpr int32_t kTp = 4;
constexpr uint64_t kSteps = 6;
constexpr uint64_t kFaultStep = 3;
constexpr int32_t kFaultRank = 2;

// What the step with the fault comes to.
enum class outcome {
    desync,    // answered, one desync event at the faulty rank, repaired
    checksum,  // failed within the step by a checksum naming the faulty rank
    timeout,   // failed by the step timeout naming the faulty rank
    harmless,  // answered as a fault-free run, the fault masked by design
};

struct kind_case {
    fault_kind kind;
    int32_t delay_ms;
    outcome expected;
};

class EveryFaultKind : public ::testing::TestWithParam<kind_case> {};

TEST_P(EveryFaultKind, IsDetectedInTimeByRankAndTheOtherStepsMatchAFaultFreeRun) {
    const kind_case param = GetParam();
    const group_config config = tiny_config(kTp);
    std::unique_ptr<group> faulty, clean;
    ASSERT_TRUE(group::create(config, faulty).is_ok());
    ASSERT_TRUE(group::create(reference_config(kTp), clean).is_ok());
    register_requests(*faulty);
    register_requests(*clean);
    fault_plan plan;
    plan.seed = 1;
    plan.faults.push_back(fault_spec{param.kind, kFaultRank, kFaultStep, kFaultStep, 1.0, param.delay_ms});
    ASSERT_TRUE(faulty->set_fault_plan(plan).is_ok());
    fault_ledger ledger(plan, config.distribution.policy);

    for (uint64_t index = 0; index < kSteps; ++index) {
        const uint64_t id = index + 1;
        SCOPED_TRACE("step " + std::to_string(id));
        tiny_step s;
        make_tiny_step(index, kTp, s);
        const auto start = std::chrono::steady_clock::now();
        const step_reply reply = faulty->step(s.request);
        const int64_t latency = since_ns(start);
        ledger.record(id, reply, latency);
        if (id != kFaultStep) {
            ASSERT_TRUE(reply.result.is_ok()) << reply.result.message;
            EXPECT_TRUE(reply.desyncs.empty());
        } else if (param.expected == outcome::harmless) {
            ASSERT_TRUE(reply.result.is_ok()) << reply.result.message;
            EXPECT_TRUE(reply.desyncs.empty());
        } else if (param.expected == outcome::desync) {
            ASSERT_TRUE(reply.result.is_ok()) << reply.result.message;
            ASSERT_EQ(reply.desyncs.size(), 1u);
            EXPECT_EQ(reply.desyncs[0].step, id);
            EXPECT_EQ(reply.desyncs[0].rank, kFaultRank);
            EXPECT_EQ(reply.desyncs[0].first_row, 0);
        } else {
            EXPECT_FALSE(reply.result.is_ok());
            EXPECT_NE(reply.result.message.find("rank " + std::to_string(kFaultRank)), std::string::npos)
                << reply.result.message;
            if (param.expected == outcome::checksum) {
                EXPECT_NE(reply.result.message.find("checksum"), std::string::npos) << reply.result.message;
                EXPECT_LT(latency, 100'000'000) << "caught within the step, long before any timeout";
            } else {
                EXPECT_EQ(reply.result.code, status_code::timeout) << reply.result.message;
                EXPECT_LT(latency,
                          (config.distribution.step_timeout + std::chrono::milliseconds(300)).count() * 1'000'000);
            }
        }
        if (reply.result.is_ok()) {
            // The fault-free run of the steps this group answered (a failed step is not committed).
            const step_reply expected = clean->step(s.request);
            ASSERT_TRUE(expected.result.is_ok()) << expected.result.message;
            EXPECT_TRUE(same_outputs(expected.outputs, reply.outputs));
        }
    }
    ASSERT_EQ(ledger.records().size(), 1u);
    const fault_record& r = ledger.records()[0];
    EXPECT_EQ(r.detected, param.expected != outcome::harmless) << r.action;
    EXPECT_EQ(r.masked, param.expected == outcome::harmless) << r.action;
    EXPECT_TRUE(ledger.unexplained().empty()) << ledger.unexplained().front();
    EXPECT_EQ(r.failed_step, param.expected == outcome::checksum || param.expected == outcome::timeout);
    // The report reads back as it was written (`distsample faults report`).
    fault_report read;
    ASSERT_TRUE(parse_fault_report_json(ledger.json(true), read).is_ok());
    EXPECT_EQ(fault_report_json(read, true), ledger.json(true));
}

INSTANTIATE_TEST_SUITE_P(Faults, EveryFaultKind,
                         ::testing::Values(kind_case{fault_kind::alter_token, 0, outcome::desync},
                                           kind_case{fault_kind::alter_accept_length, 0, outcome::desync},
                                           kind_case{fault_kind::corrupt_payload, 0, outcome::checksum},
                                           kind_case{fault_kind::hang, 0, outcome::timeout},
                                           kind_case{fault_kind::delay_kernel, 300, outcome::timeout},
                                           kind_case{fault_kind::delay_transport, 300, outcome::timeout},
                                           // The shard's checksum as handed in catches the raised logit where
                                           // the owner of row 0 (rank 0) receives it.
                                           kind_case{fault_kind::alter_logit, 0, outcome::checksum},
                                           kind_case{fault_kind::drop_put, 0, outcome::timeout},
                                           // Step 3 (a sample) receives the first bytes of rank 2's step-2 (verify)
                                           // block, which differ from its fresh ones.
                                           kind_case{fault_kind::duplicate_put, 0, outcome::checksum},
                                           kind_case{fault_kind::drop_control, 0, outcome::timeout},
                                           kind_case{fault_kind::duplicate_control, 0, outcome::harmless}),
                         [](const auto& param_info) { return std::string(fault_kind_name(param_info.param.kind)); });

TEST(Faults, ADelayWithinTheTimeoutIsMaskedAndTheStepAnswered) {
    const group_config config = tiny_config(kTp);
    std::unique_ptr<group> g;
    ASSERT_TRUE(group::create(config, g).is_ok());
    register_requests(*g);
    fault_plan plan;
    plan.faults.push_back(fault_spec{fault_kind::delay_transport, 1, 1, 1, 1.0, 20});
    ASSERT_TRUE(g->set_fault_plan(plan).is_ok());
    fault_ledger ledger(plan, config.distribution.policy);
    tiny_step s;
    make_tiny_step(0, kTp, s);
    const step_reply reply = g->step(s.request);
    ASSERT_TRUE(reply.result.is_ok()) << reply.result.message;
    ledger.record(1, reply, 0);
    ASSERT_EQ(ledger.records().size(), 1u);
    EXPECT_TRUE(ledger.records()[0].masked) << ledger.records()[0].action;
}

TEST(Faults, WithoutChecksumsTheDigestCatchesACorruptedGatherAndRepairsIt) {
    group_config config = tiny_config(kTp);
    config.transport.payload_checksums = false;
    std::unique_ptr<group> g, clean;
    ASSERT_TRUE(group::create(config, g).is_ok());
    ASSERT_TRUE(group::create(reference_config(kTp), clean).is_ok());
    register_requests(*g);
    register_requests(*clean);
    fault_plan plan;
    // Step 1 gathers 4 ints per rank: the bit lands in rank 3's token block as rank 2 received it.
    plan.faults.push_back(fault_spec{fault_kind::corrupt_payload, 2, 1, 1, 1.0, 0});
    ASSERT_TRUE(g->set_fault_plan(plan).is_ok());
    tiny_step s;
    make_tiny_step(0, kTp, s);
    const step_reply reply = g->step(s.request);
    ASSERT_TRUE(reply.result.is_ok()) << reply.result.message;
    ASSERT_EQ(reply.desyncs.size(), 1u);
    EXPECT_EQ(reply.desyncs[0].rank, 2);
    EXPECT_TRUE(same_outputs(clean->step(s.request).outputs, reply.outputs));
}

TEST(Faults, ALedgerKeepsTheLatestRecordsAndCountsThemAll) {
    fault_plan plan;
    plan.faults.push_back(fault_spec{fault_kind::delay_kernel, 1, 1, 100, 1.0, 5});
    fault_ledger ledger(plan, rank0_policy::on_mismatch, 2);
    step_reply failed;
    failed.result = status{status_code::timeout, "the coordinator's words, with no rank"};
    for (uint64_t id = 1; id <= 5; ++id) {
        const std::vector<fault_record> step = ledger.record(id, id == 5 ? failed : step_reply{}, 0);
        ASSERT_EQ(step.size(), 1u);
        EXPECT_EQ(step[0].step, id);
    }
    ASSERT_EQ(ledger.records().size(), 2u);
    EXPECT_EQ(ledger.records().front().step, 4u);
    EXPECT_EQ(ledger.report().records_left_out, 3);
    const fault_kind_summary& delays = ledger.summary()[static_cast<size_t>(fault_kind::delay_kernel)];
    EXPECT_EQ(delays.kind, fault_kind::delay_kernel);
    EXPECT_EQ(delays.injected, 5);
    EXPECT_EQ(delays.masked, 5) << "four within the timeouts, one in a step failed for no fault of its own";
    ASSERT_EQ(ledger.unexplained().size(), 1u);
    fault_report read;
    ASSERT_TRUE(parse_fault_report_json(ledger.json(true), read).is_ok());
    EXPECT_EQ(read.records_left_out, 3);
    EXPECT_EQ(read.summary[static_cast<size_t>(fault_kind::delay_kernel)].injected, 5);
}

TEST(Faults, TheGroupKeepsOnlyTheLatestDesyncEvents) {
    group_config config = tiny_config(kTp);
    config.distribution.step_timeout =
        std::chrono::seconds(10);  // about desyncs, not timeouts: no step may time out on a loaded machine
    std::unique_ptr<group> g;
    ASSERT_TRUE(group::create(config, g).is_ok());
    register_requests(*g);
    fault_plan plan;
    plan.faults.push_back(fault_spec{fault_kind::alter_token, 1, 1, kKeptDesyncEvents + 10, 1.0, 0});
    ASSERT_TRUE(g->set_fault_plan(plan).is_ok());
    tiny_step s;
    for (uint64_t index = 0; index < kKeptDesyncEvents + 10; ++index) {
        make_tiny_step(index, kTp, s);
        ASSERT_EQ(g->step(s.request).desyncs.size(), 1u);
    }
    const std::vector<desync_event> events = g->desync_events();
    ASSERT_EQ(events.size(), kKeptDesyncEvents);
    EXPECT_EQ(events.front().step, 11u);
    EXPECT_EQ(events.back().step, kKeptDesyncEvents + 10);
}

TEST(Faults, APlanIsValidatedAndAnEmptyPlanClearsIt) {
    std::unique_ptr<group> g;
    ASSERT_TRUE(group::create(tiny_config(kTp), g).is_ok());
    register_requests(*g);
    fault_plan plan;
    plan.faults.push_back(fault_spec{fault_kind::hang, kTp, 1, 1, 1.0, 0});
    const status bad = g->set_fault_plan(plan);
    EXPECT_EQ(bad.code, status_code::invalid_argument);
    EXPECT_NE(bad.message.find("faults[0].rank = 4"), std::string::npos) << bad.message;
    plan.faults[0].rank = 1;
    plan.faults[0].last_step = 1000;
    ASSERT_TRUE(g->set_fault_plan(plan).is_ok());
    ASSERT_TRUE(g->set_fault_plan(fault_plan{}).is_ok());
    tiny_step s;
    make_tiny_step(0, kTp, s);
    const step_reply reply = g->step(s.request);
    EXPECT_TRUE(reply.result.is_ok()) << reply.result.message;
}

}  // namespace
}  // namespace ds

// The gateway in front of rank processes (`distsample serve --rank-processes`, docs/gateway.md):
// 4 `distsample rank` processes over UCX on loopback, driven with the C++ client. Steps in every
// mode equal `distsample kernel` on the same rows; register, release, health, stats, inject and
// clear behave as with rank threads; a killed rank process is named in the failed step, and a
// restarted one re-forms the group under the same gateway; a stopped (hung) rank fails its step
// with TIMEOUT naming it and the group serves again once it runs; ranks that make their own logits
// serve steps that carry none. The command refuses a gateway model beside such ranks, and a wait
// for ranks that never join ends in time.
#include <csignal>

#include "multiprocess/gateway_front.h"
#include "multiprocess/own_logits.h"
#include "support/cli_runner.h"

using namespace ds::remote_test;

namespace {

class GatewayRankProcessesModes : public GatewayRankProcesses, public ::testing::WithParamInterface<const char*> {};

TEST_P(GatewayRankProcessesModes, StepsEqualTheKernelAndEveryRequestWorks) {
    start_gateway_and_ranks(GetParam(), {"--model", "none"});
    EXPECT_TRUE(health().ok()) << health().message();
    const json sample = random_step(false, 1);
    expect_same_outputs(call_gateway(sample), kernel_reference("sample", sample));
    for (uint32_t seed = 2; seed < 5; ++seed) {
        const json verify = random_step(true, seed);
        expect_same_outputs(call_gateway(verify), kernel_reference("verify", verify));
    }

    wire::StatsReply stats;
    ASSERT_TRUE(client_->stats(stats).is_ok());
    EXPECT_EQ(stats.steps(), 4u);
    EXPECT_EQ(stats.tp(), kTp);
    EXPECT_EQ(stats.registered_slots(), 5u);

    // A released slot is gone on every rank process: a step naming it is refused.
    ASSERT_TRUE(client_->release(5).is_ok());
    wire::StepReply reply;
    const ds::status unknown = client_->step(wire_step(sample), false, reply);
    EXPECT_NE(unknown.message.find("UNKNOWN_SLOT slots[4]"), std::string::npos) << unknown.message;
}

INSTANTIATE_TEST_SUITE_P(Modes, GatewayRankProcessesModes, ::testing::Values("swap", "sharded", "gathered"));

// Inject reaches the rank processes (rank 1 falsifies a token: a desync, repaired with rank 0's
// outputs under on_mismatch); Clear ends it.
TEST_F(GatewayRankProcesses, InjectAndClearReachTheRankProcesses) {
    start_gateway_and_ranks("swap", {"--model", "none", "--rank0-policy", "on_mismatch"});
    const json step = random_step(true, 11);
    const json want = kernel_reference("verify", step);
    wire::Request inject;
    inject.mutable_inject()->add_faults("alter_token:rank=1");
    wire::Reply reply;
    ASSERT_TRUE(client_->call(inject, reply).is_ok());
    expect_same_outputs(call_gateway(step), want);
    EXPECT_EQ(last_desync_events_, 1u);
    wire::Request clear;
    clear.mutable_clear();
    ASSERT_TRUE(client_->call(clear, reply).is_ok());
    expect_same_outputs(call_gateway(step), want);
    EXPECT_EQ(last_desync_events_, 0u);
}

TEST_F(GatewayRankProcesses, AKilledRankIsNamedAndARestartedOneReFormsTheGroup) {
    start_gateway_and_ranks("swap", {"--model", "none"});
    const json step = random_step(true, 7);
    const json want = kernel_reference("verify", step);
    expect_same_outputs(call_gateway(step), want);

    // Rank 2 stops answering while a step is in flight, then dies: its down_msg fails the step.
    expect_a_killed_member_fails_its_step(step, 2);

    const wire::HealthReply gone = health_naming("rank 2", milliseconds(3000));
    EXPECT_NE(gone.message().find("rank 2: its rank process has not joined or is gone"), std::string::npos)
        << gone.message();

    ranks_[2] = start_rank(2);  // the same gateway, the same connection
    expect_same_outputs(call_gateway_until_ok(step, milliseconds(20000)), want);
    const json sample = random_step(false, 8);
    expect_same_outputs(call_gateway(sample), kernel_reference("sample", sample));
}

// A stopped rank process hangs its step: TIMEOUT naming it (the connection timeout is long, so it
// is not dropped as gone); continued, it serves again in a re-formed group.
TEST_F(GatewayRankProcesses, AHungRankTimesOutNamingItAndServesAgainOnceContinued) {
    extra_args_ = {"--set", "topology.connection_timeout_ms=30000"};
    start_gateway_and_ranks("swap", {"--model", "none"});
    const json step = random_step(false, 9);
    const json want = kernel_reference("sample", step);
    expect_same_outputs(call_gateway(step), want);

    expect_a_stopped_member_times_out_and_serves_again(step, want, 1);
}

// Rank processes with their own model: the steps carry no logits, and the outputs equal the kernel
// on the model's rows, also for a slot's next step, whose context ends with its committed token.
class GatewayOwnLogits : public GatewayRankProcesses, public ::testing::WithParamInterface<const char*> {};

TEST_P(GatewayOwnLogits, StepsWithoutLogitsEqualTheKernelOnTheModelsRows) {
    extra_args_ = synthetic_source_args();
    start_gateway_and_ranks(GetParam(), {"--model", "none"});
    const json sample = step_without_logits(false, 31);
    const json first = call_gateway(sample);
    expect_same_outputs(first, kernel_reference("sample", with_model_logits(sample)));
    for (uint32_t seed = 32; seed < 34; ++seed) {
        const json verify = step_without_logits(true, seed);
        expect_same_outputs(call_gateway(verify), kernel_reference("verify", with_model_logits(verify)));
    }

    const json registered = call_gateway(sample);
    ASSERT_FALSE(registered.contains("error")) << registered.dump();
    json expected = sample;
    for (size_t b = 0; b < expected["requests"].size(); ++b)
        expected["requests"][b]["history"].push_back(registered["tokens"][b]);
    expect_same_outputs(call_gateway(sample, false), kernel_reference("sample", with_model_logits(expected)));

    // A step that carries logits is refused, naming the field.
    const json refused = call_gateway(with_model_logits(sample), false);
    ASSERT_TRUE(refused.contains("error")) << refused.dump();
    EXPECT_NE(refused["error"].get<std::string>().find("BAD_FIELD logits"), std::string::npos) << refused.dump();
}

INSTANTIATE_TEST_SUITE_P(Modes, GatewayOwnLogits, ::testing::Values("swap", "sharded", "gathered"));

// The command's refusals, each within its bound.
const std::string kServeRankProcesses =
    "serve --rank-processes --ranks-listen 127.0.0.1:0 --port 0 --metrics-port -1 --tp 2 --transport ucx "
    "--set vocab_size=64";

TEST(GatewayRankProcessesCli, AGatewayModelBesideRanksWithTheirOwnIsRefusedNamingBothFields) {
    const ds::cli_run run =
        ds::run_cli(kServeRankProcesses + " --set topology.logits_source=synthetic", "", std::chrono::seconds(30));
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_NE(run.err.find("gateway.model = synthetic: expected none, as topology.logits_source = synthetic"),
              std::string::npos)
        << run.err;
}

TEST(GatewayRankProcessesCli, AWaitForRanksThatNeverJoinEndsInTimeNamingTheMissingRank) {
    const auto start = clock_type::now();
    const ds::cli_run run = ds::run_cli(kServeRankProcesses + " --wait-ranks-ms 500", "", std::chrono::seconds(30));
    EXPECT_LT(clock_type::now() - start, milliseconds(10000));
    EXPECT_EQ(run.exit_code, 1) << run.err;
    EXPECT_NE(run.out.find("distsample serve: rank processes join at 127.0.0.1:"), std::string::npos) << run.out;
    EXPECT_NE(run.err.find("--wait-ranks-ms 500: the group did not form in time (rank 0: its rank process has not "
                           "joined or is gone)"),
              std::string::npos)
        << run.err;
}

TEST(GatewayRankProcessesCli, TheRankFlagsNeedRankProcesses) {
    const ds::cli_run run = ds::run_cli("serve --port 0 --wait-ranks-ms 500", "", std::chrono::seconds(30));
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_NE(run.err.find("--wait-ranks-ms requires --rank-processes"), std::string::npos) << run.err;
}

}  // namespace

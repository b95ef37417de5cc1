// The gateway in front of ranks inside model workers (`distsample serve --rank-processes` with
// topology.logits_source = worker): 4 example workers (examples/tp_workers/cpu_worker.cpp, the
// rank API on the CPU backend) over UCX on loopback, driven with the C++ client. Steps carry no
// logits and equal `distsample kernel` on the rows the workers' model makes, in every mode. A
// killed worker is named in the failed step, the steps after it fail fast, and a restarted worker
// re-forms the group under the same gateway; a stopped worker fails its step with TIMEOUT naming
// it, as does one that withholds its logits, and the group serves again afterwards.
#include <csignal>

#include "multiprocess/gateway_front.h"
#include "multiprocess/own_logits.h"

using namespace ds::remote_test;

namespace {

using GatewayWorkerRanks = GatewayRankProcesses;

class GatewayWorkerRanksModes : public GatewayWorkerRanks, public ::testing::WithParamInterface<const char*> {};

TEST_P(GatewayWorkerRanksModes, StepsWithoutLogitsEqualTheKernelOnTheWorkersRows) {
    start_gateway_and_workers(GetParam());
    EXPECT_TRUE(health().ok()) << health().message();
    const json sample = step_without_logits(false, 41);
    expect_same_outputs(call_gateway(sample), kernel_reference("sample", with_worker_rows(sample)));
    for (uint32_t seed = 42; seed < 45; ++seed) {
        const json verify = step_without_logits(true, seed);
        expect_same_outputs(call_gateway(verify), kernel_reference("verify", with_worker_rows(verify)));
    }
}

INSTANTIATE_TEST_SUITE_P(Modes, GatewayWorkerRanksModes, ::testing::Values("swap", "sharded", "gathered"));

TEST_F(GatewayWorkerRanks, AKilledWorkerIsNamedTheNextStepsFailFastAndARestartedOneReFormsTheGroup) {
    start_gateway_and_workers("sharded");
    const json step = step_without_logits(true, 61);
    const json want = kernel_reference("verify", with_worker_rows(step));
    expect_same_outputs(call_gateway(step), want);

    // Worker 2 stops while a step is in flight, then dies: the step fails at once, naming it.
    expect_a_killed_member_fails_its_step(step, 2);

    // The steps after it fail fast, not at the step timeout: at once (the gateway may not have
    // seen worker 2 go yet, and refuses while the group re-forms), and once health names worker 2
    // as gone, naming it.
    const auto refused_fast = [&](const std::string& naming) {
        const auto start = clock_type::now();
        const json refused = call_gateway(step, false);  // the step itself, not a registration
        EXPECT_LT(clock_type::now() - start, kStepTimeout / 4);
        ASSERT_TRUE(refused.contains("error")) << refused.dump();
        const std::string error = refused["error"].get<std::string>();
        EXPECT_EQ(error.rfind("RANK_FAILURE", 0), 0u) << error;
        EXPECT_NE(error.find(naming), std::string::npos) << error;
    };
    refused_fast("rank ");
    const wire::HealthReply gone = health_naming("rank 2", milliseconds(3000));
    EXPECT_NE(gone.message().find("rank 2: its rank process has not joined or is gone"), std::string::npos)
        << gone.message();
    for (int attempt = 0; attempt < 2; ++attempt) refused_fast("rank 2: its rank process has not joined or is gone");

    ranks_[2] = start_worker(2);  // the same gateway, the same connection
    expect_same_outputs(call_gateway_until_ok(step, milliseconds(20000)), want);
    const json sample = step_without_logits(false, 62);
    expect_same_outputs(call_gateway(sample), kernel_reference("sample", with_worker_rows(sample)));
}

// A stopped worker hangs its step: TIMEOUT naming its rank (the connection timeout is long, so it
// is not dropped as gone); continued, it serves again in a re-formed group.
TEST_F(GatewayWorkerRanks, AStoppedWorkerTimesOutNamingItsRankAndServesAgainOnceContinued) {
    extra_args_ = {"--set", "topology.connection_timeout_ms=30000"};
    start_gateway_and_workers("swap");
    const json step = step_without_logits(false, 71);
    const json want = kernel_reference("sample", with_worker_rows(step));
    expect_same_outputs(call_gateway(step), want);

    expect_a_stopped_member_times_out_and_serves_again(step, want, 1);
}

// A worker that never hands in a step's logits fails that step within its logits timeout, well
// before the step timeout, naming its rank; the next step is served.
TEST_F(GatewayWorkerRanks, AWorkerThatWithholdsItsLogitsTimesOutNamingItsRank) {
    start_gateway_and_workers("gathered", 2, 2);  // worker 2 withholds the second step's logits
    const json first = step_without_logits(false, 81);
    expect_same_outputs(call_gateway(first), kernel_reference("sample", with_worker_rows(first)));

    const auto sent = clock_type::now();
    const json withheld = call_gateway(step_without_logits(false, 82));
    EXPECT_LT(clock_type::now() - sent, kStepTimeout);
    ASSERT_TRUE(withheld.contains("error")) << withheld.dump();
    const std::string error = withheld["error"].get<std::string>();
    EXPECT_EQ(error.rfind("TIMEOUT", 0), 0u) << error;
    EXPECT_NE(error.find("rank 2: its worker did not hand in the logits of step"), std::string::npos) << error;

    const json next = step_without_logits(true, 83);
    expect_same_outputs(call_gateway_until_ok(next, milliseconds(20000)),
                        kernel_reference("verify", with_worker_rows(next)));
}

}  // namespace

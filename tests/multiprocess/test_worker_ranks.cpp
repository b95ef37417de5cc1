// Ranks inside model workers (include/distsample/rank.h): a coordinator and kTp worker processes
// (examples/tp_workers/cpu_worker.cpp) whose model makes each step's rows; the steps carry no
// logits, each worker hands in its vocab shard, and the outputs equal `distsample kernel` on the
// full rows in every mode, also with the shards in GPU memory and the ranks on the CUDA backend. A
// worker that withholds its logits fails its step naming its rank; a killed worker is named, and a
// restarted one re-forms the group.
#include "multiprocess/own_logits.h"

using namespace ds::remote_test;

namespace {

class WorkerRanks : public RemoteRanks, public ::testing::WithParamInterface<const char*> {
   protected:
    void start_coordinator_for_workers(const std::string& mode) {
        extra_args_ = {"--set", "topology.logits_source=worker"};
        start_coordinator(mode);
    }

    void start_workers(int withholding_rank = -1, int withhold_step = 0) {
        for (int r = 0; r < kTp; ++r) ranks_.push_back(start_worker(r, r == withholding_rank ? withhold_step : 0));
    }

    // Once the group is healthy, a sample step and three verify steps (seeds from `seed`) answer
    // what `distsample kernel` gives on the workers' full rows.
    void expect_steps_equal_the_kernel_on_the_workers_rows(uint32_t seed) {
        ASSERT_EQ(call_until_ok("health", json::object(), milliseconds(15000)), (json{{"health", "ok"}}));
        const json sample = step_without_logits(false, seed);
        expect_same_outputs(call("sample", sample), kernel_output("sample", with_worker_rows(sample)));
        for (uint32_t verify_seed = seed + 1; verify_seed < seed + 4; ++verify_seed) {
            const json verify = step_without_logits(true, verify_seed);
            expect_same_outputs(call("verify", verify), kernel_output("verify", with_worker_rows(verify)));
        }
    }
};

TEST_P(WorkerRanks, StepsWithoutLogitsEqualTheKernelOnTheWorkersRows) {
    start_coordinator_for_workers(GetParam());
    start_workers();
    expect_steps_equal_the_kernel_on_the_workers_rows(41);
}

INSTANTIATE_TEST_SUITE_P(Modes, WorkerRanks, ::testing::Values("swap", "sharded", "gathered"));

// Workers whose LM head leaves the shard in GPU memory, ranks on the CUDA backend, all on this
// host's GPU: swap moves the shards over UCX, sharded leaves each where the worker handed it in
// and moves per-row integers only; the outputs equal `distsample kernel` on the full rows. Skips
// without a GPU.
class GpuWorkerRanks : public WorkerRanks {};

TEST_P(GpuWorkerRanks, DeviceShardsOnTheCudaBackendEqualTheKernel) {
    if (!cuda_backend_runs()) {
        GTEST_SKIP() << "distsample kernel --backend cuda does not run here (no GPU, or built without CUDA)";
    }
    extra_args_ = {"--backend", "cuda", "--set", "topology.logits_source=worker"};
    start_coordinator(GetParam());
    for (int r = 0; r < kTp; ++r) ranks_.push_back(start_worker(r, 0, "device"));
    expect_steps_equal_the_kernel_on_the_workers_rows(51);
}

INSTANTIATE_TEST_SUITE_P(Modes, GpuWorkerRanks, ::testing::Values("swap", "sharded"));

TEST_F(WorkerRanks, AWorkerThatWithholdsItsLogitsFailsTheStepNamingItsRank) {
    start_coordinator_for_workers("swap");
    start_workers(2, 2);  // worker 2 never hands in the second step's logits
    ASSERT_EQ(call_until_ok("health", json::object(), milliseconds(15000)), (json{{"health", "ok"}}));
    const json first = step_without_logits(false, 51);
    expect_same_outputs(call("sample", first), kernel_output("sample", with_worker_rows(first)));
    const json withheld = call("sample", step_without_logits(false, 52));
    ASSERT_TRUE(withheld.contains("error")) << withheld.dump();
    EXPECT_NE(withheld["error"].get<std::string>().find("rank 2: its worker did not hand in the logits of step"),
              std::string::npos)
        << withheld.dump();
    // The group re-forms after a failed step; then the workers serve again.
    const json next = step_without_logits(false, 53);
    const json again = call_until_ok("sample", next, milliseconds(15000));
    expect_same_outputs(again, kernel_output("sample", with_worker_rows(next)));
}

TEST_F(WorkerRanks, AKilledWorkerIsNamedAndARestartedOneReformsTheGroup) {
    start_coordinator_for_workers("sharded");
    start_workers();
    ASSERT_EQ(call_until_ok("health", json::object(), milliseconds(15000)), (json{{"health", "ok"}}));
    ::kill(ranks_[1], SIGKILL);
    ::waitpid(ranks_[1], nullptr, 0);
    const json failed = call("sample", step_without_logits(false, 61));
    ASSERT_TRUE(failed.contains("error")) << failed.dump();
    EXPECT_NE(failed["error"].get<std::string>().find("rank 1"), std::string::npos) << failed.dump();
    ranks_[1] = start_worker(1);
    const json step = step_without_logits(true, 62);
    const json reformed = call_until_ok("verify", step, milliseconds(20000));
    expect_same_outputs(reformed, kernel_output("verify", with_worker_rows(step)));
}

}  // namespace

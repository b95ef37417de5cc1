// Fault plans in rank processes (issue 7): a coordinator and 4 rank processes on loopback over UCX,
// with faults from the command line (--fault, config/fault_plan.h). A crash (the process exits at
// the step) and a hang (it never answers) fail their step with an error naming the rank, within
// the step timeout; a desync is repaired with rank 0's outputs (on_mismatch) in the same step.
// Every step is answered exactly once, and the group re-forms: with the restarted process after a
// crash, with the same process after a hang.
#include <algorithm>

#include "multiprocess/remote_group.h"

using namespace ds::remote_test;

namespace {

class RemoteFaults : public RemoteRanks {
   protected:
    void start_with_fault(const std::string& fault) {
        extra_args_ = {"--fault", fault, "--rank0-policy", "on_mismatch"};
        start_group("swap");
    }

    // Steps 1 and 2 (a sample and a verify) run clean: the fault is at step 3. (Health checks,
    // unlike steps tried while the group forms, take no step id.)
    void run_clean_steps() {
        ASSERT_EQ(call_until_ok("health", json::object(), milliseconds(15000)), (json{{"health", "ok"}}));
        const json sample = random_step(false, 21);
        expect_same_outputs(call("sample", sample), kernel_output("sample", sample));
        const json verify = random_step(true, 22);
        expect_same_outputs(call("verify", verify), kernel_output("verify", verify));
    }

    // Step 3 fails naming `rank` within the step timeout; `took` is how long it took.
    void expect_step_fails_naming(const std::string& rank, milliseconds& took) {
        const auto sent = clock_type::now();
        const json failed = call("verify", random_step(true, 23));
        took = std::chrono::duration_cast<milliseconds>(clock_type::now() - sent);
        ASSERT_TRUE(failed.contains("error")) << failed.dump();
        EXPECT_NE(failed["error"].get<std::string>().find(rank), std::string::npos) << failed.dump();
    }

    // Later steps succeed once the group has re-formed, equal to the kernel.
    void expect_group_serves_again() {
        const json verify = random_step(true, 24);
        expect_same_outputs(call_until_ok("verify", verify, milliseconds(20000)), kernel_output("verify", verify));
        const json sample = random_step(false, 25);
        expect_same_outputs(call("sample", sample), kernel_output("sample", sample));
        expect_no_more_replies(milliseconds(500));
    }

    // Did the process `pid` (a child) exit by itself? Its exit status, or -1 while it runs.
    static int exit_status_within(pid_t pid, milliseconds within) {
        const auto deadline = clock_type::now() + within;
        int status = 0;
        while (clock_type::now() < deadline) {
            if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            std::this_thread::sleep_for(milliseconds(20));
        }
        return -1;
    }
};

TEST_F(RemoteFaults, ACrashedRankFailsItsStepNamingItAndTheRestartedProcessReFormsTheGroup) {
    start_with_fault("crash:rank=2:steps=3");
    run_clean_steps();
    milliseconds took{};
    expect_step_fails_naming("rank 2", took);
    EXPECT_LT(took, kStepTimeout) << "detected by the connection loss, not the step timeout";
    const pid_t crashed = ranks_[2];
    EXPECT_EQ(exit_status_within(crashed, milliseconds(2000)), 3) << "the crash fault exits with status 3";
    children_.erase(std::remove(children_.begin(), children_.end(), crashed), children_.end());  // reaped
    ranks_[2] = start_rank(2);
    expect_group_serves_again();
}

TEST_F(RemoteFaults, AHungRankFailsItsStepNamingItWithinTheStepTimeoutAndTheGroupReForms) {
    start_with_fault("hang:rank=1:steps=3");
    run_clean_steps();
    milliseconds took{};
    expect_step_fails_naming("rank 1", took);
    EXPECT_LT(took, kStepTimeout + milliseconds(1000));
    expect_group_serves_again();  // the hung process takes the new epoch
}

TEST_F(RemoteFaults, ADesyncedRankIsRepairedWithRankZerosOutputsInTheSameStep) {
    start_with_fault("alter_token:rank=3:steps=3");
    run_clean_steps();
    const json verify = random_step(true, 23);
    expect_same_outputs(call("verify", verify), kernel_output("verify", verify));  // step 3, repaired
    expect_group_serves_again();  // rank 3 committed rank 0's outputs: no desync after
    const std::string log = slurp(test_stem() + "_coordinator.log");
    EXPECT_NE(log.find("desync in step 3: rank 3 differs from rank 0"), std::string::npos) << log;
    EXPECT_EQ(log.find("desync in step 4"), std::string::npos) << log;
}

}  // namespace

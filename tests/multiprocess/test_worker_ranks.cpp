// Ranks inside model workers (include/distsample/rank.h): a coordinator and kTp worker processes
// (examples/tp_workers/cpu_worker.cpp) whose model makes each step's rows; the steps carry no
// logits, each worker hands in its vocab shard, and the outputs equal `distsample kernel` on the
// full rows in every mode. A worker that withholds its logits fails its step naming its rank; a
// killed worker is named, and a restarted one re-forms the group.
#include "examples/tp_workers/worker_rows.h"
#include "multiprocess/remote_group.h"

using namespace ds::remote_test;

namespace {

constexpr int kModelSeed = 9;
constexpr milliseconds kLogitsTimeout{1000};  // shorter than the transport's: the withholding rank is named

// random_step's requests without logits.
json step_without_logits(bool verify, uint32_t seed) {
    json step = random_step(verify, seed);
    step.erase("logits");
    return step;
}

// The rows the workers make: slots are 1..bs (cli/step_json.cpp), then positions and drafts.
json with_worker_rows(json step) {
    ds::synthetic_lm_config lm;
    lm.vocab_size = kVocab;
    lm.seed = kModelSeed;
    const ds::synthetic_lm model(lm);
    std::vector<int32_t> slots;
    std::vector<int64_t> positions;
    std::vector<int32_t> candidates;
    for (size_t b = 0; b < step["requests"].size(); ++b) {
        slots.push_back(static_cast<int32_t>(b + 1));
        positions.push_back(step["requests"][b]["position"].get<int64_t>());
        if (step.contains("candidates")) {
            for (int token : step["candidates"][b]) candidates.push_back(token);
        }
    }
    const int32_t n = step.contains("candidates") ? static_cast<int32_t>(step["candidates"][0].size()) : 1;
    const std::vector<float> rows = ds::example::model_rows(model, slots, positions, candidates, n);
    json logits = json::array();
    for (size_t r = 0; r < rows.size() / kVocab; ++r)
        logits.push_back(std::vector<float>(rows.begin() + static_cast<std::ptrdiff_t>(r * kVocab),
                                            rows.begin() + static_cast<std::ptrdiff_t>((r + 1) * kVocab)));
    step["logits"] = logits;
    return step;
}

class WorkerRanks : public RemoteRanks, public ::testing::WithParamInterface<const char*> {
   protected:
    void start_coordinator_for_workers(const std::string& mode) {
        extra_args_ = {"--set", "topology.logits_source=worker"};
        start_coordinator(mode);
    }

    // The worker takes the group's keys as --set key=value (the coordinator's flags spelt as keys).
    pid_t start_worker(int rank, int withhold_step = 0) {
        std::vector<std::string> args{"--coordinator",
                                      address_,
                                      "--rank",
                                      std::to_string(rank),
                                      "--model-seed",
                                      std::to_string(kModelSeed),
                                      "--logits-timeout-ms",
                                      std::to_string(kLogitsTimeout.count()),
                                      "--withhold-step",
                                      std::to_string(withhold_step)};
        const std::vector<std::string> group = group_args(mode_);
        for (size_t i = 0; i + 1 < group.size(); i += 2) {
            args.push_back("--set");
            if (group[i] == "--set") {
                args.push_back(group[i + 1]);
            } else {
                const std::string key = group[i] == "--threads" ? "threads_per_rank" : group[i].substr(2);
                args.push_back(key + "=" + group[i + 1]);
            }
        }
        return spawn({}, args, -1, -1, test_stem() + "_rank" + std::to_string(rank) + ".log",
                     ds::sibling_binary("cpu_worker"));
    }

    void start_workers(int withholding_rank = -1, int withhold_step = 0) {
        for (int r = 0; r < kTp; ++r) ranks_.push_back(start_worker(r, r == withholding_rank ? withhold_step : 0));
    }
};

TEST_P(WorkerRanks, StepsWithoutLogitsEqualTheKernelOnTheWorkersRows) {
    start_coordinator_for_workers(GetParam());
    start_workers();
    ASSERT_EQ(call_until_ok("health", json::object(), milliseconds(15000)), (json{{"health", "ok"}}));
    const json sample = step_without_logits(false, 41);
    expect_same_outputs(call("sample", sample), kernel_output("sample", with_worker_rows(sample)));
    for (uint32_t seed = 42; seed < 45; ++seed) {
        const json verify = step_without_logits(true, seed);
        expect_same_outputs(call("verify", verify), kernel_output("verify", with_worker_rows(verify)));
    }
}

INSTANTIATE_TEST_SUITE_P(Modes, WorkerRanks, ::testing::Values("swap", "sharded", "gathered"));

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

// A coordinator (`distsample coordinator`) and 4 rank processes (`distsample rank`) over the ucx
// transport: steps in every mode (on the GPU too, where there is one) equal `distsample kernel` on
// the full logits, on loopback and with
// every process on a host of its own (network namespaces); a killed rank process fails the step in
// flight naming it, the coordinator stays up, and a restarted rank re-forms the group; without
// the answer lane the answers are the same.
#include "multiprocess/remote_group.h"
#include "support/netns_hosts.h"

using namespace ds::remote_test;

namespace {

class RemoteRanksModes : public RemoteRanks, public ::testing::WithParamInterface<const char*> {};

TEST_P(RemoteRanksModes, SampleAndVerifyEqualTheKernelOnTheFullLogits) {
    start_group(GetParam());
    expect_steps_equal_the_kernel(1);
    EXPECT_EQ(call("health", json::object()), (json{{"health", "ok"}}));
}

INSTANTIATE_TEST_SUITE_P(Modes, RemoteRanksModes, ::testing::Values("swap", "sharded", "gathered"));

// Without the answer lane (docs/architecture.md) the ranks' answers come over CAF alone: the same
// outputs.
TEST_F(RemoteRanks, WithoutTheAnswerLaneTheAnswersComeOverCafAndAreTheSame) {
    extra_args_ = {"--set", "topology.answer_port=-1"};
    start_group("sharded");
    expect_steps_equal_the_kernel(2);
}

// `coordinator --wait-ranks-ms`: a second line says when the group has formed, so the first step
// needs no retries; without ranks the wait ends in time with exit code 1.
class RemoteRanksReady : public RemoteRanks {
   protected:
    std::vector<std::string> listen_args() const override {
        return {"--listen", "127.0.0.1:0", "--wait-ranks-ms", std::to_string(wait_.count())};
    }
    milliseconds wait_{30000};
};

TEST_F(RemoteRanksReady, TheCoordinatorSaysWhenTheGroupHasFormed) {
    start_group("swap");
    EXPECT_EQ(read_reply(wait_ + milliseconds(5000)), (json{{"ready", {{"tp", kTp}}}}));
    const json sample = random_step(false, 1);
    expect_same_outputs(call("sample", sample), kernel_output("sample", sample));
}

TEST_F(RemoteRanksReady, AGroupThatDoesNotFormEndsTheWaitInTime) {
    wait_ = milliseconds(500);
    start_coordinator("swap");
    const auto start = clock_type::now();
    EXPECT_EQ(read_reply(milliseconds(15000)), (json{{"error", "test: the coordinator closed its output"}}));
    EXPECT_LT(clock_type::now() - start, milliseconds(10000));
    EXPECT_NE(slurp(test_stem() + "_coordinator.log").find("--wait-ranks-ms 500: the group did not form in time"),
              std::string::npos);
}

// Rank processes that sample on the GPU (`--backend cuda`): each uploads its shard and swaps it over
// UCX with ucx_device_memory = auto, with UCX's peer error handling on (the default) and off. The
// tokens equal `distsample kernel`; every rank's log names the memory path it took: `direct`
// where UCX has a transport that puts GPU memory (on the H200 with the libucx-cu13 wheel: cuda_ipc,
// both ways), else staged through pinned host buffers. Skips without a GPU;
// DS_EXPECT_UCX_DEVICE_PATH=direct requires `direct`.
class CudaRankProcesses : public RemoteRanks, public ::testing::WithParamInterface<bool> {};

TEST_P(CudaRankProcesses, SwapTheirShardsOverUcxAndEqualTheKernel) {
    if (!cuda_backend_runs()) {
        GTEST_SKIP() << "distsample kernel --backend cuda does not run here (no GPU, or built without CUDA)";
    }
    const bool peer_error_handling = GetParam();
    extra_args_ = {"--backend", "cuda",
                   "--set",     "ucx_device_memory=auto",
                   "--set",     std::string("ucx_peer_error_handling=") + (peer_error_handling ? "true" : "false")};
    start_group("swap");
    expect_steps_equal_the_kernel(11);
    const char* expected = std::getenv("DS_EXPECT_UCX_DEVICE_PATH");
    const std::string want = expected != nullptr ? expected : "";
    for (int r = 0; r < kTp; ++r) {
        const std::string log = slurp(test_stem() + "_rank" + std::to_string(r) + ".log");
        const size_t at = log.find("ucx swaps ");
        ASSERT_NE(at, std::string::npos) << "rank " << r << " did not log its memory path:\n" << log;
        const std::string line = log.substr(at, log.find('\n', at) - at);
        std::printf("rank %d: %s\n", r, line.c_str());
        if (!want.empty()) {
            EXPECT_EQ(line.rfind("ucx swaps " + want + " memory", 0), 0u) << line;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Ucx, CudaRankProcesses, ::testing::Bool(), [](const auto& param_info) {
    return std::string(param_info.param ? "PeerErrorHandling" : "NoPeerErrorHandling");
});

// Rank processes in exact sharded mode on the GPU (`--backend cuda`): each rank's shard is
// processed and sampled by the CUDA shard primitives on its GPU, and only per-row integers cross
// UCX; the tokens equal `distsample kernel`. Skips without a GPU.
TEST_F(RemoteRanks, ShardedRankProcessesOnTheGpuEqualTheKernel) {
    if (!cuda_backend_runs()) {
        GTEST_SKIP() << "distsample kernel --backend cuda does not run here (no GPU, or built without CUDA)";
    }
    extra_args_ = {"--backend", "cuda"};
    start_group("sharded");
    expect_steps_equal_the_kernel(21);
}

TEST_F(RemoteRanks, AKilledRankFailsTheStepInFlightNamingItAndARestartedRankReFormsTheGroup) {
    start_group("swap");
    const json step = random_step(true, 7);
    const json want = kernel_output("verify", step);
    expect_same_outputs(call_until_ok("verify", step, milliseconds(15000)), want);

    // Rank 2 stops answering while a step is in flight (the slots are registered already), then
    // dies: the down_msg, not the step timeout, fails the step.
    const pid_t victim = ranks_[2];
    ASSERT_EQ(::kill(victim, SIGSTOP), 0);
    const auto sent = clock_type::now();
    json registered = step;
    registered["register"] = false;
    send("verify", registered);
    std::this_thread::sleep_for(milliseconds(200));
    ASSERT_EQ(::kill(victim, SIGKILL), 0);
    const json failed = read_reply(kStepTimeout + milliseconds(2000));
    const auto took = clock_type::now() - sent;
    ASSERT_TRUE(failed.contains("error")) << failed.dump();
    // Named by whichever notices first: CAF's down_msg ("rank 2: the rank process is gone") or a
    // survivor's UCX endpoint ("... rank 2 failed").
    EXPECT_NE(failed["error"].get<std::string>().find("rank 2"), std::string::npos) << failed.dump();
    EXPECT_LT(took, kStepTimeout / 2);

    // The coordinator is up and, once the down_msg is in (when UCX noticed first, the group may
    // briefly wait for the group to form), says which rank is missing.
    json health;
    const auto deadline = clock_type::now() + milliseconds(3000);
    do {
        health = call("health", json::object());
        ASSERT_TRUE(health.contains("error")) << health.dump();
        if (health["error"].get<std::string>().find("rank 2") != std::string::npos) break;
        std::this_thread::sleep_for(milliseconds(50));
    } while (clock_type::now() < deadline);
    EXPECT_NE(health["error"].get<std::string>().find("rank 2: its rank process has not joined or is gone"),
              std::string::npos)
        << health.dump();

    ranks_[2] = start_rank(2);
    expect_same_outputs(call_until_ok("verify", step, milliseconds(20000)), want);
    const json sample = random_step(false, 8);
    expect_same_outputs(call("sample", sample), kernel_output("sample", sample));
}

// A rank stopped past the connection timeout is dropped by the coordinator. Continued, it says it
// was evicted and exits non-zero, so that a restart-on-failure supervisor restarts it.
TEST_F(RemoteRanks, ARankStoppedUntilEvictedSaysSoAndExitsNonZero) {
    extra_args_ = {"--set", "topology.heartbeat_ms=100", "--set", "topology.connection_timeout_ms=800"};
    start_group("swap");
    const json step = random_step(false, 9);
    ASSERT_FALSE(call_until_ok("sample", step, milliseconds(15000)).contains("error"));
    const pid_t stopped = ranks_[1];
    ASSERT_EQ(::kill(stopped, SIGSTOP), 0);
    std::this_thread::sleep_for(milliseconds(3000));  // the coordinator hears no heartbeat from it
    ASSERT_EQ(::kill(stopped, SIGCONT), 0);
    EXPECT_EQ(exit_status_within(stopped, milliseconds(10000)), 1);
    const std::string log = slurp(test_stem() + "_rank1.log");
    EXPECT_NE(log.find("rank 1: evicted by the coordinator at " + address_), std::string::npos) << log;
    EXPECT_EQ(log.find("the coordinator is gone"), std::string::npos) << log;
}

}  // namespace

namespace {

// The same group with every process on a host of its own (a network namespace, netns_hosts.h):
// the coordinator on the hub, rank r on host r. Where they run and how they meet comes from the
// topology section of a config file the test writes: the coordinator's address, the ranks' hosts
// (each rank process finds its rank from its host's address), UCX over tcp on the host's one
// interface, the timeouts.
class RemoteHosts : public RemoteRanks, public ::testing::WithParamInterface<const char*> {
   protected:
    void SetUp() override {
        if (!hosts_.unavailable().empty()) GTEST_SKIP() << "no network namespaces: " << hosts_.unavailable();
        RemoteRanks::SetUp();
        json topology{{"coordinator", hosts_.hub_address() + ":7710"},  // a fresh namespace: the port is free
                      {"hosts", json::array()},
                      {"ucx_tls", "tcp"},
                      {"ucx_net_devices", ds::test_support::netns_hosts::interface()},
                      {"join_timeout_ms", 10000},
                      {"heartbeat_ms", 200},
                      {"connection_timeout_ms", 2000}};
        for (int r = 0; r < kTp; ++r) topology["hosts"].push_back(hosts_.host_address(r));
        const std::string path = test_stem() + "_topology.json";
        std::ofstream(path) << json{{"topology", topology}}.dump(2);
        extra_args_ = {"--config", path};
    }
    std::vector<std::string> coordinator_launcher() const override {
        return ds::test_support::netns_hosts::exec_in(hosts_.hub());
    }
    std::vector<std::string> rank_launcher(int rank) const override {
        return ds::test_support::netns_hosts::exec_in(hosts_.host(rank));
    }
    std::vector<std::string> listen_args() const override { return {}; }
    std::vector<std::string> rank_args(int) const override { return {}; }

    // Another prefix and subnet than test_ucx_transport's, so both can run at once.
    ds::test_support::netns_hosts hosts_{"dsrh", "10.214.0", kTp};
};

TEST_P(RemoteHosts, OneHostPerRankEqualsTheLocalTransportAndTheKernel) {
    const std::string mode = GetParam();
    start_group(mode);
    const json sample = random_step(false, 11);
    const json sampled = call_until_ok("sample", sample, milliseconds(20000));
    expect_same_outputs(sampled, kernel_output("sample", sample));
    expect_same_outputs(sampled, local_transport_output("sample", sample, mode));
    for (uint32_t seed = 12; seed < 15; ++seed) {
        const json verify = random_step(true, seed);
        const json verified = call("verify", verify);
        expect_same_outputs(verified, kernel_output("verify", verify));
        expect_same_outputs(verified, local_transport_output("verify", verify, mode));
    }
}

INSTANTIATE_TEST_SUITE_P(Modes, RemoteHosts, ::testing::Values("swap", "sharded", "gathered"));

}  // namespace

namespace {

// `distsample config check` prints the topology section; the rank and coordinator commands refuse
// a bad one naming the key and what is allowed.
TEST(RemoteTopology, ConfigCheckPrintsItAndTheCommandsNameABadKey) {
    const std::string path = test_stem() + "_config.json";
    std::ofstream(path)
        << json{{"tp", 2},
                {"vocab_size", 64},
                {"topology",
                 {{"coordinator", "10.1.0.254:7800"}, {"hosts", {"10.1.0.1", "10.1.0.2"}}, {"devices", {1, 0}}}}}
               .dump();
    const std::string out = test_stem() + "_out.txt";
    const std::string check = tool_path() + " config check " + path + " > " + out + " 2>&1";
    ASSERT_EQ(std::system(check.c_str()), 0) << slurp(out);
    const json printed = json::parse(slurp(out));
    EXPECT_EQ(printed["topology"]["coordinator"], "10.1.0.254:7800");
    EXPECT_EQ(printed["topology"]["devices"], (json{1, 0}));
    EXPECT_EQ(printed["topology"]["join_timeout_ms"], 10000);

    // Neither --rank nor an entry of topology.hosts that is this host.
    const std::string rank = tool_path() + " rank --config " + path + " > " + out + " 2>&1";
    EXPECT_EQ(WEXITSTATUS(std::system(rank.c_str())), 2);
    EXPECT_NE(slurp(out).find("0 entries of topology.hosts name this host"), std::string::npos) << slurp(out);
    const std::string bad = tool_path() + " coordinator --config " + path +
                            " --set topology.heartbeat_ms=5000 < /dev/null > " + out + " 2>&1";
    EXPECT_EQ(WEXITSTATUS(std::system(bad.c_str())), 2);
    EXPECT_NE(slurp(out).find("topology.heartbeat_ms = 5000: expected less than topology.connection_timeout_ms (2000)"),
              std::string::npos)
        << slurp(out);
}

}  // namespace

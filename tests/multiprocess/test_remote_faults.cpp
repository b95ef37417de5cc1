// Fault plans in rank processes (docs/faults.md): a coordinator and 4 rank processes on loopback over UCX,
// with one fault from the command line (--fault, config/fault_plan.h) at step 3 on rank 2, payload
// checksums on and the rank-0 policy on_mismatch. For every rank-side fault kind: a desync is
// repaired with rank 0's outputs in its step; a corruption (checksum) fails its step at once; a
// hang, a delay beyond the transport timeout and a dropped put or step message fail it within the
// timeouts; a repeated step message is refused by the rank and harmless. A failed step names the
// rank, every step is answered exactly once, the steps answered equal `distsample kernel`, the
// group serves again afterwards, and the coordinator's fault report (`{"op": "faults"}`) counts
// the fault as detected or masked. A crash (the process exits at the step) has its own test, as
// the process must be restarted. The connection faults (slow_connection, cut_connection) are the
// gateway's: tests/gateway/test_gateway_server.cpp covers them.
#include <algorithm>
#include <iterator>
#include <ostream>

#include "config/fault_plan.h"
#include "multiprocess/remote_group.h"

using namespace ds::remote_test;

namespace {

using ds::fault_kind;

constexpr int kFaultRank = 2;
constexpr uint64_t kFaultStep = 3;
// Beyond the peers' transport timeout, within the coordinator's step timeout.
constexpr int kLongDelayMs = static_cast<int>(kTransportTimeout.count()) + 500;
static_assert(kLongDelayMs < kStepTimeout.count(),
              "the delay must be caught by the transport timeout, before the step timeout");

// What the step with the fault comes to.
enum class outcome {
    desync,    // answered equal to the kernel, the desync repaired (on_mismatch)
    checksum,  // failed within the step by a payload checksum, naming the rank
    timeout,   // failed within the timeouts, naming the rank
    harmless,  // answered equal to the kernel, the fault masked by design
};

struct kind_case {
    fault_kind kind;
    int delay_ms;
    outcome expected;
};

const kind_case kRankSideCases[] = {
    {fault_kind::alter_token, 0, outcome::desync},
    {fault_kind::alter_accept_length, 0, outcome::desync},
    // The shard's checksums as handed in catch the raised logit at rank 0, which receives row 0.
    {fault_kind::alter_logit, 0, outcome::checksum},
    {fault_kind::corrupt_payload, 0, outcome::checksum},
    // Step 3 receives rank 2's stale payload of step 2, which differs from its fresh one.
    {fault_kind::duplicate_put, 0, outcome::checksum},
    {fault_kind::delay_kernel, kLongDelayMs, outcome::timeout},
    {fault_kind::delay_transport, kLongDelayMs, outcome::timeout},
    {fault_kind::hang, 0, outcome::timeout},
    {fault_kind::drop_put, 0, outcome::timeout},
    {fault_kind::drop_control, 0, outcome::timeout},
    {fault_kind::duplicate_control, 0, outcome::harmless},
};

// The kind's name in ctest's test names, rather than the struct's bytes.
void PrintTo(const kind_case& c, std::ostream* out) { *out << ds::fault_kind_name(c.kind); }

std::string fault_text(fault_kind kind, int delay_ms) {
    std::string text = std::string(ds::fault_kind_name(kind)) + ":rank=" + std::to_string(kFaultRank) +
                       ":steps=" + std::to_string(kFaultStep);
    if (delay_ms > 0) text += ":ms=" + std::to_string(delay_ms);
    return text;
}

class RemoteFaults : public RemoteRanks {
   protected:
    void start_with_fault(const std::string& fault) {
        extra_args_ = {"--fault", fault, "--rank0-policy", "on_mismatch", "--set", "faults.payload_checksums=true"};
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

    // Step 3 fails naming the faulty rank; `took` is how long it took.
    void expect_step_fails_naming_the_rank(milliseconds& took) {
        const auto sent = clock_type::now();
        const json failed = call("verify", random_step(true, 23));
        took = std::chrono::duration_cast<milliseconds>(clock_type::now() - sent);
        ASSERT_TRUE(failed.contains("error")) << failed.dump();
        EXPECT_NE(failed["error"].get<std::string>().find("rank " + std::to_string(kFaultRank)), std::string::npos)
            << failed.dump();
    }

    // Steps 4 and 5 succeed once the group serves again (health first: it takes no step id),
    // equal to the kernel, and nothing is answered twice.
    void expect_group_serves_again() {
        ASSERT_EQ(call_until_ok("health", json::object(), milliseconds(20000)), (json{{"health", "ok"}}));
        const json verify = random_step(true, 24);
        expect_same_outputs(call("verify", verify), kernel_output("verify", verify));
        const json sample = random_step(false, 25);
        expect_same_outputs(call("sample", sample), kernel_output("sample", sample));
        expect_no_more_replies(milliseconds(500));
    }

    // The coordinator's fault report: the one fault of `kind`, detected (or masked), nothing
    // unexplained.
    void expect_reported(fault_kind kind, bool detected) {
        const json report = call("faults", json::object());
        ASSERT_TRUE(report.contains("summary")) << report.dump();
        for (const json& k : report["summary"]) {
            const bool mine = k["kind"] == ds::fault_kind_name(kind);
            EXPECT_EQ(k["injected"], mine ? 1 : 0) << k.dump();
            if (!mine) continue;
            EXPECT_EQ(k["detected"], detected ? 1 : 0) << report.dump();
            EXPECT_EQ(k["masked"], detected ? 0 : 1) << report.dump();
        }
        EXPECT_TRUE(report["unexplained"].empty()) << report.dump();
    }
};

class EveryRankSideFault : public RemoteFaults, public ::testing::WithParamInterface<kind_case> {};

TEST_P(EveryRankSideFault, IsDetectedInTimeNamingTheRankAndTheOtherStepsEqualTheKernel) {
    const kind_case param = GetParam();
    start_with_fault(fault_text(param.kind, param.delay_ms));
    run_clean_steps();
    if (param.expected == outcome::desync || param.expected == outcome::harmless) {
        const json verify = random_step(true, 23);
        expect_same_outputs(call("verify", verify), kernel_output("verify", verify));  // step 3
    } else {
        milliseconds took{};
        expect_step_fails_naming_the_rank(took);
        if (param.expected == outcome::checksum) {
            EXPECT_LT(took, kTransportTimeout) << "caught within the step, before any timeout";
        } else {
            EXPECT_LT(took, kStepTimeout + milliseconds(1000));
        }
    }
    expect_group_serves_again();
    expect_reported(param.kind, param.expected != outcome::harmless);
    const std::string log = slurp(test_stem() + "_coordinator.log");
    if (param.expected == outcome::desync) {
        EXPECT_NE(log.find("desync in step 3: rank 2 differs from rank 0"), std::string::npos) << log;
    }
    // Every rank committed the same outputs (rank 0's after a desync): the later steps agree.
    EXPECT_EQ(log.find("desync in step 4"), std::string::npos) << log;
    EXPECT_EQ(log.find("desync in step 5"), std::string::npos) << log;
    if (param.kind == fault_kind::duplicate_control) {
        const std::string rank_log = slurp(test_stem() + "_rank2.log");
        EXPECT_NE(rank_log.find("step 3 repeated after step 3: refused"), std::string::npos) << "run once, not twice\n"
                                                                                             << rank_log;
    }
}

INSTANTIATE_TEST_SUITE_P(RemoteFaults, EveryRankSideFault, ::testing::ValuesIn(kRankSideCases),
                         [](const auto& param_info) {
                             return std::string(ds::fault_kind_name(param_info.param.kind));
                         });

// A kind added to kAllFaultKinds must get a case here (or its own test, like crash).
TEST(RemoteFaultKinds, EveryRankSideKindHasACase) {
    for (const fault_kind kind : ds::kAllFaultKinds) {
        if (ds::is_connection_fault(kind) || kind == fault_kind::crash)
            continue;  // the gateway's tests; the test below
        const bool covered = std::any_of(std::begin(kRankSideCases), std::end(kRankSideCases),
                                         [kind](const kind_case& c) { return c.kind == kind; });
        EXPECT_TRUE(covered) << ds::fault_kind_name(kind) << " has no case in kRankSideCases";
    }
}

TEST_F(RemoteFaults, ACrashedRankFailsItsStepNamingItAndTheRestartedProcessReFormsTheGroup) {
    start_with_fault(fault_text(fault_kind::crash, 0));
    run_clean_steps();
    milliseconds took{};
    expect_step_fails_naming_the_rank(took);
    EXPECT_LT(took, kStepTimeout) << "detected by the connection loss, not the step timeout";
    const pid_t crashed = ranks_[kFaultRank];
    EXPECT_EQ(exit_status_within(crashed, milliseconds(2000)), 3) << "the crash fault exits with status 3";
    children_.erase(std::remove(children_.begin(), children_.end(), crashed), children_.end());  // reaped
    ranks_[kFaultRank] = start_rank(kFaultRank);
    expect_group_serves_again();
    expect_reported(fault_kind::crash, true);
}

}  // namespace

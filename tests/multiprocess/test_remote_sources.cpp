// Rank processes that make their own logits (topology.logits_source = synthetic): the coordinator's
// steps carry no logits, each rank makes its shard of every row from the request's context (its
// history, then the tokens committed since, then the drafts), and the outputs equal
// `distsample kernel` on the full rows the same model makes, in every mode. A coordinator that
// still sends logits to such ranks is refused naming the key.
#include "multiprocess/own_logits.h"

using namespace ds::remote_test;

namespace {

class RemoteOwnLogits : public RemoteRanks, public ::testing::WithParamInterface<const char*> {};

TEST_P(RemoteOwnLogits, StepsWithoutLogitsEqualTheKernelOnTheModelsRows) {
    extra_args_ = synthetic_source_args();
    start_group(GetParam());
    ASSERT_EQ(call_until_ok("health", json::object(), milliseconds(15000)), (json{{"health", "ok"}}));
    const json sample = step_without_logits(false, 31);
    const json sampled = call("sample", sample);
    expect_same_outputs(sampled, kernel_output("sample", with_model_logits(sample)));
    for (uint32_t seed = 32; seed < 35; ++seed) {
        const json verify = step_without_logits(true, seed);
        expect_same_outputs(call("verify", verify), kernel_output("verify", with_model_logits(verify)));
    }

    // Registered afresh, then sampled again without registering: each request's context now ends
    // with the token it committed.
    const json first = call("sample", sample);
    ASSERT_FALSE(first.contains("error")) << first.dump();
    json again = sample;
    again["register"] = false;
    json expected = sample;
    for (size_t b = 0; b < expected["requests"].size(); ++b)
        expected["requests"][b]["history"].push_back(first["tokens"][b]);
    expect_same_outputs(call("sample", again), kernel_output("sample", with_model_logits(expected)));
}

INSTANTIATE_TEST_SUITE_P(Modes, RemoteOwnLogits, ::testing::Values("swap", "sharded", "gathered"));

TEST_F(RemoteOwnLogits, ACoordinatorThatSendsLogitsIsRefusedNamingTheKey) {
    start_coordinator("swap");  // topology.logits_source = wire
    extra_args_ = synthetic_source_args();
    for (int r = 0; r < kTp; ++r) ranks_.push_back(start_rank(r));
    const json reply = call_until_ok("health", json::object(), milliseconds(15000));
    ASSERT_EQ(reply, (json{{"health", "ok"}}));
    const json refused = call("sample", random_step(false, 36));
    ASSERT_TRUE(refused.contains("error")) << refused.dump();
    EXPECT_NE(refused["error"].get<std::string>().find("this rank makes its own (topology.logits_source)"),
              std::string::npos)
        << refused.dump();
}

}  // namespace

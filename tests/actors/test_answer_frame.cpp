// An answer's bytes (actors/answer_frame.h): a rank's result survives them bit for bit, and a body
// of another step, shape or digest is refused naming the field.
#include "support/answer_lane_support.h"

namespace ds::answer_lane_test {
namespace {

TEST(AnswerLane, AResultSurvivesTheFrameBitForBit) {
    const rank_result sent = result_of(2, 9);
    rank_result got;
    const status s = decode_answer(encode_answer(sent), 2, *make_step(9), got);
    ASSERT_TRUE(s.is_ok()) << s.message;
    EXPECT_EQ(got.rank, 2);
    EXPECT_EQ(got.step_id, 9u);
    EXPECT_EQ(got.digest, sent.digest);
    EXPECT_EQ(got.outputs->packed, sent.outputs->packed);
    EXPECT_EQ(got.outputs->accept_index, sent.outputs->accept_index);
    EXPECT_EQ(got.outputs->row_error, sent.outputs->row_error);
    EXPECT_EQ(
        std::memcmp(got.outputs->logprobs.data(), sent.outputs->logprobs.data(), sent.outputs->logprobs.size() * 4), 0);
    EXPECT_TRUE(std::isnan(got.outputs->logprobs[2]));
    EXPECT_EQ(got.timing.rank_answered_at_ns, 55);
    EXPECT_EQ(got.timing.rank_step_ns, 11);
}

TEST(AnswerLane, AFrameOfAnotherStepShapeOrDigestIsRefusedNamingTheField) {
    const std::string body = encode_answer(result_of(0, 9));
    rank_result got;
    EXPECT_NE(decode_answer(body, 0, *make_step(8), got).message.find("step id = 9: expected 8"), std::string::npos);
    auto wider = std::make_shared<dist_step>(*make_step(9));
    wider->plan.tokens_per_req = 3;
    EXPECT_NE(decode_answer(body, 0, *wider, got).message.find("N = 2: expected 3 and 3"), std::string::npos)
        << decode_answer(body, 0, *wider, got).message;
    std::string flipped = body;
    flipped.back() ^= 1;  // the last row's error flag
    EXPECT_NE(decode_answer(flipped, 0, *make_step(9), got).message.find("digest"), std::string::npos);
    EXPECT_NE(decode_answer(body.substr(0, 20), 0, *make_step(9), got).message.find("expected at least"),
              std::string::npos);
    EXPECT_EQ(answer_step_id(body.substr(0, 3)), 0u);
}

}  // namespace
}  // namespace ds::answer_lane_test

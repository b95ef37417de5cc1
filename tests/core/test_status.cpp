// The one error type (core/status.h): status, result<T>, DS_TRY and DS_TRY_ASSIGN.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/status.h"

namespace ds {
namespace {

TEST(Status, SuccessIsOkAndCarriesNoMessage) {
    const status s = status::success();
    EXPECT_TRUE(s.is_ok());
    EXPECT_EQ(s.code, status_code::ok);
    EXPECT_EQ(s.message, "");
}

TEST(Status, InvalidAndErrorKeepTheirCodeAndMessage) {
    const status bad = status::invalid("top_p = 2: expected a number in (0, 1]");
    EXPECT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.code, status_code::invalid_argument);
    EXPECT_EQ(bad.message, "top_p = 2: expected a number in (0, 1]");
    const status late = status::error(status_code::timeout, "rank 3 did not answer");
    EXPECT_EQ(late.code, status_code::timeout);
    EXPECT_EQ(late.message, "rank 3 did not answer");
}

TEST(Result, HoldsAValueOrTheStatusWhyNot) {
    const result<int> seven = 7;
    ASSERT_TRUE(seven.is_ok());
    EXPECT_EQ(*seven, 7);
    EXPECT_TRUE(seven.to_status().is_ok());

    const result<int> none = status::invalid("vocab_size = 0: expected >= 1");
    EXPECT_FALSE(none.is_ok());
    EXPECT_EQ(none.error().code, status_code::invalid_argument);
    EXPECT_EQ(none.to_status().message, "vocab_size = 0: expected >= 1");
}

// An ok status has no value to give: a result built from one is an internal error, never a value
// that was not set.
TEST(Result, BuiltFromAnOkStatusIsAnInternalError) {
    const result<std::string> odd = status::success();
    EXPECT_FALSE(odd.is_ok());
    EXPECT_EQ(odd.error().code, status_code::internal);
}

TEST(Result, MovesItsValueOut) {
    result<std::unique_ptr<int>> owned = std::make_unique<int>(5);
    ASSERT_TRUE(owned.is_ok());
    std::unique_ptr<int> taken = std::move(owned).value();
    ASSERT_NE(taken, nullptr);
    EXPECT_EQ(*taken, 5);
    result<std::string> text = std::string("abc");
    EXPECT_EQ(text->size(), 3u);
}

status fails_when(bool fail) { return fail ? status::invalid("asked to fail") : status::success(); }

result<int> half_of(int value) {
    if (value % 2 != 0) return status::invalid("value = " + std::to_string(value) + ": expected an even number");
    return value / 2;
}

// Returns at the first failure, else runs to the end.
status two_steps(bool first_fails, bool second_fails, int& steps_run) {
    steps_run = 0;
    DS_TRY(fails_when(first_fails));
    ++steps_run;
    DS_TRY(fails_when(second_fails));
    ++steps_run;
    return status::success();
}

result<int> quarter_of(int value) {
    DS_TRY_ASSIGN(const int half, half_of(value));
    DS_TRY_ASSIGN(const int quarter, half_of(half));
    return quarter;
}

TEST(Try, ReturnsTheFirstFailure) {
    int steps_run = -1;
    EXPECT_TRUE(two_steps(false, false, steps_run).is_ok());
    EXPECT_EQ(steps_run, 2);
    const status first = two_steps(true, false, steps_run);
    EXPECT_EQ(first.message, "asked to fail");
    EXPECT_EQ(steps_run, 0);
    EXPECT_FALSE(two_steps(false, true, steps_run).is_ok());
    EXPECT_EQ(steps_run, 1);
}

TEST(TryAssign, DeclaresTheValueOrReturnsTheStatus) {
    const result<int> quarter = quarter_of(12);
    ASSERT_TRUE(quarter.is_ok());
    EXPECT_EQ(*quarter, 3);
    const result<int> odd = quarter_of(6);  // 6 / 2 = 3 is odd
    ASSERT_FALSE(odd.is_ok());
    EXPECT_EQ(odd.error().message, "value = 3: expected an even number");
    EXPECT_EQ(quarter_of(5).error().message, "value = 5: expected an even number");
}

}  // namespace
}  // namespace ds

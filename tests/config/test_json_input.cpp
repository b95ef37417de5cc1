// The shared JSON reader (config/json_input.h): depth limit, duplicate keys, numbers beyond a
// double, short quotes; and the capacity estimate (config/capacity.h).
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "config/capacity.h"
#include "config/json_input.h"

namespace ds {
namespace {

using nlohmann::json;

std::string nested(int depth) { return std::string(static_cast<size_t>(depth), '[') + std::string(depth, ']'); }

std::string error_of(const std::string& text) {
    const result<json> doc = parse_json(text);
    EXPECT_FALSE(doc.is_ok()) << text.substr(0, 80);
    return doc.error().message;
}

TEST(JsonInput, ReadsOrdinaryDocuments) {
    const result<json> doc = parse_json(R"({"a": [1, 2.5, "x", null, true], "b": {"c": -3}})");
    ASSERT_TRUE(doc.is_ok()) << doc.error().message;
    EXPECT_EQ((*doc)["a"][1], 2.5);
    EXPECT_EQ((*doc)["b"]["c"], -3);
    EXPECT_EQ((*doc)["a"].size(), 5u);
    EXPECT_TRUE(parse_json(nested(kMaxJsonDepth)).is_ok());
}

// 10^5 levels crashed every reader: the library's printer recursed once per level.
TEST(JsonInput, RefusesDeepNestingWhileParsing) {
    EXPECT_NE(error_of(nested(kMaxJsonDepth + 1)).find("nested deeper than 64 levels"), std::string::npos);
    const std::string deep = "{\"requests\": [{\"logit_bias\": " + nested(100000) + "}]}";
    const std::string e = error_of(deep);
    EXPECT_NE(e.find("requests[0].logit_bias"), std::string::npos) << e;
    EXPECT_LT(e.size(), 200u) << e;
}

TEST(JsonInput, RefusesDuplicateKeysNamingThem) {
    EXPECT_EQ(error_of(R"({"vocab_size": 4, "vocab_size": 5})"), "duplicate key \"vocab_size\"");
    EXPECT_EQ(error_of(R"({"requests": [{}, {"seed": 1, "seed": 2}]})"), "requests[1]: duplicate key \"seed\"");
}

TEST(JsonInput, KeepsNumbersBeyondADoubleAsTheirText) {
    const result<json> doc = parse_json(R"({"top_p": 1e400, "big": -2e308, "fine": 1e308, "huge": 1e99999})");
    ASSERT_FALSE(doc.is_ok());  // beyond even a long double
    EXPECT_NE(doc.error().message.find("huge: 1e99999 is beyond the range of any number"), std::string::npos)
        << doc.error().message;
    const result<json> ok = parse_json(R"({"top_p": 1e400, "big": -2e308, "fine": 1e308})");
    ASSERT_TRUE(ok.is_ok()) << ok.error().message;
    EXPECT_TRUE(is_overflowed_number((*ok)["top_p"]));
    EXPECT_FALSE((*ok)["top_p"].is_number());
    EXPECT_EQ(quote_json((*ok)["top_p"]), "1e400");
    EXPECT_EQ(quote_json((*ok)["big"]), "-2e308");
    EXPECT_EQ((*ok)["fine"], 1e308);
}

TEST(JsonInput, SyntaxErrorsSayWhere) {
    const std::string e = error_of(R"({"tp": )");
    EXPECT_NE(e.find("not valid JSON at byte"), std::string::npos) << e;
    EXPECT_NE(error_of("").find("not valid JSON"), std::string::npos);
    EXPECT_NE(error_of("{} {}").find("not valid JSON"), std::string::npos);
}

TEST(JsonInput, QuotesAreShort) {
    const std::string long_text(2 << 20, 'x');
    const std::string q = quote_json(json(long_text));
    EXPECT_LT(q.size(), kMaxQuoteChars + 40);
    EXPECT_NE(q.find("(2097152 characters)"), std::string::npos) << q;
    EXPECT_EQ(quote_json(json::array({1, 2, 3})), "an array of 3 entries");
    EXPECT_EQ(quote_json(json::object()), "an object of 0 keys");
    EXPECT_EQ(quote_text("abc"), "'abc'");
    EXPECT_LT(quote_text(long_text).size(), kMaxQuoteChars + 40);
}

TEST(JsonInput, NumbersKeepTheirDigits) {
    EXPECT_EQ(format_number(1e-50), "1e-50");
    EXPECT_EQ(format_number(0.1), "0.1");
    EXPECT_EQ(quote_json(json(1e-50)), "1e-50");
    EXPECT_EQ(quote_json(json(std::numeric_limits<double>::denorm_min())), "5e-324");
}

TEST(Capacity, CountsWhatTheDocumentedRangesAllocate) {
    group_config config;
    config.limits.max_slots = 1 << 20;  // the top of its documented range, with the default penalty tokens
    const rank_memory m = estimate_rank_memory(config, 1);
    EXPECT_EQ(m.penalty_counts, (uint64_t{1} << 20) * 4096 * 8);  // 32 GiB
    config.limits.memory_budget_mib = 1024;
    const status s = check_memory_budget(config, 1);
    EXPECT_EQ(s.code, status_code::invalid_argument);
    EXPECT_NE(s.message.find("max_slots * max_penalty_tokens"), std::string::npos) << s.message;
    EXPECT_NE(s.message.find("memory_budget_mib = 1024"), std::string::npos) << s.message;
    EXPECT_NE(s.message.find("a rank needs"), std::string::npos) << s.message;
    EXPECT_NE(s.message.find("1.0 GiB"), std::string::npos) << s.message;
}

TEST(Capacity, TheDefaultsFitAndTheBudgetCountsEveryRankOfTheProcess) {
    group_config config;
    config.limits.memory_budget_mib = 64;
    EXPECT_TRUE(check_memory_budget(config, 1).is_ok()) << check_memory_budget(config, 1).message;
    const uint64_t one = estimate_rank_memory(config, 1).total();
    config.limits.memory_budget_mib = static_cast<int64_t>(one * 2 / (1 << 20)) + 1;
    EXPECT_TRUE(check_memory_budget(config, 2).is_ok());
    EXPECT_FALSE(check_memory_budget(config, 4).is_ok());
    config.limits.memory_budget_mib = 0;  // this host's memory
    EXPECT_GT(memory_budget_bytes(config), uint64_t{1} << 20);
}

TEST(Capacity, DemoSizedBatchesNameTheFieldsInsteadOfBadAlloc) {
    // `demo --batch 65536 --vocab 64`: pool rows and the sharded collectives dominate.
    group_config config;
    config.limits.vocab_size = 64;
    config.limits.max_batch = 65536;
    config.limits.max_slots = 65537;
    config.limits.max_tokens_per_req = 4;
    config.limits.memory_budget_mib = 4096;
    const status s = check_memory_budget(config, config.distribution.tp);
    EXPECT_EQ(s.code, status_code::invalid_argument);
    EXPECT_NE(s.message.find("4 ranks need"), std::string::npos) << s.message;
    EXPECT_EQ(format_bytes(512), "512 bytes");
    EXPECT_EQ(format_bytes(uint64_t{3} << 30), "3.0 GiB");
}

}  // namespace
}  // namespace ds

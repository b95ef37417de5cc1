// The n-gram model behind `distsample demo --model ngram`.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "sources/ngram_lm.h"

using namespace ds;

namespace {

const char* kText = "the cat sat on the mat . the cat ate the rat . a dog sat on the log .";

double probability_sum(const std::vector<float>& row) {
    double sum = 0.0;
    for (float l : row) sum += std::exp(static_cast<double>(l));
    return sum;
}

}  // namespace

TEST(NgramLm, RowsAreLogProbabilitiesOverAPaddedVocabulary) {
    ngram_lm trigram;
    ASSERT_TRUE(ngram_lm::train(kText, 3, trigram).is_ok());
    EXPECT_EQ(trigram.vocab_size() % 8, 0);
    EXPECT_GE(trigram.vocab_size(), 11);  // the, cat, sat, on, mat, ., ate, rat, a, dog, log
    std::vector<float> row(static_cast<size_t>(trigram.vocab_size()));
    for (int32_t i = 0; i < 4; ++i) {
        trigram.logits(trigram.prompt(i), row.data());
        EXPECT_NEAR(probability_sum(row), 1.0, 1e-5);
    }
    // Padding tokens are never possible.
    EXPECT_EQ(row.back(), -INFINITY);
}

TEST(NgramLm, FollowsTheTextAndFallsBackToLowerOrders) {
    ngram_lm trigram;
    ngram_lm bigram;
    ASSERT_TRUE(ngram_lm::train(kText, 3, trigram).is_ok());
    ASSERT_TRUE(ngram_lm::train(kText, 2, bigram).is_ok());
    const int32_t the = trigram.token_id("the");
    const int32_t cat = trigram.token_id("cat");
    const int32_t sat = trigram.token_id("sat");
    const int32_t on = trigram.token_id("on");
    ASSERT_GE(the, 0);
    std::vector<float> row(static_cast<size_t>(trigram.vocab_size()));
    auto best = [&](const ngram_lm& m, uint64_t context) {
        m.logits(context, row.data());
        return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    };
    EXPECT_EQ(best(trigram, ngram_lm::context_of(sat, on)), the);                      // "sat on" -> "the"
    EXPECT_EQ(best(trigram, ngram_lm::context_of(on, the)), trigram.token_id("mat"));  // seen once each: mat before log
    // "the cat" -> sat or ate; the bigram draft only knows "cat" -> sat | ate as well.
    const int32_t after_cat = best(bigram, ngram_lm::context_of(0, cat));
    EXPECT_TRUE(after_cat == sat || after_cat == trigram.token_id("ate"));
    // An unseen context still gives a distribution (unigram fallback).
    trigram.logits(ngram_lm::context_of(trigram.token_id("dog"), trigram.token_id("rat")), row.data());
    EXPECT_NEAR(probability_sum(row), 1.0, 1e-5);
    EXPECT_EQ(trigram.token_text(cat), "cat");
}

TEST(NgramLm, RejectsBadInput) {
    ngram_lm m;
    EXPECT_NE(ngram_lm::train(kText, 4, m).message.find("expected 2 or 3"), std::string::npos);
    EXPECT_NE(ngram_lm::train("two words", 3, m).message.find("at least 3 words"), std::string::npos);
    EXPECT_NE(ngram_lm::train_file("/nonexistent/corpus.txt", 3, m).message.find("cannot be opened"),
              std::string::npos);
}

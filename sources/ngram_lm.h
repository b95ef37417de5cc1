// A small real language model for the demo: an interpolated trigram (or bigram) model over the
// words of a text, with add-one unigram smoothing. Trained in a fraction of a second from a text
// every Debian machine has (/usr/share/common-licenses/GPL-3 by default). A lower-order model of
// the same text makes a natural draft model: it often, but not always, agrees with the target.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "sources/logits_source.h"

namespace ds {

class ngram_lm final : public logits_source {
   public:
    // Tokens are lower-cased runs of letters and digits, and single punctuation marks. `order` is
    // 2 (bigram) or 3 (trigram). The vocabulary is padded to a multiple of 8 (so it splits over
    // TP = 1, 2, 4, 8); padding tokens have logit -inf.
    static status train(const std::string& text, int order, ngram_lm& out);
    static status train_file(const std::string& path, int order, ngram_lm& out);

    int32_t vocab_size() const override { return padded_vocab_; }
    void logits(uint64_t context, float* row) const override;
    // The two corpus tokens before a position spread over the text by `index`.
    uint64_t prompt(int32_t index) const override;
    std::string token_text(int32_t token) const override;
    // The context of tokens (..., a, b), for tests and callers with their own prompts.
    static uint64_t context_of(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    int32_t token_id(const std::string& word) const;  // -1 when unknown

   private:
    using followers = std::vector<std::pair<int32_t, int32_t>>;  // (next token, count)

    int order_ = 3;
    int32_t words_ = 0;
    int32_t padded_vocab_ = 0;
    std::vector<std::string> text_of_;
    std::unordered_map<std::string, int32_t> id_of_;
    std::vector<int32_t> corpus_;
    std::vector<double> unigram_;                       // smoothed P(w)
    std::unordered_map<uint32_t, followers> bigrams_;   // b -> followers
    std::unordered_map<uint64_t, followers> trigrams_;  // (a, b) -> followers
};

}  // namespace ds

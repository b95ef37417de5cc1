#include "sources/ngram_lm.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

namespace ds {

namespace {

std::vector<std::string> split_words(const std::string& text) {
    std::vector<std::string> words;
    std::string word;
    for (char raw : text) {
        const auto c = static_cast<unsigned char>(raw);
        if (std::isalnum(c)) {
            word += static_cast<char>(std::tolower(c));
            continue;
        }
        if (!word.empty()) words.push_back(std::move(word));
        word.clear();
        if (std::ispunct(c)) words.emplace_back(1, static_cast<char>(c));
    }
    if (!word.empty()) words.push_back(word);
    return words;
}

// Sorted (token, count) lists, so a row is built the same way on every run.
template <class Key>
std::unordered_map<Key, std::vector<std::pair<int32_t, int32_t>>> to_followers(
    const std::map<std::pair<Key, int32_t>, int32_t>& counts) {
    std::unordered_map<Key, std::vector<std::pair<int32_t, int32_t>>> out;
    for (const auto& [key, count] : counts) out[key.first].emplace_back(key.second, count);
    return out;
}

// Adds weight * count / total of each follower to the probabilities; returns whether any.
bool add_followers(const std::vector<std::pair<int32_t, int32_t>>* list, double weight, std::vector<double>& probs) {
    if (list == nullptr) return false;
    double total = 0.0;
    for (const auto& f : *list) total += f.second;
    for (const auto& f : *list) probs[static_cast<size_t>(f.first)] += weight * f.second / total;
    return true;
}

}  // namespace

status ngram_lm::train(const std::string& text, int order, ngram_lm& out) {
    if (order != 2 && order != 3)
        return status::invalid("ngram order = " + std::to_string(order) + ": expected 2 or 3");
    const std::vector<std::string> words = split_words(text);
    if (words.size() < 3) return status::invalid("ngram corpus: expected at least 3 words");
    ngram_lm m;
    m.order_ = order;
    for (const std::string& w : words) {
        auto [it, added] = m.id_of_.emplace(w, static_cast<int32_t>(m.text_of_.size()));
        if (added) m.text_of_.push_back(w);
        m.corpus_.push_back(it->second);
    }
    m.words_ = static_cast<int32_t>(m.text_of_.size());
    m.padded_vocab_ = (m.words_ + 7) / 8 * 8;
    std::vector<double> counts(static_cast<size_t>(m.words_), 1.0);  // add-one
    std::map<std::pair<uint32_t, int32_t>, int32_t> bigram_counts;
    std::map<std::pair<uint64_t, int32_t>, int32_t> trigram_counts;
    for (size_t i = 0; i < m.corpus_.size(); ++i) {
        counts[static_cast<size_t>(m.corpus_[i])] += 1.0;
        if (i >= 1) ++bigram_counts[{static_cast<uint32_t>(m.corpus_[i - 1]), m.corpus_[i]}];
        if (i >= 2) ++trigram_counts[{context_of(m.corpus_[i - 2], m.corpus_[i - 1]), m.corpus_[i]}];
    }
    double total = 0.0;
    for (double c : counts) total += c;
    for (double c : counts) m.unigram_.push_back(c / total);
    m.bigrams_ = to_followers(bigram_counts);
    if (order == 3) m.trigrams_ = to_followers(trigram_counts);
    out = std::move(m);
    return status::success();
}

status ngram_lm::train_file(const std::string& path, int order, ngram_lm& out) {
    std::ifstream in(path);
    if (!in) return status::invalid("ngram corpus '" + path + "': cannot be opened");
    std::stringstream text;
    text << in.rdbuf();
    return train(text.str(), order, out);
}

void ngram_lm::logits(uint64_t context, float* row) const {
    // Interpolation: the highest order seen in the context gets most of the weight.
    const auto last = static_cast<uint32_t>(context);
    const auto bigram = bigrams_.find(last);
    const auto trigram = trigrams_.find(context);
    const bool has_bigram = bigram != bigrams_.end();
    const bool has_trigram = trigram != trigrams_.end();
    const double w3 = has_trigram ? 0.7 : 0.0;
    const double w2 = has_bigram ? (has_trigram ? 0.25 : 0.9) : 0.0;
    const double w1 = 1.0 - w3 - w2;
    std::vector<double> probs(static_cast<size_t>(words_));
    for (int32_t t = 0; t < words_; ++t) probs[static_cast<size_t>(t)] = w1 * unigram_[static_cast<size_t>(t)];
    add_followers(has_bigram ? &bigram->second : nullptr, w2, probs);
    add_followers(has_trigram ? &trigram->second : nullptr, w3, probs);
    for (int32_t t = 0; t < words_; ++t) row[t] = static_cast<float>(std::log(probs[static_cast<size_t>(t)]));
    std::fill(row + words_, row + padded_vocab_, -std::numeric_limits<float>::infinity());
}

uint64_t ngram_lm::prompt(int32_t index) const {
    const size_t n = corpus_.size();
    const size_t at = 2 + (static_cast<size_t>(index) * 7919u) % (n - 2);
    return context_of(corpus_[at - 2], corpus_[at - 1]);
}

std::string ngram_lm::token_text(int32_t token) const {
    if (token < 0 || token >= words_) return "<" + std::to_string(token) + ">";
    return text_of_[static_cast<size_t>(token)];
}

int32_t ngram_lm::token_id(const std::string& word) const {
    const auto it = id_of_.find(word);
    return it == id_of_.end() ? -1 : it->second;
}

}  // namespace ds

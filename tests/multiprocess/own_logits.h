// Steps for rank processes that make their own logits (topology.logits_source = synthetic): the
// flags that give every process the same model, random_step's requests with a history each and no
// logits, and the same step with the rows the ranks' model makes from each request's context (its
// history, then for verify row j the drafts 1..j), for `distsample kernel`, the reference.
#pragma once

#include <string>
#include <vector>

#include "multiprocess/remote_group.h"
#include "sources/synthetic_logits.h"

namespace ds::remote_test {

constexpr int kModelSeed = 5;

// The group flags that have every rank make its shard with the synthetic model of kModelSeed.
inline std::vector<std::string> synthetic_source_args() {
    return {"--set", "topology.logits_source=synthetic", "--set", "topology.model_seed=" + std::to_string(kModelSeed)};
}

// random_step's requests with a history each, and no logits.
inline json step_without_logits(bool verify, uint32_t seed) {
    json step = random_step(verify, seed);
    step.erase("logits");
    for (size_t b = 0; b < step["requests"].size(); ++b) {
        step["requests"][b]["history"] =
            json{static_cast<int>(3 * b + 1), static_cast<int>(seed % kVocab), static_cast<int>(7 * b + 2)};
    }
    return step;
}

// The rows the ranks make: the synthetic model after the history and, for verify row j, drafts 1..j.
inline json with_model_logits(json step) {
    synthetic_lm_config lm;
    lm.vocab_size = kVocab;
    lm.seed = kModelSeed;
    const synthetic_lm model(lm);
    const bool verify = step.contains("candidates");
    json rows = json::array();
    std::vector<float> row(kVocab);
    for (size_t b = 0; b < step["requests"].size(); ++b) {
        uint64_t context = 0;
        for (int token : step["requests"][b]["history"]) context = logits_source::next_context(context, token);
        const size_t n = verify ? step["candidates"][b].size() : 1;
        for (size_t j = 0; j < n; ++j) {
            if (j > 0) context = logits_source::next_context(context, step["candidates"][b][j].get<int>());
            model.logits(context, row.data());
            rows.push_back(row);
        }
    }
    step["logits"] = rows;
    return step;
}

}  // namespace ds::remote_test

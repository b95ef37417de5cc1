// Steps for rank processes that make their own logits (topology.logits_source = synthetic): the
// flags that give every process the same model, random_step's requests with a history each and no
// logits, and the same step with the rows the ranks' model makes from each request's context (its
// history, then for verify row j the drafts 1..j), for `distsample kernel`, the reference. Also
// the rows that ranks inside the example model workers (topology.logits_source = worker) get.
#pragma once

#include <string>
#include <vector>

#include "examples/tp_workers/worker_rows.h"
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

// The rows the example workers make (RemoteRanks::start_worker): their model after each request's
// slot (b + 1, as cli/step_json.cpp and wire_step number them) and position, then the drafts.
inline json with_worker_rows(json step) {
    synthetic_lm_config lm;
    lm.vocab_size = kVocab;
    lm.seed = kWorkerModelSeed;
    const synthetic_lm model(lm);
    std::vector<int32_t> slots;
    std::vector<int64_t> positions;
    std::vector<int32_t> candidates;
    for (size_t b = 0; b < step["requests"].size(); ++b) {
        slots.push_back(static_cast<int32_t>(b + 1));
        positions.push_back(step["requests"][b]["position"].get<int64_t>());
        if (step.contains("candidates")) {
            for (int token : step["candidates"][b]) candidates.push_back(token);
        }
    }
    const int32_t n = step.contains("candidates") ? static_cast<int32_t>(step["candidates"][0].size()) : 1;
    const std::vector<float> rows = example::model_rows(model, slots, positions, candidates, n);
    json logits = json::array();
    for (size_t r = 0; r < rows.size() / kVocab; ++r)
        logits.push_back(std::vector<float>(rows.begin() + static_cast<std::ptrdiff_t>(r * kVocab),
                                            rows.begin() + static_cast<std::ptrdiff_t>((r + 1) * kVocab)));
    step["logits"] = logits;
    return step;
}

}  // namespace ds::remote_test

// The models a process can make its logits with, by name: "synthetic" (synthetic_logits.h, from a
// seed) or "ngram" (ngram_lm.h, a trigram model trained on a text file; its vocabulary is the
// corpus's, whatever vocab_size says). Used by the gateway (gateway.model) and by rank processes
// (topology.logits_source).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "sources/logits_source.h"

namespace ds {

// Makes model `name`, or says why not (a corpus that cannot be read). Any other name leaves `out` null.
status make_logits_source(const std::string& name, int32_t vocab_size, int32_t seed, const std::string& corpus,
                          std::unique_ptr<logits_source>& out);

}  // namespace ds

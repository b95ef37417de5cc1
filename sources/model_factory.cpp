#include "sources/model_factory.h"

#include "sources/ngram_lm.h"
#include "sources/synthetic_logits.h"

namespace ds {

status make_logits_source(const std::string& name, int32_t vocab_size, int32_t seed, const std::string& corpus,
                          std::unique_ptr<logits_source>& out) {
    if (name == "ngram") {
        auto model = std::make_unique<ngram_lm>();
        DS_TRY(ngram_lm::train_file(corpus, 3, *model));
        out = std::move(model);
    } else if (name == "synthetic") {
        synthetic_lm_config c;
        c.vocab_size = vocab_size;
        c.seed = static_cast<uint64_t>(seed);
        out = std::make_unique<synthetic_lm>(c);
    }
    return status::success();
}

}  // namespace ds

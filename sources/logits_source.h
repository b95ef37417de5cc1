// A language model as the demo and the benchmarks see it: the logits of the next token after a
// context, where the context is the last two tokens packed as (previous << 32) | last (an n-gram
// window). Implemented by the synthetic generator and by the n-gram model trained from text.
#pragma once

#include <cstdint>
#include <string>

namespace ds {

class logits_source {
   public:
    virtual ~logits_source() = default;
    virtual int32_t vocab_size() const = 0;
    // Writes vocab_size() logits for the token after `context` into `row`.
    virtual void logits(uint64_t context, float* row) const = 0;
    // A starting context ("prompt") for request `index`.
    virtual uint64_t prompt(int32_t index) const = 0;
    // How to print a token.
    virtual std::string token_text(int32_t token) const = 0;

    // The context after appending `token`: the last two tokens.
    static uint64_t next_context(uint64_t context, int32_t token) {
        return ((context & 0xFFFFFFFFull) << 32) | static_cast<uint32_t>(token);
    }
};

}  // namespace ds

// Speculative decoding through the gateway from C++: the server runs the target model (start it
// with `distsample serve --model ngram`), this client drafts with the bigram model of the same
// text (the same tokens and ids), sends one verify step per round for all its requests, and
// prints what each step emitted and the acceptance rate.
//
//   gateway_client_example [ADDRESS] [CORPUS] [STEPS]   (defaults 127.0.0.1:7700, GPL-3, 8)
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "clients/cpp/distsample_client.h"
#include "sources/ngram_lm.h"

namespace {

using namespace ds;
namespace wire = distsample::wire;

int fail(const std::string& what) {
    fmt::print(stderr, "error: {}\n", what);
    return 1;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string address = argc > 1 ? argv[1] : "127.0.0.1:7700";
    const std::string corpus = argc > 2 ? argv[2] : "/usr/share/common-licenses/GPL-3";
    const int steps = argc > 3 ? std::atoi(argv[3]) : 8;
    constexpr int32_t kRequests = 3;
    constexpr int32_t kDrafts = 3;
    constexpr int32_t kN = kDrafts + 1;

    ngram_lm draft;
    if (status s = ngram_lm::train_file(corpus, 2, draft); !s.is_ok()) return fail(s.message);
    std::unique_ptr<client::gateway_client> gateway;
    if (status s = client::gateway_client::connect(
            address, std::getenv("DISTSAMPLE_SECRET") ? std::getenv("DISTSAMPLE_SECRET") : "", gateway);
        !s.is_ok()) {
        return fail(s.message);
    }
    wire::StatsReply stats;
    if (status s = gateway->stats(stats); !s.is_ok()) return fail(s.message);
    if (stats.vocab_size() != draft.vocab_size()) {
        return fail(fmt::format(
            "the server's vocabulary has {} tokens, the draft's {}: start it with --model ngram on the same corpus",
            stats.vocab_size(), draft.vocab_size()));
    }

    // Each request: a prompt of two corpus tokens, its slot, its last token and position.
    std::vector<int32_t> slots(kRequests), last(kRequests);
    std::vector<int64_t> positions(kRequests, 2);
    std::vector<uint64_t> contexts(kRequests);
    std::vector<std::string> text(kRequests);
    for (int32_t b = 0; b < kRequests; ++b) {
        contexts[b] = draft.prompt(b);
        const std::vector<int32_t> prompt = {static_cast<int32_t>(contexts[b] >> 32),
                                             static_cast<int32_t>(contexts[b] & 0xFFFFFFFFu)};
        wire::SamplingParams params;
        params.set_temperature(0.8f);
        params.set_seed(100 + static_cast<uint64_t>(b));
        slots[b] = 0;  // the server picks
        if (status s = gateway->register_request(params, prompt, slots[b]); !s.is_ok()) return fail(s.message);
        text[b] = draft.token_text(prompt[0]) + " " + draft.token_text(prompt[1]);
    }

    // The first token of each request: a sample step, logits from the server's model.
    wire::Step first;
    for (int32_t b = 0; b < kRequests; ++b) {
        first.add_slots(slots[b]);
        first.add_positions(positions[b]);
    }
    wire::StepReply reply;
    if (status s = gateway->step(first, false, reply); !s.is_ok()) return fail(s.message);
    for (int32_t b = 0; b < kRequests; ++b) {
        last[b] = reply.predict(b);
        contexts[b] = logits_source::next_context(contexts[b], last[b]);
        ++positions[b];
        text[b] += " " + draft.token_text(last[b]);
    }

    int64_t proposed = 0, accepted = 0;
    std::vector<float> row(static_cast<size_t>(draft.vocab_size()));
    for (int step = 1; step <= steps; ++step) {
        wire::Step verify;
        verify.set_tokens_per_req(kN);
        for (int32_t b = 0; b < kRequests; ++b) {
            verify.add_slots(slots[b]);
            verify.add_positions(positions[b]);
            verify.add_candidates(last[b]);
            uint64_t context = contexts[b];
            for (int32_t d = 0; d < kDrafts; ++d) {  // greedy bigram drafts
                draft.logits(context, row.data());
                const auto token = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
                verify.add_candidates(token);
                context = logits_source::next_context(context, token);
            }
        }
        if (status s = gateway->step(verify, true, reply); !s.is_ok()) return fail(s.message);
        std::string line = fmt::format("step {:2} (verify):", step);
        for (int32_t b = 0; b < kRequests; ++b) {
            const int32_t length = reply.accept_length(b);
            proposed += kDrafts;
            accepted += length - 1;
            std::string words;
            for (int32_t i = 0; i < length; ++i) {
                const int32_t token = reply.predict(b * kN + i);
                words += (i ? " " : "") + draft.token_text(token);
                text[b] += " " + draft.token_text(token);
                contexts[b] = logits_source::next_context(contexts[b], token);
                last[b] = token;
            }
            positions[b] += length;
            line += fmt::format(" [{}] {} token(s): {} |", b, length, words);
        }
        fmt::print("{}\n", line);
    }
    fmt::print("acceptance rate: {}/{} drafts = {:.1f}%\n", accepted, proposed,
               proposed ? 100.0 * accepted / proposed : 0.0);
    for (int32_t b = 0; b < kRequests; ++b) {
        fmt::print("request {}: {}\n", b, text[b]);
        if (status s = gateway->release(slots[b]); !s.is_ok()) return fail(s.message);
    }
    return 0;
}

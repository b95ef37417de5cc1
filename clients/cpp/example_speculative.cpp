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
#include "core/status.h"
#include "sources/ngram_lm.h"

namespace {

using namespace ds;
namespace wire = distsample::wire;

int fail(const std::string& what) {
    fmt::print(stderr, "error: {}\n", what);
    return 1;
}

constexpr int32_t kRequests = 3;
constexpr int32_t kDrafts = 3;
constexpr int32_t kN = kDrafts + 1;

// The client's side of speculative decoding: its requests and the draft model.
class speculative_client {
   public:
    speculative_client(const ngram_lm& draft, client::gateway_client& gateway) : draft_(draft), gateway_(gateway) {}

    // Each request: a prompt of two corpus tokens; the server picks its slot.
    status register_requests() {
        for (int32_t b = 0; b < kRequests; ++b) {
            contexts_[b] = draft_.prompt(b);
            const std::vector<int32_t> prompt = {static_cast<int32_t>(contexts_[b] >> 32),
                                                 static_cast<int32_t>(contexts_[b] & 0xFFFFFFFFu)};
            wire::SamplingParams params;
            params.set_temperature(0.8f);
            params.set_seed(100 + static_cast<uint64_t>(b));
            slots_[b] = 0;
            DS_TRY(gateway_.register_request(params, prompt, slots_[b]));
            text_[b] = draft_.token_text(prompt[0]) + " " + draft_.token_text(prompt[1]);
        }
        return status::success();
    }

    // The first token of each request: a sample step, logits from the server's model.
    status sample_first_tokens() {
        wire::Step first;
        for (int32_t b = 0; b < kRequests; ++b) {
            first.add_slots(slots_[b]);
            first.add_positions(positions_[b]);
        }
        wire::StepReply reply;
        DS_TRY(gateway_.step(first, false, reply));
        for (int32_t b = 0; b < kRequests; ++b) append(b, reply.predict(b));
        return status::success();
    }

    // One verify step of greedy bigram drafts for every request; prints what each emitted.
    status verify_round(int step) {
        wire::Step verify;
        verify.set_tokens_per_req(kN);
        std::vector<float> row(static_cast<size_t>(draft_.vocab_size()));
        for (int32_t b = 0; b < kRequests; ++b) {
            verify.add_slots(slots_[b]);
            verify.add_positions(positions_[b]);
            verify.add_candidates(last_[b]);
            uint64_t context = contexts_[b];
            for (int32_t d = 0; d < kDrafts; ++d) {
                draft_.logits(context, row.data());
                const auto token = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
                verify.add_candidates(token);
                context = logits_source::next_context(context, token);
            }
        }
        wire::StepReply reply;
        DS_TRY(gateway_.step(verify, true, reply));
        std::string line = fmt::format("step {:2} (verify):", step);
        for (int32_t b = 0; b < kRequests; ++b) {
            const int32_t length = reply.accept_length(b);
            proposed_ += kDrafts;
            accepted_ += length - 1;
            std::string words;
            for (int32_t i = 0; i < length; ++i) {
                const int32_t token = reply.predict(b * kN + i);
                words += (i ? " " : "") + draft_.token_text(token);
                append(b, token);
            }
            line += fmt::format(" [{}] {} token(s): {} |", b, length, words);
        }
        fmt::print("{}\n", line);
        return status::success();
    }

    status finish() {
        fmt::print("acceptance rate: {}/{} drafts = {:.1f}%\n", accepted_, proposed_,
                   proposed_ ? 100.0 * static_cast<double>(accepted_) / static_cast<double>(proposed_) : 0.0);
        for (int32_t b = 0; b < kRequests; ++b) {
            fmt::print("request {}: {}\n", b, text_[b]);
            DS_TRY(gateway_.release(slots_[b]));
        }
        return status::success();
    }

   private:
    void append(int32_t b, int32_t token) {
        text_[b] += " " + draft_.token_text(token);
        contexts_[b] = logits_source::next_context(contexts_[b], token);
        last_[b] = token;
        ++positions_[b];
    }

    const ngram_lm& draft_;
    client::gateway_client& gateway_;
    int32_t slots_[kRequests] = {};
    int32_t last_[kRequests] = {};
    int64_t positions_[kRequests] = {2, 2, 2};
    uint64_t contexts_[kRequests] = {};
    std::string text_[kRequests];
    int64_t proposed_ = 0;
    int64_t accepted_ = 0;
};

status run(const std::string& address, const std::string& corpus, int steps) {
    ngram_lm draft;
    DS_TRY(ngram_lm::train_file(corpus, 2, draft));
    std::unique_ptr<client::gateway_client> gateway;
    const char* secret = std::getenv("DISTSAMPLE_SECRET");
    DS_TRY(client::gateway_client::connect(address, secret != nullptr ? secret : "", gateway));
    wire::StatsReply stats;
    DS_TRY(gateway->stats(stats));
    if (stats.vocab_size() != draft.vocab_size()) {
        return status::invalid(fmt::format(
            "the server's vocabulary has {} tokens, the draft's {}: start it with --model ngram on the same corpus",
            stats.vocab_size(), draft.vocab_size()));
    }
    speculative_client session(draft, *gateway);
    DS_TRY(session.register_requests());
    DS_TRY(session.sample_first_tokens());
    for (int step = 1; step <= steps; ++step) DS_TRY(session.verify_round(step));
    return session.finish();
}

}  // namespace

int main(int argc, char** argv) {
    const std::string address = argc > 1 ? argv[1] : "127.0.0.1:7700";
    const std::string corpus = argc > 2 ? argv[2] : "/usr/share/common-licenses/GPL-3";
    const int steps = argc > 3 ? std::atoi(argv[3]) : 8;
    const status s = run(address, corpus, steps);
    return s.is_ok() ? 0 : fail(s.message);
}

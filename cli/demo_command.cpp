// `distsample demo`: speculative decoding through the coordinator with synthetic target and draft
// models: TP rank actors (threads), the configured transport (local by default), the CPU backend.
// Each step the draft proposes N-1 tokens greedily, the target scores every prefix, and the ranks
// verify the chains; the demo prints what each request emitted, the acceptance and the step latency.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <vector>

#include <distsample/group.h>

#include "cli/commands.h"
#include "config/config_file.h"
#include "sources/ngram_lm.h"
#include "sources/synthetic_logits.h"

namespace ds::cli {

namespace {

struct demo_request {
    const char* label;
    sampling_params params;
    uint64_t context = 0;
    int64_t position = 0;
    int32_t last_token = 0;
    int64_t drafts_proposed = 0;
    int64_t drafts_accepted = 0;
    std::vector<int32_t> text;
};

std::vector<demo_request> make_requests(int count, uint64_t seed) {
    struct preset {
        const char* label;
        sampling_params params;
    };
    std::vector<preset> presets(6);
    presets[0].label = "greedy";
    presets[0].params.temperature = 0.0f;
    presets[1].label = "T=0.7 top_p=0.9";
    presets[1].params.temperature = 0.7f;
    presets[1].params.top_p = 0.9f;
    presets[2].label = "T=1.0 top_k=50";
    presets[2].params.top_k = 50;
    presets[3].label = "T=0.8 min_p=0.05";
    presets[3].params.temperature = 0.8f;
    presets[3].params.min_p = 0.05f;
    presets[4].label = "T=0.9 rep=1.3 pres=0.5";
    presets[4].params.temperature = 0.9f;
    presets[4].params.repetition_penalty = 1.3f;
    presets[4].params.presence_penalty = 0.5f;
    presets[5].label = "T=0.9 top_k=40 top_p=0.95 ban 0";
    presets[5].params.temperature = 0.9f;
    presets[5].params.top_k = 40;
    presets[5].params.top_p = 0.95f;
    presets[5].params.logit_bias = {{0, -100.0f}};
    std::vector<demo_request> requests(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
        const preset& p = presets[static_cast<size_t>(i) % presets.size()];
        demo_request& r = requests[static_cast<size_t>(i)];
        r.label = p.label;
        r.params = p.params;
        r.params.seed = seed + static_cast<uint64_t>(i);
        r.position = 16 + i;  // prompt lengths
    }
    return requests;
}

int32_t argmax(const std::vector<float>& row) {
    return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

std::string join(const logits_source& model, const int32_t* tokens, int32_t count) {
    std::string out;
    for (int32_t i = 0; i < count; ++i) out += fmt::format("{}{}", i ? " " : "", model.token_text(tokens[i]));
    return out;
}

// The target model and a weaker draft of it: the synthetic generator with extra draft noise, or a
// trigram model of a text with its bigram model as the draft.
status make_models(const demo_options& options, std::unique_ptr<logits_source>& target,
                   std::unique_ptr<logits_source>& draft) {
    if (options.model == "ngram") {
        auto trigram = std::make_unique<ngram_lm>();
        auto bigram = std::make_unique<ngram_lm>();
        DS_TRY(ngram_lm::train_file(options.corpus, 3, *trigram));
        DS_TRY(ngram_lm::train_file(options.corpus, 2, *bigram));
        target = std::move(trigram);
        draft = std::move(bigram);
        return status::success();
    }
    if (options.model != "synthetic")
        return status::invalid(fmt::format("--model = '{}': expected 'synthetic' or 'ngram'", options.model));
    synthetic_lm_config target_config;
    target_config.vocab_size = options.vocab;
    target_config.seed = options.seed;
    synthetic_lm_config draft_config = target_config;
    draft_config.draft_noise = 1.0f;
    target = std::make_unique<synthetic_lm>(target_config);
    draft = std::make_unique<synthetic_lm>(draft_config);
    return status::success();
}

status check_demo_options(const demo_options& options) {
    auto in_range = [](const char* flag, int64_t value, int64_t lo, int64_t hi) {
        if (value >= lo && value <= hi) return status::success();
        return status::invalid(fmt::format("{} {}: expected an integer in [{}, {}]", flag, value, lo, hi));
    };
    DS_TRY(in_range("--steps", options.steps, 1, 1'000'000));
    DS_TRY(in_range("--batch", options.batch, 1, kMaxBatchSize));
    DS_TRY(in_range("--vocab", options.vocab, 1, kMaxVocabSize));
    return in_range("--draft-tokens", options.draft_tokens, 0, 15);
}

// The demo's sizes over the configured group (config file, DISTSAMPLE_*, --set and flags).
result<group_config> demo_group_config(const demo_options& options, int32_t vocab) {
    group_config config;
    DS_TRY(load_group_config(options.group.config_file, options.group.overrides, config));
    config.limits.vocab_size = vocab;
    config.limits.max_batch = options.batch;
    config.limits.max_slots = options.batch + 1;
    config.limits.max_tokens_per_req = options.draft_tokens + 1;
    return config;
}

// One run of the demo: the requests, the step buffers, and what the steps emitted.
class demo_run {
   public:
    demo_run(const demo_options& options, const group_config& config, group& ranks, const logits_source& target,
             const logits_source& draft)
        : options_(options),
          config_(config),
          ranks_(ranks),
          target_(target),
          draft_(draft),
          bs_(options.batch),
          n_(options.draft_tokens + 1),
          vocab_(target.vocab_size()),
          requests_(make_requests(options.batch, options.seed)),
          slots_(static_cast<size_t>(bs_)),
          logits_(static_cast<size_t>(bs_) * static_cast<size_t>(n_) * static_cast<size_t>(vocab_)),
          candidates_(static_cast<size_t>(bs_) * static_cast<size_t>(n_)),
          draft_row_(static_cast<size_t>(vocab_)) {}

    // Registers request b into slot b + 1 and prints what the run is.
    status register_requests() {
        for (int32_t b = 0; b < bs_; ++b) {
            demo_request& r = request(b);
            r.context = target_.prompt(b);
            slots_[static_cast<size_t>(b)] = b + 1;
            DS_TRY(ranks_.register_request(b + 1, r.params));
        }
        fmt::print(
            "distsample demo: {} backend, TP={} rank actors ({} mode, {} transport), V={}, {} requests, N={} ({} "
            "drafts per step), {} steps\n",
            backend_name(config_.backend), config_.distribution.tp, mode_name(config_.distribution.mode),
            transport_name(config_.transport.kind), vocab_, bs_, n_, n_ - 1, options_.steps);
        for (int32_t b = 0; b < bs_; ++b) fmt::print("  request {} (slot {}): {}\n", b, b + 1, request(b).label);
        return status::success();
    }

    // Step 0: plain sampling of each request's first token.
    status sample_first_tokens() {
        for (int32_t b = 0; b < bs_; ++b)
            target_.logits(request(b).context, logits_.data() + static_cast<size_t>(b) * static_cast<size_t>(vocab_));
        DS_TRY(run_step(false, 1));
        fmt::print("\nstep 0 (sample):");
        for (int32_t b = 0; b < bs_; ++b) {
            demo_request& r = request(b);
            r.last_token = packed_[static_cast<size_t>(b)];
            r.text.push_back(r.last_token);
            r.context = logits_source::next_context(r.context, r.last_token);
            ++r.position;
            ++emitted_total_;
            fmt::print(" [{}] {}", b, target_.token_text(r.last_token));
        }
        fmt::print("\n");
        return status::success();
    }

    // The draft proposes N-1 tokens greedily, the target scores every prefix, the ranks verify.
    status verify_step(int step) {
        for (int32_t b = 0; b < bs_; ++b) draft_chain(b);
        DS_TRY(run_step(true, n_));
        fmt::print("step {} (verify):", step);
        for (int32_t b = 0; b < bs_; ++b) {
            demo_request& r = request(b);
            const int32_t length = packed_[static_cast<size_t>(bs_) * static_cast<size_t>(n_) + static_cast<size_t>(b)];
            const int32_t* emitted = packed_.data() + static_cast<size_t>(b) * static_cast<size_t>(n_);
            r.drafts_proposed += n_ - 1;
            r.drafts_accepted += length - 1;
            for (int32_t i = 0; i < length; ++i) {
                r.text.push_back(emitted[i]);
                r.context = logits_source::next_context(r.context, emitted[i]);
            }
            r.last_token = emitted[length - 1];
            r.position += length;
            emitted_total_ += length;
            fmt::print(" [{}] +{} ({})", b, length, join(target_, emitted, length));
        }
        fmt::print("\n");
        return status::success();
    }

    void print_summary() const {
        fmt::print("\nsummary\n");
        int64_t proposed = 0;
        int64_t accepted = 0;
        for (int32_t b = 0; b < bs_; ++b) {
            const demo_request& r = requests_[static_cast<size_t>(b)];
            proposed += r.drafts_proposed;
            accepted += r.drafts_accepted;
            fmt::print("  request {} {:<34} accepted {:>3}/{:<3} drafts ({:5.1f} %), {} tokens\n", b, r.label,
                       r.drafts_accepted, r.drafts_proposed,
                       100.0 * static_cast<double>(r.drafts_accepted) /
                           static_cast<double>(std::max<int64_t>(1, r.drafts_proposed)),
                       r.text.size());
        }
        const double steps = options_.steps;
        fmt::print("  acceptance {:.1f} %, mean accept length {:.2f} tokens per verify step, {} tokens in {} steps\n",
                   100.0 * static_cast<double>(accepted) / static_cast<double>(std::max<int64_t>(1, proposed)),
                   static_cast<double>(accepted + bs_ * options_.steps) / (steps * bs_), emitted_total_,
                   options_.steps + 1);
        fmt::print("  coordinator steps (TP={}, {} mode): {:.2f} ms in total ({:.1f} us per step), desync events: {}\n",
                   config_.distribution.tp, mode_name(config_.distribution.mode), step_seconds_ * 1e3,
                   step_seconds_ * 1e6 / (steps + 1), ranks_.desync_events().size());
        if (options_.model == "ngram") {
            fmt::print("\ngenerated text\n");
            for (int32_t b = 0; b < bs_; ++b) {
                const demo_request& r = requests_[static_cast<size_t>(b)];
                fmt::print("  [{}] {}\n", b, join(target_, r.text.data(), static_cast<int32_t>(r.text.size())));
            }
        }
    }

   private:
    demo_request& request(int32_t b) { return requests_[static_cast<size_t>(b)]; }

    // Request b's chain: its last token, then the draft's greedy tokens; target row j scores the
    // token after anchor + drafts[1..j].
    void draft_chain(int32_t b) {
        demo_request& r = request(b);
        int32_t* chain = candidates_.data() + static_cast<size_t>(b) * static_cast<size_t>(n_);
        chain[0] = r.last_token;
        uint64_t context = r.context;
        for (int32_t j = 0; j < n_; ++j) {
            target_.logits(
                context, logits_.data() + (static_cast<size_t>(b) * static_cast<size_t>(n_) + static_cast<size_t>(j)) *
                                              static_cast<size_t>(vocab_));
            if (j + 1 < n_) {
                draft_.logits(context, draft_row_.data());
                chain[j + 1] = argmax(draft_row_);
                context = logits_source::next_context(context, chain[j + 1]);
            }
        }
    }

    // One step through the coordinator; packed_ receives predict [bs*N] then accept_length [bs].
    status run_step(bool verify_step, int32_t rows_per_req) {
        step_request step;
        step.kind = verify_step ? step_kind::verify : step_kind::sample;
        step.tokens_per_req = rows_per_req;
        step.slots = slots_;
        for (int32_t b = 0; b < bs_; ++b) step.positions.push_back(request(b).position);
        if (verify_step) step.candidates = candidates_;
        step.shards =
            split_vocab(logits_view{logits_.data(), logits_dtype::f32, int64_t{bs_} * rows_per_req, vocab_, vocab_},
                        config_.distribution.tp);
        const auto start = std::chrono::steady_clock::now();
        step_reply reply = ranks_.step(std::move(step));
        step_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        DS_TRY(reply.result);
        packed_ = std::move(reply.outputs.packed);
        return status::success();
    }

    const demo_options& options_;
    const group_config& config_;
    group& ranks_;
    const logits_source& target_;
    const logits_source& draft_;
    const int32_t bs_;
    const int32_t n_;
    const int32_t vocab_;
    std::vector<demo_request> requests_;
    std::vector<int32_t> slots_;
    std::vector<float> logits_;
    std::vector<int32_t> candidates_;
    std::vector<float> draft_row_;
    std::vector<int32_t> packed_;
    double step_seconds_ = 0.0;
    int64_t emitted_total_ = 0;
};

// Prints the error line; exit code 2 for bad input, 1 for any other failure.
int report(const status& s) {
    std::cerr << "error: " << s.message << '\n';
    return s.code == status_code::invalid_argument ? 2 : 1;
}

}  // namespace

int run_demo_command(const demo_options& options) {
    if (status s = check_demo_options(options); !s.is_ok()) return report(s);
    std::unique_ptr<logits_source> target;
    std::unique_ptr<logits_source> draft;
    if (status s = make_models(options, target, draft); !s.is_ok()) return report(s);
    const result<group_config> config = demo_group_config(options, target->vocab_size());
    if (!config.is_ok()) return report(config.error());
    std::unique_ptr<group> ranks;
    if (status s = group::create(*config, ranks); !s.is_ok()) return report(s);

    demo_run run(options, *config, *ranks, *target, *draft);
    // A failed registration or step is not bad input: exit code 1.
    auto failed = [](const status& s) {
        std::cerr << "error: " << s.message << '\n';
        return 1;
    };
    if (status s = run.register_requests(); !s.is_ok()) return failed(s);
    if (status s = run.sample_first_tokens(); !s.is_ok()) return failed(s);
    for (int step = 1; step <= options.steps; ++step) {
        if (status s = run.verify_step(step); !s.is_ok()) return failed(s);
    }
    run.print_summary();
    return 0;
}

}  // namespace ds::cli

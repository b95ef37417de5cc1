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
std::string make_models(const demo_options& options, std::unique_ptr<logits_source>& target,
                        std::unique_ptr<logits_source>& draft) {
    if (options.model == "ngram") {
        auto trigram = std::make_unique<ngram_lm>();
        auto bigram = std::make_unique<ngram_lm>();
        if (std::string e = ngram_lm::train_file(options.corpus, 3, *trigram); !e.empty()) return e;
        if (std::string e = ngram_lm::train_file(options.corpus, 2, *bigram); !e.empty()) return e;
        target = std::move(trigram);
        draft = std::move(bigram);
        return {};
    }
    if (options.model != "synthetic")
        return fmt::format("--model = '{}': expected 'synthetic' or 'ngram'", options.model);
    synthetic_lm_config target_config;
    target_config.vocab_size = options.vocab;
    target_config.seed = options.seed;
    synthetic_lm_config draft_config = target_config;
    draft_config.draft_noise = 1.0f;
    target = std::make_unique<synthetic_lm>(target_config);
    draft = std::make_unique<synthetic_lm>(draft_config);
    return {};
}

}  // namespace

int run_demo_command(const demo_options& options) {
    if (options.batch < 1 || options.steps < 1 || options.draft_tokens < 0 || options.draft_tokens > 15) {
        std::cerr << "error: --batch >= 1, --steps >= 1 and --draft-tokens in [0, 15] expected\n";
        return 2;
    }
    const int32_t n = options.draft_tokens + 1;
    std::unique_ptr<logits_source> target_model;
    std::unique_ptr<logits_source> draft_model;
    if (std::string e = make_models(options, target_model, draft_model); !e.empty()) {
        std::cerr << "error: " << e << '\n';
        return 2;
    }
    const logits_source& target = *target_model;
    const logits_source& draft = *draft_model;
    const int32_t vocab = target.vocab_size();
    group_config config;
    if (std::string e = load_group_config(options.group.config_file, options.group.overrides, config); !e.empty()) {
        std::cerr << "error: " << e << '\n';
        return 2;
    }
    // The demo's own sizes.
    config.vocab_size = vocab;
    config.max_batch = options.batch;
    config.max_slots = options.batch + 1;
    config.max_tokens_per_req = n;
    std::unique_ptr<group> ranks;
    if (status s = group::create(config, ranks); !s.is_ok()) {
        std::cerr << "error: " << s.message << '\n';
        return s.code == status_code::invalid_argument ? 2 : 1;
    }

    std::vector<demo_request> requests = make_requests(options.batch, options.seed);
    for (int32_t b = 0; b < options.batch; ++b) requests[static_cast<size_t>(b)].context = target.prompt(b);
    const int32_t bs = options.batch;
    std::vector<int32_t> slots(static_cast<size_t>(bs));
    std::vector<int64_t> positions(static_cast<size_t>(bs));
    for (int32_t b = 0; b < bs; ++b) {
        slots[static_cast<size_t>(b)] = b + 1;
        if (status s = ranks->register_request(b + 1, requests[static_cast<size_t>(b)].params); !s.is_ok()) {
            std::cerr << "error: " << s.message << '\n';
            return 1;
        }
    }
    fmt::print(
        "distsample demo: {} backend, TP={} rank actors ({} mode, {} transport), V={}, {} requests, N={} ({} drafts "
        "per step), {} steps\n",
        config.backend, config.tp, mode_name(config.mode), config.transport, vocab, bs, n, n - 1, options.steps);
    for (int32_t b = 0; b < bs; ++b)
        fmt::print("  request {} (slot {}): {}\n", b, b + 1, requests[static_cast<size_t>(b)].label);

    std::vector<float> logits(static_cast<size_t>(bs) * n * vocab);
    std::vector<int32_t> candidates(static_cast<size_t>(bs) * n);
    std::vector<float> draft_row(static_cast<size_t>(vocab));
    std::vector<int32_t> packed;
    double step_seconds = 0.0;
    int64_t emitted_total = 0;

    // One step through the coordinator; `packed` receives predict [bs*N] then accept_length [bs].
    auto run = [&](bool verify_step, int32_t rows_per_req) -> bool {
        step_request step;
        step.kind = verify_step ? step_kind::verify : step_kind::sample;
        step.tokens_per_req = rows_per_req;
        step.slots = slots;
        for (int32_t b = 0; b < bs; ++b) step.positions.push_back(requests[static_cast<size_t>(b)].position);
        if (verify_step) step.candidates = candidates;
        step.shards = split_vocab(
            logits_view{logits.data(), logits_dtype::f32, int64_t{bs} * rows_per_req, vocab, vocab}, config.tp);
        const auto start = std::chrono::steady_clock::now();
        step_reply reply = ranks->step(std::move(step));
        step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (!reply.result.is_ok()) {
            std::cerr << "error: " << reply.result.message << '\n';
            return false;
        }
        packed = std::move(reply.outputs.packed);
        return true;
    };

    // Step 0: plain sampling of each request's first token.
    for (int32_t b = 0; b < bs; ++b)
        target.logits(requests[static_cast<size_t>(b)].context, logits.data() + static_cast<size_t>(b) * vocab);
    if (!run(false, 1)) return 1;
    fmt::print("\nstep 0 (sample):");
    for (int32_t b = 0; b < bs; ++b) {
        demo_request& r = requests[static_cast<size_t>(b)];
        r.last_token = packed[static_cast<size_t>(b)];
        r.text.push_back(r.last_token);
        r.context = logits_source::next_context(r.context, r.last_token);
        ++r.position;
        ++emitted_total;
        fmt::print(" [{}] {}", b, target.token_text(r.last_token));
    }
    fmt::print("\n");

    for (int step = 1; step <= options.steps; ++step) {
        for (int32_t b = 0; b < bs; ++b) {
            demo_request& r = requests[static_cast<size_t>(b)];
            int32_t* chain = candidates.data() + static_cast<size_t>(b) * n;
            chain[0] = r.last_token;
            uint64_t context = r.context;
            for (int32_t j = 0; j < n; ++j) {
                // Target row j scores the token after anchor + drafts[1..j].
                target.logits(context, logits.data() + (static_cast<size_t>(b) * n + j) * vocab);
                if (j + 1 < n) {
                    draft.logits(context, draft_row.data());
                    chain[j + 1] = argmax(draft_row);
                    context = logits_source::next_context(context, chain[j + 1]);
                }
            }
        }
        if (!run(true, n)) return 1;
        fmt::print("step {} (verify):", step);
        for (int32_t b = 0; b < bs; ++b) {
            demo_request& r = requests[static_cast<size_t>(b)];
            const int32_t length = packed[static_cast<size_t>(bs) * n + b];
            const int32_t* emitted = packed.data() + static_cast<size_t>(b) * n;
            r.drafts_proposed += n - 1;
            r.drafts_accepted += length - 1;
            for (int32_t i = 0; i < length; ++i) {
                r.text.push_back(emitted[i]);
                r.context = logits_source::next_context(r.context, emitted[i]);
            }
            r.last_token = emitted[length - 1];
            r.position += length;
            emitted_total += length;
            fmt::print(" [{}] +{} ({})", b, length, join(target, emitted, length));
        }
        fmt::print("\n");
    }

    fmt::print("\nsummary\n");
    int64_t proposed = 0;
    int64_t accepted = 0;
    for (int32_t b = 0; b < bs; ++b) {
        const demo_request& r = requests[static_cast<size_t>(b)];
        proposed += r.drafts_proposed;
        accepted += r.drafts_accepted;
        fmt::print("  request {} {:<34} accepted {:>3}/{:<3} drafts ({:5.1f} %), {} tokens\n", b, r.label,
                   r.drafts_accepted, r.drafts_proposed,
                   100.0 * static_cast<double>(r.drafts_accepted) /
                       static_cast<double>(std::max<int64_t>(1, r.drafts_proposed)),
                   r.text.size());
    }
    const double steps = options.steps;
    fmt::print("  acceptance {:.1f} %, mean accept length {:.2f} tokens per verify step, {} tokens in {} steps\n",
               100.0 * static_cast<double>(accepted) / static_cast<double>(std::max<int64_t>(1, proposed)),
               static_cast<double>(accepted + bs * options.steps) / (steps * bs), emitted_total, options.steps + 1);
    fmt::print("  coordinator steps (TP={}, {} mode): {:.2f} ms in total ({:.1f} us per step), desync events: {}\n",
               config.tp, mode_name(config.mode), step_seconds * 1e3, step_seconds * 1e6 / (steps + 1),
               ranks->desync_events().size());
    if (options.model == "ngram") {
        fmt::print("\ngenerated text\n");
        for (int32_t b = 0; b < bs; ++b) {
            const demo_request& r = requests[static_cast<size_t>(b)];
            fmt::print("  [{}] {}\n", b, join(target, r.text.data(), static_cast<int32_t>(r.text.size())));
        }
    }
    return 0;
}

}  // namespace ds::cli

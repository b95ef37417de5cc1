#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <limits>
#include <thread>

#include "kernels/det_math.h"
#include "kernels/exact_rules.h"
#include "kernels/validation.h"

namespace ds::cpu {

namespace dm = ds::detmath;

namespace {

int resolve_threads(int configured) {
    if (configured > 0) return configured;
    return std::max(1u, std::thread::hardware_concurrency());
}

// Below this many logits per step, waking the workers costs more than it saves.
constexpr int64_t kParallelMinElements = int64_t{1} << 16;

status check_host_logits(const step_input& step) {
    if (!step.logits.on_device) return status::success();
    return status::invalid("logits.on_device = true: the cpu backend reads host memory; use --backend cuda");
}

// What one row of a chain decided.
struct row_decision {
    int32_t emitted = -1;  // the draft when accepted, else the token drawn here
    bool draft_accepted = false;
    double logprob = std::numeric_limits<double>::quiet_NaN();
};

// Row j of request b: judge the draft that follows it, or draw the token the chain stops with.
row_decision decide_row(const chain_step& step, const request_view& r, int32_t b, int32_t j, row_sampler& sampler) {
    const int32_t n = step.tokens_per_req;
    const int64_t base = static_cast<int64_t>(b) * n;
    const int64_t row = base + j;
    const int32_t words = bitmask_words(step.logits.vocab);
    const uint32_t* mask_row = step.bitmask != nullptr ? step.bitmask + row * words : nullptr;
    const drafts_before drafts{step.candidates != nullptr ? step.candidates + base + 1 : nullptr, j};
    const float* logits = sampler.prepare_logits(step.logits, row, r, drafts, mask_row);
    const int32_t top = sampler.argmax(logits);
    const bool has_draft = j + 1 < n;
    const int32_t draft = has_draft ? step.candidates[base + j + 1] : -1;
    row_decision d;
    uint64_t kept = 0;
    if (top < 0) return d;  // nothing allowed: the chain ends with an error flag
    if (r.greedy()) {
        d.draft_accepted = has_draft && draft == top;
        d.emitted = d.draft_accepted ? draft : top;
    } else {
        kept = sampler.build_distribution(logits, top, r);
        uint64_t draft_mass = 0;
        if (has_draft) {
            draft_mass = sampler.kept_mass_of(draft);
            const double coin = step.coins != nullptr
                                    ? step.coins[static_cast<int64_t>(b) * (n - 1) + j]
                                    : dm::bits_to_unit_double(dm::random_bits64(
                                          r.seed, r.position, static_cast<uint32_t>(j + 1), dm::draw_purpose::coin));
            d.draft_accepted =
                exact::accepts_draft(draft_mass, kept, coin, step.thresholds.single, step.thresholds.acc);
        }
        if (d.draft_accepted) {
            d.emitted = draft;
        } else {
            const uint64_t bits =
                step.final_coins != nullptr
                    ? dm::unit_double_to_bits(step.final_coins[b])
                    : dm::random_bits64(r.seed, r.position, static_cast<uint32_t>(j), dm::draw_purpose::token);
            const exact::residual rest = exact::residual_after(kept, draft_mass);
            d.emitted = sampler.token_at(exact::draw_target(bits, rest.mass), rest.excludes_draft ? draft : -1);
        }
    }
    if (step.logprobs == logprob_mode::raw) {
        d.logprob = raw_logprob(step.logits, row, d.emitted);
    } else if (step.logprobs == logprob_mode::processed) {
        d.logprob = r.greedy() ? sampler.greedy_logprob(logits, top, d.emitted)
                               : sampler.filtered_logprob(logits, top, d.emitted, r.temperature, kept);
    }
    return d;
}

}  // namespace

cpu_backend::cpu_backend(const kernel_config& config)
    : config_(config), pool_(config), threads_(resolve_threads(config.threads)) {
    samplers_.reserve(static_cast<size_t>(threads_.size()));
    for (int t = 0; t < threads_.size(); ++t) samplers_.emplace_back(config.vocab_size);
}

status cpu_backend::sample(const step_input& step, const step_output& out) { return run(step, step_kind::sample, out); }

status cpu_backend::verify(const step_input& step, const step_output& out) { return run(step, step_kind::verify, out); }

status cpu_backend::run(const step_input& step, step_kind kind, const step_output& out) {
    DS_TRY(validate_step(step, kind, config_));
    DS_TRY(check_host_logits(step));
    const chain_step chain = chain_step_of(step, out);
    auto body = [&](int64_t request, int worker) {
        const auto b = static_cast<int32_t>(request);
        run_request(chain, pool_.request(step.slots[b], step.positions[b]), b, samplers_[static_cast<size_t>(worker)]);
    };
    if (step.logits.rows * step.logits.vocab < kParallelMinElements) {
        for (int32_t b = 0; b < step.batch_size; ++b) body(b, 0);
    } else {
        threads_.parallel_for(step.batch_size, body);
    }
    return status::success();
}

// Draft j+1 is judged against row j; the chain ends at the first rejection (final token from row
// j without the draft) or after the last draft (bonus token from row N-1). Plain sampling is the
// chain with N = 1.
void run_request(const chain_step& step, const request_view& r, int32_t b, row_sampler& sampler) {
    const int32_t n = step.tokens_per_req;
    const int64_t base = static_cast<int64_t>(b) * n;
    const sampling_outputs& out = step.outputs;
    int32_t* predict = out.predict + base;
    int32_t* accept_index = out.accept_index + base;
    std::fill(predict, predict + n, -1);
    std::fill(accept_index, accept_index + n, -1);
    if (out.logprobs != nullptr) {
        std::fill(out.logprobs + base, out.logprobs + base + n, std::numeric_limits<float>::quiet_NaN());
    }
    int32_t accepted = 0;
    for (int32_t j = 0; r.error == kRowOk && j < n; ++j) {
        const row_decision d = decide_row(step, r, b, j, sampler);
        if (out.logprobs != nullptr) out.logprobs[base + j] = static_cast<float>(d.logprob);
        predict[j] = d.emitted;
        accept_index[j] = static_cast<int32_t>(base + j);
        if (!d.draft_accepted) break;
        ++accepted;
    }
    out.accept_length[b] = accepted + 1;
    if (out.row_error != nullptr) {
        out.row_error[b] = r.error != kRowOk ? r.error : (predict[accepted] < 0 ? kRowErrorNothingAllowed : kRowOk);
    }
}

std::size_t call_workspace_bytes(int32_t vocab) { return row_sampler::scratch_bytes(vocab); }

void run_call(const sampling_call& call, workspace_ref workspace) {
    row_sampler sampler(call.logits.vocab, workspace.data);
    const chain_step chain = chain_step_of(call);
    for (int32_t b = 0; b < call.batch_size; ++b) run_request(chain, resolve_request(call, b), b, sampler);
}

}  // namespace ds::cpu

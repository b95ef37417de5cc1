#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <limits>
#include <thread>

#include "kernels/det_math.h"
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

}  // namespace

cpu_backend::cpu_backend(const kernel_config& config)
    : config_(config), pool_(config), threads_(resolve_threads(config.threads)) {
    samplers_.reserve(static_cast<size_t>(threads_.size()));
    for (int t = 0; t < threads_.size(); ++t) samplers_.emplace_back(config.vocab_size);
}

namespace {
status check_host_logits(const step_input& step) {
    if (!step.logits.on_device) return status::success();
    return status::invalid("logits.on_device = true: the cpu backend reads host memory; use --backend cuda");
}
}  // namespace

status cpu_backend::sample(const step_input& step, const step_output& out) {
    status s = validate_step(step, step_kind::sample, config_);
    if (s.is_ok()) s = check_host_logits(step);
    if (!s.is_ok()) return s;
    run_steps(step, out);
    return status::success();
}

status cpu_backend::verify(const step_input& step, const step_output& out) {
    status s = validate_step(step, step_kind::verify, config_);
    if (s.is_ok()) s = check_host_logits(step);
    if (!s.is_ok()) return s;
    run_steps(step, out);
    return status::success();
}

void cpu_backend::run_steps(const step_input& step, const step_output& out) {
    auto body = [&](int64_t request, int worker) {
        run_request(step, out, static_cast<int32_t>(request), samplers_[static_cast<size_t>(worker)]);
    };
    if (step.logits.rows * step.logits.vocab < kParallelMinElements) {
        for (int32_t b = 0; b < step.batch_size; ++b) body(b, 0);
    } else {
        threads_.parallel_for(step.batch_size, body);
    }
}

// One request's chain: rows b*N .. b*N+N-1. Draft j+1 is judged against row j; the chain ends
// at the first rejection (final token from row j without the draft) or after the last draft
// (bonus token from row N-1). Plain sampling is the chain with N = 1.
void cpu_backend::run_request(const step_input& step, const step_output& out, int32_t b, row_sampler& sampler) const {
    const int32_t n = step.tokens_per_req;
    const int64_t base = static_cast<int64_t>(b) * n;
    const int32_t slot = step.slots[b];
    const uint64_t position = static_cast<uint64_t>(step.positions[b]);
    const sampling_params& params = pool_.params(slot);
    const token_count_span seen = pool_.seen_tokens(slot);
    const bool greedy = is_greedy(params);
    const int32_t words = bitmask_words(config_.vocab_size);
    int32_t* predict = predict_of(out) + base;
    int32_t* accept_index = out.accept_index + base;
    std::fill(predict, predict + n, -1);
    std::fill(accept_index, accept_index + n, -1);
    if (out.logprobs != nullptr) {
        std::fill(out.logprobs + base, out.logprobs + base + n, std::numeric_limits<float>::quiet_NaN());
    }

    int32_t accepted = 0;
    for (int32_t j = 0; j < n; ++j) {
        const int64_t row = base + j;
        const uint32_t* mask_row = step.bitmask != nullptr ? step.bitmask + row * words : nullptr;
        const float* logits = sampler.prepare_logits(step.logits, row, params, seen, mask_row);
        const int32_t top = sampler.argmax(logits);
        const bool has_draft = j + 1 < n;
        const int32_t draft = has_draft ? step.candidates[base + j + 1] : -1;
        int32_t emitted = -1;
        bool draft_accepted = false;
        if (top < 0) {
            emitted = -1;  // nothing allowed: the chain ends with an error flag
        } else if (greedy) {
            draft_accepted = has_draft && draft == top;
            emitted = top;
        } else {
            const uint64_t kept = sampler.build_distribution(logits, top, params);
            uint64_t excluded_mass = 0;
            if (has_draft) {
                const uint64_t draft_mass = sampler.kept_mass_of(draft);
                const double p = static_cast<double>(draft_mass) / static_cast<double>(kept);
                const double coin =
                    step.coins != nullptr
                        ? step.coins[static_cast<int64_t>(b) * (n - 1) + j]
                        : dm::bits_to_unit_double(dm::random_bits64(params.seed, position, static_cast<uint32_t>(j + 1),
                                                                    dm::draw_purpose::coin));
                // A draft without mass is accepted only by the lossy threshold_single = 0 knob.
                draft_accepted = p >= step.thresholds.single || (draft_mass > 0 && coin <= p / step.thresholds.acc);
                excluded_mass = draft_mass;
            }
            if (draft_accepted) {
                emitted = draft;
            } else {
                const uint64_t bits =
                    step.final_coins != nullptr
                        ? dm::unit_double_to_bits(step.final_coins[b])
                        : dm::random_bits64(params.seed, position, static_cast<uint32_t>(j), dm::draw_purpose::token);
                // The residual excludes the rejected draft; if that left nothing, use the full row.
                const bool residual = kept > excluded_mass;
                const uint64_t mass = residual ? kept - excluded_mass : kept;
                emitted = sampler.token_at(dm::mul_high64(bits, mass), residual && has_draft ? draft : -1);
            }
        }
        if (out.logprobs != nullptr) out.logprobs[row] = static_cast<float>(sampler.logprob(logits, top, emitted));
        predict[j] = draft_accepted ? draft : emitted;
        accept_index[j] = static_cast<int32_t>(row);
        if (!draft_accepted) break;
        ++accepted;
    }
    accept_length_of(out, step.batch_size, n)[b] = accepted + 1;
    if (out.row_error != nullptr) out.row_error[b] = predict[accepted] < 0 ? 1 : 0;
}

}  // namespace ds::cpu

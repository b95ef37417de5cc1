#include "kernels/cpu/row_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/det_math.h"

namespace ds::cpu {

namespace dm = ds::detmath;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void load_row_as_float(const logits_view& logits, int64_t row, float* out) {
    const int64_t offset = row * logits.row_stride;
    switch (logits.dtype) {
        case logits_dtype::f32: {
            const float* src = static_cast<const float*>(logits.data) + offset;
            std::copy(src, src + logits.vocab, out);
            return;
        }
        case logits_dtype::bf16: {
            const uint16_t* src = static_cast<const uint16_t*>(logits.data) + offset;
            for (int32_t i = 0; i < logits.vocab; ++i) out[i] = dm::bf16_bits_to_float(src[i]);
            return;
        }
        case logits_dtype::f16: {
            const uint16_t* src = static_cast<const uint16_t*>(logits.data) + offset;
            for (int32_t i = 0; i < logits.vocab; ++i) out[i] = dm::fp16_bits_to_float(src[i]);
            return;
        }
    }
}

// Whether `token` is among the request's seen tokens.
bool was_seen(const request_view& r, int32_t token) {
    for (int32_t k = 0; k < r.seen_count; ++k) {
        if (r.seen_tokens[k] == token) return true;
    }
    return false;
}

// Penalties, bias and bitmask for the tokens in [vocab_offset, vocab_offset + count) of a row
// whose slice is `out`: each penalised token once, with its count before the step plus its
// occurrences among the drafts before the row; then bias (add); then the mask (-inf).
void apply_processing(float* out, int32_t count, int32_t vocab_offset, const request_view& r, drafts_before drafts,
                      const uint32_t* bitmask_row) {
    auto local = [&](int32_t token) -> float* {
        const int32_t i = token - vocab_offset;
        return i >= 0 && i < count ? out + i : nullptr;
    };
    if (r.penalties.active()) {
        for (int32_t k = 0; k < r.seen_count; ++k) {
            const int32_t token = r.seen_tokens[k];
            float* l = local(token);
            if (l == nullptr) continue;
            const int32_t times = r.seen_counts[k] + exact::occurrences(drafts.tokens, drafts.count, token);
            *l = exact::penalised_logit(*l, times, r.penalties);
        }
        for (int32_t i = 0; i < drafts.count; ++i) {
            const int32_t token = drafts.tokens[i];
            float* l = local(token);
            if (l == nullptr || !exact::first_occurrence(drafts.tokens, i) || was_seen(r, token)) continue;
            *l = exact::penalised_logit(*l, exact::occurrences(drafts.tokens, drafts.count, token), r.penalties);
        }
    }
    for (int32_t k = 0; k < r.bias_count; ++k) {
        if (float* l = local(r.bias_tokens[k])) *l = *l + r.bias_values[k];
    }
    if (bitmask_row != nullptr) {
        for (int32_t i = 0; i < count; ++i) {
            const int32_t token = vocab_offset + i;
            if (((bitmask_row[token / 32] >> (token % 32)) & 1u) == 0) out[i] = kNegInf;
        }
    }
}

}  // namespace

std::size_t row_sampler::scratch_bytes(int32_t vocab) {
    const auto v = static_cast<std::size_t>(vocab);
    return v * (sizeof(uint64_t) + sizeof(float) + sizeof(int32_t));
}

row_sampler::row_sampler(int32_t vocab) : row_sampler(vocab, nullptr) {}

row_sampler::row_sampler(int32_t vocab, void* scratch) : vocab_(vocab) {
    if (scratch == nullptr) {
        owned_.resize(scratch_bytes(vocab));  // operator new's alignment suits the masses
        scratch = owned_.data();
    }
    auto* bytes = static_cast<unsigned char*>(scratch);
    const auto v = static_cast<std::size_t>(vocab);
    mass_ = reinterpret_cast<uint64_t*>(bytes);
    logits_ = reinterpret_cast<float*>(bytes + v * sizeof(uint64_t));
    order_ = reinterpret_cast<int32_t*>(bytes + v * (sizeof(uint64_t) + sizeof(float)));
}

const float* row_sampler::prepare_logits(const logits_view& logits, int64_t row, const request_view& request,
                                         drafts_before drafts, const uint32_t* bitmask_row) {
    const bool penalised = request.penalties.active() && (request.seen_count > 0 || drafts.count > 0);
    if (logits.dtype == logits_dtype::f32 && !penalised && request.bias_count == 0 && bitmask_row == nullptr) {
        return static_cast<const float*>(logits.data) + row * logits.row_stride;
    }
    prepare_shard_logits(logits, row, request, drafts, bitmask_row, 0, logits_);
    return logits_;
}

void prepare_shard_logits(const logits_view& shard, int64_t row, const request_view& request, drafts_before drafts,
                          const uint32_t* bitmask_row, int32_t vocab_offset, float* out) {
    load_row_as_float(shard, row, out);
    apply_processing(out, shard.vocab, vocab_offset, request, drafts, bitmask_row);
}

int32_t argmax_of(const float* logits, int32_t count) {
    int32_t best = -1;
    float best_value = kNegInf;
    for (int32_t i = 0; i < count; ++i) {
        // Strict '>' keeps the lowest index on ties and never picks NaN or -inf.
        if (logits[i] > best_value) {
            best_value = logits[i];
            best = i;
        }
    }
    return best;
}

void masses_of(const float* logits, int32_t count, float max_logit, float scale, uint64_t* mass) {
    for (int32_t i = 0; i < count; ++i) mass[i] = exact::token_mass(logits[i], max_logit, scale);
}

uint64_t unit_mass_sum(const float* logits, int32_t count, float max_logit) {
    uint64_t sum = 0;
    for (int32_t i = 0; i < count; ++i) sum += exact::token_mass(logits[i], max_logit, exact::kUnitScale);
    return sum;
}

filter_cut localize_cut(const filter_cut& global, int32_t vocab_offset, int32_t count) {
    filter_cut local = global;
    if (global.has_boundary) {
        const int64_t token = int64_t{global.boundary_token} - vocab_offset;
        local.boundary_token = static_cast<int32_t>(std::clamp<int64_t>(token, -1, count));
    }
    return local;
}

void mass_histogram(const uint64_t* mass, int32_t count, const filter_cut& domain, uint64_t prefix, int shift,
                    uint64_t* counts, uint64_t* masses) {
    for (int32_t i = 0; i < count; ++i) {
        const uint64_t q = mass[i];
        if (q == 0 || !domain.keeps(i, q) || (q >> (shift + 8)) != prefix) continue;
        const auto digit = static_cast<size_t>((q >> shift) & 255u);
        counts[digit] += 1;
        masses[digit] += q;
    }
}

int64_t count_with_mass(const uint64_t* mass, int32_t count, const filter_cut& domain, uint64_t q) {
    int64_t n = 0;
    for (int32_t i = 0; i < count; ++i) n += (mass[i] == q && domain.keeps(i, q)) ? 1 : 0;
    return n;
}

int32_t nth_with_mass(const uint64_t* mass, int32_t count, const filter_cut& domain, uint64_t q, int64_t nth) {
    for (int32_t i = 0; i < count; ++i) {
        if (mass[i] == q && domain.keeps(i, q) && nth-- == 0) return i;
    }
    return -1;
}

uint64_t kept_mass(const uint64_t* mass, int32_t count, const filter_cut& cut) {
    uint64_t sum = 0;
    for (int32_t i = 0; i < count; ++i) sum += cut.keeps(i, mass[i]) ? mass[i] : 0;
    return sum;
}

int32_t token_at_mass(const uint64_t* mass, int32_t count, const filter_cut& cut, uint64_t target, int32_t excluded) {
    uint64_t prefix = 0;
    for (int32_t i = 0; i < count; ++i) {
        if (i == excluded || !cut.keeps(i, mass[i])) continue;
        prefix += mass[i];
        if (prefix > target) return i;
    }
    return -1;
}

double raw_logprob(const logits_view& logits, int64_t row, int32_t token) {
    if (token < 0) return std::numeric_limits<double>::quiet_NaN();
    auto value = [&](int32_t i) {
        const int64_t at = row * logits.row_stride + i;
        switch (logits.dtype) {
            case logits_dtype::f32: return static_cast<const float*>(logits.data)[at];
            case logits_dtype::bf16: return dm::bf16_bits_to_float(static_cast<const uint16_t*>(logits.data)[at]);
            case logits_dtype::f16: return dm::fp16_bits_to_float(static_cast<const uint16_t*>(logits.data)[at]);
        }
        return 0.0f;
    };
    float max_logit = kNegInf;
    for (int32_t i = 0; i < logits.vocab; ++i) max_logit = std::max(max_logit, value(i));  // NaN never wins
    uint64_t sum = 0;
    for (int32_t i = 0; i < logits.vocab; ++i) sum += exact::token_mass(value(i), max_logit, exact::kUnitScale);
    if (sum == 0) return std::numeric_limits<double>::quiet_NaN();
    return exact::log_probability(exact::shifted_logit(value(token), max_logit), 1.0f, exact::mass_weight(sum));
}

int32_t row_sampler::argmax(const float* logits) const { return argmax_of(logits, vocab_); }

uint64_t row_sampler::build_distribution(const float* logits, int32_t top_token, const request_view& params) {
    const float max_logit = logits[top_token];
    const float scale = exact::mass_scale(params.temperature);
    cut_ = filter_cut{};
    cut_.min_mass = exact::min_p_mass_threshold(params.min_p);

    uint64_t* mass = mass_;
    int32_t* order = order_;
    int64_t nonzero = 0;
    uint64_t unfiltered_kept = 0;  // mass passing min_p alone
    for (int32_t i = 0; i < vocab_; ++i) {
        const uint64_t q = exact::token_mass(logits[i], max_logit, scale);
        mass[i] = q;
        if (q > 0) order[nonzero++] = i;
        if (q >= cut_.min_mass) unfiltered_kept += q;
    }

    const int64_t top_k = (params.top_k < 0 || params.top_k >= nonzero) ? nonzero : params.top_k;
    if (top_k == nonzero && params.top_p >= 1.0f) return unfiltered_kept;

    // Only tokens at or above a power-of-two mass bound can survive: the highest bound above which
    // lie top_k tokens (or, for top-p alone, the top-p target mass). Sorting those few (hundreds
    // for LLM-like rows) gives the cut exactly as the definition reads. The CUDA kernel bounds its
    // candidates the same way.
    constexpr int kBuckets = exact::kMassBits + 1;
    uint64_t bucket_count[kBuckets] = {};
    uint64_t bucket_mass[kBuckets] = {};
    uint64_t total = 0;
    for (int64_t n = 0; n < nonzero; ++n) {
        const uint64_t q = mass[order[n]];
        const int bucket = 63 - __builtin_clzll(q);
        ++bucket_count[bucket];
        bucket_mass[bucket] += q;
        total += q;
    }
    const bool top_k_active = top_k < nonzero;
    const uint64_t goal = top_k_active ? static_cast<uint64_t>(top_k) : exact::top_p_mass_target(params.top_p, total);
    int bucket = kBuckets - 1;
    for (uint64_t reached = 0; bucket > 0; --bucket) {
        reached += top_k_active ? bucket_count[bucket] : bucket_mass[bucket];
        if (reached >= goal) break;
    }
    const uint64_t bound = uint64_t{1} << bucket;
    int64_t candidates = 0;
    for (int64_t n = 0; n < nonzero; ++n) {
        if (mass[order[n]] >= bound) order[candidates++] = order[n];
    }
    std::sort(order, order + candidates,
              [mass](int32_t a, int32_t b) { return mass[a] > mass[b] || (mass[a] == mass[b] && a < b); });
    int64_t kept = top_k_active ? top_k : candidates;
    uint64_t top_k_mass = total;
    if (top_k_active) {
        top_k_mass = 0;
        for (int64_t i = 0; i < kept; ++i) top_k_mass += mass[order[i]];
    }
    if (params.top_p < 1.0f) {
        // Shortest prefix reaching ceil(top_p * M_k); it lies within the candidates.
        const uint64_t target = exact::top_p_mass_target(params.top_p, top_k_mass);
        uint64_t prefix = 0;
        kept = 0;
        while (prefix < target) prefix += mass[order[kept++]];
    }
    // order[0, kept) are the kept tokens, in order; order[kept - 1] is the boundary.
    const int32_t boundary = order[kept - 1];
    cut_.has_boundary = true;
    cut_.boundary_mass = mass[boundary];
    cut_.boundary_token = boundary;
    uint64_t kept_mass = 0;
    for (int64_t i = 0; i < kept; ++i) {
        if (mass[order[i]] >= cut_.min_mass) kept_mass += mass[order[i]];
    }
    return kept_mass;
}

uint64_t row_sampler::kept_mass_of(int32_t token) const {
    const uint64_t q = mass_[static_cast<size_t>(token)];
    return cut_.keeps(token, q) ? q : 0;
}

int32_t row_sampler::token_at(uint64_t target, int32_t excluded) const {
    return token_at_mass(mass_, vocab_, cut_, target, excluded);
}

double row_sampler::greedy_logprob(const float* logits, int32_t top_token, int32_t token) const {
    if (token < 0 || top_token < 0) return std::numeric_limits<double>::quiet_NaN();
    const float max_logit = logits[top_token];
    return exact::log_probability(exact::shifted_logit(logits[token], max_logit), 1.0f,
                                  exact::mass_weight(unit_mass_sum(logits, vocab_, max_logit)));
}

double row_sampler::filtered_logprob(const float* logits, int32_t top_token, int32_t token, float temperature,
                                     uint64_t kept) const {
    if (token < 0 || top_token < 0) return std::numeric_limits<double>::quiet_NaN();
    return exact::log_probability(exact::shifted_logit(logits[token], logits[top_token]), temperature,
                                  exact::mass_weight(kept));
}

}  // namespace ds::cpu

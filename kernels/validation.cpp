#include "kernels/validation.h"

#include <fmt/format.h>

#include <cmath>

namespace ds {

static_assert(kMaxVocabSize <= exact::kMaxVocab, "a configured row's masses must sum without wrapping");

namespace {

std::string field_name(std::string_view prefix, std::string_view field) { return fmt::format("{}{}", prefix, field); }

// [lo, hi] with either end optionally open; NaN and infinities always fail.
status check_real(std::string_view prefix, std::string_view field, double value, double lo, bool lo_open, double hi,
                  bool hi_open) {
    const bool ok =
        std::isfinite(value) && (lo_open ? value > lo : value >= lo) && (hi_open ? value < hi : value <= hi);
    if (ok) return status::success();
    return status::invalid(fmt::format("{} = {}: expected a number in {}{}, {}{}", field_name(prefix, field), value,
                                       lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']'));
}

status check_int(std::string_view prefix, std::string_view field, int64_t value, int64_t lo, int64_t hi) {
    if (value >= lo && value <= hi) return status::success();
    return status::invalid(
        fmt::format("{} = {}: expected an integer in [{}, {}]", field_name(prefix, field), value, lo, hi));
}

// A per-call scalar (an array is checked per row on the device instead).
template <class T, class Check>
status check_scalar(std::string_view field, const param<T>& p, const Check& check) {
    if (p.values != nullptr) return status::success();
    return check(p.scalar) ? status::success()
                           : status::invalid(fmt::format("{} = {}: expected {}", field, p.scalar, range_of(field)));
}

}  // namespace

const char* range_of(std::string_view field) {
    if (field == "temperature") return "a finite number >= 0";
    if (field == "top_k") return "-1 (no limit) or an integer >= 1";
    if (field == "top_p") return "a number in (0, 1]";
    if (field == "min_p") return "a number in [0, 1]";
    if (field == "presence_penalty" || field == "frequency_penalty") return "a number in [-2, 2]";
    if (field == "repetition_penalty") return "a number in (0, 10]";
    if (field == "position" || field == "positions") return "an integer >= 0";
    return "a value in range";
}

status validate_call_params(const sampling_call& call) {
    const request_sources& p = call.params;
    DS_TRY(check_scalar("temperature", p.temperature, ranges::temperature));
    DS_TRY(check_scalar("top_k", p.top_k, ranges::top_k));
    DS_TRY(check_scalar("top_p", p.top_p, ranges::top_p));
    DS_TRY(check_scalar("min_p", p.min_p, ranges::min_p));
    DS_TRY(check_scalar("presence_penalty", p.presence_penalty, ranges::additive_penalty));
    DS_TRY(check_scalar("frequency_penalty", p.frequency_penalty, ranges::additive_penalty));
    DS_TRY(check_scalar("repetition_penalty", p.repetition_penalty, ranges::repetition_penalty));
    DS_TRY(check_scalar("positions", call.positions, [](int64_t v) { return v >= 0; }));
    auto check_list = [](std::string_view field, const auto& list) {
        if (list.tokens == nullptr) return status::success();
        if (list.values == nullptr) return status::invalid(fmt::format("{}.values: expected one per token", field));
        if (list.offsets == nullptr && (list.sizes == nullptr || list.stride <= 0)) {
            return status::invalid(
                fmt::format("{}: expected offsets (CSR) or sizes with a positive stride (per-slot capacity)", field));
        }
        return status::success();
    };
    DS_TRY(check_list("logit_bias", p.logit_bias));
    DS_TRY(check_list("seen", p.seen));
    if (call.slots != nullptr && call.num_slots <= 0) {
        return status::invalid(fmt::format("num_slots = {}: expected the length (> 0) of the slot-indexed arrays",
                                           call.num_slots));
    }
    return status::success();
}

status validate_sampling_params(const sampling_params& p, const kernel_config& config, std::string_view prefix) {
    if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
        return status::invalid(
            fmt::format("{} = {}: expected a finite number >= 0", field_name(prefix, "temperature"), p.temperature));
    }
    if (p.top_k != -1 && p.top_k < 1) {
        return status::invalid(
            fmt::format("{} = {}: expected -1 (no limit) or an integer >= 1", field_name(prefix, "top_k"), p.top_k));
    }
    status s = check_real(prefix, "top_p", p.top_p, 0.0, true, 1.0, false);
    if (s.is_ok()) s = check_real(prefix, "min_p", p.min_p, 0.0, false, 1.0, false);
    if (s.is_ok()) s = check_real(prefix, "presence_penalty", p.presence_penalty, -2.0, false, 2.0, false);
    if (s.is_ok()) s = check_real(prefix, "frequency_penalty", p.frequency_penalty, -2.0, false, 2.0, false);
    if (s.is_ok()) s = check_real(prefix, "repetition_penalty", p.repetition_penalty, 0.0, true, 10.0, false);
    if (!s.is_ok()) return s;
    if (p.logit_bias.size() > static_cast<size_t>(config.max_logit_bias)) {
        return status::invalid(fmt::format("{} has {} entries: expected at most {} (max_logit_bias)",
                                           field_name(prefix, "logit_bias"), p.logit_bias.size(),
                                           config.max_logit_bias));
    }
    for (const logit_bias_entry& entry : p.logit_bias) {
        const std::string entry_prefix = fmt::format("{}logit_bias[{}]", prefix, entry.token);
        if (entry.token < 0 || entry.token >= config.vocab_size) {
            return status::invalid(
                fmt::format("{}: token id {} expected in [0, {})", entry_prefix, entry.token, config.vocab_size));
        }
        s = check_real(entry_prefix, "", entry.bias, -100.0, false, 100.0, false);
        if (!s.is_ok()) return s;
    }
    return status::success();
}

status validate_thresholds(const verify_thresholds& t, std::string_view prefix) {
    status s = check_real(prefix, "threshold_single", t.single, 0.0, false, 1.0, false);
    if (s.is_ok()) s = check_real(prefix, "threshold_acc", t.acc, 0.0, true, 1.0, false);
    return s;
}

status validate_step(const step_input& step, step_kind kind, const kernel_config& config) {
    status s = check_int("", "batch_size", step.batch_size, 0, config.max_batch);
    if (!s.is_ok()) return s;
    if (kind == step_kind::sample) {
        s = check_int("", "tokens_per_req", step.tokens_per_req, 1, 1);
    } else {
        s = check_int("", "tokens_per_req", step.tokens_per_req, 1, config.max_tokens_per_req);
    }
    if (!s.is_ok()) return s;
    const int64_t bs = step.batch_size;
    const int64_t n = step.tokens_per_req;
    const logits_view& logits = step.logits;
    if (logits.vocab != config.vocab_size) {
        return status::invalid(
            fmt::format("logits.vocab = {}: expected {} (vocab_size)", logits.vocab, config.vocab_size));
    }
    if (logits.rows != bs * n) {
        return status::invalid(
            fmt::format("logits.rows = {}: expected batch_size * tokens_per_req = {}", logits.rows, bs * n));
    }
    if (logits.row_stride < logits.vocab) {
        return status::invalid(
            fmt::format("logits.row_stride = {}: expected >= vocab ({})", logits.row_stride, logits.vocab));
    }
    if (bs == 0) return status::success();
    if (logits.data == nullptr) return status::invalid("logits.data: expected a non-null pointer");
    if (step.slots == nullptr) return status::invalid("slots: expected batch_size slot ids");
    if (step.positions == nullptr) return status::invalid("positions: expected batch_size positions");
    for (int64_t b = 0; b < bs; ++b) {
        if (step.slots[b] < 0 || step.slots[b] >= config.max_slots) {
            return check_int("", fmt::format("slots[{}]", b), step.slots[b], 0, config.max_slots - 1);
        }
        if (step.positions[b] < 0) {
            return check_int("", fmt::format("positions[{}]", b), step.positions[b], 0, INT64_MAX);
        }
    }
    if (kind == step_kind::verify) {
        if (step.candidates == nullptr) {
            return status::invalid("candidates: expected batch_size rows of tokens_per_req ids");
        }
        for (int64_t i = 0; i < bs * n; ++i) {
            if (step.candidates[i] < 0 || step.candidates[i] >= config.vocab_size) {
                return check_int("", fmt::format("candidates[{}][{}]", i / n, i % n), step.candidates[i], 0,
                                 config.vocab_size - 1);
            }
        }
        s = validate_thresholds(step.thresholds);
        if (!s.is_ok()) return s;
    }
    if (step.coins != nullptr) {
        for (int64_t i = 0; i < bs * (n - 1); ++i) {
            if (!(step.coins[i] >= 0.0 && step.coins[i] <= 1.0)) {
                return check_real("", fmt::format("coins[{}][{}]", i / (n - 1), i % (n - 1)), step.coins[i], 0.0, false,
                                  1.0, false);
            }
        }
    }
    if (step.final_coins != nullptr) {
        for (int64_t b = 0; b < bs; ++b) {
            if (!(step.final_coins[b] >= 0.0 && step.final_coins[b] <= 1.0)) {
                return check_real("", fmt::format("final_coins[{}]", b), step.final_coins[b], 0.0, false, 1.0, false);
            }
        }
    }
    return status::success();
}

}  // namespace ds

#include "cli/step_json.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <string_view>

#include "config/json_input.h"
#include "kernels/validation.h"

namespace ds::cli {

using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& field, const std::string& expected) {
    throw input_error(fmt::format("{}: expected {}", field, expected));
}

const json& require(const json& obj, const char* key, const std::string& where) {
    auto it = obj.find(key);
    if (it == obj.end()) fail(where + key, "a value (the field is required)");
    return *it;
}

// Refuses keys a step or a request does not have (a misspelt "temprature" would otherwise be
// ignored), naming the ones it has.
void expect_only(const json& obj, const std::string& where, std::initializer_list<const char*> known,
                 const char* what) {
    for (const auto& item : obj.items()) {
        bool found = false;
        for (const char* k : known) found = found || item.key() == k;
        if (found) continue;
        std::string names;
        for (const char* k : known) names += fmt::format("{}{}", names.empty() ? "" : ", ", k);
        fail(where + shorten(item.key()), fmt::format("a field of {} (one of: {})", what, names));
    }
}

// The fields only a verify step takes.
void refuse_verify_fields(const json& doc) {
    for (const char* key : {"candidates", "threshold_single", "threshold_acc", "coins"}) {
        if (doc.contains(key)) fail(key, "none in a sample step (only a verify step takes it)");
    }
}

double number(const json& value, const std::string& field) {
    if (!value.is_number()) fail(field, fmt::format("a number, got {}", quote_json(value)));
    return value.get<double>();
}

// A number the kernels hold as a 32-bit float, refused when a float would change it beyond
// rounding: past its largest value, or to 0 from a number that is not 0 (1e-50).
float real32(const json& value, const std::string& field) {
    const bool beyond_double = is_overflowed_number(value);
    const double v = beyond_double ? 0.0 : number(value, field);
    const double magnitude = std::fabs(v);
    const bool overflows = beyond_double || magnitude > static_cast<double>(std::numeric_limits<float>::max());
    const bool vanishes = v != 0.0 && magnitude < static_cast<double>(std::numeric_limits<float>::denorm_min()) / 2;
    if (overflows || vanishes) {
        throw input_error(fmt::format("{} = {}: expected 0 or a magnitude in [{}, {}] (a 32-bit float)", field,
                                      quote_json(value), std::numeric_limits<float>::denorm_min(),
                                      std::numeric_limits<float>::max()));
    }
    return static_cast<float>(v);
}

int64_t integer(const json& value, const std::string& field, int64_t lo, int64_t hi) {
    const bool too_large = value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
    if (!value.is_number_integer() || too_large) {
        fail(field, fmt::format("an integer in [{}, {}], got {}", lo, hi, quote_json(value)));
    }
    const int64_t v = value.get<int64_t>();
    if (v < lo || v > hi) fail(field, fmt::format("an integer in [{}, {}], got {}", lo, hi, v));
    return v;
}

const json& array_of(const json& value, const std::string& field, size_t size, const char* what) {
    if (!value.is_array() || value.size() != size) {
        fail(field, fmt::format("an array of {} {}, got {}", size, what,
                                value.is_array() ? fmt::format("{} entries", value.size()) : quote_json(value)));
    }
    return value;
}

// Logits at or above this are refused: a float would hold them, but no model makes them, and a
// kernel cannot normalise an infinite one. At or below its negative they mean -inf (a token never
// drawn); null means NaN (the row is reported in row_errors).
constexpr double kLogitLimit = 1e30;

float logit(const json& value, const std::string& row, size_t i) {
    if (value.is_null()) return std::numeric_limits<float>::quiet_NaN();
    if (!value.is_number())
        fail(fmt::format("{}[{}]", row, i), fmt::format("a number or null, got {}", quote_json(value)));
    const double v = value.get<double>();
    if (v <= -kLogitLimit) return -std::numeric_limits<float>::infinity();
    if (v >= kLogitLimit) {
        fail(fmt::format("{}[{}]", row, i),
             fmt::format("a number below {} (at most -{} means -inf, null means NaN), got {}", kLogitLimit, kLogitLimit,
                         quote_json(value)));
    }
    return static_cast<float>(v);
}

// A logit_bias key: a token id in canonical decimal ("3", "-1"; not " 3", "+3" or "03", which
// would name the same token twice).
int32_t bias_token(const std::string& key, const std::string& field) {
    const size_t digits = key.size() - (key.rfind('-', 0) == 0 ? 1 : 0);
    const std::string_view number(key.data() + (key.size() - digits), digits);
    const bool canonical = !number.empty() && number.size() <= 10 &&
                           number.find_first_not_of("0123456789") == std::string_view::npos &&
                           (number == "0" || number.front() != '0') && key != "-0";
    const long long token = canonical ? std::stoll(key) : 0;
    if (!canonical || token < INT32_MIN || token > INT32_MAX)
        fail(field, "a token id in decimal digits as the key (e.g. \"3\")");
    return static_cast<int32_t>(token);
}

json_request parse_request(const json& r, const std::string& where) {
    if (!r.is_object()) fail(where, "an object with seed, position and sampling parameters");
    expect_only(r, where,
                {"seed", "position", "temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty",
                 "repetition_penalty", "top_k", "logit_bias", "history"},
                "a request");
    json_request out;
    sampling_params& p = out.params;
    if (auto it = r.find("seed"); it != r.end()) {
        const bool valid = it->is_number_unsigned() || (it->is_number_integer() && it->get<int64_t>() >= 0);
        if (!valid) fail(where + "seed", fmt::format("an integer in [0, 2^64), got {}", quote_json(*it)));
        p.seed = it->get<uint64_t>();
    }
    if (auto it = r.find("position"); it != r.end()) out.position = integer(*it, where + "position", 0, INT64_MAX);
    auto real = [&](const char* key, float& field) {
        if (auto it = r.find(key); it != r.end()) field = real32(*it, where + key);
    };
    real("temperature", p.temperature);
    real("top_p", p.top_p);
    real("min_p", p.min_p);
    real("presence_penalty", p.presence_penalty);
    real("frequency_penalty", p.frequency_penalty);
    real("repetition_penalty", p.repetition_penalty);
    if (auto it = r.find("top_k"); it != r.end()) {
        p.top_k = static_cast<int32_t>(integer(*it, where + "top_k", INT32_MIN, INT32_MAX));
    }
    if (auto it = r.find("logit_bias"); it != r.end()) {
        if (!it->is_object() || it->size() > static_cast<size_t>(kMaxLogitBias)) {
            fail(where + "logit_bias", fmt::format("an object mapping at most {} token ids (strings) to biases, got {}",
                                                   kMaxLogitBias, quote_json(*it)));
        }
        for (const auto& [key, value] : it->items()) {
            const std::string field = where + "logit_bias[" + quote_json(json(key)) + "]";
            p.logit_bias.push_back({bias_token(key, field), real32(value, field)});
        }
    }
    if (auto it = r.find("history"); it != r.end()) {
        if (!it->is_array() || it->size() > static_cast<size_t>(kMaxPenaltyTokens)) {
            fail(where + "history",
                 fmt::format("an array of at most {} token ids, got {}", kMaxPenaltyTokens, quote_json(*it)));
        }
        for (size_t i = 0; i < it->size(); ++i) {
            out.history.push_back(
                static_cast<int32_t>(integer((*it)[i], fmt::format("{}history[{}]", where, i), 0, INT32_MAX)));
        }
    }
    return out;
}

void parse_candidates(const json& doc, size_t bs, json_step& step) {
    const json& candidates = array_of(require(doc, "candidates", ""), "candidates", bs, "rows of candidate ids");
    for (size_t b = 0; b < bs; ++b) {
        const std::string field = fmt::format("candidates[{}]", b);
        const size_t n = candidates[b].is_array() ? candidates[b].size() : 0;
        if (n < 1 || n > static_cast<size_t>(kMaxTokensPerRequest)) {
            fail(field, fmt::format("an array of 1 to {} ids: the anchor then the drafts, got {}", kMaxTokensPerRequest,
                                    quote_json(candidates[b])));
        }
        if (b == 0) step.request.tokens_per_req = static_cast<int32_t>(n);
        array_of(candidates[b], field, static_cast<size_t>(step.request.tokens_per_req),
                 "ids (every row has N = len(candidates[0]))");
        for (size_t j = 0; j < n; ++j) {
            step.request.candidates.push_back(
                static_cast<int32_t>(integer(candidates[b][j], fmt::format("{}[{}]", field, j), INT32_MIN, INT32_MAX)));
        }
    }
    if (auto it = doc.find("threshold_single"); it != doc.end())
        step.request.thresholds.single = real32(*it, "threshold_single");
    if (auto it = doc.find("threshold_acc"); it != doc.end())
        step.request.thresholds.acc = real32(*it, "threshold_acc");
    if (auto it = doc.find("coins"); it != doc.end()) {
        array_of(*it, "coins", bs, "rows of N-1 numbers");
        for (size_t b = 0; b < bs; ++b) {
            const std::string field = fmt::format("coins[{}]", b);
            array_of((*it)[b], field, static_cast<size_t>(step.request.tokens_per_req - 1), "numbers in [0, 1]");
            for (size_t j = 0; j < (*it)[b].size(); ++j)
                step.request.coins.push_back(number((*it)[b][j], fmt::format("{}[{}]", field, j)));
        }
    }
}

void parse_logits(const json& doc, step_kind kind, size_t rows, json_step& step) {
    const auto vocab = static_cast<size_t>(step.vocab_size);
    const json& logits = array_of(require(doc, "logits", ""), "logits", rows,
                                  kind == step_kind::verify ? "rows (batch_size * N)" : "rows (one per request)");
    step.logits.reserve(rows * vocab);
    for (size_t r = 0; r < rows; ++r) {
        const std::string field = fmt::format("logits[{}]", r);
        array_of(logits[r], field, vocab, "numbers (vocab_size)");
        for (size_t i = 0; i < vocab; ++i) step.logits.push_back(logit(logits[r][i], field, i));
    }
}

void parse_bitmask(const json& bitmask, size_t rows, json_step& step) {
    const auto words = static_cast<size_t>(bitmask_words(step.vocab_size));
    array_of(bitmask, "bitmask", rows, "rows (one per logits row)");
    for (size_t r = 0; r < rows; ++r) {
        const std::string field = fmt::format("bitmask[{}]", r);
        array_of(bitmask[r], field, words, "int32 words (ceil(vocab_size / 32))");
        for (size_t w = 0; w < words; ++w) {
            const int64_t word = integer(bitmask[r][w], fmt::format("{}[{}]", field, w), INT32_MIN, UINT32_MAX);
            step.request.bitmask.push_back(static_cast<uint32_t>(word));
        }
    }
}

}  // namespace

int run_json_command(const std::function<int()>& body) {
    try {
        return body();
    } catch (const input_error& e) {
        std::cerr << "error: " << e.what() << '\n';
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "error: " << e.what() << '\n';
        return 1;
    }
}

json read_json_input(std::istream& in) {
    result<json> doc = read_json(in);
    if (!doc.is_ok()) throw input_error(fmt::format("input: expected one JSON object ({})", doc.error().message));
    return std::move(doc).value();
}

void throw_unless_ok(const status& s) {
    if (s.code == status_code::invalid_argument) throw input_error(s.message);
    if (!s.is_ok()) throw std::runtime_error(s.message);
}

json_step parse_step(const json& doc, step_kind kind, bool with_logits) {
    if (!doc.is_object()) fail("input", "one JSON object");
    expect_only(doc, "",
                {"vocab_size", "logits", "requests", "candidates", "threshold_single", "threshold_acc", "coins",
                 "final_coins", "bitmask"},
                "a step");
    if (kind == step_kind::sample) refuse_verify_fields(doc);
    json_step step;
    step.request.kind = kind;
    step.vocab_size = static_cast<int32_t>(integer(require(doc, "vocab_size", ""), "vocab_size", 1, kMaxVocabSize));
    const json& requests = require(doc, "requests", "");
    // Counted before anything is sized by it.
    if (!requests.is_array() || requests.empty() || requests.size() > static_cast<size_t>(kMaxBatchSize)) {
        fail("requests",
             fmt::format("an array of 1 to {} request objects, got {}", kMaxBatchSize, quote_json(requests)));
    }
    for (size_t b = 0; b < requests.size(); ++b) {
        step.requests.push_back(parse_request(requests[b], fmt::format("requests[{}].", b)));
    }
    const size_t bs = step.requests.size();
    if (kind == step_kind::verify) parse_candidates(doc, bs, step);
    if (auto it = doc.find("final_coins"); it != doc.end()) {
        array_of(*it, "final_coins", bs, "numbers in [0, 1]");
        for (size_t b = 0; b < bs; ++b)
            step.request.final_coins.push_back(number((*it)[b], fmt::format("final_coins[{}]", b)));
    }
    const size_t rows = bs * static_cast<size_t>(step.request.tokens_per_req);
    if (!with_logits) {
        if (doc.contains("logits")) fail("logits", "none: the ranks make their own (topology.logits_source)");
    } else {
        parse_logits(doc, kind, rows, step);
    }
    if (auto it = doc.find("bitmask"); it != doc.end()) parse_bitmask(*it, rows, step);
    for (size_t b = 0; b < bs; ++b) {
        step.request.slots.push_back(static_cast<int32_t>(b + 1));
        step.request.positions.push_back(step.requests[b].position);
    }
    return step;
}

status check_requests(const json_step& step, const kernel_config& limits) {
    for (int32_t b = 0; b < step.batch_size(); ++b) {
        const json_request& r = step.requests[static_cast<size_t>(b)];
        DS_TRY(validate_sampling_params(r.params, limits, fmt::format("requests[{}].", b)));
        for (size_t i = 0; i < r.history.size(); ++i) {
            if (r.history[i] >= step.vocab_size) {
                return status::invalid(fmt::format("requests[{}].history[{}] = {}: expected a token id in [0, {})", b,
                                                   i, r.history[i], step.vocab_size));
            }
        }
    }
    return status::success();
}

kernel_config json_step::fitting_config(int threads) const {
    kernel_config config;
    config.vocab_size = vocab_size;
    config.max_batch = std::max(1, batch_size());
    config.max_slots = std::max(2, batch_size() + 1);
    config.max_tokens_per_req = std::clamp(request.tokens_per_req, 1, kMaxTokensPerRequest);
    size_t max_bias = 0;
    size_t max_history = 0;
    for (const json_request& r : requests) {
        max_bias = std::max(max_bias, r.params.logit_bias.size());
        max_history = std::max(max_history, r.history.size());
    }
    config.max_logit_bias = static_cast<int32_t>(max_bias);
    config.max_penalty_tokens = static_cast<int32_t>(max_history);
    config.threads = threads;
    return config;
}

step_input json_step::as_input() const {
    step_input in;
    in.logits = logits_view{logits.data(), logits_dtype::f32,
                            static_cast<int64_t>(requests.size()) * request.tokens_per_req, vocab_size, vocab_size};
    in.slots = request.slots.data();
    in.positions = request.positions.data();
    in.batch_size = batch_size();
    in.tokens_per_req = request.tokens_per_req;
    in.candidates = request.candidates.empty() ? nullptr : request.candidates.data();
    in.bitmask = request.bitmask.empty() ? nullptr : request.bitmask.data();
    in.thresholds = request.thresholds;
    in.coins = request.coins.empty() ? nullptr : request.coins.data();
    in.final_coins = request.final_coins.empty() ? nullptr : request.final_coins.data();
    return in;
}

step_result::step_result(int32_t batch_size, int32_t tokens_per_req)
    : packed(static_cast<size_t>(batch_size) * (tokens_per_req + 1)),
      accept_index(static_cast<size_t>(batch_size) * tokens_per_req),
      logprobs(static_cast<size_t>(batch_size) * tokens_per_req),
      row_error(static_cast<size_t>(batch_size)) {}

step_output step_result::view() {
    return step_output{packed.data(), accept_index.data(), logprobs.data(), row_error.data()};
}

json result_to_json(const step_result& result, step_kind kind, int32_t bs, int32_t n) {
    auto logprob_json = [](float v) { return std::isnan(v) ? json(nullptr) : json(v); };
    json out = json::object();
    if (kind == step_kind::sample) {
        json tokens = json::array();
        json logprobs = json::array();
        for (int32_t b = 0; b < bs; ++b) {
            tokens.push_back(result.packed[static_cast<size_t>(b)]);
            logprobs.push_back(logprob_json(result.logprobs[static_cast<size_t>(b)]));
        }
        out["tokens"] = tokens;
        out["logprobs"] = logprobs;
    } else {
        const size_t total = static_cast<size_t>(bs) * static_cast<size_t>(n);
        out["predict"] =
            std::vector<int32_t>(result.packed.begin(), result.packed.begin() + static_cast<std::ptrdiff_t>(total));
        json accept_index = json::array();
        for (int32_t b = 0; b < bs; ++b) {
            const auto begin = result.accept_index.begin() + static_cast<std::ptrdiff_t>(b) * n;
            accept_index.push_back(std::vector<int32_t>(begin, begin + n));
        }
        out["accept_index"] = accept_index;
        out["accept_length"] =
            std::vector<int32_t>(result.packed.begin() + static_cast<std::ptrdiff_t>(total), result.packed.end());
        json logprobs = json::array();
        for (size_t i = 0; i < total; ++i) logprobs.push_back(logprob_json(result.logprobs[i]));
        out["logprobs"] = logprobs;
    }
    json errors = json::array();
    for (int32_t b = 0; b < bs; ++b) {
        if (result.row_error[static_cast<size_t>(b)] != 0) errors.push_back(b);
    }
    if (!errors.empty()) out["row_errors"] = errors;
    return out;
}

step_result run_step(sampling_backend& backend, const json_step& step, step_kind kind) {
    throw_unless_ok(check_requests(step, backend.config()));
    for (int32_t b = 0; b < step.batch_size(); ++b) {
        const json_request& r = step.requests[static_cast<size_t>(b)];
        status s =
            backend.pool().register_request(b + 1, r.params, r.history.data(), static_cast<int32_t>(r.history.size()));
        // Pool messages name the bare field; say which request it was.
        if (!s.is_ok()) throw input_error(fmt::format("requests[{}].{}", b, s.message));
    }
    step_result result(step.batch_size(), step.request.tokens_per_req);
    const step_input input = step.as_input();
    throw_unless_ok(kind == step_kind::sample ? backend.sample(input, result.view())
                                              : backend.verify(input, result.view()));
    return result;
}

}  // namespace ds::cli

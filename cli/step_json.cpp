#include "cli/step_json.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>

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

double number(const json& value, const std::string& field) {
    if (!value.is_number()) fail(field, fmt::format("a number, got {}", value.dump()));
    return value.get<double>();
}

int64_t integer(const json& value, const std::string& field, int64_t lo, int64_t hi) {
    if (!value.is_number_integer()) fail(field, fmt::format("an integer in [{}, {}], got {}", lo, hi, value.dump()));
    const int64_t v = value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                          ? INT64_MAX
                          : value.get<int64_t>();
    if (v < lo || v > hi) fail(field, fmt::format("an integer in [{}, {}], got {}", lo, hi, v));
    return v;
}

const json& array_of(const json& value, const std::string& field, size_t size, const char* what) {
    if (!value.is_array() || value.size() != size) {
        fail(field, fmt::format("an array of {} {}, got {}", size, what,
                                value.is_array() ? fmt::format("{} entries", value.size()) : value.type_name()));
    }
    return value;
}

// A logit: a number (<= -1e30 means -inf) or null (NaN).
float logit(const json& value, const std::string& field) {
    if (value.is_null()) return std::numeric_limits<float>::quiet_NaN();
    const double v = number(value, field);
    if (v <= -1e30) return -std::numeric_limits<float>::infinity();
    if (v >= 1e30) return std::numeric_limits<float>::infinity();
    return static_cast<float>(v);
}

json_request parse_request(const json& r, const std::string& where) {
    if (!r.is_object()) fail(where, "an object with seed, position and sampling parameters");
    json_request out;
    sampling_params& p = out.params;
    if (auto it = r.find("seed"); it != r.end()) {
        if (!it->is_number_integer()) fail(where + "seed", "an integer in [0, 2^64)");
        p.seed = it->is_number_unsigned() ? it->get<uint64_t>()
                                          : static_cast<uint64_t>(integer(*it, where + "seed", 0, INT64_MAX));
    }
    if (auto it = r.find("position"); it != r.end()) out.position = integer(*it, where + "position", 0, INT64_MAX);
    auto real = [&](const char* key, float& field) {
        if (auto it = r.find(key); it != r.end()) field = static_cast<float>(number(*it, where + key));
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
        if (!it->is_object()) fail(where + "logit_bias", "an object mapping token id (string) to bias");
        for (const auto& [key, value] : it->items()) {
            const std::string field = where + "logit_bias[" + key + "]";
            int32_t token = 0;
            try {
                size_t used = 0;
                token = std::stoi(key, &used);
                if (used != key.size()) throw std::invalid_argument(key);
            } catch (const std::exception&) {
                fail(field, "a decimal token id as the key");
            }
            p.logit_bias.push_back({token, static_cast<float>(number(value, field))});
        }
    }
    if (auto it = r.find("history"); it != r.end()) {
        if (!it->is_array()) fail(where + "history", "an array of token ids");
        for (size_t i = 0; i < it->size(); ++i) {
            out.history.push_back(
                static_cast<int32_t>(integer((*it)[i], fmt::format("{}history[{}]", where, i), 0, INT32_MAX)));
        }
    }
    return out;
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
    try {
        return json::parse(in);
    } catch (const json::parse_error& e) {
        throw input_error(fmt::format("input: expected one JSON object ({})", e.what()));
    }
}

void throw_unless_ok(const status& s) {
    if (s.code == status_code::invalid_argument) throw input_error(s.message);
    if (!s.is_ok()) throw std::runtime_error(s.message);
}

json_step parse_step(const json& doc, step_kind kind, bool with_logits) {
    if (!doc.is_object()) fail("input", "one JSON object");
    json_step step;
    step.request.kind = kind;
    step.vocab_size = static_cast<int32_t>(integer(require(doc, "vocab_size", ""), "vocab_size", 1, 1 << 24));
    const json& requests = require(doc, "requests", "");
    if (!requests.is_array()) fail("requests", "an array of request objects");
    for (size_t b = 0; b < requests.size(); ++b) {
        step.requests.push_back(parse_request(requests[b], fmt::format("requests[{}].", b)));
    }
    const size_t bs = step.requests.size();
    if (kind == step_kind::verify) {
        const json& candidates = array_of(require(doc, "candidates", ""), "candidates", bs, "rows of candidate ids");
        for (size_t b = 0; b < bs; ++b) {
            const std::string field = fmt::format("candidates[{}]", b);
            if (!candidates[b].is_array() || candidates[b].empty())
                fail(field, "a non-empty array: the anchor then the drafts");
            if (b == 0)
                step.request.tokens_per_req = static_cast<int32_t>(std::min<size_t>(candidates[b].size(), 1 << 20));
            array_of(candidates[b], field, static_cast<size_t>(step.request.tokens_per_req),
                     "ids (every row has N = len(candidates[0]))");
            for (size_t j = 0; j < candidates[b].size(); ++j) {
                step.request.candidates.push_back(static_cast<int32_t>(
                    integer(candidates[b][j], fmt::format("{}[{}]", field, j), INT32_MIN, INT32_MAX)));
            }
        }
        if (auto it = doc.find("threshold_single"); it != doc.end())
            step.request.thresholds.single = static_cast<float>(number(*it, "threshold_single"));
        if (auto it = doc.find("threshold_acc"); it != doc.end())
            step.request.thresholds.acc = static_cast<float>(number(*it, "threshold_acc"));
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
    if (auto it = doc.find("final_coins"); it != doc.end()) {
        array_of(*it, "final_coins", bs, "numbers in [0, 1]");
        for (size_t b = 0; b < bs; ++b)
            step.request.final_coins.push_back(number((*it)[b], fmt::format("final_coins[{}]", b)));
    }
    const size_t rows = bs * static_cast<size_t>(step.request.tokens_per_req);
    const auto vocab = static_cast<size_t>(step.vocab_size);
    if (!with_logits) {
        if (doc.contains("logits")) fail("logits", "none: the ranks make their own (topology.logits_source)");
    } else {
        const json& logits = array_of(require(doc, "logits", ""), "logits", rows,
                                      kind == step_kind::verify ? "rows (batch_size * N)" : "rows (one per request)");
        step.logits.reserve(rows * vocab);
        for (size_t r = 0; r < rows; ++r) {
            const std::string field = fmt::format("logits[{}]", r);
            array_of(logits[r], field, vocab, "numbers (vocab_size)");
            for (size_t i = 0; i < vocab; ++i)
                step.logits.push_back(logit(logits[r][i], fmt::format("{}[{}]", field, i)));
        }
    }
    if (auto it = doc.find("bitmask"); it != doc.end()) {
        const auto words = static_cast<size_t>(bitmask_words(step.vocab_size));
        array_of(*it, "bitmask", rows, "rows (one per logits row)");
        for (size_t r = 0; r < rows; ++r) {
            const std::string field = fmt::format("bitmask[{}]", r);
            array_of((*it)[r], field, words, "int32 words (ceil(vocab_size / 32))");
            for (size_t w = 0; w < words; ++w) {
                const int64_t word = integer((*it)[r][w], fmt::format("{}[{}]", field, w), INT32_MIN, UINT32_MAX);
                step.request.bitmask.push_back(static_cast<uint32_t>(word));
            }
        }
    }
    for (size_t b = 0; b < bs; ++b) {
        step.request.slots.push_back(static_cast<int32_t>(b + 1));
        step.request.positions.push_back(step.requests[b].position);
    }
    return step;
}

kernel_config json_step::fitting_config(int threads) const {
    kernel_config config;
    config.vocab_size = vocab_size;
    config.max_batch = std::max(1, batch_size());
    config.max_slots = std::max(2, batch_size() + 1);
    config.max_tokens_per_req = std::clamp(request.tokens_per_req, 1, 64);
    size_t max_bias = 0;
    size_t max_history = 0;
    for (const json_request& r : requests) {
        max_bias = std::max(max_bias, r.params.logit_bias.size());
        max_history = std::max(max_history, r.history.size());
    }
    config.max_logit_bias = static_cast<int32_t>(std::min<size_t>(max_bias, 1 << 20));
    config.max_penalty_tokens = static_cast<int32_t>(std::min<size_t>(max_history, 1 << 20));
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
    for (int32_t b = 0; b < step.batch_size(); ++b) {
        const json_request& r = step.requests[static_cast<size_t>(b)];
        for (size_t i = 0; i < r.history.size(); ++i) {
            if (r.history[i] >= step.vocab_size) {
                throw input_error(fmt::format("requests[{}].history[{}] = {}: expected a token id in [0, {})", b, i,
                                              r.history[i], step.vocab_size));
            }
        }
        status s =
            backend.pool().register_request(b + 1, r.params, r.history.data(), static_cast<int32_t>(r.history.size()));
        if (!s.is_ok()) {
            // Pool messages name the bare field; say which request it was.
            throw input_error(fmt::format("requests[{}].{}", b, s.message));
        }
    }
    step_result result(step.batch_size(), step.request.tokens_per_req);
    const step_input input = step.as_input();
    throw_unless_ok(kind == step_kind::sample ? backend.sample(input, result.view())
                                              : backend.verify(input, result.view()));
    return result;
}

}  // namespace ds::cli

#include "gateway/steps.h"

#include <fmt/format.h>

#include <algorithm>

namespace ds::gateway {

int32_t slot_table::free_slot() const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t s = 1; s < slots_.size(); ++s) {
        if (!slots_[s].registered) return static_cast<int32_t>(s);
    }
    return 0;
}

void slot_table::set(int32_t slot, const std::vector<int32_t>& history, uint64_t owner) {
    std::lock_guard<std::mutex> lock(mutex_);
    entry& e = slots_[static_cast<size_t>(slot)];
    e.registered = true;
    e.owner = owner;
    e.context = 0;
    ++e.generation;
    for (int32_t token : history) e.context = logits_source::next_context(e.context, token);
}

bool slot_table::release(int32_t slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (slot < 1 || slot >= max_slots() || !slots_[static_cast<size_t>(slot)].registered) return false;
    entry& e = slots_[static_cast<size_t>(slot)];
    e.registered = false;
    e.owner = 0;
    e.context = 0;
    ++e.generation;
    return true;
}

uint64_t slot_table::owner(int32_t slot) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return slot >= 1 && slot < max_slots() ? slots_[static_cast<size_t>(slot)].owner : 0;
}

void slot_table::disown(uint64_t owner) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (entry& e : slots_) {
        if (e.owner == owner) e.owner = 0;
    }
}

bool slot_table::registered(int32_t slot) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return slot >= 1 && slot < max_slots() && slots_[static_cast<size_t>(slot)].registered;
}

uint64_t slot_table::context(int32_t slot) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return slots_[static_cast<size_t>(slot)].context;
}

uint64_t slot_table::generation(int32_t slot) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return slots_[static_cast<size_t>(slot)].generation;
}

void slot_table::commit(int32_t slot, uint64_t generation, const int32_t* tokens, int32_t count) {
    std::lock_guard<std::mutex> lock(mutex_);
    entry& e = slots_[static_cast<size_t>(slot)];
    if (e.generation != generation) return;
    for (int32_t i = 0; i < count; ++i) e.context = logits_source::next_context(e.context, tokens[i]);
}

int32_t slot_table::registered_count() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int32_t>(
        std::count_if(slots_.begin(), slots_.end(), [](const entry& e) { return e.registered; }));
}

namespace {

// Row b*N + j: the model's distribution after the request's committed context and its drafts
// 1..j (the anchor, candidate 0, is the last committed token).
void fill_model_rows(const wire::Step& step, int32_t n, int32_t vocab, const slot_table& slots,
                     const logits_source& model, std::vector<float>& rows) {
    const int32_t bs = step.slots_size();
    rows.resize(static_cast<size_t>(bs) * n * vocab);
    for (int32_t b = 0; b < bs; ++b) {
        uint64_t context = slots.context(step.slots(b));
        for (int32_t j = 0; j < n; ++j) {
            if (j > 0) context = logits_source::next_context(context, step.candidates(static_cast<int>(b * n + j)));
            model.logits(context, rows.data() + (static_cast<size_t>(b) * n + j) * vocab);
        }
    }
}

}  // namespace

bool prepare_step(std::shared_ptr<const wire::Request> frame, const group_config& config, const slot_table& slots,
                  logits_supplier supplier, const logits_source* model, prepared_step& out, wire::Error& error) {
    const bool verify = frame->body_case() == wire::Request::kVerifyStep;
    const wire::Step& step = verify ? frame->verify_step() : frame->sample_step();
    if (!check_step_shape(step, verify, config, supplier, error)) return false;
    const int32_t bs = step.slots_size();
    const int32_t n = verify ? step.tokens_per_req() : 1;
    for (int32_t b = 0; b < bs; ++b) {
        if (!slots.registered(step.slots(b))) {
            error = make_error(wire::Error::UNKNOWN_SLOT, fmt::format("slots[{}]", b),
                               fmt::format("slot {} is not registered", step.slots(b)));
            return false;
        }
        out.generations.push_back(slots.generation(step.slots(b)));
    }
    std::vector<int32_t> step_slots(step.slots().begin(), step.slots().end());
    if (status s = check_distinct_slots(step_slots); !s.is_ok()) {
        error = error_of(s);
        return false;
    }

    step_request& r = out.request;
    r.kind = verify ? step_kind::verify : step_kind::sample;
    r.tokens_per_req = n;
    r.slots = std::move(step_slots);
    r.positions.assign(step.positions().begin(), step.positions().end());
    r.candidates.assign(step.candidates().begin(), step.candidates().end());
    r.bitmask.assign(step.bitmask().begin(), step.bitmask().end());
    if (step.has_threshold_single()) r.thresholds.single = step.threshold_single();
    if (step.has_threshold_acc()) r.thresholds.acc = step.threshold_acc();
    out.frame = std::move(frame);
    if (supplier == logits_supplier::ranks) return true;  // no shards: each rank makes its own
    const float* rows_data = step.logits().data();
    if (step.logits_size() == 0) {
        fill_model_rows(step, n, config.limits.vocab_size, slots, *model, out.model_logits);
        rows_data = out.model_logits.data();
    }
    r.shards = split_vocab(
        logits_view{rows_data, logits_dtype::f32, int64_t{bs} * n, config.limits.vocab_size, config.limits.vocab_size},
        config.distribution.tp);
    return true;
}

wire::Error error_of(const status& s) {
    switch (s.code) {
        case status_code::invalid_argument: {
            // Messages start with the field: "requests[3].top_p = 1.5: expected ...".
            const size_t end = s.message.find_first_of(" =:");
            return make_error(wire::Error::BAD_FIELD, s.message.substr(0, end), s.message);
        }
        case status_code::timeout: return make_error(wire::Error::TIMEOUT, "", s.message);
        case status_code::aborted:
        case status_code::mismatch: return make_error(wire::Error::RANK_FAILURE, "", s.message);
        default: return make_error(wire::Error::INTERNAL, "", s.message);
    }
}

sampling_params params_of(const wire::SamplingParams& p) {
    sampling_params out;
    if (p.has_temperature()) out.temperature = p.temperature();
    if (p.has_top_k()) out.top_k = p.top_k();
    if (p.has_top_p()) out.top_p = p.top_p();
    if (p.has_min_p()) out.min_p = p.min_p();
    if (p.has_seed()) out.seed = p.seed();
    if (p.has_presence_penalty()) out.presence_penalty = p.presence_penalty();
    if (p.has_frequency_penalty()) out.frequency_penalty = p.frequency_penalty();
    if (p.has_repetition_penalty()) out.repetition_penalty = p.repetition_penalty();
    for (const auto& [token, bias] : p.logit_bias()) out.logit_bias.push_back({token, bias});
    std::sort(out.logit_bias.begin(), out.logit_bias.end(),
              [](const logit_bias_entry& a, const logit_bias_entry& b) { return a.token < b.token; });
    return out;
}

}  // namespace ds::gateway

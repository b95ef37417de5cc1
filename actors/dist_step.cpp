#include "actors/dist_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/digest.h"

namespace ds {

status check_distinct_slots(const std::vector<int32_t>& slots) {
    std::vector<std::pair<int32_t, size_t>> sorted;  // (slot, index): equal slots sort by index
    sorted.reserve(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) sorted.emplace_back(slots[i], i);
    std::sort(sorted.begin(), sorted.end());
    size_t first = 0;
    size_t repeat = slots.size();  // the lowest index that repeats an earlier slot
    for (size_t i = 1; i < sorted.size(); ++i) {
        if (sorted[i].first != sorted[i - 1].first) continue;
        if (sorted[i].second < repeat) {
            repeat = sorted[i].second;
            first = sorted[i - 1].second;
        }
    }
    if (repeat == slots.size()) return status::success();
    return status::invalid(fmt::format("slots[{}] = {}: expected each slot once per step, but slots[{}] has it too",
                                       repeat, slots[repeat], first));
}

std::vector<logits_view> split_vocab(const logits_view& full, int32_t tp) {
    std::vector<logits_view> shards;
    const int32_t shard_vocab = full.vocab / tp;
    const auto* base = static_cast<const unsigned char*>(full.data);
    for (int32_t r = 0; r < tp; ++r) {
        const size_t offset = static_cast<size_t>(r) * static_cast<size_t>(shard_vocab) * dtype_size(full.dtype);
        shards.push_back(
            logits_view{base + offset, full.dtype, full.rows, shard_vocab, full.row_stride, full.on_device});
    }
    return shards;
}

void step_outputs::resize(int32_t bs, int32_t n) {
    const size_t rows = static_cast<size_t>(bs) * static_cast<size_t>(n);
    packed.assign(rows + static_cast<size_t>(bs), -1);
    accept_index.assign(rows, -1);
    logprobs.assign(rows, 0.0f);
    row_error.assign(static_cast<size_t>(bs), 0);
}

step_output step_outputs::view() {
    return step_output{packed.data(), accept_index.data(), logprobs.data(), row_error.data()};
}

namespace {

bool same_bits(const float* a, const float* b, size_t count) { return std::memcmp(a, b, count * sizeof(float)) == 0; }

}  // namespace

uint64_t step_outputs::digest() const {
    uint64_t hash = digest_bytes(packed.data(), packed.size() * sizeof(int32_t));
    hash = digest_bytes(hash, accept_index.data(), accept_index.size() * sizeof(int32_t));
    hash = digest_bytes(hash, logprobs.data(), logprobs.size() * sizeof(float));
    return digest_bytes(hash, row_error.data(), row_error.size());
}

int32_t step_outputs::first_difference(const step_outputs& other, int32_t n) const {
    const int32_t bs = batch_size();
    if (other.batch_size() != bs) return 0;
    const size_t rows = static_cast<size_t>(bs) * static_cast<size_t>(n);
    for (int32_t b = 0; b < bs; ++b) {
        const size_t row = static_cast<size_t>(b) * static_cast<size_t>(n);
        const bool same =
            std::equal(packed.begin() + row, packed.begin() + row + n, other.packed.begin() + row) &&
            std::equal(accept_index.begin() + row, accept_index.begin() + row + n, other.accept_index.begin() + row) &&
            packed[rows + b] == other.packed[rows + b] &&
            same_bits(logprobs.data() + row, other.logprobs.data() + row, static_cast<size_t>(n)) &&
            row_error[b] == other.row_error[b];
        if (!same) return b;
    }
    return -1;
}

step_input dist_step::slice(int32_t first, int32_t count, const logits_view& logits) const {
    const int32_t n = plan.tokens_per_req;
    const size_t rows_before = static_cast<size_t>(first) * static_cast<size_t>(n);
    step_input in;
    in.logits = logits;
    in.slots = slots.data() + first;
    in.positions = positions.data() + first;
    in.batch_size = count;
    in.tokens_per_req = n;
    in.candidates = candidates.empty() ? nullptr : candidates.data() + rows_before;
    in.bitmask =
        bitmask.empty() ? nullptr : bitmask.data() + rows_before * static_cast<size_t>(bitmask_words(logits.vocab));
    in.thresholds = thresholds;
    in.coins = coins.empty() ? nullptr : coins.data() + static_cast<size_t>(first) * static_cast<size_t>(n - 1);
    in.final_coins = final_coins.empty() ? nullptr : final_coins.data() + first;
    return in;
}

dist_step make_dist_step(uint64_t id, const step_request& request, const step_plan& plan, int32_t vocab_size) {
    const size_t pad = static_cast<size_t>(plan.pad_bs);
    const size_t n = static_cast<size_t>(plan.tokens_per_req);
    auto padded = [](auto values, size_t size, auto fill) {
        if (!values.empty()) values.resize(size, fill);
        return values;
    };
    dist_step step;
    step.id = id;
    step.kind = request.kind;
    step.plan = plan;
    step.slots = padded(request.slots, pad, 0);
    step.positions = padded(request.positions, pad, int64_t{0});
    step.candidates = padded(request.candidates, pad * n, 0);
    step.bitmask = padded(request.bitmask, pad * n * static_cast<size_t>(bitmask_words(vocab_size)), 0xFFFFFFFFu);
    step.coins = padded(request.coins, pad * (n - 1), 0.0);
    step.final_coins = padded(request.final_coins, pad, 0.0);
    step.thresholds = request.thresholds;
    step.shards = request.shards;
    return step;
}

}  // namespace ds

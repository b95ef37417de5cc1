// The C ABI of include/distsample/distsample_rank_c.h over the rank API (distsample/rank.h).
#include <distsample/distsample_rank_c.h>
#include <distsample/rank.h>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "capi/c_status.h"
#include "config/config_file.h"
#include "core/status.h"

namespace {

using ds::status;
using ds::capi::guarded;
using ds::capi::report;

constexpr int64_t kMaxWaitMs = 3'600'000;
constexpr size_t kKeptSteps = 64;  // steps whose outputs the worker may still ask for

status check_wait(const char* field, int64_t ms) {
    if (ms >= 0 && ms <= kMaxWaitMs) return status::success();
    return status::invalid(fmt::format("{} = {}: expected milliseconds in [0, {}]", field, ms, kMaxWaitMs));
}

status load_config(const char* config_json, const char* coordinator, int32_t rank, int64_t logits_timeout_ms,
                   ds::worker_rank_config& c) {
    if (config_json == nullptr)
        return status::invalid("config_json: expected the text of a JSON object (\"{}\": the defaults), got null");
    if (coordinator == nullptr) return status::invalid("coordinator: expected HOST:PORT, got null");
    const ds::config_keys::json_source source{{}, config_json};
    DS_TRY(ds::load_group_config(source, {}, c.group));
    DS_TRY(ds::load_topology_config(source, {}, c.topology));
    c.coordinator = coordinator;
    c.rank = rank;
    c.logits_timeout = std::chrono::milliseconds(logits_timeout_ms);
    return c.check();
}

}  // namespace

// The handle: the rank, and the shape of each step it took, which its outputs are cut to (the
// group pads a step's batch to a multiple of tp).
struct ds_rank {
    std::unique_ptr<ds::worker_rank> rank;
    ds_rank_info info{};
    ds::backend_kind backend = ds::backend_kind::cpu;
    std::mutex mutex;
    std::map<uint64_t, std::pair<int32_t, int32_t>> shapes;  // step id -> (batch_size, tokens_per_req)

    status next_step(int64_t timeout_ms, ds_rank_step& out);
    status provide(uint64_t step_id, const ds::logits_view& shard);
    status outputs(uint64_t step_id, int64_t timeout_ms, ds_rank_step_outputs& out);
};

status ds_rank::next_step(int64_t timeout_ms, ds_rank_step& out) {
    DS_TRY(check_wait("timeout_ms", timeout_ms));
    if (out.slots == nullptr || out.positions == nullptr) {
        return status::invalid(
            fmt::format("step.slots, step.positions: expected buffers of max_batch = {} elements, "
                        "got null",
                        info.max_batch));
    }
    ds::worker_step step;
    DS_TRY(rank->next_step(std::chrono::milliseconds(timeout_ms), step));
    // The coordinator's limits may exceed this rank's config, which sized the buffers.
    if (step.batch_size > info.max_batch || step.tokens_per_req > info.max_tokens_per_req) {
        return status::invalid(fmt::format(
            "step {}: batch_size = {}, tokens_per_req = {}: expected at most max_batch = {}, max_tokens_per_req = {} "
            "(this rank's config; the coordinator's must not be larger)",
            step.id, step.batch_size, step.tokens_per_req, info.max_batch, info.max_tokens_per_req));
    }
    std::copy(step.slots.begin(), step.slots.end(), out.slots);
    std::copy(step.positions.begin(), step.positions.end(), out.positions);
    if (out.candidates != nullptr) std::copy(step.candidates.begin(), step.candidates.end(), out.candidates);
    out.id = step.id;
    out.kind = step.kind == ds::step_kind::verify ? DS_STEP_VERIFY : DS_STEP_SAMPLE;
    out.batch_size = step.batch_size;
    out.tokens_per_req = step.tokens_per_req;
    out.vocab_begin = step.vocab_begin;
    out.shard_vocab = step.shard_vocab;
    std::lock_guard<std::mutex> lock(mutex);
    shapes[step.id] = {step.batch_size, step.tokens_per_req};
    while (shapes.size() > kKeptSteps) shapes.erase(shapes.begin());
    return status::success();
}

status ds_rank::provide(uint64_t step_id, const ds::logits_view& shard) {
    const auto dtype = static_cast<int32_t>(shard.dtype);
    if (dtype < DS_DTYPE_F32 || dtype > DS_DTYPE_F16) {
        return status::invalid(
            fmt::format("dtype = {}: expected DS_DTYPE_F32 (0), DS_DTYPE_BF16 (1) or DS_DTYPE_F16 (2)", dtype));
    }
    if (shard.on_device && backend != ds::backend_kind::cuda) {
        return status::invalid(fmt::format("on_device = 1: expected 0 with backend = {} (device memory needs cuda)",
                                           ds::backend_name(backend)));
    }
    return rank->provide_logits(step_id, shard);
}

status ds_rank::outputs(uint64_t step_id, int64_t timeout_ms, ds_rank_step_outputs& out) {
    DS_TRY(check_wait("timeout_ms", timeout_ms));
    std::pair<int32_t, int32_t> shape;
    {
        std::lock_guard<std::mutex> lock(mutex);
        const auto found = shapes.find(step_id);
        if (found == shapes.end()) {
            return status::invalid(fmt::format(
                "step_id = {}: expected a step this rank took with ds_rank_next_step (the latest {} are kept)", step_id,
                kKeptSteps));
        }
        shape = found->second;
    }
    const auto [bs, n] = shape;
    const int64_t rows = int64_t{bs} * n;
    if ((out.predict != nullptr || out.accept_index != nullptr || out.logprobs != nullptr) && out.rows_capacity < rows)
        return status::invalid(
            fmt::format("outputs.rows_capacity = {}: expected at least batch_size * tokens_per_req "
                        "= {} (step {})",
                        out.rows_capacity, rows, step_id));
    if ((out.accept_length != nullptr || out.row_error != nullptr) && out.requests_capacity < bs)
        return status::invalid(
            fmt::format("outputs.requests_capacity = {}: expected at least batch_size = {} (step {})",
                        out.requests_capacity, bs, step_id));
    ds::step_outputs agreed;
    DS_TRY(rank->outputs(step_id, std::chrono::milliseconds(timeout_ms), agreed));
    // Padded to pad_bs >= bs requests of n rows: the step's own come first.
    const int32_t pad_bs = agreed.batch_size();
    if (pad_bs < bs || agreed.accept_index.size() != static_cast<size_t>(pad_bs) * static_cast<size_t>(n))
        return status::error(
            ds::status_code::internal,
            fmt::format("step {}: outputs of {} requests do not fit the step's {} x {}", step_id, pad_bs, bs, n));
    const auto cut = [](const auto& from, size_t first, int64_t count, auto* to) {
        if (to != nullptr) std::copy_n(from.begin() + static_cast<std::ptrdiff_t>(first), count, to);
    };
    cut(agreed.packed, 0, rows, out.predict);
    cut(agreed.accept_index, 0, rows, out.accept_index);
    cut(agreed.logprobs, 0, rows, out.logprobs);
    cut(agreed.packed, static_cast<size_t>(pad_bs) * static_cast<size_t>(n), bs, out.accept_length);
    cut(agreed.row_error, 0, bs, out.row_error);
    out.batch_size = bs;
    out.tokens_per_req = n;
    return status::success();
}

extern "C" {

int ds_rank_abi_version(void) { return DS_RANK_C_ABI_VERSION; }

int ds_rank_join(const char* config_json, const char* coordinator, int32_t rank, int64_t logits_timeout_ms,
                 ds_rank** out) {
    if (out == nullptr) return report(status::invalid("out: expected a non-null pointer"));
    *out = nullptr;
    return guarded([&] {
        auto handle = std::make_unique<ds_rank>();
        ds::worker_rank_config c;
        DS_TRY(load_config(config_json, coordinator, rank, logits_timeout_ms, c));
        handle->info = {c.rank, c.group.distribution.tp, c.group.limits.vocab_size, c.group.limits.max_batch,
                        c.group.limits.max_tokens_per_req};
        handle->backend = c.group.backend;
        DS_TRY(ds::worker_rank::join(c, handle->rank));
        *out = handle.release();
        return status::success();
    });
}

int ds_rank_describe(const ds_rank* rank, ds_rank_info* out) {
    if (rank == nullptr || out == nullptr) return report(status::invalid("rank, out: expected non-null pointers"));
    *out = rank->info;
    return report(status::success());
}

int ds_rank_next_step(ds_rank* rank, int64_t timeout_ms, ds_rank_step* step) {
    if (rank == nullptr || step == nullptr) return report(status::invalid("rank, step: expected non-null pointers"));
    return guarded([&] { return rank->next_step(timeout_ms, *step); });
}

int ds_rank_provide_logits(ds_rank* rank, uint64_t step_id, const void* logits, int32_t dtype, int32_t on_device,
                           int64_t rows, int32_t shard_vocab, int64_t row_stride) {
    if (rank == nullptr) return report(status::invalid("rank: expected a handle from ds_rank_join, got null"));
    if (on_device != 0 && on_device != 1)
        return report(status::invalid(fmt::format("on_device = {}: expected 0 or 1", on_device)));
    const ds::logits_view shard{logits,        static_cast<ds::logits_dtype>(dtype), rows, shard_vocab, row_stride,
                                on_device == 1};
    return guarded([&] { return rank->provide(step_id, shard); });
}

int ds_rank_outputs(ds_rank* rank, uint64_t step_id, int64_t timeout_ms, ds_rank_step_outputs* out) {
    if (rank == nullptr || out == nullptr) return report(status::invalid("rank, out: expected non-null pointers"));
    return guarded([&] { return rank->outputs(step_id, timeout_ms, *out); });
}

void ds_rank_leave(ds_rank* rank) { delete rank; }

const char* ds_rank_last_error(void) { return ds::capi::last_error().c_str(); }

}  // extern "C"

#include "actors/rank_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>
#include <string>

#include "config/capacity.h"

namespace ds {

namespace {

kernel_config rank_kernel_config(const group_config& config, int32_t max_batch) {
    kernel_config k;
    k.vocab_size = config.limits.vocab_size;
    k.max_slots = config.limits.max_slots;
    k.max_batch = max_batch;
    k.max_tokens_per_req = config.limits.max_tokens_per_req;
    k.max_penalty_tokens = config.limits.max_penalty_tokens;
    k.max_logit_bias = config.limits.max_logit_bias;
    k.threads = config.tuning.threads_per_rank;
    return k;
}

}  // namespace

transport_config rank_transport_config(const group_config& config) {
    transport_config t;
    t.world_size = config.distribution.tp;
    t.vocab_size = config.limits.vocab_size;
    // Sized as config/capacity.h counts them against the memory budget.
    t.max_swap_rows = max_swap_rows(config);
    t.max_collective_bytes = max_collective_bytes(config);
    t.timeout = config.transport.timeout;
    return t;
}

ucx_endpoint_options rank_ucx_options(const group_config& config) {
    return {config.transport.ucx,
            config.backend == backend_kind::cuda && config.distribution.mode != dist_mode::sharded};
}

namespace {

// Runs `phase`, a failed allocation becoming a status that says what it was allocating (`what()`,
// formatted only then: a step's path formats no string): a rank out of memory answers with that
// (its actor adds its name) instead of dying unanswered.
template <class Describe, class Phase>
status allocating(Describe&& what, Phase&& phase) {
    try {
        return phase();
    } catch (const std::bad_alloc&) {
        return {status_code::internal, fmt::format("out of memory allocating {}", what())};
    }
}

}  // namespace

rank_engine::rank_engine(const group_config& config, int32_t rank, transport& endpoint)
    : config_(config), rank_(rank), endpoint_(endpoint) {
    const group_limits& limits = config.limits;
    init_status_ = allocating(
        [&] {
            return fmt::format(
                "its backend and buffers (max_slots = {}, max_batch = {}, max_tokens_per_req = {}, "
                "vocab_size = {})",
                limits.max_slots, limits.max_batch, limits.max_tokens_per_req, limits.vocab_size);
        },
        [&] { return build(); });
}

status rank_engine::build() {
    const group_config& config = config_;
    if (config.backend == backend_kind::cuda) device_ = current_cuda_device();
    const int32_t max_pad_bs = config.max_pad_bs();
    if (config.distribution.mode == dist_mode::sharded) {
        const kernel_config k = rank_kernel_config(config, config.limits.max_batch);
        DS_TRY(validate_kernel_config(k));
        shard_pool_ = std::make_unique<param_pool>(k);
        std::unique_ptr<shard_primitives> primitives;
        if (config.backend == backend_kind::cuda) {
            DS_TRY(make_cuda_shard_primitives(config, primitives));
        } else {
            primitives = make_cpu_shard_primitives(config);
        }
        sharded_ = std::make_unique<sharded_sampler>(config, rank_, std::move(primitives));
        return status::success();
    }
    const backend_kind kind = config.backend;
    // swap samples reqs_per_rank requests; gathered samples the whole batch on every rank.
    const int32_t max_batch =
        config.distribution.mode == dist_mode::swap ? max_pad_bs / config.distribution.tp : config.limits.max_batch;
    backend_reads_device_ = kind == backend_kind::cuda;
    DS_TRY(make_backend(kind, rank_kernel_config(config, max_batch), backend_));
    if (backend_reads_device_ && !endpoint_.swaps_device_logits()) {
        // The largest shard: every row of the largest batch over this rank's V/TP, in f32.
        const std::size_t bytes = static_cast<std::size_t>(config.limits.max_batch) *
                                  static_cast<std::size_t>(config.limits.max_tokens_per_req) *
                                  static_cast<std::size_t>(config.limits.vocab_size / config.distribution.tp) *
                                  dtype_size(logits_dtype::f32);
        DS_TRY(cuda_allocation::allocate(cuda_memory_kind::pinned_host, bytes, pinned_staging_));
    }
    if (config.distribution.mode == dist_mode::swap) {
        const size_t block =
            static_cast<size_t>(max_batch) * static_cast<size_t>(2 * config.limits.max_tokens_per_req + 1);
        const size_t extra = static_cast<size_t>(max_batch) * static_cast<size_t>(config.limits.max_tokens_per_req + 1);
        packed_block_.resize(block);
        gathered_blocks_.resize(block * static_cast<size_t>(config.distribution.tp));
        extra_block_.resize(extra);
        gathered_extras_.resize(extra * static_cast<size_t>(config.distribution.tp));
        local_out_.resize(max_batch, config.limits.max_tokens_per_req);
    }
    return status::success();
}

param_pool& rank_engine::pool() { return backend_ ? backend_->pool() : *shard_pool_; }

status rank_engine::register_request(int32_t slot, const sampling_params& params, const std::vector<int32_t>& history) {
    if (!init_status_.is_ok()) return init_status_;
    return allocating(
        [&] { return fmt::format("the registration of slot {} ({} history tokens)", slot, history.size()); },
        [&] { return pool().register_request(slot, params, history.data(), static_cast<int32_t>(history.size())); });
}

status rank_engine::release(int32_t slot) {
    if (!init_status_.is_ok()) return init_status_;
    return pool().release(slot);
}

status rank_engine::run(const dist_step& step, const logits_view& shard, step_outputs& out) {
    if (!init_status_.is_ok()) return init_status_;
    const cuda_device_scope on_device(device_);
    return allocating(
        [&] {
            return fmt::format("step {} (bs = {}, N = {}, vocab_size = {})", step.id, step.plan.bs,
                               step.plan.tokens_per_req, config_.limits.vocab_size);
        },
        [&] { return run_allocating(step, shard, out); });
}

status rank_engine::run_allocating(const dist_step& step, const logits_view& handed, step_outputs& out) {
    out.resize(step.plan.bs, step.plan.tokens_per_req);
    const auto start = std::chrono::steady_clock::now();
    endpoint_.reset();
    // The shard goes where it is read: device memory for a transport that swaps it there (nccl),
    // else the host (the local and UCX transports), whichever the model produced. Sharded mode
    // reads it where it is: its CUDA primitives copy host rows in themselves.
    const bool sharded = config_.distribution.mode == dist_mode::sharded;
    const bool read_on_device = !sharded && endpoint_.swaps_device_logits();
    logits_view shard = handed;
    if (handed.on_device != read_on_device && !(sharded && config_.backend == backend_kind::cuda)) {
        DS_TRY(read_on_device ? stage_host_logits(handed, device_staging_, device_staging_bytes_, shard)
                              : stage_to_host(handed, shard));
    }
    status s;
    switch (config_.distribution.mode) {
        case dist_mode::gathered: s = run_gathered(step, shard, out); break;
        case dist_mode::swap: s = run_swap(step, shard, out); break;
        case dist_mode::sharded:
            s = sharded_->run(step.slice(0, step.plan.bs, shard), *shard_pool_, endpoint_, out.view());
            break;
    }
    last_run_ns_ =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    last_transport_ns_ = endpoint_.elapsed_ns();
    last_received_bytes_ = endpoint_.received_bytes();
    return s;
}

status rank_engine::run_gathered(const dist_step& step, const logits_view& shard, step_outputs& out) {
    const int64_t rows = int64_t{step.plan.bs} * step.plan.tokens_per_req;
    logits_view full;
    status s = endpoint_.swap_batch_vocab(shard, 0, rows, full);
    if (s.is_ok()) s = readable_by_backend(full);
    if (!s.is_ok()) return s;
    const step_input in = step.slice(0, step.plan.bs, full);
    return step.kind == step_kind::sample ? backend_->sample(in, out.view()) : backend_->verify(in, out.view());
}

// The seed's batch-DP: swap the vocab so this rank holds its requests' full rows, sample them,
// then all-gather the packed [reqs_per_rank, 2N+1] blocks (and the logprobs and error flags).
status rank_engine::run_swap(const dist_step& step, const logits_view& shard, step_outputs& out) {
    const step_plan& plan = step.plan;
    const int32_t n = plan.tokens_per_req;
    const int32_t per_rank = plan.reqs_per_rank;
    const int32_t first = plan.first_request(rank_);
    logits_view mine;
    status s = endpoint_.swap_batch_vocab(shard, int64_t{first} * n, int64_t{per_rank} * n, mine);
    if (s.is_ok()) s = readable_by_backend(mine);
    if (!s.is_ok()) return s;
    const step_input in = step.slice(first, per_rank, mine);
    const step_output local = local_out_.view();
    s = step.kind == step_kind::sample ? backend_->sample(in, local) : backend_->verify(in, local);
    if (!s.is_ok()) return s;

    // Block row: predict [N] | accept_index [N] (global row ids) | accept_length.
    const int32_t width = 2 * n + 1;
    const int32_t* lengths = accept_length_of(local, per_rank, n);
    const int32_t row_offset = first * n;
    for (int32_t b = 0; b < per_rank; ++b) {
        int32_t* row = packed_block_.data() + static_cast<size_t>(b) * width;
        for (int32_t j = 0; j < n; ++j) {
            const int32_t index = local.accept_index[b * n + j];
            row[j] = local.packed[b * n + j];
            row[n + j] = index < 0 ? index : index + row_offset;
        }
        row[2 * n] = lengths[b];
    }
    const size_t block_ints = static_cast<size_t>(per_rank) * static_cast<size_t>(width);
    s = endpoint_.gather_verify_outputs(packed_block_.data(), block_ints, gathered_blocks_.data());
    if (!s.is_ok()) return s;
    // Logprobs (as bits) and error flags travel in a second gather: [reqs_per_rank, N+1].
    const int32_t extra_width = n + 1;
    for (int32_t b = 0; b < per_rank; ++b) {
        int32_t* row = extra_block_.data() + static_cast<size_t>(b) * extra_width;
        std::memcpy(row, local.logprobs + b * n, static_cast<size_t>(n) * sizeof(float));
        row[n] = local.row_error[b];
    }
    s = endpoint_.all_gather(extra_block_.data(), static_cast<size_t>(per_rank) * extra_width * sizeof(int32_t),
                             gathered_extras_.data());
    if (!s.is_ok()) return s;
    // Blocks arrive in rank order, i.e. in request order; phantom requests are dropped.
    int32_t* predict = predict_of(out.view());
    int32_t* out_lengths = accept_length_of(out.view(), plan.bs, n);
    for (int32_t b = 0; b < plan.bs; ++b) {
        const int32_t* row = gathered_blocks_.data() + static_cast<size_t>(b) * width;
        const int32_t* extra = gathered_extras_.data() + static_cast<size_t>(b) * extra_width;
        std::memcpy(predict + b * n, row, static_cast<size_t>(n) * sizeof(int32_t));
        std::memcpy(out.accept_index.data() + b * n, row + n, static_cast<size_t>(n) * sizeof(int32_t));
        out_lengths[b] = row[2 * n];
        std::memcpy(out.logprobs.data() + b * n, extra, static_cast<size_t>(n) * sizeof(float));
        out.row_error[static_cast<size_t>(b)] = static_cast<uint8_t>(extra[n]);
    }
    return status::success();
}

status rank_engine::readable_by_backend(logits_view& rows) {
    if (!rows.on_device || backend_reads_device_) return status::success();
    const logits_view device_rows = rows;
    return stage_to_host(device_rows, rows);
}

status rank_engine::stage_to_host(const logits_view& rows, logits_view& staged) {
    if (pinned_staging_.data() != nullptr)
        return stage_device_logits(rows, pinned_staging_.data(), pinned_staging_.bytes(), staged);
    const std::size_t bytes =
        static_cast<std::size_t>(rows.vocab) * dtype_size(rows.dtype) * static_cast<std::size_t>(rows.rows);
    host_staging_.resize(std::max(host_staging_.size(), bytes));
    return stage_device_logits(rows, host_staging_.data(), host_staging_.size(), staged);
}

status rank_engine::commit(const dist_step& step, const step_outputs& agreed) {
    if (!init_status_.is_ok()) return init_status_;
    const step_input in = step.slice(0, step.plan.bs, logits_view{});
    // record_step_tokens only reads the outputs; step_output's pointers are mutable for writers.
    return record_step_tokens(pool(), in, const_cast<step_outputs&>(agreed).view());
}

}  // namespace ds

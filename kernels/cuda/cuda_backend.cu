#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cuda/call_launcher.h"
#include "kernels/cuda/chain_kernel.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/step_layout.h"
#include "kernels/validation.h"

namespace ds::cuda {

struct cuda_backend::impl {
    kernel_config config;
    param_pool pool;
    cuda_stream stream;
    kernel_capacity capacity;  // what the GPU holds of the kernels at once
    // What a step's kernels read: the small parts (the requests' values, positions, candidates,
    // coins) straight from mapped pinned memory, read a few times a row; the lists and the
    // bitmask, which every block of a row reads, from a device copy, made only when the step
    // has them. A step without them is its kernels alone.
    pinned_buffer staging_mapped;
    device_buffer staging_device;
    pinned_buffer staging_host;
    device_buffer host_logits_copy;  // for logits that arrive in host memory
    device_buffer workspace;
    // The step's outputs: the kernels write them straight into this pinned host memory, so a step
    // needs no output copy after its kernels.
    pinned_buffer outputs_host;

    // The captured graph and the step it was captured for.
    captured_graph graph;
    staged_step graph_step;

    explicit impl(const kernel_config& c) : config(c), pool(c) {}

    // Per request: 6 floats, top_k, seed, position, two offsets; per row: candidate, coin.
    size_t max_mapped_bytes() const {
        const size_t batch = static_cast<size_t>(config.max_batch);
        const size_t rows = static_cast<size_t>(config.max_rows());
        return 16 * kSectionAlign + section_bytes(batch * 6 * sizeof(float)) + section_bytes(batch * sizeof(int32_t)) +
               2 * section_bytes(batch * sizeof(int64_t)) + 2 * section_bytes((batch + 1) * sizeof(int32_t)) +
               section_bytes(rows * sizeof(int32_t)) + section_bytes(rows * sizeof(double)) +
               section_bytes(batch * sizeof(double));
    }

    // The four lists (bias tokens and values, seen tokens and counts) and the bitmask words.
    size_t max_copied_bytes() const {
        const size_t batch = static_cast<size_t>(config.max_batch);
        const size_t rows = static_cast<size_t>(config.max_rows());
        const size_t bias = batch * static_cast<size_t>(config.max_logit_bias);
        const size_t seen = batch * static_cast<size_t>(config.max_penalty_tokens);
        return 8 * kSectionAlign + 4 * section_bytes(std::max(bias, seen) * sizeof(int32_t)) +
               section_bytes(rows * static_cast<size_t>(bitmask_words(config.vocab_size)) * sizeof(uint32_t));
    }

    // Packs the slots' parameters (as per-request arrays and CSR lists) and the step's positions
    // into the staging buffers (the lists into `copied`, the rest into `mapped`), in the layout of
    // a sampling_call over what the kernels read.
    void stage_requests(const step_input& step, staging_carver& mapped, staging_carver& copied, sampling_call& call) {
        const int32_t bs = step.batch_size;
        const auto count = static_cast<size_t>(bs);
        float* temperature = mapped.reserve<float>(count);
        int32_t* top_k = mapped.reserve<int32_t>(count);
        float* top_p = mapped.reserve<float>(count);
        float* min_p = mapped.reserve<float>(count);
        int64_t* seed = mapped.reserve<int64_t>(count);
        float* presence = mapped.reserve<float>(count);
        float* frequency = mapped.reserve<float>(count);
        float* repetition = mapped.reserve<float>(count);
        int32_t* bias_offsets = mapped.reserve<int32_t>(count + 1);
        int32_t* seen_offsets = mapped.reserve<int32_t>(count + 1);
        bias_offsets[0] = 0;
        seen_offsets[0] = 0;
        for (int32_t b = 0; b < bs; ++b) {
            const request_view r = pool.request(step.slots[b], step.positions[b]);
            temperature[b] = r.temperature;
            top_k[b] = r.top_k;
            top_p[b] = r.top_p;
            min_p[b] = r.min_p;
            seed[b] = static_cast<int64_t>(r.seed);
            presence[b] = r.penalties.presence;
            frequency[b] = r.penalties.frequency;
            repetition[b] = r.penalties.repetition;
            bias_offsets[b + 1] = bias_offsets[b] + r.bias_count;
            seen_offsets[b + 1] = seen_offsets[b] + r.seen_count;
        }
        int32_t* bias_tokens = copied.reserve<int32_t>(static_cast<size_t>(bias_offsets[bs]));
        float* bias_values = copied.reserve<float>(static_cast<size_t>(bias_offsets[bs]));
        int32_t* seen_tokens = copied.reserve<int32_t>(static_cast<size_t>(seen_offsets[bs]));
        int32_t* seen_counts = copied.reserve<int32_t>(static_cast<size_t>(seen_offsets[bs]));
        for (int32_t b = 0; b < bs; ++b) {
            const request_view r = pool.request(step.slots[b], step.positions[b]);
            for (int32_t k = 0; k < r.bias_count; ++k) {
                bias_tokens[bias_offsets[b] + k] = r.bias_tokens[k];
                bias_values[bias_offsets[b] + k] = r.bias_values[k];
            }
            for (int32_t k = 0; k < r.seen_count; ++k) {
                seen_tokens[seen_offsets[b] + k] = r.seen_tokens[k];
                seen_counts[seen_offsets[b] + k] = r.seen_counts[k];
            }
        }
        request_sources& p = call.params;
        p.temperature = param<float>::per_row(mapped.device_of(temperature));
        p.top_k = param<int32_t>::per_row(mapped.device_of(top_k));
        p.top_p = param<float>::per_row(mapped.device_of(top_p));
        p.min_p = param<float>::per_row(mapped.device_of(min_p));
        p.seed = param<int64_t>::per_row(mapped.device_of(seed));
        p.presence_penalty = param<float>::per_row(mapped.device_of(presence));
        p.frequency_penalty = param<float>::per_row(mapped.device_of(frequency));
        p.repetition_penalty = param<float>::per_row(mapped.device_of(repetition));
        // No bias list at all when no request has one: a plain greedy step then runs the streaming kernel.
        p.logit_bias = {};
        if (bias_offsets[bs] > 0)
            p.logit_bias = {copied.device_of(bias_tokens), copied.device_of(bias_values),
                            mapped.device_of(bias_offsets)};
        p.seen = {copied.device_of(seen_tokens), copied.device_of(seen_counts), mapped.device_of(seen_offsets)};
        call.positions = param<int64_t>::per_row(mapped.put(step.positions, count));
    }

    // Bias entries (or seen tokens) the step's requests carry.
    int32_t pool_entries(const step_input& step, bool bias) const {
        int32_t total = 0;
        for (int32_t b = 0; b < step.batch_size; ++b) {
            const request_view r = pool.request(step.slots[b], step.positions[b]);
            total += bias ? r.bias_count : r.seen_count;
        }
        return total;
    }

    // Validates the step and stages it; fills the staged call and its launch.
    status stage(const step_input& step, step_kind kind, bool with_logprobs, staged_step& staged, replay_coins& coins) {
        DS_TRY(validate_step(step, kind, config));
        const int32_t bs = step.batch_size;
        const int32_t n = step.tokens_per_req;
        const size_t rows = static_cast<size_t>(bs) * static_cast<size_t>(n);
        staging_carver mapped(static_cast<char*>(staging_mapped.get()));
        staging_carver copied(static_cast<char*>(staging_host.get()), static_cast<char*>(staging_device.get()));
        sampling_call& call = staged.call;
        call = sampling_call{};
        stage_requests(step, mapped, copied, call);
        call.logits = step.logits;
        if (!step.logits.on_device) {
            call.logits.data = host_logits_copy.get();
            call.logits.row_stride = step.logits.vocab;
            call.logits.on_device = true;
        }
        call.batch_size = bs;
        call.tokens_per_req = n;
        call.candidates = kind == step_kind::verify ? mapped.put(step.candidates, rows) : nullptr;
        call.bitmask = copied.put(
            step.bitmask, step.bitmask != nullptr ? rows * static_cast<size_t>(bitmask_words(step.logits.vocab)) : 0);
        call.thresholds = step.thresholds;
        call.logprobs = with_logprobs ? logprob_mode::processed : logprob_mode::none;
        bool plain_greedy = true;
        for (int32_t b = 0; b < bs && plain_greedy; ++b) {
            const sampling_params& sp = pool.params(step.slots[b]);
            plain_greedy = is_greedy(sp) && sp.logit_bias.empty() && !sp.has_penalties();
        }
        call.all_greedy_hint = plain_greedy;
        coins.coins = mapped.put(step.coins, step.coins != nullptr ? static_cast<size_t>(bs) * (n - 1) : 0);
        coins.final_coins = mapped.put(step.final_coins, step.final_coins != nullptr ? static_cast<size_t>(bs) : 0);
        const output_layout out = outputs_for(bs, n);
        auto* outputs = static_cast<char*>(outputs_host.get());
        call.outputs.predict = reinterpret_cast<int32_t*>(outputs + out.packed);
        call.outputs.accept_length = call.outputs.predict + rows;
        call.outputs.accept_index = reinterpret_cast<int32_t*>(outputs + out.accept_index);
        call.outputs.logprobs = with_logprobs ? reinterpret_cast<float*>(outputs + out.logprobs) : nullptr;
        call.outputs.row_error = reinterpret_cast<uint8_t*>(outputs + out.row_error);
        staged.staged_bytes = copied.used();
        DS_TRY(plan_call(call, {workspace.get(), workspace.bytes()}, capacity, coins, staged.params));
        staged.shape = {bs,
                        n,
                        pool_entries(step, true),
                        pool_entries(step, false),
                        staged.params.stream_segments,
                        call.logits.data,
                        call.logits.row_stride,
                        call.logits.dtype,
                        kind == step_kind::verify,
                        step.bitmask != nullptr,
                        step.coins != nullptr,
                        step.final_coins != nullptr,
                        with_logprobs,
                        step.thresholds.single,
                        step.thresholds.acc};
        return status::success();
    }

    // The device work of a step: the copy of its lists and bitmask when it has any, and the
    // kernels, which write the outputs into pinned host memory. Capturable.
    status enqueue(const staged_step& staged) {
        if (staged.staged_bytes > 0) {
            CUDA_TRY(cudaMemcpyAsync(staging_device.get(), staging_host.get(), staged.staged_bytes,
                                     cudaMemcpyHostToDevice, stream.get()));
        }
        return enqueue_call(staged.call, staged.params, stream.get());
    }

    status copy_host_logits(const logits_view& logits) {
        if (logits.on_device || logits.rows == 0) return status::success();
        const size_t element = dtype_size(logits.dtype);
        CUDA_TRY(cudaMemcpy2DAsync(host_logits_copy.get(), static_cast<size_t>(logits.vocab) * element, logits.data,
                                   static_cast<size_t>(logits.row_stride) * element,
                                   static_cast<size_t>(logits.vocab) * element, static_cast<size_t>(logits.rows),
                                   cudaMemcpyHostToDevice, stream.get()));
        return status::success();
    }

    status finish(int32_t bs, int32_t n, bool with_logprobs, const step_output& out) {
        CUDA_TRY(cudaStreamSynchronize(stream.get()));
        const output_layout layout = outputs_for(bs, n);
        const size_t rows = static_cast<size_t>(bs) * static_cast<size_t>(n);
        const auto* host = static_cast<const char*>(outputs_host.get());
        const auto* row_error = reinterpret_cast<const uint8_t*>(host + layout.row_error);
        if (std::find(row_error, row_error + bs, kRowErrorKernelFault) != row_error + bs) {
            return {
                status_code::internal,
                "cuda backend: a row's thread blocks did not meet within 2 s (is another process filling the GPU?); "
                "the step's outputs were discarded"};
        }
        std::memcpy(out.packed, host + layout.packed, (rows + static_cast<size_t>(bs)) * sizeof(int32_t));
        std::memcpy(out.accept_index, host + layout.accept_index, rows * sizeof(int32_t));
        if (out.logprobs != nullptr) {
            if (with_logprobs) {
                std::memcpy(out.logprobs, host + layout.logprobs, rows * sizeof(float));
            } else {
                std::fill(out.logprobs, out.logprobs + rows, std::numeric_limits<float>::quiet_NaN());
            }
        }
        if (out.row_error != nullptr) std::memcpy(out.row_error, row_error, static_cast<size_t>(bs));
        return status::success();
    }

    status run(const step_input& step, step_kind kind, const step_output& out) {
        if (step.batch_size == 0) return validate_step(step, kind, config);
        staged_step staged;
        replay_coins coins;
        DS_TRY(stage(step, kind, out.logprobs != nullptr, staged, coins));
        DS_TRY(copy_host_logits(step.logits));
        DS_TRY(enqueue(staged));
        return finish(step.batch_size, step.tokens_per_req, out.logprobs != nullptr, out);
    }
};

cuda_backend::cuda_backend(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
cuda_backend::~cuda_backend() = default;

status cuda_backend::create(const kernel_config& config, std::unique_ptr<cuda_backend>& out) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        cudaGetLastError();
        return {status_code::unsupported, "backend = 'cuda': no CUDA device is available; use --backend cpu"};
    }
    CUDA_TRY(prepare_chain_kernel());
    auto state = std::make_unique<impl>(config);
    int device = 0;
    CUDA_TRY(cudaGetDevice(&device));
    CUDA_TRY(query_kernel_capacity(device, state->capacity));
    DS_TRY(check_row_fits("vocab_size", config.vocab_size, state->capacity, "; use backend = 'cpu'"));
    DS_TRY(state->stream.create());
    const size_t rows = static_cast<size_t>(config.max_rows());
    const size_t vocab = static_cast<size_t>(config.vocab_size);
    const output_layout max_out = outputs_for(config.max_batch, config.max_tokens_per_req);
    DS_TRY(state->staging_mapped.allocate(state->max_mapped_bytes()));
    DS_TRY(state->staging_device.allocate(state->max_copied_bytes()));
    DS_TRY(state->staging_host.allocate(state->max_copied_bytes()));
    DS_TRY(state->host_logits_copy.allocate(rows * vocab * sizeof(float)));
    DS_TRY(state->workspace.allocate(
        call_workspace_bytes(config.max_batch, config.max_tokens_per_req, config.vocab_size, true)));
    DS_TRY(state->outputs_host.allocate(max_out.total));
    out.reset(new cuda_backend(std::move(state)));
    return status::success();
}

const kernel_config& cuda_backend::config() const { return impl_->config; }
param_pool& cuda_backend::pool() { return impl_->pool; }

status cuda_backend::sample(const step_input& step, const step_output& out) {
    return impl_->run(step, step_kind::sample, out);
}

status cuda_backend::verify(const step_input& step, const step_output& out) {
    return impl_->run(step, step_kind::verify, out);
}

status cuda_backend::capture_graph(const step_input& step, step_kind kind, bool with_logprobs) {
    if (!step.logits.on_device) {
        return status::invalid(
            "logits.on_device = false: a captured graph reads the logits in place, so they must be device memory");
    }
    if (step.batch_size == 0) return status::invalid("batch_size = 0: nothing to capture");
    impl& st = *impl_;
    replay_coins coins;
    DS_TRY(st.stage(step, kind, with_logprobs, st.graph_step, coins));
    return st.graph.capture(st.stream.get(), [&] { return st.enqueue(st.graph_step); });
}

status cuda_backend::replay_graph(const step_input& step, const step_output& out) {
    impl& st = *impl_;
    if (st.graph.empty()) return status::invalid("replay_graph: no graph has been captured");
    const staged_shape& captured = st.graph_step.shape;
    staged_step staged;
    replay_coins coins;
    DS_TRY(st.stage(step, captured.verify ? step_kind::verify : step_kind::sample, captured.logprobs, staged, coins));
    if (!(staged.shape == captured)) {
        return status::invalid(
            "replay_graph: the step's shape differs from the captured one (batch, N, logits, optional inputs, bias and "
            "penalty sizes, thresholds, and whether every request is plain greedy must match); capture again");
    }
    DS_TRY(st.graph.launch(st.stream.get()));
    return st.finish(step.batch_size, step.tokens_per_req, captured.logprobs, out);
}

status cuda_backend::time_graph(int iterations, double& microseconds_per_step) {
    impl& st = *impl_;
    if (st.graph.empty()) return status::invalid("time_graph: no graph has been captured");
    return st.graph.time_replays(st.stream.get(), iterations, microseconds_per_step);
}

status cuda_backend::captured_shape(graph_shape& shape) const {
    const impl& st = *impl_;
    if (st.graph.empty()) return status::invalid("captured_shape: no graph has been captured");
    shape.staged_bytes = st.graph_step.staged_bytes;
    shape.output_bytes = outputs_for(st.graph_step.params.batch_size, st.graph_step.params.tokens_per_req).total;
    shape.kernel_blocks = chain_kernel_blocks(st.graph_step.params);
    return status::success();
}

}  // namespace ds::cuda

namespace ds::cuda {

status measure_copy_bandwidth(size_t bytes, int iterations, double& terabytes_per_second) {
    device_buffer from;
    device_buffer to;
    status s = from.allocate(bytes);
    if (s.is_ok()) s = to.allocate(bytes);
    if (!s.is_ok()) return s;
    CUDA_TRY(cudaMemset(from.get(), 1, bytes));
    CUDA_TRY(cudaMemcpy(to.get(), from.get(), bytes, cudaMemcpyDeviceToDevice));  // warm-up
    event_timer timer;                                                            // frees its events on every return
    s = timer.start(nullptr);
    if (!s.is_ok()) return s;
    for (int i = 0; i < iterations; ++i)
        CUDA_TRY(cudaMemcpyAsync(to.get(), from.get(), bytes, cudaMemcpyDeviceToDevice));
    float ms = 0.0f;
    s = timer.stop(nullptr, ms);
    if (!s.is_ok()) return s;
    terabytes_per_second = 2.0 * static_cast<double>(bytes) * iterations / (ms * 1e-3) / 1e12;
    return status::success();
}

status copy_rows_to_host(const logits_view& rows, void* host) {
    if (rows.rows == 0) return status::success();
    const size_t element = dtype_size(rows.dtype);
    CUDA_TRY(cudaMemcpy2D(host, static_cast<size_t>(rows.vocab) * element, rows.data,
                          static_cast<size_t>(rows.row_stride) * element, static_cast<size_t>(rows.vocab) * element,
                          static_cast<size_t>(rows.rows), cudaMemcpyDeviceToHost));
    return status::success();
}

status copy_rows_to_device(const logits_view& rows, void* device) {
    const size_t row_bytes = static_cast<size_t>(rows.vocab) * dtype_size(rows.dtype);
    const size_t stride_bytes = static_cast<size_t>(rows.row_stride) * dtype_size(rows.dtype);
    CUDA_TRY(cudaMemcpy2D(device, row_bytes, rows.data, stride_bytes, row_bytes, static_cast<size_t>(rows.rows),
                          cudaMemcpyHostToDevice));
    return status::success();
}

status allocate_device(size_t bytes, std::shared_ptr<void>& device) {
    void* raw = nullptr;
    CUDA_TRY(cudaMalloc(&raw, bytes > 0 ? bytes : 1));
    device = std::shared_ptr<void>(raw, [](void* p) { cudaFree(p); });
    return status::success();
}

status upload_to_device(const void* host, size_t bytes, std::shared_ptr<void>& device) {
    if (status s = allocate_device(bytes, device); !s.is_ok()) return s;
    CUDA_TRY(cudaMemcpy(device.get(), host, bytes, cudaMemcpyHostToDevice));
    return status::success();
}

}  // namespace ds::cuda

#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cuda/chain_kernel.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/validation.h"

namespace ds::cuda {

namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Where each input section sits in the staging buffer for one step (bytes from its start).
struct staging_layout {
    size_t requests = 0, candidates = 0, coins = 0, final_coins = 0, bias = 0, seen = 0, bitmask = 0, total = 0;

    bool operator==(const staging_layout& o) const {
        return requests == o.requests && candidates == o.candidates && coins == o.coins &&
               final_coins == o.final_coins && bias == o.bias && seen == o.seen && bitmask == o.bitmask &&
               total == o.total;
    }
};

// Where each output sits in the output buffer (bytes), matching step_output.
struct output_layout {
    size_t packed = 0, accept_index = 0, logprobs = 0, row_error = 0, fault = 0, total = 0;
};

output_layout outputs_for(int32_t bs, int32_t n) {
    output_layout o;
    const size_t rows = static_cast<size_t>(bs) * static_cast<size_t>(n);
    // The fault word first, at the same place for every shape: it is cleared only after a fault.
    o.fault = 0;
    o.packed = align_up(sizeof(uint32_t));
    o.accept_index = o.packed + align_up((rows + static_cast<size_t>(bs)) * sizeof(int32_t));
    o.logprobs = o.accept_index + align_up(rows * sizeof(int32_t));
    o.row_error = o.logprobs + align_up(rows * sizeof(float));
    o.total = o.row_error + static_cast<size_t>(bs);
    return o;
}

}  // namespace

struct cuda_backend::impl {
    kernel_config config;
    param_pool pool;
    cuda_stream stream;
    int streaming_resident_blocks = 1;  // what the GPU holds of the streaming kernel at once
    device_buffer staging_device;
    pinned_buffer staging_host;
    device_buffer host_logits_copy;      // for logits that arrive in host memory
    device_buffer workspace;             // the kernel's; its counters are zero between steps
    size_t workspace_counter_bytes = 0;  // the part before the candidate lists
    device_buffer outputs_device;
    pinned_buffer outputs_host;
    std::vector<request_params> requests;  // host scratch, reserved

    // The captured graph and the shape it was captured for.
    captured_graph graph;
    staging_layout graph_layout;
    chain_kernel_params graph_params;
    step_kind graph_kind = step_kind::sample;

    explicit impl(const kernel_config& c) : config(c), pool(c) {}

    size_t max_staging_bytes() const {
        const size_t batch = static_cast<size_t>(config.max_batch);
        const size_t rows = static_cast<size_t>(config.max_rows());
        return align_up(batch * sizeof(request_params)) + align_up(rows * sizeof(int32_t)) +
               align_up(rows * sizeof(double)) + align_up(batch * sizeof(double)) +
               align_up(batch * static_cast<size_t>(config.max_logit_bias) * sizeof(logit_bias_entry)) +
               align_up(batch * static_cast<size_t>(config.max_penalty_tokens) * sizeof(token_count)) +
               align_up(rows * static_cast<size_t>(bitmask_words(config.vocab_size)) * sizeof(uint32_t));
    }

    // Validates the step, gathers the slots' parameters and packs every input into the pinned
    // staging buffer; fills the kernel parameters with device addresses.
    status stage(const step_input& step, step_kind kind, bool with_logprobs, staging_layout& layout,
                 chain_kernel_params& params) {
        status s = validate_step(step, kind, config);
        if (!s.is_ok()) return s;
        const int32_t bs = step.batch_size;
        const int32_t n = step.tokens_per_req;
        const size_t rows = static_cast<size_t>(bs) * static_cast<size_t>(n);
        requests.clear();
        bool streaming_greedy = true;
        size_t bias_total = 0;
        size_t seen_total = 0;
        for (int32_t b = 0; b < bs; ++b) {
            const sampling_params& sp = pool.params(step.slots[b]);
            request_params r;
            r.position = step.positions[b];
            r.seed = sp.seed;
            r.temperature = sp.temperature;
            r.top_p = sp.top_p;
            r.min_p = sp.min_p;
            r.presence_penalty = sp.presence_penalty;
            r.frequency_penalty = sp.frequency_penalty;
            r.repetition_penalty = sp.repetition_penalty;
            r.top_k = sp.top_k;
            r.greedy = is_greedy(sp) ? 1 : 0;
            r.bias_offset = static_cast<int32_t>(bias_total);
            r.bias_count = static_cast<int32_t>(sp.logit_bias.size());
            r.seen_offset = static_cast<int32_t>(seen_total);
            r.seen_count = sp.has_penalties() ? pool.seen_tokens(step.slots[b]).size : 0;
            streaming_greedy = streaming_greedy && r.greedy && r.bias_count == 0 && r.seen_count == 0;
            bias_total += sp.logit_bias.size();
            seen_total += static_cast<size_t>(r.seen_count);
            requests.push_back(r);
        }
        layout = staging_layout{};
        size_t at = 0;
        auto section = [&](size_t& offset, size_t bytes) {
            offset = at;
            at += align_up(bytes);
        };
        section(layout.requests, static_cast<size_t>(bs) * sizeof(request_params));
        section(layout.candidates, kind == step_kind::verify ? rows * sizeof(int32_t) : 0);
        section(layout.coins, step.coins != nullptr ? rows * sizeof(double) : 0);
        section(layout.final_coins, step.final_coins != nullptr ? static_cast<size_t>(bs) * sizeof(double) : 0);
        section(layout.bias, bias_total * sizeof(logit_bias_entry));
        section(layout.seen, seen_total * sizeof(token_count));
        section(layout.bitmask, step.bitmask != nullptr
                                    ? rows * static_cast<size_t>(bitmask_words(config.vocab_size)) * sizeof(uint32_t)
                                    : 0);
        layout.total = at;

        auto* host = static_cast<char*>(staging_host.get());
        std::memcpy(host + layout.requests, requests.data(), requests.size() * sizeof(request_params));
        if (kind == step_kind::verify) std::memcpy(host + layout.candidates, step.candidates, rows * sizeof(int32_t));
        if (step.coins != nullptr)
            std::memcpy(host + layout.coins, step.coins, static_cast<size_t>(bs) * (n - 1) * sizeof(double));
        if (step.final_coins != nullptr)
            std::memcpy(host + layout.final_coins, step.final_coins, static_cast<size_t>(bs) * sizeof(double));
        auto* bias_out = reinterpret_cast<logit_bias_entry*>(host + layout.bias);
        auto* seen_out = reinterpret_cast<token_count*>(host + layout.seen);
        for (int32_t b = 0; b < bs; ++b) {
            const sampling_params& sp = pool.params(step.slots[b]);
            const request_params& r = requests[static_cast<size_t>(b)];
            std::copy(sp.logit_bias.begin(), sp.logit_bias.end(), bias_out + r.bias_offset);
            const token_count_span seen = pool.seen_tokens(step.slots[b]);
            std::copy(seen.data, seen.data + r.seen_count, seen_out + r.seen_offset);
        }
        if (step.bitmask != nullptr) {
            std::memcpy(host + layout.bitmask, step.bitmask,
                        rows * static_cast<size_t>(bitmask_words(config.vocab_size)) * sizeof(uint32_t));
        }

        const output_layout out = outputs_for(bs, n);
        auto* device = static_cast<char*>(staging_device.get());
        auto* outputs = static_cast<char*>(outputs_device.get());
        params = chain_kernel_params{};
        params.logits = step.logits.on_device ? step.logits.data : host_logits_copy.get();
        params.dtype = step.logits.dtype;
        params.row_stride = step.logits.on_device ? step.logits.row_stride : step.logits.vocab;
        params.vocab = config.vocab_size;
        params.batch_size = bs;
        params.tokens_per_req = n;
        params.requests = reinterpret_cast<const request_params*>(device + layout.requests);
        params.candidates =
            kind == step_kind::verify ? reinterpret_cast<const int32_t*>(device + layout.candidates) : nullptr;
        params.coins = step.coins != nullptr ? reinterpret_cast<const double*>(device + layout.coins) : nullptr;
        params.final_coins =
            step.final_coins != nullptr ? reinterpret_cast<const double*>(device + layout.final_coins) : nullptr;
        params.bias = reinterpret_cast<const logit_bias_entry*>(device + layout.bias);
        params.seen = reinterpret_cast<const token_count*>(device + layout.seen);
        params.bitmask = step.bitmask != nullptr ? reinterpret_cast<const uint32_t*>(device + layout.bitmask) : nullptr;
        params.thresholds = step.thresholds;
        chain_workspace::layout(workspace.get(), config.max_rows(), config.max_batch, config.vocab_size,
                                params.workspace);
        params.packed = reinterpret_cast<int32_t*>(outputs + out.packed);
        params.accept_index = reinterpret_cast<int32_t*>(outputs + out.accept_index);
        params.logprobs = with_logprobs ? reinterpret_cast<float*>(outputs + out.logprobs) : nullptr;
        params.row_error = reinterpret_cast<uint8_t*>(outputs + out.row_error);
        params.fault = reinterpret_cast<uint32_t*>(outputs + out.fault);
        // As many segments per row as keep every block of the step resident at once.
        params.stream_segments = streaming_greedy ? std::clamp(streaming_resident_blocks / static_cast<int32_t>(rows),
                                                               1, max_stream_segments(config.vocab_size))
                                                  : 0;
        if (const char* problem = params.check()) return {status_code::internal, problem};
        return status::success();
    }

    // The device work of a step: one input copy, the kernel, one output copy. Capturable. (The
    // fault word stays zero until a launch faults; finish() clears it then.)
    status enqueue(const staging_layout& layout, const chain_kernel_params& params) {
        CUDA_TRY(cudaMemcpyAsync(staging_device.get(), staging_host.get(), layout.total, cudaMemcpyHostToDevice,
                                 stream.get()));
        CUDA_TRY(launch_chain_kernel(params, stream.get()));
        const output_layout out = outputs_for(params.batch_size, params.tokens_per_req);
        CUDA_TRY(
            cudaMemcpyAsync(outputs_host.get(), outputs_device.get(), out.total, cudaMemcpyDeviceToHost, stream.get()));
        return status::success();
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
        uint32_t fault = 0;
        std::memcpy(&fault, host + layout.fault, sizeof(fault));
        if (fault != 0) {
            // The kernel's counters are unreliable after a timed-out barrier: start them afresh.
            CUDA_TRY(cudaMemset(workspace.get(), 0, workspace_counter_bytes));
            CUDA_TRY(cudaMemset(outputs_device.get(), 0, sizeof(uint32_t)));
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
        if (out.row_error != nullptr) std::memcpy(out.row_error, host + layout.row_error, static_cast<size_t>(bs));
        return status::success();
    }

    status run(const step_input& step, step_kind kind, const step_output& out) {
        staging_layout layout;
        chain_kernel_params params;
        status s = stage(step, kind, out.logprobs != nullptr, layout, params);
        if (!s.is_ok() || step.batch_size == 0) return s;
        s = copy_host_logits(step.logits);
        if (s.is_ok()) s = enqueue(layout, params);
        if (s.is_ok()) s = finish(step.batch_size, step.tokens_per_req, out.logprobs != nullptr, out);
        return s;
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
    CUDA_TRY(streaming_kernel_capacity(device, state->streaming_resident_blocks));
    if (status s = state->stream.create(); !s.is_ok()) return s;
    const size_t rows = static_cast<size_t>(config.max_rows());
    const size_t vocab = static_cast<size_t>(config.vocab_size);
    const output_layout max_out = outputs_for(config.max_batch, config.max_tokens_per_req);
    status s = state->staging_device.allocate(state->max_staging_bytes());
    if (s.is_ok()) s = state->staging_host.allocate(state->max_staging_bytes());
    if (s.is_ok()) s = state->host_logits_copy.allocate(rows * vocab * sizeof(float));
    if (s.is_ok())
        s = state->workspace.allocate(
            chain_kernel_workspace_bytes(config.max_rows(), config.max_batch, config.vocab_size));
    if (!s.is_ok()) return s;
    {
        chain_workspace carved;
        chain_workspace::layout(state->workspace.get(), config.max_rows(), config.max_batch, config.vocab_size, carved);
        state->workspace_counter_bytes = static_cast<size_t>(reinterpret_cast<char*>(carved.candidates) -
                                                             static_cast<char*>(state->workspace.get()));
    }
    CUDA_TRY(cudaMemset(state->workspace.get(), 0, state->workspace_counter_bytes));
    if (s.is_ok()) s = state->outputs_device.allocate(max_out.total);
    if (s.is_ok()) s = state->outputs_host.allocate(max_out.total);
    if (!s.is_ok()) return s;
    CUDA_TRY(cudaMemset(state->outputs_device.get(), 0, sizeof(uint32_t)));  // the fault word
    state->requests.reserve(static_cast<size_t>(config.max_batch));
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
    impl& st = *impl_;
    status s = st.stage(step, kind, with_logprobs, st.graph_layout, st.graph_params);
    if (!s.is_ok()) return s;
    if (step.batch_size == 0) return status::invalid("batch_size = 0: nothing to capture");
    s = st.graph.capture(st.stream.get(), [&] { return st.enqueue(st.graph_layout, st.graph_params); });
    if (!s.is_ok()) return s;
    st.graph_kind = kind;
    return status::success();
}

status cuda_backend::replay_graph(const step_input& step, const step_output& out) {
    impl& st = *impl_;
    if (st.graph.empty()) return status::invalid("replay_graph: no graph has been captured");
    staging_layout layout;
    chain_kernel_params params;
    status s = st.stage(step, st.graph_kind, st.graph_params.logprobs != nullptr, layout, params);
    if (!s.is_ok()) return s;
    if (!(layout == st.graph_layout) || params.logits != st.graph_params.logits ||
        params.dtype != st.graph_params.dtype || params.row_stride != st.graph_params.row_stride ||
        params.stream_segments != st.graph_params.stream_segments) {
        return status::invalid(
            "replay_graph: the step's shape differs from the captured one (batch, N, logits, optional inputs, bias and "
            "penalty sizes, and whether every request is plain greedy must match); capture again");
    }
    s = st.graph.launch(st.stream.get());
    if (!s.is_ok()) return s;
    return st.finish(step.batch_size, step.tokens_per_req, st.graph_params.logprobs != nullptr, out);
}

status cuda_backend::time_graph(int iterations, double& microseconds_per_step) {
    impl& st = *impl_;
    if (st.graph.empty()) return status::invalid("time_graph: no graph has been captured");
    return st.graph.time_replays(st.stream.get(), iterations, microseconds_per_step);
}

status cuda_backend::captured_shape(graph_shape& shape) const {
    const impl& st = *impl_;
    if (st.graph.empty()) return status::invalid("captured_shape: no graph has been captured");
    shape.staged_bytes = st.graph_layout.total;
    shape.output_bytes = outputs_for(st.graph_params.batch_size, st.graph_params.tokens_per_req).total;
    shape.kernel_blocks = chain_kernel_blocks(st.graph_params);
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

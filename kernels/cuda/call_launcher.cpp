#include "kernels/cuda/call_launcher.h"

#include <algorithm>
#include <atomic>

#include "kernels/cuda/call_entry.h"
#include "kernels/cuda/chain_kernel.h"
#include "kernels/cuda/cuda_status.h"

namespace ds::cuda {

std::size_t call_workspace_bytes(int32_t batch, int32_t tokens_per_req, int32_t vocab, bool cut_lists) {
    return chain_kernel_workspace_bytes(int64_t{batch} * tokens_per_req, batch, vocab, cut_lists);
}

bool cut_possible(const sampling_call& call) {
    const request_sources& p = call.params;
    return p.top_k.values != nullptr || p.top_k.scalar != -1 || p.top_p.values != nullptr || p.top_p.scalar < 1.0f ||
           p.min_p.values != nullptr || p.min_p.scalar > 0.0f;
}

namespace {

// The streaming kernel reads neither penalties nor bias, and in raw mode no mask may change what
// it reads (docs/semantics.md, "Log-probabilities").
bool can_stream(const sampling_call& call) {
    return call.all_greedy_hint && call.params.logit_bias.empty() &&
           !(call.logprobs == logprob_mode::raw && call.bitmask != nullptr);
}

}  // namespace

status check_row_fits(const char* field, int32_t vocab, const kernel_capacity& capacity, const char* advice) {
    if (chunks_per_row(vocab) <= capacity.chain_blocks) return status::success();
    return status::invalid(fmt::format(
        "{} = {}: expected at most {} on this GPU, whose {} resident blocks of the sampling kernel hold one row at "
        "most (docs/configuration.md, CUDA backend vocabulary){}",
        field, vocab, int64_t{capacity.chain_blocks} * kChunkTokens, capacity.chain_blocks, advice));
}

status plan_call(const sampling_call& call, workspace_ref workspace, const kernel_capacity& capacity,
                 replay_coins coins, chain_kernel_params& params) {
    const int32_t bs = call.batch_size;
    const int32_t n = call.tokens_per_req;
    const bool streams = can_stream(call);
    if (!streams) DS_TRY(check_row_fits("logits.vocab", call.logits.vocab, capacity));
    const bool cut_lists = cut_possible(call);
    const std::size_t needed = call_workspace_bytes(bs, n, call.logits.vocab, cut_lists);
    if (workspace.data == nullptr || workspace.bytes < needed) {
        return status::invalid(fmt::format("workspace.bytes = {}: expected at least {} (workspace_bytes)",
                                           workspace.data == nullptr ? 0 : workspace.bytes, needed));
    }
    if (reinterpret_cast<uintptr_t>(workspace.data) % 256 != 0) {
        return status::invalid("workspace.data: expected an address aligned to 256 bytes");
    }
    params = chain_kernel_params{};
    params.logits = call.logits.data;
    params.dtype = call.logits.dtype;
    params.row_stride = call.logits.row_stride;
    params.vocab = call.logits.vocab;
    params.batch_size = bs;
    params.tokens_per_req = n;
    params.candidates = n > 1 ? call.candidates : nullptr;
    params.coins = coins.coins;
    params.final_coins = coins.final_coins;
    params.bitmask = call.bitmask;
    params.thresholds = call.thresholds;
    params.logprobs = call.logprobs;
    params.outputs = call.outputs;
    chain_workspace::layout(workspace.data, int64_t{bs} * n, bs, call.logits.vocab, cut_lists, params.workspace);
    const int64_t rows = int64_t{bs} * n;
    // As many segments as one round of the resident blocks holds: a block's fixed costs (its
    // start, reduction and the row's combine) outweigh what more, shorter segments would
    // spread (measured on the H200: one round 60 us, two 68, four 72 for bs 256 greedy).
    const int64_t wanted = capacity.streaming_blocks / std::max<int64_t>(rows, 1);
    params.stream_segments =
        streams ? static_cast<int32_t>(std::clamp<int64_t>(wanted, 1, max_stream_segments(call.logits.vocab))) : 0;
    if (const char* problem = params.check()) return {status_code::internal, problem};
    return status::success();
}

status enqueue_call(const sampling_call& call, const chain_kernel_params& params, cudaStream_t stream) {
    CUDA_TRY(launch_step(call, params, stream));
    return status::success();
}

namespace {

// The kernels' one-time setup on a device (their shared-memory attribute) and what the GPU holds
// of them: properties of the device and the kernels, the same for every call, so they are found
// once per device instead of on every engine call.
constexpr int kMaxDevices = 64;
// Per device: (streaming blocks + 1) << 32 | chain blocks, 0 while unknown.
std::atomic<uint64_t> capacity_known[kMaxDevices];

status device_setup(kernel_capacity& capacity) {
    int device = 0;
    CUDA_TRY(cudaGetDevice(&device));
    const bool cached = device >= 0 && device < kMaxDevices;
    if (cached) {
        const uint64_t known = capacity_known[device].load(std::memory_order_acquire);
        if (known != 0) {
            capacity.streaming_blocks = static_cast<int>(known >> 32) - 1;
            capacity.chain_blocks = static_cast<int>(known & 0xFFFFFFFFu);
            return status::success();
        }
    }
    CUDA_TRY(prepare_chain_kernel());
    CUDA_TRY(query_kernel_capacity(device, capacity));
    if (cached) {
        capacity_known[device].store(
            (static_cast<uint64_t>(capacity.streaming_blocks + 1) << 32) | static_cast<uint32_t>(capacity.chain_blocks),
            std::memory_order_release);
    }
    return status::success();
}

}  // namespace

status run_call(const sampling_call& call, workspace_ref workspace, cudaStream_t stream) {
    kernel_capacity capacity;
    DS_TRY(device_setup(capacity));
    chain_kernel_params params;
    DS_TRY(plan_call(call, workspace, capacity, {}, params));
    return enqueue_call(call, params, stream);
}

}  // namespace ds::cuda

namespace ds::cuda {

std::size_t call_workspace_size(const sampling_call& call) {
    return call_workspace_bytes(call.batch_size, call.tokens_per_req, call.logits.vocab, cut_possible(call));
}

status run_call_on(const sampling_call& call, workspace_ref workspace, void* stream) {
    return run_call(call, workspace, static_cast<cudaStream_t>(stream));
}

status copy_to_host_async(void* host, const void* device, std::size_t bytes, void* stream) {
    CUDA_TRY(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)));
    return status::success();
}

}  // namespace ds::cuda

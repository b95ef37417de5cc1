// The engine-facing API of include/distsample/sampling.h: checks on the host, then the CPU
// sampler on the calling thread or the CUDA kernels enqueued on the caller's stream.
#include <distsample/sampling.h>
#include <fmt/format.h>

#include <cstring>
#include <utility>

#include "kernels/cpu/commit.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/validation.h"

#if defined(DISTSAMPLE_HAVE_CUDA)
#include "kernels/cuda/call_entry.h"
#endif

namespace ds {

namespace {

status check_shape(const sampling_call& call) {
    const logits_view& l = call.logits;
    if (call.batch_size < 0) return status::invalid(fmt::format("batch_size = {}: expected >= 0", call.batch_size));
    if (call.tokens_per_req < 1 || call.tokens_per_req > kMaxTokensPerRequest) {
        return status::invalid(fmt::format("tokens_per_req = {}: expected an integer in [1, {}]", call.tokens_per_req,
                                           kMaxTokensPerRequest));
    }
    if (l.vocab < 1 || l.vocab > exact::kMaxVocab) {
        return status::invalid(fmt::format("logits.vocab = {}: expected an integer in [1, {}]", l.vocab, exact::kMaxVocab));
    }
    const int64_t rows = int64_t{call.batch_size} * call.tokens_per_req;
    if (l.rows != rows) {
        return status::invalid(fmt::format("logits.rows = {}: expected batch_size * tokens_per_req = {}", l.rows, rows));
    }
    if (l.row_stride < l.vocab) {
        return status::invalid(fmt::format("logits.row_stride = {}: expected >= vocab ({})", l.row_stride, l.vocab));
    }
    if (l.dtype != logits_dtype::f32 && l.dtype != logits_dtype::bf16 && l.dtype != logits_dtype::f16) {
        return status::invalid(fmt::format("logits.dtype = {}: expected f32, bf16 or f16", static_cast<int>(l.dtype)));
    }
    return status::success();
}

status check_pointers(const sampling_call& call) {
    if (call.batch_size == 0) return status::success();
    if (call.logits.data == nullptr) return status::invalid("logits.data: expected a non-null pointer");
    const sampling_outputs& o = call.outputs;
    if (o.predict == nullptr || o.accept_index == nullptr || o.accept_length == nullptr) {
        return status::invalid("outputs: predict, accept_index and accept_length are required");
    }
    if (call.logprobs != logprob_mode::none && o.logprobs == nullptr) {
        return status::invalid("outputs.logprobs: required when logprobs is raw or processed");
    }
    if (call.logprobs != logprob_mode::none && call.logprobs != logprob_mode::raw &&
        call.logprobs != logprob_mode::processed) {
        return status::invalid(
            fmt::format("logprobs = {}: expected none, raw or processed", static_cast<int>(call.logprobs)));
    }
    return status::success();
}

status run(const sampling_call& call, workspace_ref workspace, stream_ref stream) {
    DS_TRY(call.check());
    if (call.batch_size == 0) return status::success();
    if (!call.logits.on_device) {
        const std::size_t needed = cpu::call_workspace_bytes(call.logits.vocab);
        if (workspace.data == nullptr || workspace.bytes < needed) {
            return status::invalid(
                fmt::format("workspace.bytes = {}: expected at least {} (workspace_bytes)", workspace.bytes, needed));
        }
        cpu::run_call(call, workspace);
        return status::success();
    }
#if defined(DISTSAMPLE_HAVE_CUDA)
    return cuda::run_call_on(call, workspace, stream.native);
#else
    (void)stream;
    return {status_code::unsupported, "logits.on_device = true: this build of distsample has no CUDA"};
#endif
}

}  // namespace

status sampling_call::check() const {
    DS_TRY(check_shape(*this));
    DS_TRY(check_pointers(*this));
    if (tokens_per_req > 1 && candidates == nullptr && batch_size > 0) {
        return status::invalid("candidates: expected batch_size rows of tokens_per_req ids for verify");
    }
    DS_TRY(validate_thresholds(thresholds));
    return validate_call_params(*this);
}

std::size_t workspace_bytes(const sampling_call& call) {
#if defined(DISTSAMPLE_HAVE_CUDA)
    if (call.logits.on_device) return cuda::call_workspace_size(call);
#endif
    return cpu::call_workspace_bytes(call.logits.vocab);
}

status sample(const sampling_call& call, workspace_ref workspace, stream_ref stream) {
    if (call.tokens_per_req != 1) {
        return status::invalid(fmt::format("tokens_per_req = {}: sample takes one row per request; use verify",
                                           call.tokens_per_req));
    }
    return run(call, workspace, stream);
}

status verify(const sampling_call& call, workspace_ref workspace, stream_ref stream) {
    if (call.candidates == nullptr && call.batch_size > 0) {
        return status::invalid("candidates: expected batch_size rows of tokens_per_req ids (anchor, then drafts)");
    }
    return run(call, workspace, stream);
}

status copy_outputs(const sampling_outputs& from, const sampling_outputs& to, int32_t batch_size,
                    int32_t tokens_per_req, bool from_device, stream_ref stream) {
    if (batch_size < 0 || tokens_per_req < 1) {
        return status::invalid(fmt::format("batch_size = {}, tokens_per_req = {}: expected >= 0 and >= 1", batch_size,
                                           tokens_per_req));
    }
    const auto rows = static_cast<std::size_t>(batch_size) * static_cast<std::size_t>(tokens_per_req);
    const auto bs = static_cast<std::size_t>(batch_size);
    const std::pair<const void*, void*> pairs[] = {{from.predict, to.predict},
                                                   {from.accept_index, to.accept_index},
                                                   {from.accept_length, to.accept_length},
                                                   {from.logprobs, to.logprobs},
                                                   {from.row_error, to.row_error}};
    const std::size_t bytes[] = {rows * 4, rows * 4, bs * 4, rows * 4, bs};
    for (int i = 0; i < 5; ++i) {
        if (pairs[i].first == nullptr || pairs[i].second == nullptr || bytes[i] == 0) continue;
        if (!from_device) {
            std::memcpy(pairs[i].second, pairs[i].first, bytes[i]);
            continue;
        }
#if defined(DISTSAMPLE_HAVE_CUDA)
        DS_TRY(cuda::copy_to_host_async(pairs[i].second, pairs[i].first, bytes[i], stream.native));
#else
        (void)stream;
        return {status_code::unsupported, "from_device = true: this build of distsample has no CUDA"};
#endif
    }
    return status::success();
}

status commit_call::check() const {
    if (batch_size < 0 || tokens_per_req < 1 || tokens_per_req > kMaxTokensPerRequest) {
        return status::invalid(fmt::format("batch_size = {}, tokens_per_req = {}: expected >= 0 and in [1, {}]",
                                           batch_size, tokens_per_req, kMaxTokensPerRequest));
    }
    if (capacity < 1 || max_slots < 1 || vocab < 1) {
        return status::invalid(fmt::format("capacity = {}, max_slots = {}, vocab = {}: expected positive values",
                                           capacity, max_slots, vocab));
    }
    if (batch_size > 0 && (slots == nullptr || predict == nullptr || accept_length == nullptr ||
                           seen_tokens == nullptr || seen_counts == nullptr || seen_sizes == nullptr)) {
        return status::invalid("commit: slots, predict, accept_length and the seen lists are required");
    }
    return status::success();
}

status commit_tokens(const commit_call& call, stream_ref stream) {
    DS_TRY(call.check());
    if (call.batch_size == 0) return status::success();
    if (!call.on_device) {
        cpu::commit_tokens(call);
        return status::success();
    }
#if defined(DISTSAMPLE_HAVE_CUDA)
    return cuda::commit_tokens_on(call, stream.native);
#else
    (void)stream;
    return {status_code::unsupported, "on_device = true: this build of distsample has no CUDA"};
#endif
}

}  // namespace ds

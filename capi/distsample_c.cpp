// The C ABI of include/distsample/distsample_c.h over the C++ engine API.
#include <distsample/distsample_c.h>
#include <distsample/sampling.h>

#include "capi/c_status.h"

namespace {

using ds::capi::guarded;
using ds::capi::report;

template <class T, class C>
ds::param<T> param_of(const C& p) {
    return {p.scalar, p.values};
}

template <class V>
ds::token_list<V> list_of(const ds_token_list& l) {
    return {l.tokens, static_cast<const V*>(l.values), l.offsets, l.sizes, l.stride};
}

ds::sampling_call call_of(const ds_call& c) {
    ds::sampling_call call;
    call.batch_size = c.batch_size;
    call.tokens_per_req = c.tokens_per_req;
    call.logits = {c.logits, static_cast<ds::logits_dtype>(c.dtype), int64_t{c.batch_size} * c.tokens_per_req,
                   c.vocab, c.row_stride, c.on_device != 0};
    ds::request_sources& p = call.params;
    p.temperature = param_of<float>(c.temperature);
    p.top_k = param_of<int32_t>(c.top_k);
    p.top_p = param_of<float>(c.top_p);
    p.min_p = param_of<float>(c.min_p);
    p.seed = param_of<int64_t>(c.seed);
    p.presence_penalty = param_of<float>(c.presence_penalty);
    p.frequency_penalty = param_of<float>(c.frequency_penalty);
    p.repetition_penalty = param_of<float>(c.repetition_penalty);
    p.logit_bias = list_of<float>(c.logit_bias);
    p.seen = list_of<int32_t>(c.seen);
    call.slots = c.slots;
    call.num_slots = c.num_slots;
    call.positions = param_of<int64_t>(c.positions);
    call.candidates = c.candidates;
    call.bitmask = c.bitmask;
    call.thresholds = {c.threshold_single, c.threshold_acc};
    call.logprobs = static_cast<ds::logprob_mode>(c.logprobs);
    call.all_greedy_hint = c.all_greedy_hint != 0;
    call.outputs = {c.predict, c.accept_index, c.accept_length, c.logprobs_out, c.row_error};
    return call;
}

}  // namespace

extern "C" {

int ds_abi_version(void) { return DS_C_ABI_VERSION; }

int ds_has_cuda(void) {
#if defined(DISTSAMPLE_HAVE_CUDA)
    return 1;
#else
    return 0;
#endif
}

size_t ds_workspace_bytes(const ds_call* call) {
    if (call == nullptr) return 0;
    const ds::sampling_call c = call_of(*call);
    return c.check().is_ok() ? ds::workspace_bytes(c) : 0;
}

int ds_sample(const ds_call* call, void* workspace, size_t workspace_bytes, void* stream) {
    if (call == nullptr) return report(ds::status::invalid("call: expected a non-null pointer"));
    return guarded([&] { return ds::sample(call_of(*call), {workspace, workspace_bytes}, {stream}); });
}

int ds_verify(const ds_call* call, void* workspace, size_t workspace_bytes, void* stream) {
    if (call == nullptr) return report(ds::status::invalid("call: expected a non-null pointer"));
    return guarded([&] { return ds::verify(call_of(*call), {workspace, workspace_bytes}, {stream}); });
}

int ds_commit_tokens(const ds_commit* commit, void* stream) {
    if (commit == nullptr) return report(ds::status::invalid("commit: expected a non-null pointer"));
    const ds_commit& c = *commit;
    ds::commit_call call;
    call.batch_size = c.batch_size;
    call.tokens_per_req = c.tokens_per_req;
    call.slots = c.slots;
    call.predict = c.predict;
    call.accept_length = c.accept_length;
    call.seen_tokens = c.seen_tokens;
    call.seen_counts = c.seen_counts;
    call.seen_sizes = c.seen_sizes;
    call.capacity = c.capacity;
    call.max_slots = c.max_slots;
    call.vocab = c.vocab;
    call.row_error = c.row_error;
    call.on_device = c.on_device != 0;
    return guarded([&] { return ds::commit_tokens(call, {stream}); });
}

const char* ds_last_error(void) { return ds::capi::last_error().c_str(); }

}  // extern "C"

// distsample's engine-facing sampling API: one call samples (or verifies drafts for) a batch of
// logits rows, exactly as docs/semantics.md defines, on the CPU or on a CUDA device.
//
//   ds::sampling_call call;                       // what to sample and where the outputs go
//   call.logits = {logits_ptr, ds::logits_dtype::bf16, bs, vocab, vocab, /*on_device=*/true};
//   call.batch_size = bs;
//   call.params.temperature = ds::param<float>::per_row(temperature_ptr);   // or a scalar
//   call.params.seed = ds::param<int64_t>::per_row(seed_ptr);
//   call.positions = ds::param<int64_t>::per_row(position_ptr);
//   call.outputs.predict = predict_ptr;  ...
//   size_t bytes = ds::workspace_bytes(call);      // the caller allocates it (any allocator)
//   ds::status s = ds::sample(call, {workspace_ptr, bytes}, ds::stream_ref{cuda_stream});
//
// On CUDA every call only enqueues work on the caller's stream: no synchronisation, no
// allocation, no host round trip, so calls can be captured in the caller's CUDA graph and
// replayed with new logits, seeds and positions (they are read from device memory). The returned
// status covers what the host can check (shapes, pointers, scalar ranges); values in device
// arrays are checked on the device, and a row whose parameters are out of range gets
// row_error = kRowErrorInvalidParams and token -1 instead of a host error.
//
// Self-contained and CUDA-free: the stream is an opaque handle.
#pragma once

#include <cstddef>
#include <cstdint>

#include <distsample/status.h>

// Functions the shared library libdistsample.so exports (it hides everything else).
#if defined(__GNUC__)
#define DS_API __attribute__((visibility("default")))
#else
#define DS_API
#endif

namespace ds {

enum class logits_dtype : int { f32 = 0, bf16 = 1, f16 = 2 };
DS_API const char* dtype_name(logits_dtype dtype);
DS_API std::size_t dtype_size(logits_dtype dtype);

// Rows of logits over the full vocabulary (or over one rank's vocab shard). Row r starts at
// data + r * row_stride elements; row_stride >= vocab. `on_device` marks CUDA device memory; in a
// sampling_call every other pointer then lives on the same device too.
struct logits_view {
    const void* data = nullptr;
    logits_dtype dtype = logits_dtype::f32;
    int64_t rows = 0;
    int32_t vocab = 0;
    int64_t row_stride = 0;
    bool on_device = false;
};

// A parameter given once for the whole batch or per row (FlashInfer's scalar-or-array). `values`,
// when set, points to one value per request (or per slot, see sampling_call::slots) in the call's
// memory; otherwise every request uses `scalar`.
template <class T>
struct param {
    T scalar{};
    const T* values = nullptr;

    static param uniform(T value) { return {value, nullptr}; }
    static param per_row(const T* array) { return {T{}, array}; }
};

// A list of (token, value) entries per request, e.g. logit biases or seen-token counts. Entries
// of list i are [offsets[i], offsets[i + 1]) when `offsets` is set (CSR), else
// [i * stride, i * stride + sizes[i]) (fixed capacity per slot). Null `tokens`: no lists.
template <class V>
struct token_list {
    const int32_t* tokens = nullptr;
    const V* values = nullptr;
    const int32_t* offsets = nullptr;  // [n + 1]
    const int32_t* sizes = nullptr;    // [n], with stride
    int32_t stride = 0;

    bool empty() const { return tokens == nullptr; }
};

// Per-request sampling parameters; ranges as in docs/semantics.md (temperature >= 0, top_k = -1
// or >= 1, top_p in (0, 1], min_p in [0, 1], presence and frequency penalties in [-2, 2],
// repetition penalty in (0, 10], biases in [-100, 100]).
struct request_sources {
    param<float> temperature = param<float>::uniform(1.0f);
    param<int32_t> top_k = param<int32_t>::uniform(-1);
    param<float> top_p = param<float>::uniform(1.0f);
    param<float> min_p = param<float>::uniform(0.0f);
    param<int64_t> seed = param<int64_t>::uniform(0);  // the 64 bits of the request's seed
    param<float> presence_penalty = param<float>::uniform(0.0f);
    param<float> frequency_penalty = param<float>::uniform(0.0f);
    param<float> repetition_penalty = param<float>::uniform(1.0f);
    token_list<float> logit_bias;  // added to the logits of the listed tokens
    token_list<int32_t> seen;      // distinct tokens already generated and their counts (penalties)
};

// Acceptance knobs of target-only chain verification (docs/semantics.md, Verify). 1.0 / 1.0 is
// exact rejection sampling; lower values accept more drafts and are lossy.
struct verify_thresholds {
    float single = 1.0f;  // [0, 1]: accept a draft whose target probability is at least this
    float acc = 1.0f;     // (0, 1]: accept when coin <= p / acc
};

// Which log-probability of the emitted token `outputs.logprobs` receives.
enum class logprob_mode : int {
    none = 0,
    raw = 1,        // log_softmax of the logits as given
    processed = 2,  // log of the probability the token was drawn with: after penalties, bias, mask,
                    // temperature and the filters (greedy rows: log_softmax of the processed logits)
};

// Row error codes (outputs.row_error).
constexpr uint8_t kRowOk = 0;
constexpr uint8_t kRowErrorNothingAllowed = 1;  // a row the request used allowed no token
constexpr uint8_t kRowErrorInvalidParams = 2;   // a per-row parameter, position or candidate is out of range
constexpr uint8_t kRowErrorKernelFault = 3;     // the GPU could not run the row's blocks together in time

// Outputs, in the call's memory. predict [bs * N] and accept_index [bs * N] hold -1 after the
// emitted tokens; accept_length [bs]; logprobs [bs * N] (NaN where nothing was emitted) and
// row_error [bs] are optional.
struct sampling_outputs {
    int32_t* predict = nullptr;
    int32_t* accept_index = nullptr;
    int32_t* accept_length = nullptr;
    float* logprobs = nullptr;
    uint8_t* row_error = nullptr;
};

// One sample or verify call (TensorRT-LLM's params-struct shape: inputs, outputs, check()).
struct sampling_call {
    logits_view logits;  // [batch_size * tokens_per_req rows, vocab]
    int32_t batch_size = 0;
    int32_t tokens_per_req = 1;  // N: 1 for sample; anchor + N - 1 drafts for verify
    request_sources params;
    // Optional [bs] slot of each request: the per-row arrays of `params` and its lists are then
    // indexed by slot (state kept per slot by the caller), not by request.
    const int32_t* slots = nullptr;
    int32_t num_slots = 0;  // with slots: the length of the slot-indexed arrays (slots out of range flag the row)
    param<int64_t> positions = param<int64_t>::uniform(0);  // per request: sequence length before the step
    const int32_t* candidates = nullptr;                    // [bs, N] verify: the anchor then the drafts
    const uint32_t* bitmask = nullptr;                      // [bs * N, ceil(V / 32)] bit 1 = allowed; null = all
    verify_thresholds thresholds;
    logprob_mode logprobs = logprob_mode::none;
    // Every request is greedy with no penalties and no bias (a promise the caller can make without
    // reading device memory): the call may take a faster path. A request that breaks the promise
    // emits nothing and gets row_error = kRowErrorInvalidParams.
    bool all_greedy_hint = false;
    sampling_outputs outputs;

    // Shapes, pointers and scalar ranges; names the field and the allowed range.
    DS_API status check() const;
};

// A non-owning CUDA stream (cudaStream_t); null is the legacy default stream. Ignored on the host.
struct stream_ref {
    void* native = nullptr;
};

// Caller-owned scratch memory, in the call's memory, aligned to 256 bytes.
struct workspace_ref {
    void* data = nullptr;
    std::size_t bytes = 0;
};

// Bytes of workspace a call of this shape needs (batch size, N, vocabulary, where).
DS_API std::size_t workspace_bytes(const sampling_call& call);

// One token per request (tokens_per_req == 1); accept_length all 1, accept_index[b] = b.
DS_API status sample(const sampling_call& call, workspace_ref workspace, stream_ref stream = {});
// Chain verification of the drafts (docs/semantics.md, Verify).
DS_API status verify(const sampling_call& call, workspace_ref workspace, stream_ref stream = {});

// Enqueues copies of a call's outputs (`from`, where the call ran) into `to` (host memory; pinned
// for the copies to be asynchronous) on `stream`: for callers that want host results. Outputs
// null in either are skipped. On the host, copies at once.
DS_API status copy_outputs(const sampling_outputs& from, const sampling_outputs& to, int32_t batch_size,
                           int32_t tokens_per_req, bool from_device, stream_ref stream = {});

// Adds each request's emitted tokens (predict[b * N, b * N + accept_length[b])) to the seen-token
// lists of its slot, held by the caller in fixed-capacity form: tokens and counts
// [max_slots, capacity], sizes [max_slots]. Slot 0 is skipped. A list that would exceed its
// capacity keeps what fits and sets row_error[b] = kRowErrorInvalidParams when row_error is given.
struct commit_call {
    int32_t batch_size = 0;
    int32_t tokens_per_req = 1;
    const int32_t* slots = nullptr;          // [bs]
    const int32_t* predict = nullptr;        // [bs * N]
    const int32_t* accept_length = nullptr;  // [bs]
    int32_t* seen_tokens = nullptr;          // [max_slots, capacity]
    int32_t* seen_counts = nullptr;          // [max_slots, capacity]
    int32_t* seen_sizes = nullptr;           // [max_slots]
    int32_t capacity = 0;
    int32_t max_slots = 0;
    int32_t vocab = 0;
    uint8_t* row_error = nullptr;  // optional [bs]
    bool on_device = false;

    DS_API status check() const;
};
DS_API status commit_tokens(const commit_call& call, stream_ref stream = {});

}  // namespace ds

/* distsample's C ABI: the engine-facing sampling API (distsample/sampling.h) as plain C, for
 * bindings that load the shared library at run time (the Python package uses ctypes), so they need
 * no compiler and no development headers where they run.
 *
 * Every function returns a status code (0 = ok, otherwise ds::status_code's value) and, on
 * failure, leaves a message naming the field and its allowed range for ds_last_error() on the
 * calling thread. Pointers of one call all live where the logits live (host memory, or the CUDA
 * device of the stream). On CUDA the calls only enqueue work on `stream` (a cudaStream_t; null
 * is the legacy default stream). */
#ifndef DISTSAMPLE_DISTSAMPLE_C_H
#define DISTSAMPLE_DISTSAMPLE_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DS_C_ABI_VERSION 1

#if defined(__GNUC__)
#define DS_C_API __attribute__((visibility("default")))
#else
#define DS_C_API
#endif

/* A parameter for the whole batch (values == NULL: scalar) or one value per request (per slot
 * when the call has slots). */
typedef struct {
    float scalar;
    const float* values;
} ds_param_f32;
typedef struct {
    int32_t scalar;
    const int32_t* values;
} ds_param_i32;
typedef struct {
    int64_t scalar;
    const int64_t* values;
} ds_param_i64;

/* Per-request lists of (token, value): CSR with offsets [n + 1], or fixed capacity `stride` with
 * sizes [n]. tokens == NULL: no lists. values are float (logit_bias) or int32 (seen counts). */
typedef struct {
    const int32_t* tokens;
    const void* values;
    const int32_t* offsets;
    const int32_t* sizes;
    int32_t stride;
} ds_token_list;

enum { DS_DTYPE_F32 = 0, DS_DTYPE_BF16 = 1, DS_DTYPE_F16 = 2 };
enum { DS_LOGPROBS_NONE = 0, DS_LOGPROBS_RAW = 1, DS_LOGPROBS_PROCESSED = 2 };
enum { DS_ROW_OK = 0, DS_ROW_NOTHING_ALLOWED = 1, DS_ROW_INVALID_PARAMS = 2, DS_ROW_KERNEL_FAULT = 3 };

typedef struct {
    /* logits [batch_size * tokens_per_req rows, vocab], row r at logits + r * row_stride */
    const void* logits;
    int32_t dtype;     /* DS_DTYPE_* */
    int32_t on_device; /* 1: CUDA device memory */
    int32_t vocab;
    int64_t row_stride;
    int32_t batch_size;
    int32_t tokens_per_req; /* 1 for sample; anchor + drafts for verify */
    /* per-request parameters */
    ds_param_f32 temperature, top_p, min_p, presence_penalty, frequency_penalty, repetition_penalty;
    ds_param_i32 top_k;
    ds_param_i64 seed;
    ds_param_i64 positions; /* always per request, never per slot */
    ds_token_list logit_bias;
    ds_token_list seen;
    const int32_t* slots; /* [batch_size] or NULL */
    int32_t num_slots;    /* with slots: length of the slot-indexed arrays */
    const int32_t* candidates; /* [batch_size, tokens_per_req], verify */
    const uint32_t* bitmask;   /* [rows, ceil(vocab / 32)] or NULL */
    float threshold_single, threshold_acc;
    int32_t logprobs;        /* DS_LOGPROBS_* */
    int32_t all_greedy_hint; /* every request greedy, no penalties, no bias */
    /* outputs */
    int32_t* predict;       /* [rows] */
    int32_t* accept_index;  /* [rows] */
    int32_t* accept_length; /* [batch_size] */
    float* logprobs_out;    /* [rows] or NULL */
    uint8_t* row_error;     /* [batch_size] or NULL, DS_ROW_* */
} ds_call;

typedef struct {
    int32_t batch_size;
    int32_t tokens_per_req;
    const int32_t* slots;
    const int32_t* predict;
    const int32_t* accept_length;
    int32_t* seen_tokens; /* [max_slots, capacity] */
    int32_t* seen_counts; /* [max_slots, capacity] */
    int32_t* seen_sizes;  /* [max_slots] */
    int32_t capacity;
    int32_t max_slots;
    int32_t vocab;
    uint8_t* row_error; /* [batch_size] or NULL */
    int32_t on_device;
} ds_commit;

DS_C_API int ds_abi_version(void);
/* 1 when this library was built with CUDA. */
DS_C_API int ds_has_cuda(void);
/* Bytes of workspace a call of this shape needs (0 when the call's shape is invalid). */
DS_C_API size_t ds_workspace_bytes(const ds_call* call);
DS_C_API int ds_sample(const ds_call* call, void* workspace, size_t workspace_bytes, void* stream);
DS_C_API int ds_verify(const ds_call* call, void* workspace, size_t workspace_bytes, void* stream);
DS_C_API int ds_commit_tokens(const ds_commit* commit, void* stream);
/* The message of the calling thread's last failed call ("" when none). */
DS_C_API const char* ds_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* DISTSAMPLE_DISTSAMPLE_C_H */

/* distsample's C ABI for a tensor-parallel rank inside a model worker: the rank API
 * (distsample/rank.h, docs/deployment.md, Ranks inside model workers) as plain C, for bindings
 * that load it at run time (the Python package's distsample.WorkerRank). It lives in its own
 * library, libdistsample_rank.so, which carries the actors and their transport; libdistsample.so
 * (distsample_c.h) stays the sampling kernels alone.
 *
 *   ds_rank* rank;
 *   ds_rank_join("{\"tp\": 4, \"vocab_size\": 64, \"transport\": \"ucx\", "
 *                "\"topology\": {\"logits_source\": \"worker\"}}", "127.0.0.1:7710", 2, 5000, &rank);
 *   ds_rank_step step = {...};                   // with buffers for slots, positions, candidates
 *   ds_rank_next_step(rank, 1000, &step);        // DS_RANK_TIMEOUT when no step came
 *   ds_rank_provide_logits(rank, step.id, shard, DS_DTYPE_F32, 0, rows, step.shard_vocab, stride);
 *   ds_rank_outputs(rank, step.id, 5000, &out);  // the agreed tokens
 *   ds_rank_leave(rank);
 *
 * As in distsample_c.h, every function returns a status code (0 = ok, otherwise ds::status_code's
 * value) and, on failure, leaves a message naming the field and its allowed range (or the rank and
 * step that failed) for ds_rank_last_error() on the calling thread. A handle may be used from
 * several threads. */
#ifndef DISTSAMPLE_DISTSAMPLE_RANK_C_H
#define DISTSAMPLE_DISTSAMPLE_RANK_C_H

#include <stddef.h>
#include <stdint.h>

#include "distsample_c.h" /* DS_C_API, DS_DTYPE_* */

#ifdef __cplusplus
extern "C" {
#endif

#define DS_RANK_C_ABI_VERSION 1

enum { DS_STEP_SAMPLE = 0, DS_STEP_VERIFY = 1 };
enum { DS_RANK_INVALID_ARGUMENT = 1, DS_RANK_TIMEOUT = 4, DS_RANK_ABORTED = 5 }; /* ds::status_code */

typedef struct ds_rank ds_rank;

/* The group this rank is in, as its config says. */
typedef struct {
    int32_t rank;
    int32_t tp;
    int32_t vocab_size;
    int32_t max_batch;          /* the most requests a step has */
    int32_t max_tokens_per_req; /* the most rows a request has (N) */
} ds_rank_info;

/* A step whose logits the rank waits for: rows b * N + j of request b, j = 0 .. N-1, follow its
 * context and, for j > 0, drafts 1..j. Only vocab ids [vocab_begin, vocab_begin + shard_vocab)
 * are this rank's. The caller gives the buffers; ds_rank_next_step fills the rest. */
typedef struct {
    /* the caller's: slots and positions hold max_batch elements, candidates (or NULL) max_batch *
     * max_tokens_per_req (ds_rank_info) */
    int32_t* slots;      /* [batch_size] */
    int64_t* positions;  /* [batch_size] */
    int32_t* candidates; /* [batch_size, tokens_per_req], verify only; NULL: not copied */
    /* filled */
    uint64_t id;
    int32_t kind; /* DS_STEP_* */
    int32_t batch_size;
    int32_t tokens_per_req;
    int32_t vocab_begin;
    int32_t shard_vocab;
} ds_rank_step;

/* The outputs the group agreed on for a step the rank took, over its batch_size requests. The
 * caller's buffers hold `rows_capacity` (predict, accept_index, logprobs) and
 * `requests_capacity` (accept_length, row_error) elements; any may be NULL (not copied). */
typedef struct {
    int32_t* predict;       /* [batch_size * tokens_per_req]; -1 after the emitted tokens */
    int32_t* accept_index;  /* [batch_size * tokens_per_req] */
    float* logprobs;        /* [batch_size * tokens_per_req] */
    int32_t* accept_length; /* [batch_size] */
    uint8_t* row_error;     /* [batch_size], DS_ROW_* */
    int64_t rows_capacity;
    int32_t requests_capacity;
    /* filled */
    int32_t batch_size;
    int32_t tokens_per_req;
} ds_rank_step_outputs;

DS_C_API int ds_rank_abi_version(void);
/* Joins the coordinator at `coordinator` (HOST:PORT) as rank `rank`, bounded by the config's
 * topology.join_timeout_ms, and serves in background threads. `config_json` is one JSON object
 * with the coordinator's config keys (docs/configuration.md; topology.logits_source must be
 * "worker"); DISTSAMPLE_* environment variables apply as for the coordinator. A worker that
 * does not hand in a step's logits within `logits_timeout_ms` (in [1, step_timeout_ms]) fails
 * the step. On success *out is a handle for ds_rank_leave. */
DS_C_API int ds_rank_join(const char* config_json, const char* coordinator, int32_t rank, int64_t logits_timeout_ms,
                          ds_rank** out);
DS_C_API int ds_rank_describe(const ds_rank* rank, ds_rank_info* out);
/* The next step, within `timeout_ms` (DS_RANK_TIMEOUT otherwise); DS_RANK_ABORTED with the
 * reason once the rank has left the group (its coordinator is gone or evicted it). */
DS_C_API int ds_rank_next_step(ds_rank* rank, int64_t timeout_ms, ds_rank_step* step);
/* Step `step_id`'s shard: `rows` = batch_size * tokens_per_req rows of `shard_vocab` logits, row r
 * at logits + r * row_stride elements; host memory, or CUDA device memory (on_device = 1) with the
 * CUDA backend. Complete when called, and valid until ds_rank_outputs for the step returns. The
 * calling thread runs this rank's part of the step (kernels, collectives, its answer) before the
 * call returns; DS_RANK_OK means the shard was taken, the step's outcome comes from ds_rank_outputs. */
DS_C_API int ds_rank_provide_logits(ds_rank* rank, uint64_t step_id, const void* logits, int32_t dtype,
                                    int32_t on_device, int64_t rows, int32_t shard_vocab, int64_t row_stride);
/* Step `step_id`'s outputs once the coordinator commits them, within `timeout_ms`; the step's
 * error when it failed. */
DS_C_API int ds_rank_outputs(ds_rank* rank, uint64_t step_id, int64_t timeout_ms, ds_rank_step_outputs* out);
/* Leaves the group and frees the handle (NULL: nothing). */
DS_C_API void ds_rank_leave(ds_rank* rank);
/* The message of the calling thread's last failed call ("" when none). */
DS_C_API const char* ds_rank_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* DISTSAMPLE_DISTSAMPLE_RANK_C_H */

/*
 * tandem user pipelines: stages connected by bounded queues.
 *
 * A pipeline is an ordered list of stages. A stage is either a C callback (pre- or
 * post-processing run on CPU worker threads of the stage's own) or a model stage (a
 * tdm_session, run on the session's devices). Items flow through the stages in order; each
 * item carries a user pointer, named tensors and a sequence number (0, 1, 2, ... in submit
 * order). Conventions are tandem.h's: statuses, NULL-safe frees, out-parameters untouched
 * on failure.
 *
 *  - Order: items leave the pipeline in submit order, even when a stage has several
 *    workers and finishes them out of order (a reorder buffer sits before the output).
 *  - Back-pressure: the queue in front of every stage holds at most `queue_capacity`
 *    items; a full queue blocks the stage before it, and finally tdm_pipeline_submit
 *    (up to its timeout). Finished items that nobody receives block the last stage.
 *  - Errors: a stage that returns a status fails only that item: the later stages skip
 *    it, and it is delivered in its place in the order with the status
 *    (tdm_pipeline_item_status) and the stage that failed it. The pipeline keeps going.
 *  - Output: either tdm_pipeline_receive (blocking, with a timeout) or, when
 *    options.on_output is set, a callback called for every item in order on one tandem
 *    thread.
 *  - Ending: tdm_pipeline_close stops input (then receive reports the end once everything
 *    was delivered); tdm_pipeline_drain closes and waits until everything was delivered;
 *    tdm_pipeline_cancel closes and fails every item that has not finished yet with a
 *    "cancelled" status (items inside a stage callback finish that callback first).
 *  - Threading: submit, receive, close, drain, cancel and the statistics may be called
 *    from any threads. Stages are added before tdm_pipeline_start. A callback runs on one
 *    item at a time per worker; with workers > 1 it must be thread-safe.
 *
 * Usage (decode on 4 CPU threads -> model -> top-k):
 *
 *     tdm_pipeline *p = NULL;
 *     tdm_pipeline_options po = {TDM_API_VERSION, 8, NULL, NULL};
 *     tdm_status *st = tdm_pipeline_create(env, &po, &p);
 *     if (!st) st = tdm_pipeline_add_callback_stage(p, "decode", 4, decode_fn, NULL);
 *     if (!st) st = tdm_pipeline_add_model_stage(p, "model", 1, session);
 *     if (!st) st = tdm_pipeline_add_callback_stage(p, "topk", 1, topk_fn, NULL);
 *     if (!st) st = tdm_pipeline_start(p);
 *     // producer thread: for each file
 *     //     tdm_pipeline_item *it; tdm_pipeline_item_create(p, path, &it);
 *     //     tdm_pipeline_submit(p, it, -1, NULL);   // the pipeline owns `it` now
 *     //   then tdm_pipeline_close(p);
 *     // consumer: while (!(st = tdm_pipeline_receive(p, -1, &it)) && it) {
 *     //     ... tdm_pipeline_item_status(it) ...; tdm_pipeline_item_free(it); }
 *     tdm_pipeline_free(p);
 */
#ifndef TANDEM_PIPELINE_H
#define TANDEM_PIPELINE_H

#include "tandem/tandem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tdm_pipeline tdm_pipeline;
typedef struct tdm_pipeline_item tdm_pipeline_item;

/* A stage callback: works on `item` (reads and replaces its tensors, its user pointer).
 * Returns NULL on success; a status fails the item (the pipeline takes the status). */
typedef tdm_status *(*tdm_stage_fn)(void *user, tdm_pipeline_item *item);

/* Output callback (options.on_output): called once per item, in sequence order, on one
 * tandem thread; the callee owns `item` (free it with tdm_pipeline_item_free). */
typedef void (*tdm_output_fn)(void *user, tdm_pipeline_item *item);

typedef struct tdm_pipeline_options {
    int api_version;         /* TDM_API_VERSION */
    int queue_capacity;      /* items each queue holds (in front of each stage, and finished
                                items waiting to be received); 0 = 4 */
    tdm_output_fn on_output; /* optional: deliver items through this callback instead of
                                tdm_pipeline_receive */
    void *on_output_user;
} tdm_pipeline_options;

/* Per-stage statistics (since tdm_pipeline_start). */
typedef struct tdm_stage_stats {
    const char *name;     /* owned by the pipeline */
    int workers;
    int64_t items;        /* items the stage worked on (successes and failures) */
    int64_t failed;       /* items this stage failed */
    double busy_ms;       /* time the workers spent in the stage's work, summed */
    double utilisation;   /* busy_ms / (elapsed ms x workers), 0..1 */
    double queue_wait_ms; /* mean time an item waited in the queue in front of the stage */
    double items_per_s;   /* items / elapsed seconds */
    int queued;           /* items in the stage's input queue now */
} tdm_stage_stats;

/* A new status for a stage callback to return (code other than TDM_OK; printf-style
 * message). Freed by whoever owns it, as any status. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
TDM_API tdm_status *tdm_status_create(tdm_code code, const char *fmt, ...);

/* ---- items ---- */

/* A new empty item with a user pointer (which the pipeline never frees). */
TDM_API tdm_status *tdm_pipeline_item_create(tdm_pipeline *pipeline, void *user,
                                             tdm_pipeline_item **out);
/* Frees the item and its tensors and status (not the user pointer). */
TDM_API void tdm_pipeline_item_free(tdm_pipeline_item *item);
/* Sequence number given by tdm_pipeline_submit (UINT64_MAX before submit). */
TDM_API uint64_t tdm_pipeline_item_sequence(const tdm_pipeline_item *item);
TDM_API void *tdm_pipeline_item_user(const tdm_pipeline_item *item);
TDM_API void tdm_pipeline_item_set_user(tdm_pipeline_item *item, void *user);
/* NULL when the item went through every stage; otherwise why it failed (owned by the
 * item). */
TDM_API const tdm_status *tdm_pipeline_item_status(const tdm_pipeline_item *item);
/* Index of the stage that failed the item, -1 if none. */
TDM_API int tdm_pipeline_item_failed_stage(const tdm_pipeline_item *item);
/* Attaches `tensor` under `name` (copied); the item owns the tensor from then on (also on
 * failure, when it is freed). A tensor already under that name is freed and replaced. */
TDM_API tdm_status *tdm_pipeline_item_set_tensor(tdm_pipeline_item *item, const char *name,
                                                 tdm_tensor *tensor);
/* The tensor under `name`, owned by the item; NULL if none. */
TDM_API tdm_tensor *tdm_pipeline_item_tensor(tdm_pipeline_item *item, const char *name);
/* Removes the tensor under `name` from the item and returns it (the caller owns it). */
TDM_API tdm_tensor *tdm_pipeline_item_take_tensor(tdm_pipeline_item *item, const char *name);
TDM_API size_t tdm_pipeline_item_tensor_count(const tdm_pipeline_item *item);
TDM_API const char *tdm_pipeline_item_tensor_name(const tdm_pipeline_item *item, size_t index);

/* ---- pipelines ---- */

/* `options` may be NULL for defaults. */
TDM_API tdm_status *tdm_pipeline_create(tdm_env *env, const tdm_pipeline_options *options,
                                        tdm_pipeline **out);
/* Adds a stage that calls fn(user, item) on `workers` threads of its own (1..64). */
TDM_API tdm_status *tdm_pipeline_add_callback_stage(tdm_pipeline *pipeline, const char *name,
                                                    int workers, tdm_stage_fn fn, void *user);
/* Adds a stage that runs `session` (borrowed: it must outlive the pipeline) with the item's
 * tensors named like the model's inputs (inputs with an initializer may be left out); it
 * removes those tensors from the item and attaches every model output under its name.
 * `workers` (1..64) runs that many requests on the session at once (useful when the session
 * has several devices in throughput mode). */
TDM_API tdm_status *tdm_pipeline_add_model_stage(tdm_pipeline *pipeline, const char *name,
                                                 int workers, tdm_session *session);
/* Starts the worker threads. */
TDM_API tdm_status *tdm_pipeline_start(tdm_pipeline *pipeline);
/* Queues `item` (giving it the next sequence number, returned in *sequence if not NULL).
 * Blocks while the first queue is full, at most timeout_ms (< 0: no limit); on timeout
 * returns TDM_ERR_LIMIT and the caller keeps the item. On success the pipeline owns it. */
TDM_API tdm_status *tdm_pipeline_submit(tdm_pipeline *pipeline, tdm_pipeline_item *item,
                                        int timeout_ms, uint64_t *sequence);
/* Takes the next item in sequence order, waiting at most timeout_ms (< 0: no limit;
 * TDM_ERR_LIMIT on timeout). After tdm_pipeline_close, once every item was received, sets
 * *out = NULL and returns NULL (the end). Not available with options.on_output. */
TDM_API tdm_status *tdm_pipeline_receive(tdm_pipeline *pipeline, int timeout_ms,
                                         tdm_pipeline_item **out);
/* No more submits; what was submitted still flows through. */
TDM_API void tdm_pipeline_close(tdm_pipeline *pipeline);
/* Closes, then waits at most timeout_ms (< 0: no limit) until every submitted item was
 * delivered (received, or passed to on_output); TDM_ERR_LIMIT on timeout. */
TDM_API tdm_status *tdm_pipeline_drain(tdm_pipeline *pipeline, int timeout_ms);
/* Closes and fails every item that has not finished with a "cancelled" status; they are
 * still delivered, in order. */
TDM_API void tdm_pipeline_cancel(tdm_pipeline *pipeline);
/* Cancels, waits for the workers, frees items not received, and frees the pipeline. Not from
 * a stage or output callback of the same pipeline (it waits for those threads). */
TDM_API void tdm_pipeline_free(tdm_pipeline *pipeline);

TDM_API size_t tdm_pipeline_stage_count(const tdm_pipeline *pipeline);
TDM_API tdm_status *tdm_pipeline_stage_stats(tdm_pipeline *pipeline, size_t index,
                                             tdm_stage_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_PIPELINE_H */

/*
 * Running one batch: the inputs of the batch's requests are concatenated along the first
 * dimension (or, for a model without batching, the one request's inputs are used as they
 * are) into one tandem run; each request gets its own part of the outputs as its answer.
 *
 * Deadlines: the run gets a timeout (tdm_session_run_ex) that ends at the latest deadline
 * among the requests (sv_request.t_deadline); none when one of them has no deadline. So the
 * run stops only when nobody in the batch can still use its answer; then the run ends with
 * TDM_ERR_CANCELLED, turned into 503 SV_TIMEOUT_MSG.
 *
 * Called by an instance thread of the scheduler (sched.c) without its lock; the requests
 * belong to the batch (nobody else touches them meanwhile).
 */
#ifndef TDM_SERVE_BATCH_H
#define TDM_SERVE_BATCH_H

#include "serve/request.h"

/* Triton answers a request whose timeout passed (in its queue) with UNAVAILABLE (503) and
 * this message; tandem answers the same when the deadline passes while the request runs. */
#define SV_TIMEOUT_MSG "Request timeout expired"

typedef struct sv_batch_ctx {
    tdm_env *env;
    tdm_session *session;
    const sv_model_config *cfg;
    const char *model_name, *version; /* for the answers */
} sv_batch_ctx;

/* Runs the batch b[0..n) of `items` batch elements and fills every request's answer
 * (sv_infer_respond). On error the answers are not filled: the caller answers each request
 * with the error. t[1..3] receive the times (sv_now_ns) when the inputs were ready, the run
 * ended and the answers were built (t[0], the start, is the caller's). *timed_out: the run
 * was stopped, or not started, because every request's deadline had passed (the error is
 * then 503 SV_TIMEOUT_MSG). */
sv_error *sv_batch_run(const sv_batch_ctx *x, sv_request **b, int n, int64_t items, uint64_t t[4],
                       bool *timed_out);

#endif

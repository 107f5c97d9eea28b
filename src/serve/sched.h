/*
 * The scheduler of one model version: a queue with priority levels and queue policies, the
 * dynamic batcher (Triton's semantics), and the instances (one tandem session and one thread
 * each) that run the batches.
 *
 *  - Without dynamic_batching, each request runs alone (it may carry its own batch).
 *  - With dynamic_batching, a batch is formed when an instance can take it: requests are
 *    taken in priority order (then arrival order) while their shapes agree (all but the
 *    first dimension) and the batch stays within max_batch_size. The batch goes at once when
 *    it reaches max_batch_size or the largest preferred_batch_size, when the next request
 *    cannot join it, or when the oldest request has waited max_queue_delay_microseconds;
 *    otherwise the batcher waits for more requests. When preferred sizes are given, the
 *    largest preferred size that a prefix of the candidates reaches exactly is sent.
 *  - A batch goes to the instance that is estimated to finish it first (its current work
 *    plus its measured time for that batch size), so fast and slow devices share the load.
 *    Instances on the same device share their measured times, so that of identical instances
 *    an idle one is always preferred to a busy one.
 *  - Inputs of the requests are concatenated along the first dimension into one run
 *    (batch.c); outputs are split back by each request's batch size.
 *  - preserve_ordering: answers are released in arrival order.
 *  - Queue policy per priority level: max_queue_size (503 "Exceeds maximum queue size"),
 *    default timeout and per-request override, REJECT (503) or DELAY on timeout.
 *  - Deadlines also hold while a batch runs: the batch runs with tdm_session_run_ex and a
 *    timeout that ends at the latest deadline among its requests (no timeout when one of
 *    them has none, e.g. a request delayed by the DELAY action), so a run is stopped only
 *    when every request in it has expired; they all get 503 "Request timeout expired"
 *    (Triton's answer to a timed-out request) and the instance takes the next batch.
 *  - Requests whose client has gone (sv_request.gone) are dropped before they are batched:
 *    the candidates of each batch are checked just before it is formed, and the batcher
 *    sweeps the whole queue every SV_SWEEP_MS while requests wait. A dropped request is
 *    answered 400 "Request was cancelled" (Triton's HTTP code for CANCELLED; nobody reads
 *    it), counted as a failure and in sv_sched_cancelled(). A request whose batch is already
 *    running stays in it; its answer is discarded by the HTTP layer.
 */
#ifndef TDM_SERVE_SCHED_H
#define TDM_SERVE_SCHED_H

#include "serve/request.h"
#include "serve/stats.h"

typedef struct sv_sched sv_sched;

typedef struct sv_instance_desc {
    tdm_session *session; /* owned by the scheduler from then on */
    const char *device;   /* "cpu", "cuda:0", ... */
} sv_instance_desc;

/* Starts the scheduler; takes ownership of the sessions (also on failure). cfg, stats and
 * the strings must outlive the scheduler. */
sv_error *sv_sched_create(tdm_env *env, const sv_model_config *cfg, const char *model_name,
                          const char *version, sv_stats *stats, const sv_instance_desc *inst,
                          int n_inst, sv_sched **out);
/* Queues a request. On error the request is not queued and notify is not called. */
sv_error *sv_sched_submit(sv_sched *s, sv_request *r);
/* Stops accepting requests and waits until every accepted one is answered. */
void sv_sched_drain(sv_sched *s);
/* Answers every request still waiting in the queue with 503 `why`. */
void sv_sched_cancel_queued(sv_sched *s, const char *why);
/* Drains, stops the threads and frees the sessions. NULL-safe. */
void sv_sched_free(sv_sched *s);

/* Requests queued plus requests running. */
uint64_t sv_sched_pending(sv_sched *s);

#define SV_SWEEP_MS 100 /* how often queued requests are checked for clients that went away */

/* Why requests ended without an answer from the model (tandem_request_cancelled_total). */
typedef enum sv_cancel_reason {
    SV_CANCEL_DISCONNECT,    /* the client went away while the request was queued */
    SV_CANCEL_QUEUE_TIMEOUT, /* the deadline passed in the queue (REJECT action) */
    SV_CANCEL_RUN_TIMEOUT,   /* the deadlines of every request of a running batch passed */
    SV_CANCEL_N
} sv_cancel_reason;
/* Requests cancelled so far, per reason (each is also counted as a failure in the stats). */
void sv_sched_cancelled(sv_sched *s, uint64_t out[SV_CANCEL_N]);
/* The label value of a reason in /metrics: "disconnect", "queue_timeout", "run_timeout". */
const char *sv_cancel_reason_name(sv_cancel_reason r);
#define SV_MON_DEVICES 8 /* devices of one instance's plan reported in /metrics */

/* Live figures of instance `i`'s session, one per device of its plan (tdm_session_monitor, in
 * the session's device order, at most `max`); util[k]: the device's busy fraction since the
 * previous call for this instance (the session's whole-window figure on the first call), in
 * [0, 1]. Returns the device count; 0 when i is out of range. */
int sv_sched_monitor(sv_sched *s, int i, int max, tdm_device_monitor *out, double *util);
/* Per instance: device name and busy time so far (ns). Returns the instance count. */
int sv_sched_instances(sv_sched *s, int max, const char **devices, uint64_t *busy_ns);

#endif

/* Internal layout of the public handles. */
#ifndef TDM_API_IMPL_H
#define TDM_API_IMPL_H

#include <pthread.h>

#include "backends/backend.h"
#include "core/log.h"
#include "core/threadpool.h"
#include "onnx/loader.h"
#include "sched/plan.h"
#include "tandem/tandem.h"

struct tdm_env {
    tdm_allocator alloc_storage;
    const tdm_allocator *alloc; /* NULL = libc */
    tdm_logger log;
    int threads;
    tdm_device *devices[TDM_MAX_DEVICES];
    int n_devices;
    char *unavailable[TDM_MAX_DEVICES]; /* "backend: reason" */
    int n_unavailable;
    pthread_mutex_t discover_mu;  /* lazy backends are discovered on first need */
    bool discovered[TDM_MAX_DEVICES];
    tdm_settings settings; /* resolved at creation (api/settings.c); read-only afterwards */
};

/* Discovers lazy backends whose name starts `prefix` (NULL: all) if not done yet. */
tdm_status *tdm_env_discover(tdm_env *env, const char *prefix);

typedef struct op_hist {
    char *op;
    size_t nodes;
} op_hist;

struct tdm_model {
    tdm_env *env;
    tdm_onnx_model *m;
    op_hist *ops;
    size_t n_ops;
    int64_t params, param_bytes; /* initializers and Constant nodes, subgraphs included */
    size_t nested_nodes, n_subgraphs; /* nodes inside subgraphs, and the subgraphs */
    bool graph_borrowed; /* a session's model: the graph belongs to the session's plan */
};

typedef struct async_job async_job;

/* Throughput mode: one plan per device. */
typedef struct tdm_replica {
    tdm_plan *plan;
    tdm_device *device;  /* the device the replica is for (its plan may fall back to the CPU) */
    double ms_per_item;  /* smoothed measured time per batch item; 0 = not measured yet */
    double share;        /* fraction of a split batch */
    int inflight;
    int64_t runs, items;
    double busy_ms;
    /* a device that failed is taken out until a probe run on it succeeds */
    bool down;
    bool probing;        /* a probe is running */
    int64_t probe_at_ns; /* when the next probe may run */
    int64_t backoff_ns;  /* the wait before the next probe (doubles, at most 64x probe_ms) */
} tdm_replica;

struct tdm_session {
    tdm_env *env;
    tdm_model *model;  /* the model as loaded (for descriptions) */
    tdm_plan *plan;    /* owns the optimised copy of the graph */
    tdm_threadpool *pool;
    tdm_loop_bounds loop; /* the options' Loop / Scan bounds, else the environment's */
    tdm_device *devices[TDM_MAX_DEVICES];
    int n_devices;
    /* asynchronous runs: one worker thread, a FIFO of jobs */
    pthread_mutex_t mu;
    pthread_cond_t cv, idle_cv;
    async_job *head, *tail;
    int pending;
    bool worker_started, stopping;
    pthread_t worker;
    async_job *running;    /* the job the worker runs now (mu), or NULL */
    tdm_run_id next_id;    /* the id the next asynchronous run gets (mu); starts at 1 */
    /* throughput mode (n_replicas > 1); replicas[0].plan == plan */
    int n_replicas;
    tdm_replica replicas[TDM_MAX_DEVICES];
    bool splittable;     /* every input and output has a dynamic leading (batch) dim */
    float alpha;
    bool no_rebalance;
    int probe_ms;        /* throughput mode: first back-off of a failed device (< 0: off) */
    struct tdm_pipe_mode *pipe; /* pipeline mode (src/api/pipeline_mode.c), or NULL */
    pthread_mutex_t stats_mu;
    int64_t runs, items; /* latency mode figures */
    double busy_ms;
};

/* Throughput-mode run (src/api/throughput.c). by_input: per graph input. */
tdm_status *tdm_throughput_run(tdm_session *s, const tdm_tensor **by_input, tdm_tensor **all_outputs,
                               const tdm_run_ctl *ctl);

/* Describes `m`; on success the model owns m (and its graph unless graph_borrowed); on
 * failure m is left to the caller. */
tdm_status *tdm_model_wrap(tdm_env *env, tdm_onnx_model *m, bool graph_borrowed, tdm_model **out);
tdm_device *tdm_env_find_device(const tdm_env *env, const char *name);
/* Asynchronous runs of the session waiting to start (session.c; the monitoring API uses it). */
int tdm_session_queued_runs(tdm_session *s);

#endif

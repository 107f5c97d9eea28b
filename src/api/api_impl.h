/* Internal layout of the public handles. */
#ifndef TDM_API_IMPL_H
#define TDM_API_IMPL_H

#include <pthread.h>

#include "backends/backend.h"
#include "core/log.h"
#include "core/threadpool.h"
#include "onnx/loader.h"
#include "sched/strategy.h"
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

struct tdm_session {
    tdm_env *env;
    tdm_model *model;        /* the model as loaded (for descriptions; its graph is the plan's) */
    tdm_strategy *strategy;  /* how the session runs (sched/strategy.h): latency, replicas, pipeline */
    struct tdm_monitor *monitor; /* device counters shared by the strategy's plans (owned) */
    tdm_threadpool *pool;
    bool map_weights;        /* options.residency "mapped": external data mapped (loader flag) */
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
};

/* Describes `m`; on success the model owns m (and its graph unless graph_borrowed); on
 * failure m is left to the caller. */
tdm_status *tdm_model_wrap(tdm_env *env, tdm_onnx_model *m, bool graph_borrowed, tdm_model **out);
tdm_device *tdm_env_find_device(const tdm_env *env, const char *name);
/* The stop request of a synchronous run with `options` (may be NULL); *has: it has a
 * deadline (otherwise the run needs none). session.c */
tdm_status *tdm_session_run_ctl(const tdm_run_options *options, tdm_run_ctl *ctl, bool *has);
/* The graph whose inputs and outputs a run names (the strategy's plan's). */
const tdm_graph *tdm_session_graph(const tdm_session *s);
/* Asynchronous runs of the session waiting to start (session.c; the monitoring API uses it). */
int tdm_session_queued_runs(tdm_session *s);
/* tdm_session_create with `edit` applied to the loaded graph before the session's passes
 * (internal: the generator's rewrites, src/llm/generator.c). `edit` must leave the graph
 * finalized (tdm_graph_finalize); an error from it fails the creation. session.c */
typedef tdm_status *(*tdm_graph_edit_fn)(tdm_graph *g, void *user);
tdm_status *tdm_session_create_edited(tdm_env *env, const char *path,
                                      const tdm_session_options *options, tdm_graph_edit_fn edit,
                                      void *user, tdm_session **out);

#endif

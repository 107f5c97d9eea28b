/* Run strategies: the ways a session runs its model. A strategy is a struct of function
 * pointers plus a context (like a backend's tdm_device_iface): the latency plan (one plan over
 * the devices), replicas (a plan per device, a batch split between them or whole requests to
 * the one predicted to finish first; sched/replicas.c) and a pipeline of stages
 * (sched/pipeline_mode.c). The session (src/api/session.c) keeps the environment, the model,
 * one strategy and its queue of asynchronous runs, and calls the strategy only through the
 * wrappers below; a new way to run (a generator, streamed weights) is a new strategy.
 *
 *     tdm_strategy *st;
 *     TDM_TRY(tdm_strategy_create(&setup, graph, &st));     // takes the loaded graph
 *     const tdm_graph *g = tdm_plan_graph(tdm_strategy_plan(st));  // names of inputs, outputs
 *     TDM_TRY(tdm_strategy_run(st, by_input, all_outputs, NULL));
 *     tdm_strategy_free(st);
 *
 * Threading: run may be called from several threads at once (each strategy locks what it
 * shares); stats and set_monitor too. free only when no run is in flight. */
#ifndef TDM_SCHED_STRATEGY_H
#define TDM_SCHED_STRATEGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/kernel.h"
#include "core/log.h"
#include "core/threadpool.h"
#include "graph/graph.h"
#include "sched/plan.h"
#include "tandem/tandem.h"

#define TDM_STRATEGY_API_VERSION 1

struct tdm_monitor;

/* What a strategy is made with: everything borrowed from the session, which outlives it. */
typedef struct tdm_strategy_setup {
    const tdm_allocator *alloc;
    const tdm_logger *log;
    tdm_env *env;                 /* a pipeline runs its stages over a tdm_pipeline of env */
    tdm_threadpool *pool;
    tdm_device **devices;         /* the session's devices, in preference order */
    int n_devices;
    const tdm_session_options *o; /* mode, placement, fallback, split and pipeline settings */
    uint64_t model_hash;          /* of the model bytes: keys stored measurements (0 = none) */
    const tdm_settings *settings; /* the environment's (cache folder, copies, spin) */
    tdm_loop_bounds loop;         /* the session's Loop / Scan bounds */
} tdm_strategy_setup;

typedef struct tdm_strategy_iface {
    int api_version;   /* TDM_STRATEGY_API_VERSION */
    const char *name;  /* "latency", "replicas", "pipeline" */
    /* A run: by_input per graph input of the strategy's plan (NULL = its initializer);
     * all_outputs[j] receives graph output j. ctl (may be NULL) stops it early. */
    tdm_status *(*run)(void *ctx, const tdm_tensor *const *by_input, tdm_tensor **all_outputs,
                       const tdm_run_ctl *ctl);
    /* Statistics entries (one per device or stage) and entry `index` (< stats_count). */
    size_t (*stats_count)(void *ctx);
    void (*stats)(void *ctx, size_t index, tdm_device_stats *out);
    /* Makes every plan of the strategy count into mon (sched/monitor.h; owned by the caller). */
    void (*set_monitor)(void *ctx, struct tdm_monitor *mon);
    void (*free)(void *ctx);
    /* Optional (NULL: I/O binding is refused with TDM_ERR_UNSUPPORTED): a run whose graph
     * outputs j with bound[j] set are written into those tensors (tdm_plan_run_bound). */
    tdm_status *(*run_bound)(void *ctx, const tdm_tensor *const *by_input,
                             tdm_tensor *const *bound, tdm_tensor *bound_hdr,
                             tdm_tensor **all_outputs, const tdm_run_ctl *ctl);
} tdm_strategy_iface;

typedef struct tdm_strategy {
    const tdm_strategy_iface *iface;
    void *ctx;
    const tdm_allocator *alloc;
    /* The plan that describes the model (owned by ctx): binds input and output names, explains,
     * traces and keeps measurements. Its graph is the optimised copy of the model. */
    tdm_plan *plan;
} tdm_strategy;

/* Chooses and makes the session's strategy from the loaded, unoptimised graph g (taken, also
 * on failure): latency for TDM_MODE_LATENCY or one device, a pipeline for TDM_MODE_PIPELINE,
 * and for TDM_MODE_THROUGHPUT replicas unless the cost model predicts a pipeline faster
 * (logged). Stages and replicas are copies of g (graph/clone.h), never a second parse. */
tdm_status *tdm_strategy_create(const tdm_strategy_setup *su, tdm_graph *g, tdm_strategy **out);

tdm_status *tdm_strategy_run(tdm_strategy *st, const tdm_tensor *const *by_input,
                             tdm_tensor **all_outputs, const tdm_run_ctl *ctl);
/* A run with I/O binding (tdm_strategy_iface.run_bound); TDM_ERR_UNSUPPORTED for strategies
 * without it (replicas, pipeline). */
tdm_status *tdm_strategy_run_bound(tdm_strategy *st, const tdm_tensor *const *by_input,
                                   tdm_tensor *const *bound, tdm_tensor *bound_hdr,
                                   tdm_tensor **all_outputs, const tdm_run_ctl *ctl);
size_t tdm_strategy_stats_count(const tdm_strategy *st);
tdm_status *tdm_strategy_stats(tdm_strategy *st, size_t index, tdm_device_stats *out);
void tdm_strategy_set_monitor(tdm_strategy *st, struct tdm_monitor *mon);
tdm_plan *tdm_strategy_plan(const tdm_strategy *st);
const char *tdm_strategy_name(const tdm_strategy *st);
void tdm_strategy_free(tdm_strategy *st);

/* ---- for the strategies ---- */

/* Wraps ctx into a new strategy (ctx freed through iface on failure). */
tdm_status *tdm_strategy_wrap(const tdm_allocator *a, const tdm_strategy_iface *iface, void *ctx,
                              tdm_plan *plan, tdm_strategy **out);

/* Plans g (taken) to run on `dev`, with the session's CPU behind it for what dev cannot run
 * unless no_fallback: the plan of a replica or a pipeline stage. affinity (may be NULL),
 * profile and model_hash as in tdm_plan_options. */
tdm_status *tdm_strategy_plan_on(const tdm_strategy_setup *su, tdm_graph *g, tdm_device *dev,
                                 const char *affinity, bool profile, uint64_t model_hash,
                                 tdm_plan **out);

/* Plans g (taken) over every device of the session with its placement, affinity, profile
 * setting and model hash: the latency plan, and the plan that describes a pipeline. */
tdm_status *tdm_strategy_plan_all(const tdm_strategy_setup *su, tdm_graph *g, tdm_plan **out);

/* The session's memory budgets and residency options (device_memory, residency) for a plan
 * over devs (budgets of the session's other devices are left out); *any false without
 * budgets. Bad text is TDM_ERR_INVALID_ARGUMENT. */
struct tdm_budget_options;
tdm_status *tdm_strategy_budget(const tdm_strategy_setup *su, tdm_device *const *devs, int n,
                                struct tdm_budget_options *out, bool *any);
/* Whether the session's residency option asks for mapped weights (checked text). */
tdm_status *tdm_residency_mapped(const char *residency, bool *mapped);

/* The implementations: each takes g (also on failure). */
tdm_status *tdm_latency_create(const tdm_strategy_setup *su, tdm_graph *g, tdm_strategy **out);
tdm_status *tdm_replicas_create(const tdm_strategy_setup *su, tdm_graph *g, tdm_strategy **out);
/* g has its shapes inferred (the cut reads them). */
tdm_status *tdm_pipeline_strategy_create(const tdm_strategy_setup *su, tdm_graph *g,
                                         tdm_strategy **out);

#endif

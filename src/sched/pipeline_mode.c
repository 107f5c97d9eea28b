/* Pipeline mode (TDM_MODE_PIPELINE): the model is cut into consecutive stages, each on one
 * device of the session's list (in list order), and micro-batches flow through them over a
 * tandem user pipeline (bounded queues, one worker per stage, output in order).
 *
 * How a stage is made: the graph the loader made (shapes inferred, before graph passes) is
 * copied with only the constants the stage reads (graph/clone.h, never a second parse), and
 * every node outside the stage's range (positions in the model's topological order) is removed; the values
 * the stage reads from earlier stages become its graph inputs and the values later stages
 * (or the caller) need become its outputs. That graph is planned like any session's (passes,
 * placement on the stage's device with the CPU behind it for what the device cannot run),
 * so a stage is a sub-plan with its own memory plan and weights on its device. A value that
 * skips a stage rides along on the item.
 *
 * The cut: user cut points (options.pipeline_cuts: node names or #positions where a stage
 * starts), or the auto cut, which bisects on the slowest stage time T: stages are filled in
 * order while their predicted time (the cost model's per-node time on the stage's device)
 * stays within T; the smallest feasible T gives max(T_stage) close to T_total / N.
 *
 * Rebalancing (auto cut only; off with options.no_rebalance; user cut points are never
 * moved, the session only logs a measured imbalance for them): the stages and their
 * pipeline form a generation. At the end of every window of successful runs on the current
 * generation (after WARMUP runs that are not measured; windows below), the run that
 * completes the window hands its measurements (busy time per row of every stage, rows per
 * ms while runs were in flight, whether every run was one micro-batch) to the rebalancer
 * (pipeline_mode_rebalance.c),
 * which corrects the cost model and may ask for another cut or for one stage on one device.
 * That run then builds the new generation (on its own thread, after its own outputs are
 * made) and installs it: runs that start later use it, runs in flight finish on the old
 * one, which is freed by whichever of them ends last. Every decision is logged (INFO) and
 * the last one can be queried (tdm_pipe_mode_last_decision). A failed build keeps the old
 * generation (logged).
 *
 * Early decisions: a generation's first window ends after EARLY measured runs already when
 * a stage measured more than STRONG times (or less than 1 / STRONG of) its predicted time
 * per row, or the stages' measured / predicted ratios are more than STRONG apart (the cut
 * is unbalanced even where each is near its prediction): the cost model is clearly wrong,
 * and more runs on that configuration only cost time. Otherwise a generation's first window
 * (the one that decides on it) is FIRST_WINDOW runs; later ones (which look for a drift)
 * are WINDOW runs.
 *
 * Micro-batch size (options.micro_batch 0 and no no_rebalance; also with user cut points):
 * every micro-batch a stage runs is a (rows, ms) sample; at the end of a window the samples
 * of the generation are fitted to a fixed cost per micro-batch and a cost per row per stage
 * (pipeline_mode_mbatch.c), which then choose the micro-batch size of every run: the size
 * that minimises the predicted run time, when 5% better than the default (batch / stages).
 * When the samples saw one size only, the next window alternates runs between the default
 * and one micro-batch per run (a probe) to see two. A change of the size for the last
 * run's batch is logged (INFO) and queryable (tdm_pipe_mode_micro_batch); the window that
 * led to it makes no decision on the cut (per-row times change with the size): the next
 * one counts as the generation's first. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "graph/clone.h"
#include "sched/batch.h"
#include "sched/pipeline_mode.h"
#include "sched/pipeline_mode_cut.h"
#include "sched/pipeline_mode_mbatch.h"
#include "sched/pipeline_mode_rebalance.h"
#include "tandem/pipeline.h" /* stages run over a user pipeline (src/api/pipeline.c) */

#define WINDOW 8 /* runs per measurement window */
#define WARMUP 2 /* first runs of a generation, not measured (first-run allocations) */
#define EARLY 2        /* measured runs before an early first decision */
#define STRONG 2.0     /* measured / predicted per stage that allows it */
#define FIRST_WINDOW 4 /* runs of a generation's first window */

typedef struct pm_gen pm_gen;

typedef struct pm_stage {
    pm_gen *gen;
    tdm_plan *plan;
    tdm_device *device;
    int dev;            /* index of device in the session's list */
    int begin, end;     /* node positions in the unoptimised graph */
    double predicted_ms;
    char **drop;        /* item tensors no later stage and no caller needs after this one */
    size_t n_drop;
    int64_t runs, items; /* pm->mu */
    double busy_ms;
    int64_t win_items;   /* the current window (pm->mu) */
    double win_busy_ms;
    tdm_pm_mb_acc acc;   /* (rows, ms) of every micro-batch on this generation (pm->mu) */
} pm_stage;

/* A set of stages over one pipeline; fields marked (mu) under pm->mu. */
struct pm_gen {
    tdm_pipe_mode *pm;
    tdm_pm_config cfg;
    int n_stages;
    pm_stage stages[TDM_MAX_DEVICES];
    tdm_pipeline *pipe;
    int refs;            /* runs using it (mu) */
    bool retired;        /* no longer current: freed when refs drops to 0 (mu) */
    int64_t active_since; /* runs in flight since (refs > 0) (mu) */
    double active_ms;    /* time with runs in flight, this window (mu) */
    int64_t win_runs, win_rows; /* (mu) */
    int windows;         /* windows measured (mu) */
    int warm_runs;       /* runs before measuring (mu) */
    double ref_ms_per_row[TDM_MAX_DEVICES]; /* per stage, from the first window */
    int64_t win_parts;   /* micro-batches of the window's runs (mu) */
    tdm_pm_mb_model mbm; /* the fitted stage costs: micro-batch sizes (mu) */
    bool probe;          /* alternate runs between the default size and one part (mu) */
    int64_t probe_runs;  /* (mu) */
    int64_t last_rows;   /* the last run's rows (mu) */
};

struct tdm_pipe_mode {
    tdm_strategy_setup su; /* the session's (su.o: &o) */
    tdm_session_options o; /* the settings used after creation (strings cleared) */
    const tdm_allocator *a;
    tdm_plan *plan;  /* over every device: describes the model (names, explain, trace) */
    bool splittable; /* a run's batch may be cut into micro-batches */
    tdm_graph *ir;   /* the loaded graph, shapes inferred: stages are cut from it (kept for
                        new stages while rebalancing, else freed after the first) */
    int micro_batch; /* 0 = batch / stages */
    struct tdm_monitor *monitor;
    pthread_mutex_t mu;
    pm_gen *cur;     /* (mu) */
    bool imbalance_said; /* the measured imbalance was logged (user cuts, no_rebalance) */
    /* per session device: what its stages did, over all generations (mu) */
    int64_t dev_runs[TDM_MAX_DEVICES], dev_items[TDM_MAX_DEVICES];
    double dev_busy_ms[TDM_MAX_DEVICES];
    /* rebalancing (rb == NULL: off); rb is used by the one thread that set replanning */
    tdm_pm_rebal *rb;
    const char *names[TDM_MAX_DEVICES];
    bool replanning; /* (mu) */
    int64_t replans; /* generations installed after the first (mu) */
    int64_t decisions; /* (mu) */
    char last[1024];   /* the last decision (mu) */
    bool adapt_mb;     /* micro-batch sizes follow measurements */
    int64_t mb_changes; /* (mu) */
    char mb_last[1024]; /* the last change (mu) */
};

/* One run's state, shared by its micro-batches. */
typedef struct pm_request {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int remaining;
    tdm_pipeline_item **done; /* per micro-batch, in order */
    const tdm_run_ctl *ctl;   /* the run's stop request (cancel, deadline), or NULL */
} pm_request;

typedef struct pm_part {
    pm_request *req;
    int index;
} pm_part;

/* ---- running ---- */

static size_t find_name(tdm_pipeline_item *it, const char *name) {
    for (size_t i = 0; i < tdm_pipeline_item_tensor_count(it); i++)
        if (!strcmp(tdm_pipeline_item_tensor_name(it, i), name)) return i;
    return SIZE_MAX;
}

static tdm_status *stage_fn(void *user, tdm_pipeline_item *it) {
    pm_stage *ps = user;
    tdm_pipe_mode *pm = ps->gen->pm;
    const tdm_graph *g = ps->plan->graph;
    const tdm_allocator *a = pm->a;
    const tdm_tensor **ins = tdm_calloc(a, g->n_inputs + 1, sizeof *ins);
    tdm_tensor **outs = tdm_calloc(a, g->n_outputs + 1, sizeof *outs);
    tdm_status *st = NULL;
    if (!ins || !outs) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in a pipeline stage");
    int64_t rows = 1;
    for (size_t i = 0; i < g->n_inputs && !st; i++) {
        const char *name = g->values[g->inputs[i]].name;
        ins[i] = find_name(it, name) == SIZE_MAX ? NULL : tdm_pipeline_item_tensor(it, name);
        if (i == 0 && ins[i] && ins[i]->rank > 0) rows = ins[i]->dims[0];
    }
    const pm_part *part = tdm_pipeline_item_user(it); /* a cancelled run stops at each stage */
    int64_t t0 = tdm_now_ns();
    if (!st) st = tdm_plan_run_ctl(ps->plan, ins, outs, part ? part->req->ctl : NULL);
    double ms = (double)(tdm_now_ns() - t0) / 1e6;
    for (size_t o = 0; o < g->n_outputs; o++) {
        if (!st && outs[o]) st = tdm_pipeline_item_set_tensor(it, g->values[g->outputs[o]].name, outs[o]);
        else tdm_tensor_destroy(outs[o]);
        outs[o] = NULL;
    }
    if (!st)
        for (size_t d = 0; d < ps->n_drop; d++) tdm_tensor_destroy(tdm_pipeline_item_take_tensor(it, ps->drop[d]));
    pthread_mutex_lock(&pm->mu);
    ps->runs++;
    ps->busy_ms += ms;
    pm->dev_runs[ps->dev]++;
    pm->dev_busy_ms[ps->dev] += ms;
    if (!st) {
        ps->items += rows;
        ps->win_items += rows;
        ps->win_busy_ms += ms;
        tdm_pm_mb_add(&ps->acc, rows, ms);
        pm->dev_items[ps->dev] += rows;
    }
    pthread_mutex_unlock(&pm->mu);
    tdm_free(a, ins);
    tdm_free(a, outs);
    return st ? tdm_status_wrap(st, "%s: ", ps->device->name) : NULL;
}

static void on_output(void *user, tdm_pipeline_item *it) {
    (void)user;
    pm_part *part = tdm_pipeline_item_user(it);
    pm_request *r = part->req;
    pthread_mutex_lock(&r->mu);
    r->done[part->index] = it;
    if (--r->remaining == 0) pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* ---- generations ---- */

static void gen_free(pm_gen *gen) {
    if (!gen) return;
    tdm_pipe_mode *pm = gen->pm;
    if (gen->pipe) tdm_pipeline_drain(gen->pipe, -1);
    tdm_pipeline_free(gen->pipe);
    for (int k = 0; k < TDM_MAX_DEVICES; k++) {
        pm_stage *ps = &gen->stages[k];
        tdm_plan_free(ps->plan);
        for (size_t d = 0; d < ps->n_drop; d++) tdm_free(pm->a, ps->drop[d]);
        tdm_free(pm->a, ps->drop);
    }
    tdm_free(pm->a, gen);
}

/* Plans the stages of cfg from pm->ir and starts their pipeline. n: nodes. */
static tdm_status *gen_build(tdm_pipe_mode *pm, const tdm_pm_config *cfg, size_t n, const double *predicted,
                             pm_gen **out) {
    const tdm_allocator *a = pm->a;
    pm_gen *gen = tdm_calloc(a, 1, sizeof *gen);
    if (!gen) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a pipeline");
    gen->pm = pm;
    gen->cfg = *cfg;
    tdm_status *st = NULL;
    for (int k = 0; k < cfg->n_stages && !st; k++) {
        pm_stage *ps = &gen->stages[k];
        ps->gen = gen;
        ps->dev = cfg->device[k];
        ps->device = pm->su.devices[ps->dev];
        ps->begin = cfg->start[k];
        ps->end = k + 1 < cfg->n_stages ? cfg->start[k + 1] : (int)n;
        ps->predicted_ms = predicted ? predicted[k] : 0;
        tdm_graph *sg = NULL;
        st = tdm_pm_stage_graph(pm->ir, ps->begin, ps->end, &ps->drop, &ps->n_drop, a, &sg);
        if (st) break;
        /* the stage's device, the CPU behind it for what it cannot run */
        st = tdm_strategy_plan_on(&pm->su, sg, ps->device, NULL, false, 0, &ps->plan); /* takes sg */
        if (st) st = tdm_status_wrap(st, "pipeline stage %d (nodes #%d-#%d on %s): ", k, ps->begin,
                                     ps->end - 1, ps->device->name);
        else gen->n_stages++;
        if (!st) ps->plan->monitor = pm->monitor;
    }
    /* the stages over a pipeline: one worker each (a device runs one micro-batch at a time),
     * two slots per queue: the next micro-batch waits staged while the current one runs */
    tdm_pipeline_options po = {TDM_API_VERSION, 2, on_output, pm};
    if (!st) st = tdm_pipeline_create(pm->su.env, &po, &gen->pipe);
    for (int k = 0; k < gen->n_stages && !st; k++)
        st = tdm_pipeline_add_callback_stage(gen->pipe, gen->stages[k].device->name, 1, stage_fn, &gen->stages[k]);
    if (!st) st = tdm_pipeline_start(gen->pipe);
    if (st) {
        gen_free(gen);
        return st;
    }
    gen->mbm.n_stages = gen->n_stages;
    *out = gen;
    return NULL;
}

static void log_stages(tdm_pipe_mode *pm, const pm_gen *gen) {
    for (int k = 0; k < gen->n_stages; k++) {
        const pm_stage *ps = &gen->stages[k];
        tdm_log(pm->su.log, TDM_LOG_INFO, "pipeline stage %d: nodes #%d-#%d on %s (%.3f ms predicted)", k,
                ps->begin, ps->end - 1, ps->device->name, ps->predicted_ms);
    }
}

/* ---- creation ---- */

static void pm_free(void *ctx) {
    tdm_pipe_mode *pm = ctx;
    if (!pm) return;
    gen_free(pm->cur); /* no run is in flight: older generations are gone */
    tdm_pm_rebal_free(pm->rb);
    tdm_graph_free(pm->ir);
    tdm_plan_free(pm->plan);
    pthread_mutex_destroy(&pm->mu);
    tdm_free(pm->a, pm);
}

/* The first stages: user cut points, else the auto cut from the cost model (which the
 * rebalancer keeps, unless no_rebalance). stage_ms: the predicted time of each stage. */
static tdm_status *first_cut(tdm_pipe_mode *pm, const tdm_session_options *o, tdm_pm_config *cfg,
                             double *stage_ms) {
    const tdm_graph *g = pm->ir;
    const tdm_allocator *a = pm->a;
    int K = pm->su.n_devices;
    size_t n = g->n_nodes;
    if (n == 0) return TDM_ERR(TDM_ERR_INVALID_MODEL, "the model has no nodes to cut into stages");
    if (o->pipeline_cuts && o->pipeline_cuts[0]) {
        TDM_TRY(tdm_pm_user_cut(g, o->pipeline_cuts, K, cfg->start, &cfg->n_stages));
        tdm_log(pm->su.log, TDM_LOG_INFO, "pipeline: %d stages at the user's cut points", cfg->n_stages);
        return NULL;
    }
    double *costs = tdm_calloc(a, n * (size_t)K, sizeof *costs);
    tdm_status *st = costs ? NULL : TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory cutting the model");
    if (!st) st = tdm_pm_node_costs(&pm->su, g, K, costs);
    if (!st) {
        cfg->n_stages = tdm_pm_auto_cut(costs, n, K, cfg->start, stage_ms);
        double total = 0, slowest = 0;
        for (size_t i = 0; i < n; i++) total += costs[i];
        for (int k = 0; k < cfg->n_stages; k++) slowest = stage_ms[k] > slowest ? stage_ms[k] : slowest;
        tdm_log(pm->su.log, TDM_LOG_INFO,
                "pipeline: auto cut into %d stages; slowest stage %.3f ms predicted (all on %s: %.3f ms)",
                cfg->n_stages, slowest, pm->su.devices[0]->name, total);
    }
    /* rebalancing keeps the cost model (and pm->ir, for new stages) */
    if (!st && !o->no_rebalance) st = tdm_pm_rebal_create(a, K, n, costs, pm->names, &pm->rb);
    tdm_free(a, costs);
    return st;
}

static const tdm_strategy_iface pipeline_iface;

tdm_status *tdm_pipeline_strategy_create(const tdm_strategy_setup *su, tdm_graph *g, tdm_strategy **out) {
    const tdm_session_options *o = su->o;
    const tdm_allocator *a = su->alloc;
    tdm_pipe_mode *pm = tdm_calloc(a, 1, sizeof *pm);
    if (!pm) {
        tdm_graph_free(g);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a pipeline");
    }
    pm->su = *su;
    pm->o = *o;
    pm->o.devices = pm->o.placement = pm->o.affinity = pm->o.precision = pm->o.pipeline_cuts = NULL;
    pm->su.o = &pm->o;
    pm->a = a;
    pm->ir = g;
    pm->micro_batch = o->micro_batch > 0 ? o->micro_batch : 0;
    pm->adapt_mb = !pm->micro_batch && !o->no_rebalance;
    pthread_mutex_init(&pm->mu, NULL);
    for (int d = 0; d < su->n_devices; d++) pm->names[d] = su->devices[d]->name;
    tdm_pm_config cfg = {0};
    double stage_ms[TDM_MAX_DEVICES] = {0};
    tdm_status *st = first_cut(pm, o, &cfg, stage_ms);
    for (int k = 0; k < cfg.n_stages; k++) cfg.device[k] = k;
    if (!st) st = gen_build(pm, &cfg, g->n_nodes, stage_ms, &pm->cur);
    /* a plan over all devices describes the model (for names, explain and traces): it takes
     * the loaded graph itself unless the rebalancer cuts new stages from it */
    tdm_graph *whole = NULL;
    if (!st && pm->rb) st = tdm_graph_clone(g, NULL, &whole);
    if (!st && !pm->rb) {
        whole = pm->ir;
        pm->ir = NULL;
    }
    if (!st) st = tdm_strategy_plan_all(su, whole, &pm->plan);
    if (!st) pm->splittable = tdm_batch_splittable(pm->plan->graph);
    if (st) {
        pm_free(pm);
        return st;
    }
    log_stages(pm, pm->cur);
    return tdm_strategy_wrap(a, &pipeline_iface, pm, pm->plan, out);
}

tdm_pipe_mode *tdm_pipe_mode_of(const tdm_strategy *st) {
    return st && st->iface == &pipeline_iface ? st->ctx : NULL;
}

/* Statistics entries: one per device of the session (index = its place in the device list;
 * the stages a device ran, summed over every cut it had). */
static size_t pm_stats_count(void *ctx) { return (size_t)((tdm_pipe_mode *)ctx)->su.n_devices; }

static void pm_stats(void *ctx, size_t index, tdm_device_stats *out) {
    tdm_pipe_mode *pm = ctx;
    pthread_mutex_lock(&pm->mu);
    int d = (int)index;
    *out = (tdm_device_stats){pm->su.devices[d]->name, pm->dev_runs[d], pm->dev_items[d], pm->dev_busy_ms[d], 1.0,
                              pm->dev_items[d] ? pm->dev_busy_ms[d] / (double)pm->dev_items[d] : 0};
    pthread_mutex_unlock(&pm->mu);
}

int tdm_pipe_mode_layout(tdm_pipe_mode *pm, int *device, int *begin, int *end) {
    pthread_mutex_lock(&pm->mu);
    const pm_gen *gen = pm->cur;
    int n = gen->n_stages;
    for (int k = 0; k < n; k++) {
        if (device) device[k] = gen->stages[k].dev;
        if (begin) begin[k] = gen->stages[k].begin;
        if (end) end[k] = gen->stages[k].end;
    }
    pthread_mutex_unlock(&pm->mu);
    return n;
}

int64_t tdm_pipe_mode_last_decision(tdm_pipe_mode *pm, int64_t *replans, char *buf, size_t size) {
    pthread_mutex_lock(&pm->mu);
    int64_t d = pm->decisions;
    if (replans) *replans = pm->replans;
    if (buf && size) snprintf(buf, size, "%s", pm->last);
    pthread_mutex_unlock(&pm->mu);
    return d;
}

/* The micro-batch size of an n-row run on gen, the probe aside (mu). */
static int64_t micro_batch_of(const tdm_pipe_mode *pm, const pm_gen *gen, int64_t n) {
    return n < 1 ? 1 : pm->micro_batch > 0 ? pm->micro_batch : tdm_pm_mb_choose(&gen->mbm, n);
}

int64_t tdm_pipe_mode_micro_batch(tdm_pipe_mode *pm, int64_t rows, int64_t *changes, char *buf, size_t size) {
    pthread_mutex_lock(&pm->mu);
    int64_t mb = micro_batch_of(pm, pm->cur, rows);
    if (changes) *changes = pm->mb_changes;
    if (buf && size) snprintf(buf, size, "%s", pm->mb_last);
    pthread_mutex_unlock(&pm->mu);
    return mb;
}

/* ---- a run: micro-batches in, outputs joined ---- */

/* Joins the parts' tensors `name` along the leading dim into a new tensor. */
static tdm_status *join_rows(const tdm_allocator *a, tdm_pipeline_item **parts, int np, const char *name,
                             tdm_tensor **out) {
    const tdm_tensor *stack[16], **ts = np <= 16 ? stack : tdm_calloc(a, (size_t)np, sizeof *ts);
    if (!ts) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory joining outputs");
    for (int q = 0; q < np; q++) ts[q] = tdm_pipeline_item_tensor(parts[q], name);
    tdm_status *st = tdm_batch_join(a, ts, np, NULL, name, out);
    if (ts != stack) tdm_free(a, ts);
    return st;
}

/* After some runs, says once (log) when the measured stage times are far apart: the cut
 * came from the cost model (or the user), and the slowest stage sets the pipeline's pace.
 * Only without rebalancing (user cut points, no_rebalance), which would move the cut. */
static void check_balance(tdm_pipe_mode *pm, const pm_gen *gen) {
    char msg[600];
    msg[0] = 0;
    pthread_mutex_lock(&pm->mu);
    double lo = INFINITY, hi = 0;
    int slow = 0;
    bool enough = !pm->imbalance_said;
    for (int k = 0; k < gen->n_stages && enough; k++) {
        const pm_stage *ps = &gen->stages[k];
        enough = ps->runs >= 16 && ps->items > 0;
        double per = enough ? ps->busy_ms / (double)ps->items : 0;
        if (per < lo) lo = per;
        if (per > hi) {
            hi = per;
            slow = k;
        }
    }
    if (enough && lo > 0 && hi > 2 * lo) {
        pm->imbalance_said = true;
        snprintf(msg, sizeof msg,
                 "pipeline: measured stage times are unbalanced: stage %d on %s takes %.3f ms per row, "
                 "%.1fx the fastest stage; the pipeline runs at its pace (%s)",
                 slow, gen->stages[slow].device->name, hi, hi / lo,
                 pm->o.no_rebalance ? "no_rebalance is set, so the cut stays"
                                     : "user cut points are not moved; set other pipeline_cuts to move work "
                                       "off it, or use the auto cut or throughput mode");
    }
    pthread_mutex_unlock(&pm->mu);
    if (msg[0]) tdm_log(pm->su.log, TDM_LOG_INFO, "%s", msg);
}

/* Takes the current generation for a run (mu). */
static pm_gen *gen_enter(tdm_pipe_mode *pm) {
    pthread_mutex_lock(&pm->mu);
    pm_gen *gen = pm->cur;
    if (gen->refs++ == 0) gen->active_since = tdm_now_ns();
    pthread_mutex_unlock(&pm->mu);
    return gen;
}

/* Starts a new measurement window on gen (mu). */
static void window_reset(pm_gen *gen, int64_t now) {
    for (int k = 0; k < gen->n_stages; k++) {
        gen->stages[k].win_items = 0;
        gen->stages[k].win_busy_ms = 0;
    }
    gen->win_runs = gen->win_rows = gen->win_parts = 0;
    gen->active_ms = 0;
    if (gen->refs) gen->active_since = now;
}

/* True when the window of gen (mu) may end after its runs so far: WINDOW runs, FIRST_WINDOW
 * for a generation's first, EARLY for a first one whose stage times are STRONG off their
 * prediction (see the file comment). */
static bool window_full(const pm_gen *gen) {
    if (gen->win_runs >= WINDOW) return true;
    if (gen->windows > 0) return false;
    if (gen->win_runs >= FIRST_WINDOW) return true;
    if (gen->win_runs < EARLY) return false;
    double lo = INFINITY, hi = 0; /* measured / predicted, over the stages */
    for (int k = 0; k < gen->n_stages; k++) {
        const pm_stage *ps = &gen->stages[k];
        double per = ps->win_items > 0 ? ps->win_busy_ms / (double)ps->win_items : 0;
        if (!(ps->predicted_ms > 0) || !(per > 0)) return false;
        double r = per / ps->predicted_ms;
        lo = r < lo ? r : lo;
        hi = r > hi ? r : hi;
    }
    return hi > STRONG || lo * STRONG < 1 || hi > STRONG * lo;
}

/* Ends a run on gen (parts: its micro-batches): counts it into the window; when the window
 * is full (and nobody else is re-planning), fills *w and returns true: the caller re-plans.
 * Frees a retired generation that the run was the last to use. */
static bool gen_leave(tdm_pipe_mode *pm, pm_gen *gen, bool ok, int64_t rows, int parts, tdm_pm_window *w) {
    bool due = false, free_it;
    int64_t now = tdm_now_ns();
    pthread_mutex_lock(&pm->mu);
    if (--gen->refs == 0) gen->active_ms += (double)(now - gen->active_since) / 1e6;
    if (ok) {
        gen->win_runs++;
        gen->win_rows += rows;
        gen->win_parts += parts;
    }
    if (ok && gen->warm_runs < WARMUP && ++gen->warm_runs == WARMUP) window_reset(gen, now); /* measure from here */
    if ((pm->rb || pm->adapt_mb) && !pm->replanning && gen == pm->cur && gen->warm_runs >= WARMUP &&
        window_full(gen)) {
        double active = gen->active_ms + (gen->refs ? (double)(now - gen->active_since) / 1e6 : 0);
        memset(w, 0, sizeof *w);
        due = true;
        for (int k = 0; k < gen->n_stages; k++) {
            pm_stage *ps = &gen->stages[k];
            w->ms_per_row[k] = ps->win_items > 0 ? ps->win_busy_ms / (double)ps->win_items : 0;
            due &= ps->win_items > 0; /* a stage without a finished row: measure longer */
        }
        w->rows_per_ms = active > 0 ? (double)gen->win_rows / active : 0;
        w->whole = gen->win_parts == gen->win_runs;
        if (due) {
            window_reset(gen, now);
            w->first = gen->windows++ == 0;
            if (w->first) memcpy(gen->ref_ms_per_row, w->ms_per_row, sizeof w->ms_per_row);
            memcpy(w->ref_ms_per_row, gen->ref_ms_per_row, sizeof w->ref_ms_per_row);
            pm->replanning = true;
        }
    }
    free_it = gen->retired && gen->refs == 0;
    pthread_mutex_unlock(&pm->mu);
    if (free_it) gen_free(gen);
    return due;
}

/* Fits the micro-batch costs of gen (the current generation) and installs them; true when
 * the size of the last run's batch changed (logged). Runs on the thread that set
 * pm->replanning. */
static bool adapt_micro_batch(tdm_pipe_mode *pm, pm_gen *gen) {
    if (!pm->adapt_mb || gen->n_stages < 2) return false;
    tdm_pm_mb_acc acc[TDM_MAX_DEVICES];
    const char *names[TDM_MAX_DEVICES];
    pthread_mutex_lock(&pm->mu);
    for (int k = 0; k < gen->n_stages; k++) {
        acc[k] = gen->stages[k].acc;
        names[k] = gen->stages[k].device->name;
    }
    int64_t n = gen->last_rows;
    tdm_pm_mb_model old = gen->mbm, m;
    pthread_mutex_unlock(&pm->mu);
    if (!tdm_pm_mb_fit(acc, gen->n_stages, &m)) { /* one size seen: try two */
        pthread_mutex_lock(&pm->mu);
        gen->probe = n >= 2;
        pthread_mutex_unlock(&pm->mu);
        return false;
    }
    int64_t was = tdm_pm_mb_choose(&old, n), now = tdm_pm_mb_choose(&m, n);
    char msg[1024] = "", costs[800];
    if (now != was) {
        tdm_pm_mb_describe(&m, names, costs, sizeof costs);
        snprintf(msg, sizeof msg,
                 "pipeline micro-batch: %lld -> %lld rows for %lld-row runs: predicted %.3f -> %.3f ms per run "
                 "(%s); measured %s", (long long)was, (long long)now, (long long)n,
                 tdm_pm_mb_predict(&m, n, (n + was - 1) / was), tdm_pm_mb_predict(&m, n, (n + now - 1) / now),
                 now > was ? "fewer micro-batches pay the fixed costs fewer times"
                           : "more micro-batches fill the pipeline sooner",
                 costs);
    }
    pthread_mutex_lock(&pm->mu);
    gen->mbm = m;
    gen->probe = false;
    if (msg[0]) {
        pm->mb_changes++;
        snprintf(pm->mb_last, sizeof pm->mb_last, "%s", msg);
        gen->windows = 0; /* the next window, at the new size, counts as the first */
    }
    pthread_mutex_unlock(&pm->mu);
    if (msg[0]) tdm_log(pm->su.log, TDM_LOG_INFO, "%s", msg);
    return msg[0] != 0;
}

/* Asks the rebalancer about a window of gen (the current generation) and installs what it
 * decides, after the micro-batch size (which, when it changed, postpones the decision on
 * the cut). Runs on the thread that set pm->replanning. */
static void replan(tdm_pipe_mode *pm, pm_gen *gen, const tdm_pm_window *w) {
    const tdm_logger *lg = pm->su.log;
    tdm_pm_config next;
    char msg[1024];
    tdm_pm_verdict v = TDM_PM_NOTHING;
    if (!adapt_micro_batch(pm, gen) && pm->rb) v = tdm_pm_decide(pm->rb, &gen->cfg, w, &next, msg, sizeof msg);
    pm_gen *built = NULL, *old = NULL;
    tdm_status *st = NULL;
    if (v == TDM_PM_INSTALL) {
        double predicted[TDM_MAX_DEVICES];
        for (int k = 0; k < next.n_stages; k++) predicted[k] = tdm_pm_predict(pm->rb, &next, k);
        st = gen_build(pm, &next, tdm_pm_node_count(pm->rb), predicted, &built);
    }
    if (v != TDM_PM_NOTHING) tdm_log(lg, TDM_LOG_INFO, "%s", msg);
    if (st) {
        tdm_log(lg, TDM_LOG_WARN, "pipeline rebalance: the new stages could not be built (%s); the old ones stay",
                tdm_status_message(st));
        tdm_status_free(st);
    }
    pthread_mutex_lock(&pm->mu);
    if (v != TDM_PM_NOTHING) {
        if (!w->first) /* a drift was decided on: later drifts are measured from here */
            memcpy(gen->ref_ms_per_row, w->ms_per_row, sizeof gen->ref_ms_per_row);
        pm->decisions++;
        snprintf(pm->last, sizeof pm->last, "%s", msg);
    }
    if (built) {
        old = pm->cur;
        pm->cur = built;
        old->retired = true;
        if (old->refs > 0) old = NULL; /* the last run on it frees it */
        pm->replans++;
    }
    pm->replanning = false;
    pthread_mutex_unlock(&pm->mu);
    if (built) log_stages(pm, built);
    gen_free(old);
}

/* The micro-batch size of an n-row run on gen (see the file comment). */
static int64_t run_micro_batch(tdm_pipe_mode *pm, pm_gen *gen, int64_t n) {
    if (n < 1 || pm->micro_batch > 0) return micro_batch_of(pm, gen, n);
    pthread_mutex_lock(&pm->mu);
    int64_t mb = micro_batch_of(pm, gen, n);
    if (gen->probe && (gen->probe_runs++ & 1)) mb = n;
    gen->last_rows = n;
    pthread_mutex_unlock(&pm->mu);
    return mb;
}

static tdm_status *pm_run(void *ctx, const tdm_tensor *const *by_input, tdm_tensor **all,
                          const tdm_run_ctl *ctl) {
    tdm_pipe_mode *pm = ctx;
    const tdm_graph *g = pm->plan->graph;
    const tdm_allocator *a = pm->a;
    pm_gen *gen = gen_enter(pm);
    int64_t n = pm->splittable ? tdm_batch_rows(g, by_input) : -1;
    int64_t mb = run_micro_batch(pm, gen, n);
    int np = n < 1 ? 1 : (int)((n + mb - 1) / mb);
    pm_request r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    r.ctl = ctl;
    pm_part *parts = tdm_calloc(a, (size_t)np, sizeof *parts);
    r.done = tdm_calloc(a, (size_t)np, sizeof *r.done);
    tdm_status *st = parts && r.done ? NULL : TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory splitting a run");
    int submitted = 0;
    for (int q = 0; q < np && !st; q++) {
        tdm_pipeline_item *it = NULL;
        if ((st = tdm_run_ctl_check(ctl))) break; /* cancelled: submit no more micro-batches */
        parts[q] = (pm_part){&r, q};
        if ((st = tdm_pipeline_item_create(gen->pipe, &parts[q], &it))) break;
        for (size_t i = 0; i < g->n_inputs && !st; i++) {
            const tdm_tensor *t = by_input[i];
            if (!t) continue;
            tdm_tensor *view = NULL;
            if (n >= 1) st = tdm_batch_slice(a, t, (int64_t)q * mb, q == np - 1 ? n - (int64_t)q * mb : mb, &view);
            else st = tdm_tensor_new_view(a, t->dtype, t->rank, t->dims, t->data, &view);
            if (!st && t->device) { /* a device tensor goes as it is: the stage plan reads it */
                tdm_tensor_destroy(view);
                view = NULL;
                st = TDM_ERR(TDM_ERR_UNSUPPORTED, "pipeline mode takes host tensors only");
            }
            if (!st) st = tdm_pipeline_item_set_tensor(it, g->values[g->inputs[i]].name, view);
        }
        pthread_mutex_lock(&r.mu);
        r.remaining++;
        pthread_mutex_unlock(&r.mu);
        if (!st) st = tdm_pipeline_submit(gen->pipe, it, -1, NULL);
        if (st) {
            pthread_mutex_lock(&r.mu);
            r.remaining--;
            pthread_mutex_unlock(&r.mu);
            tdm_pipeline_item_free(it);
            break;
        }
        submitted++;
    }
    /* wait for every submitted part, also after a failure (they reference the inputs) */
    pthread_mutex_lock(&r.mu);
    while (r.remaining > 0) pthread_cond_wait(&r.cv, &r.mu);
    pthread_mutex_unlock(&r.mu);
    for (int q = 0; q < submitted && !st; q++) {
        const tdm_status *ps = tdm_pipeline_item_status(r.done[q]);
        if (ps) st = tdm_status_new(tdm_status_code(ps), "%s", tdm_status_message(ps));
    }
    for (size_t o = 0; o < g->n_outputs && !st; o++)
        st = join_rows(a, r.done, np, g->values[g->outputs[o]].name, &all[o]);
    if (st)
        for (size_t o = 0; o < g->n_outputs; o++) {
            tdm_tensor_destroy(all[o]);
            all[o] = NULL;
        }
    for (int q = 0; q < submitted; q++) tdm_pipeline_item_free(r.done[q]);
    if (!st && !pm->rb) check_balance(pm, gen);
    tdm_free(a, r.done);
    tdm_free(a, parts);
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);
    /* the run is done with gen: a full window re-plans (the outputs are made already) */
    tdm_pm_window w;
    if (gen_leave(pm, gen, !st, n < 1 ? 1 : n, np, &w)) replan(pm, gen, &w);
    return st;
}

static void pm_set_monitor(void *ctx, struct tdm_monitor *mon) {
    tdm_pipe_mode *pm = ctx;
    pthread_mutex_lock(&pm->mu);
    pm->monitor = mon;
    pm->plan->monitor = mon;
    pm_gen *gen = pm->cur;
    for (int k = 0; k < gen->n_stages; k++)
        if (gen->stages[k].plan) gen->stages[k].plan->monitor = mon;
    pthread_mutex_unlock(&pm->mu);
}

static const tdm_strategy_iface pipeline_iface = {
    TDM_STRATEGY_API_VERSION, "pipeline", pm_run, pm_stats_count, pm_stats, pm_set_monitor, pm_free,
    NULL, /* no I/O binding */
};

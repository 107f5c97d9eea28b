/* The latency strategy: one plan over the session's devices, nodes placed by the cost model
 * (sched/place.c); a run is one run of the plan. */
#include <pthread.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "sched/monitor.h"
#include "sched/budget.h"
#include "sched/strategy.h"

typedef struct latency {
    const tdm_allocator *a;
    tdm_plan *plan;
    const char *device; /* the first device's name, for the statistics */
    pthread_mutex_t mu;
    int64_t runs, items; /* mu */
    double busy_ms;
} latency;

/* The items of a run: the leading dim of the first given input whose model dim is dynamic
 * (1 when there is none). */
static int64_t run_items(const tdm_graph *g, const tdm_tensor *const *by_input) {
    for (size_t i = 0; i < g->n_inputs; i++)
        if (by_input[i] && by_input[i]->rank > 0 && g->values[g->inputs[i]].rank > 0 &&
            g->values[g->inputs[i]].dims[0] < 0)
            return by_input[i]->dims[0];
    return 1;
}

static tdm_status *lat_run_bound(void *ctx, const tdm_tensor *const *by_input,
                                 tdm_tensor *const *bound, tdm_tensor *bound_hdr,
                                 tdm_tensor **all, const tdm_run_ctl *ctl) {
    latency *l = ctx;
    int64_t t0 = tdm_now_ns();
    tdm_status *st = tdm_plan_run_bound(l->plan, by_input, bound, bound_hdr, all, ctl);
    double ms = (double)(tdm_now_ns() - t0) / 1e6;
    int64_t items = run_items(l->plan->graph, by_input);
    pthread_mutex_lock(&l->mu);
    l->runs++;
    l->items += st ? 0 : items;
    l->busy_ms += ms;
    pthread_mutex_unlock(&l->mu);
    return st;
}

static tdm_status *lat_run(void *ctx, const tdm_tensor *const *by_input, tdm_tensor **all,
                           const tdm_run_ctl *ctl) {
    return lat_run_bound(ctx, by_input, NULL, NULL, all, ctl);
}

static size_t lat_stats_count(void *ctx) {
    (void)ctx;
    return 1;
}

static void lat_stats(void *ctx, size_t index, tdm_device_stats *out) {
    latency *l = ctx;
    (void)index;
    pthread_mutex_lock(&l->mu);
    *out = (tdm_device_stats){l->device, l->runs, l->items, l->busy_ms, 1.0,
                              l->items ? l->busy_ms / (double)l->items : 0};
    pthread_mutex_unlock(&l->mu);
}

static void lat_set_monitor(void *ctx, struct tdm_monitor *mon) {
    latency *l = ctx;
    l->plan->monitor = mon;
}

static void lat_free(void *ctx) {
    latency *l = ctx;
    if (!l) return;
    tdm_plan_free(l->plan);
    pthread_mutex_destroy(&l->mu);
    tdm_free(l->a, l);
}

static const tdm_strategy_iface latency_iface = {
    TDM_STRATEGY_API_VERSION, "latency", lat_run, lat_stats_count, lat_stats, lat_set_monitor, lat_free,
    lat_run_bound,
};

/* The plan of the latency strategy and of a pipeline's description: every device, the
 * session's placement and affinity. */
tdm_status *tdm_strategy_plan_all(const tdm_strategy_setup *su, tdm_graph *g, tdm_plan **out) {
    const tdm_session_options *o = su->o;
    tdm_budget_options bo;
    bool budgets = false;
    tdm_status *st = tdm_strategy_budget(su, su->devices, su->n_devices, &bo, &budgets);
    if (st) {
        tdm_graph_free(g);
        return st;
    }
    tdm_plan_options po = {o->no_fallback, o->opt_level, o->placement, o->affinity,
                           tdm_threadpool_size(su->pool), o->profile, su->model_hash,
                           su->settings, su->loop, budgets ? &bo : NULL};
    return tdm_plan_create(su->alloc, g, su->devices, su->n_devices, su->pool, &po, out);
}

tdm_status *tdm_latency_create(const tdm_strategy_setup *su, tdm_graph *g, tdm_strategy **out) {
    latency *l = tdm_calloc(su->alloc, 1, sizeof *l);
    if (!l) {
        tdm_graph_free(g);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a session");
    }
    l->a = su->alloc;
    l->device = su->devices[0]->name;
    pthread_mutex_init(&l->mu, NULL);
    tdm_status *st = tdm_strategy_plan_all(su, g, &l->plan);
    if (st) {
        lat_free(l);
        return st;
    }
    return tdm_strategy_wrap(su->alloc, &latency_iface, l, l->plan, out);
}

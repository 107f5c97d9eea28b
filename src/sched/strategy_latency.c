/* The latency strategy: one plan over the session's devices, nodes placed by the cost model
 * (sched/place.c); a run is one run of the plan. On a CPU alone whose plan went channels-last
 * for a dynamic batch (made before the batch is seen, for few images per thread), a run of
 * TDM_CL_MAX_IMAGES_PER_THREAD (ops/fused.h) or more images per thread takes a second plan in
 * channel blocks, made at the first such run from a copy of the graph kept for it, its
 * constants' bytes shared with the session's plan (tdm_graph_clone_sharing; oneDNN's
 * channel-blocked kernels gain from a batch at 1 thread, its channels-last ones do not:
 * graph/fuse_blocked.c).
 *
 * Plans per shape class: with several devices and the cost model's placement, the first plan
 * is placed for the inputs' symbolic dims at 1, which is the wrong plan for a large batch (on
 * an H200 host, BERT-base at batch 32 kept the LayerNorms and some products where batch 1 had
 * put them, on the CPU: 219 ms against 13 ms at batch 1). So a run whose symbolic dims
 * multiply to a larger power of two than the plan's takes a plan placed for its own shapes,
 * made at the first run of that class from a copy of the model's graph (constants shared)
 * and kept: the class's plan when its placement differs from the first plan's and from the
 * other classes' (else that plan). The plans share the device copies of the constants they
 * have in common (tdm_plan.const_twin). Not for profiling sessions, fixed placements or memory
 * budgets. */
#include <pthread.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "graph/clone.h"
#include "ops/fused.h"
#include "sched/monitor.h"
#include "sched/budget.h"
#include "sched/strategy.h"

typedef struct latency {
    const tdm_allocator *a;
    tdm_plan *plan;
    bool want_blocks;      /* a channel-blocked plan for many images per thread (mu) */
    tdm_graph *blocks_src; /* its graph until it is made (mu) */
    tdm_plan *blocks;      /* that plan, made at the first run that takes it (mu) */
    tdm_strategy_setup su; /* (for making it) */
    tdm_session_options o;
    int threads;
    /* plans per shape class (mu): class k = the symbolic input dims multiply to at most 2^k;
     * the first plan is class 0; plan NULL = not made yet */
    tdm_graph *classes_src; /* the model's graph, constants shared, for making them */
    char *affinity;         /* the session's affinity rules (copied; l->o.affinity) */
#define LAT_CLASSES 8
    struct {
        int cls;
        tdm_plan *plan; /* l->plan when the placement came out the same */
    } by_class[LAT_CLASSES];
    int n_classes;
    struct tdm_monitor *mon;
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

static tdm_status *plan_for(const tdm_strategy_setup *su, tdm_graph *g, bool cpu_blocks,
                            const tdm_tensor *const *cost_inputs, tdm_plan *const_from,
                            tdm_plan **out);

/* The plan for a run of `items` images: the channel-blocked one for many per thread (made
 * here the first time; when that fails, the first plan, and no more tries). */
static tdm_plan *pick_plan(latency *l, int64_t items) {
    if (items < (int64_t)TDM_CL_MAX_IMAGES_PER_THREAD * l->threads) return l->plan;
    pthread_mutex_lock(&l->mu);
    if (l->want_blocks && !l->blocks) {
        tdm_graph *g = l->blocks_src;
        l->blocks_src = NULL; /* (the plan takes it, or frees it on failure) */
        tdm_status *st = plan_for(&l->su, g, true, NULL, NULL, &l->blocks);
        if (st) {
            l->blocks = NULL;
            l->want_blocks = false;
            tdm_status_free(st);
        } else {
            l->blocks->monitor = l->mon;
        }
    }
    tdm_plan *p = l->blocks ? l->blocks : l->plan;
    pthread_mutex_unlock(&l->mu);
    return p;
}

/* The shape class of a run: ceil(log2) of the largest product of one input's symbolic dims
 * (0 when every one is 1, or there are none). */
static int shape_class(const tdm_graph *g, const tdm_tensor *const *by_input) {
    int64_t most = 1;
    for (size_t i = 0; i < g->n_inputs; i++) {
        const tdm_value *v = &g->values[g->inputs[i]];
        const tdm_tensor *t = by_input[i];
        if (!t || t->rank != v->rank) continue;
        int64_t n = 1;
        for (int d = 0; d < v->rank; d++)
            if (v->dims[d] < 0 && t->dims[d] > 1)
                n = n > INT64_MAX / t->dims[d] ? INT64_MAX : n * t->dims[d];
        if (n > most) most = n;
    }
    int k = 0;
    while (k < 62 && ((int64_t)1 << k) < most) k++;
    return k;
}

/* Do two plans put the same nodes on the same devices? */
static bool same_placement(const tdm_plan *p, const tdm_plan *q) {
    const tdm_graph *g = p->graph, *h = q->graph;
    if (g->n_nodes != h->n_nodes) return false;
    for (size_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].device != h->nodes[i].device ||
            strcmp(g->nodes[i].op_type, h->nodes[i].op_type))
            return false;
    return true;
}

/* A plan of another class placed as p is (mu held), or NULL. */
static tdm_plan *same_as_made(const latency *l, const tdm_plan *p) {
    for (int i = 0; i < l->n_classes; i++)
        if (l->by_class[i].plan != l->plan && same_placement(p, l->by_class[i].plan))
            return l->by_class[i].plan;
    return NULL;
}

/* The plan of a run's shape class (made at its first run; mu held). A failure takes the
 * first plan; a class past LAT_CLASSES the plan of the nearest class made (the first plan is
 * class 0). */
static tdm_plan *class_plan(latency *l, const tdm_tensor *const *by_input) {
    int cls = shape_class(l->classes_src, by_input);
    if (cls == 0) return l->plan;
    for (int i = 0; i < l->n_classes; i++)
        if (l->by_class[i].cls == cls) return l->by_class[i].plan;
    if (l->n_classes == LAT_CLASSES) {
        tdm_plan *near = l->plan;
        int gap = cls;
        for (int i = 0; i < l->n_classes; i++) {
            int d = l->by_class[i].cls > cls ? l->by_class[i].cls - cls : cls - l->by_class[i].cls;
            if (d < gap) {
                gap = d;
                near = l->by_class[i].plan;
            }
        }
        return near;
    }
    tdm_plan *made = l->plan, *twin = NULL;
    tdm_graph *g = NULL;
    tdm_status *st = tdm_graph_clone_sharing(l->classes_src, &g);
    if (!st) {
        tdm_session_options o = l->o;
        tdm_strategy_setup su = l->su;
        su.o = &o;
        st = plan_for(&su, g, false, by_input, l->plan, &made);
    }
    if (st) {
        tdm_log(l->su.log, TDM_LOG_WARN, "latency: no plan of its own for inputs of class 2^%d "
                "(the first plan runs them): %s", cls, tdm_status_message(st));
        tdm_status_free(st);
        made = l->plan;
    } else if (same_placement(made, l->plan)) {
        tdm_plan_free(made);
        made = l->plan;
    } else if ((twin = same_as_made(l, made))) { /* (as another class's: that plan) */
        tdm_plan_free(made);
        made = twin;
    } else {
        made->monitor = l->mon;
        size_t moved = 0;
        for (size_t i = 0; i < made->graph->n_nodes && i < l->plan->graph->n_nodes; i++)
            moved += made->graph->nodes[i].device != l->plan->graph->nodes[i].device;
        tdm_log(l->su.log, TDM_LOG_INFO, "latency: inputs of class 2^%d (symbolic dims up to %lld) "
                "get a plan of their own: %zu of %zu nodes placed elsewhere, predicted %.3f ms",
                cls, (long long)((int64_t)1 << cls), moved, made->graph->n_nodes,
                made->predicted_ms);
    }
    l->by_class[l->n_classes].cls = cls;
    l->by_class[l->n_classes++].plan = made;
    return made;
}

static tdm_status *lat_run_bound(void *ctx, const tdm_tensor *const *by_input,
                                 tdm_tensor *const *bound, tdm_tensor *bound_hdr,
                                 tdm_tensor **all, const tdm_run_ctl *ctl) {
    latency *l = ctx;
    int64_t items = run_items(l->plan->graph, by_input);
    tdm_plan *plan = pick_plan(l, items);
    if (l->classes_src) {
        pthread_mutex_lock(&l->mu);
        plan = class_plan(l, by_input);
        if (plan != l->plan) plan->trace = l->plan->trace; /* (switched between runs) */
        pthread_mutex_unlock(&l->mu);
    }
    int64_t t0 = tdm_now_ns();
    tdm_status *st = tdm_plan_run_bound(plan, by_input, bound, bound_hdr, all, ctl);
    double ms = (double)(tdm_now_ns() - t0) / 1e6;
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
    pthread_mutex_lock(&l->mu);
    l->mon = mon;
    l->plan->monitor = mon;
    if (l->blocks) l->blocks->monitor = mon;
    for (int i = 0; i < l->n_classes; i++) /* (a plan shared by classes: set twice) */
        l->by_class[i].plan->monitor = mon;
    pthread_mutex_unlock(&l->mu);
}

static void lat_free(void *ctx) {
    latency *l = ctx;
    if (!l) return;
    for (int i = 0; i < l->n_classes; i++) { /* (before the first plan: they use its constants) */
        tdm_plan *c = l->by_class[i].plan;
        bool first_of = c != l->plan; /* (classes may share a plan: freed at its first entry) */
        for (int k = 0; k < i && first_of; k++) first_of = l->by_class[k].plan != c;
        if (first_of) {
            c->trace = NULL; /* (the first plan's) */
            tdm_plan_free(c);
        }
    }
    tdm_graph_free(l->classes_src);
    tdm_free(l->a, l->affinity);
    tdm_plan_free(l->plan);
    tdm_plan_free(l->blocks);
    tdm_graph_free(l->blocks_src);
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
    return plan_for(su, g, false, NULL, NULL, out);
}

static tdm_status *plan_for(const tdm_strategy_setup *su, tdm_graph *g, bool cpu_blocks,
                            const tdm_tensor *const *cost_inputs, tdm_plan *const_from,
                            tdm_plan **out) {
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
                           su->settings, su->loop, budgets ? &bo : NULL, cpu_blocks,
                           cost_inputs, const_from};
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
    const tdm_session_options *o = su->o;
    l->su = *su; /* (the session's devices, pool, settings outlive the strategy) */
    l->o = (tdm_session_options){.api_version = o->api_version, .threads = o->threads,
                                 .opt_level = o->opt_level, .no_fallback = o->no_fallback,
                                 .profile = o->profile, .mode = o->mode};
    l->su.o = &l->o; /* (the caller's strings do not: the plan takes none of them) */
    l->threads = tdm_threadpool_size(su->pool);
    /* (not for profiling sessions: their reports read the first plan) */
    bool dynamic = false, conv = false,
         plain = !o->placement && !o->affinity && !o->precision && !o->profile && !o->residency &&
                 !(o->device_memory && o->device_memory[0]);
    for (size_t i = 0; i < g->n_inputs; i++)
        dynamic |= g->values[g->inputs[i]].rank > 0 && g->values[g->inputs[i]].dims[0] < 0;
    for (size_t i = 0; i < g->n_nodes && !conv; i++) conv = !strcmp(g->nodes[i].op_type, "Conv");
    tdm_status *st = NULL;
    /* (not where the CPU never goes channels-last: AVX2, cpu_layout blocked) */
    l->want_blocks = dynamic && conv && plain && o->opt_level >= 1 && su->n_devices == 1 &&
                     su->devices[0]->host_memory &&
                     tdm_device_channels_last(su->devices[0]) != TDM_CL_NEVER;
    /* the copy shares the weights' bytes with g (and so with the plan made from it) */
    if (l->want_blocks && (st = tdm_graph_clone_sharing(g, &l->blocks_src))) {
        tdm_graph_free(g);
        lat_free(l);
        return st;
    }
    bool symbolic = false;
    for (size_t i = 0; i < g->n_inputs; i++)
        for (int d = 0; d < g->values[g->inputs[i]].rank; d++)
            symbolic |= g->values[g->inputs[i]].dims[d] < 0;
    bool by_shape = symbolic && su->n_devices > 1 &&
                    (!o->placement || !strcmp(o->placement, "auto")) &&
                    !o->profile && !o->residency && !(o->device_memory && o->device_memory[0]);
    if (by_shape && o->affinity) { /* (the class plans keep the session's rules) */
        size_t n = strlen(o->affinity) + 1;
        if ((l->affinity = tdm_alloc(l->a, n))) memcpy(l->affinity, o->affinity, n);
        l->o.affinity = l->affinity;
        by_shape = l->affinity != NULL;
    }
    if (by_shape && (st = tdm_graph_clone_sharing(g, &l->classes_src))) {
        tdm_graph_free(g);
        lat_free(l);
        return st;
    }
    st = tdm_strategy_plan_all(su, g, &l->plan);
    if (st) {
        lat_free(l);
        return st;
    }
    if (l->want_blocks && !tdm_plan_channels_last(l->plan)) { /* blocks already */
        tdm_graph_free(l->blocks_src);
        l->blocks_src = NULL;
        l->want_blocks = false;
    }
    return tdm_strategy_wrap(su->alloc, &latency_iface, l, l->plan, out);
}

/* Run strategies: the wrappers, the choice of a session's strategy and the planning helper
 * they share (sched/strategy.h). */
#include "sched/strategy.h"

#include <stdio.h>

#include "core/alloc.h"
#include "graph/infer.h"
#include "sched/pipeline_mode.h"

tdm_status *tdm_strategy_wrap(const tdm_allocator *a, const tdm_strategy_iface *iface, void *ctx,
                              tdm_plan *plan, tdm_strategy **out) {
    tdm_strategy *st = tdm_calloc(a, 1, sizeof *st);
    if (!st) {
        iface->free(ctx);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a run strategy");
    }
    st->iface = iface;
    st->ctx = ctx;
    st->alloc = a;
    st->plan = plan;
    *out = st;
    return NULL;
}

tdm_status *tdm_strategy_plan_on(const tdm_strategy_setup *su, tdm_graph *g, tdm_device *dev,
                                 const char *affinity, bool profile, uint64_t model_hash,
                                 tdm_plan **out) {
    const tdm_session_options *o = su->o;
    tdm_device *cpu = NULL;
    for (int d = 0; d < su->n_devices; d++)
        if (su->devices[d]->host_memory) cpu = su->devices[d];
    tdm_device *devs[2] = {dev, cpu};
    int nd = cpu && cpu != dev && !o->no_fallback ? 2 : 1;
    /* the plan runs on its device; the CPU only takes what the device cannot run */
    tdm_plan_options po = {o->no_fallback, o->opt_level, dev->name, affinity,
                           tdm_threadpool_size(su->pool), profile, model_hash,
                           su->settings, su->loop};
    return tdm_plan_create(su->alloc, g, devs, nd, su->pool, &po, out);
}

tdm_status *tdm_strategy_create(const tdm_strategy_setup *su, tdm_graph *g, tdm_strategy **out) {
    const tdm_session_options *o = su->o;
    if (o->mode == TDM_MODE_LATENCY || su->n_devices == 1) return tdm_latency_create(su, g, out);
    /* the cut and the choice read the unoptimised graph's shapes */
    tdm_status *st = tdm_graph_infer_shapes(g);
    if (st) {
        tdm_graph_free(g);
        return st;
    }
    bool pipeline = o->mode == TDM_MODE_PIPELINE;
    if (o->mode == TDM_MODE_THROUGHPUT) {
        char why[512];
        pipeline = tdm_pipe_mode_preferred(su, g, why, sizeof why);
        tdm_log(su->log, TDM_LOG_INFO, "throughput mode: %s", why);
    }
    return pipeline ? tdm_pipeline_strategy_create(su, g, out) : tdm_replicas_create(su, g, out);
}

tdm_status *tdm_strategy_run(tdm_strategy *st, const tdm_tensor *const *by_input,
                             tdm_tensor **all_outputs, const tdm_run_ctl *ctl) {
    return st->iface->run(st->ctx, by_input, all_outputs, ctl);
}

tdm_status *tdm_strategy_run_bound(tdm_strategy *st, const tdm_tensor *const *by_input,
                                   tdm_tensor *const *bound, tdm_tensor *bound_hdr,
                                   tdm_tensor **all_outputs, const tdm_run_ctl *ctl) {
    if (!st->iface->run_bound)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "the %s strategy does not run with bound outputs; use "
                       "the latency mode", st->iface->name);
    return st->iface->run_bound(st->ctx, by_input, bound, bound_hdr, all_outputs, ctl);
}

size_t tdm_strategy_stats_count(const tdm_strategy *st) { return st ? st->iface->stats_count(st->ctx) : 0; }

tdm_status *tdm_strategy_stats(tdm_strategy *st, size_t index, tdm_device_stats *out) {
    if (index >= tdm_strategy_stats_count(st))
        return TDM_ERR(TDM_ERR_NOT_FOUND, "no device statistics entry %zu", index);
    st->iface->stats(st->ctx, index, out);
    return NULL;
}

void tdm_strategy_set_monitor(tdm_strategy *st, struct tdm_monitor *mon) { st->iface->set_monitor(st->ctx, mon); }

tdm_plan *tdm_strategy_plan(const tdm_strategy *st) { return st ? st->plan : NULL; }

const char *tdm_strategy_name(const tdm_strategy *st) { return st ? st->iface->name : ""; }

void tdm_strategy_free(tdm_strategy *st) {
    if (!st) return;
    st->iface->free(st->ctx);
    tdm_free(st->alloc, st);
}

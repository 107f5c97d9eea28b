/* Run strategies: the wrappers, the choice of a session's strategy and the planning helper
 * they share (sched/strategy.h). */
#include "sched/strategy.h"

#include <stdio.h>

#include "core/alloc.h"
#include "graph/infer.h"
#include "sched/budget.h"
#include "sched/pipeline_mode.h"
#include <stdlib.h>
#include <string.h>

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

/* Parses the residency option: flags into *out (NULL: checks only). */
static tdm_status *parse_residency(const char *text, bool *mapped, tdm_budget_options *out) {
    *mapped = false;
    if (!text || !text[0]) return NULL;
    char buf[256];
    if (strlen(text) >= sizeof buf)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "residency: the text is too long");
    snprintf(buf, sizeof buf, "%s", text);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        if (!*tok) continue;
        if (!strcmp(tok, "mapped")) *mapped = true;
        else if (!strcmp(tok, "streamed") || !strcmp(tok, "layers") || !strcmp(tok, "auto")) {
            if (out) out->force = !strcmp(tok, "streamed") ? TDM_FIT_STREAMED
                                  : !strcmp(tok, "layers") ? TDM_FIT_LAYERS
                                                           : 0;
        } else if (!strncmp(tok, "kv=", 3)) {
            const char *k = tok + 3;
            int place = !strcmp(k, "auto") ? 0 : !strcmp(k, "device") ? TDM_KV_DEVICE
                        : !strcmp(k, "host") ? TDM_KV_HOST : !strcmp(k, "cpu") ? TDM_KV_CPU : -1;
            if (place < 0)
                return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "residency: '%s': give kv=auto, kv=device, "
                               "kv=host or kv=cpu", tok);
            if (out) out->kv_force = place;
        } else if (!strncmp(tok, "window=", 7)) {
            char *end;
            long k = strtol(tok + 7, &end, 10);
            if (!tok[7] || *end || k < 1 || k > 64)
                return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "residency: '%s' needs a window of 1 to 64 "
                               "nodes", tok);
            if (out) out->window = (int)k;
        } else {
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "residency: '%s' is not one of mapped, streamed, "
                           "layers, auto, window=K, kv=auto|device|host|cpu", tok);
        }
    }
    return NULL;
}

tdm_status *tdm_residency_mapped(const char *residency, bool *mapped) {
    return parse_residency(residency, mapped, NULL);
}

tdm_status *tdm_strategy_budget(const tdm_strategy_setup *su, tdm_device *const *devs, int n,
                                tdm_budget_options *out, bool *any) {
    const tdm_session_options *o = su->o;
    memset(out, 0, sizeof *out);
    *any = false;
    bool mapped;
    TDM_TRY(parse_residency(o->residency, &mapped, out));
    *any = out->kv_force != 0; /* a KV cache placement asked for: the fit places it */
    if (!o->device_memory || !o->device_memory[0]) return NULL;
    tdm_budget_spec all[TDM_MAX_DEVICES];
    memset(all, 0, sizeof all);
    TDM_TRY(tdm_budget_parse(o->device_memory, su->devices, su->n_devices, all));
    for (int d = 0; d < n && d < TDM_MAX_DEVICES; d++)
        for (int e = 0; e < su->n_devices; e++)
            if (su->devices[e] == devs[d]) {
                out->spec[d] = all[e];
                *any |= all[e].bytes > 0 || all[e].percent > 0;
            }
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
    tdm_budget_options bo;
    bool budgets = false;
    tdm_status *st = tdm_strategy_budget(su, devs, nd, &bo, &budgets);
    if (st) {
        tdm_graph_free(g);
        return st;
    }
    tdm_plan_options po = {o->no_fallback, o->opt_level, dev->name, affinity,
                           tdm_threadpool_size(su->pool), profile, model_hash,
                           su->settings, su->loop, budgets ? &bo : NULL};
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

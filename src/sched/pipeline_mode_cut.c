/* Pipeline mode's cut: the pieces of pipeline_mode.c that work on the model's graph (see
 * pipeline_mode_cut.h), and throughput mode's choice of a pipeline over replicas. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/strlist.h"
#include "graph/clone.h"
#include "graph/infer.h"
#include "sched/batch.h"
#include "sched/cost.h"
#include "sched/pipeline_mode.h"
#include "sched/pipeline_mode_cut.h"
#include "sched/pipeline_mode_rebalance.h"
#include "sched/profile.h"

/* ---- the cut ---- */

/* costs[k * n + i]: predicted ms of node i on device k (dynamic dims count as 1). */
tdm_status *tdm_pm_node_costs(const tdm_strategy_setup *su, const tdm_graph *g, int K, double *costs) {
    size_t n = g->n_nodes;
    for (int k = 0; k < K; k++) {
        tdm_device_profile prof;
        TDM_TRY(tdm_profile_device(su->devices[k], su->alloc, su->settings, tdm_threadpool_size(su->pool), false, &prof));
        for (size_t i = 0; i < n; i++) costs[(size_t)k * n + i] = tdm_cost_node_ms(g, &g->nodes[i], &prof);
    }
    return NULL;
}

/* User cut points: "name,#12,..." where stages 2, 3, ... start. */
tdm_status *tdm_pm_user_cut(const tdm_graph *g, const char *cuts, int K, int *starts, int *used) {
    char buf[1024];
    if (strlen(cuts) >= sizeof buf) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "pipeline_cuts is too long");
    snprintf(buf, sizeof buf, "%s", cuts);
    int k = 0;
    starts[0] = 0;
    char *save = NULL;
    for (char *tok = tdm_list_next(buf, &save); tok; tok = tdm_list_next(NULL, &save)) {
        long pos = -1;
        if (tok[0] == '#') {
            char *end = NULL;
            pos = strtol(tok + 1, &end, 10);
            if (!end || *end || end == tok + 1) pos = -2;
        } else {
            for (size_t i = 0; i < g->n_nodes; i++)
                if (g->nodes[i].name && !strcmp(g->nodes[i].name, tok)) pos = (long)i;
        }
        if (pos == -2 || pos == -1)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "pipeline cut '%s' is not %s", tok,
                           pos == -2 ? "a #position" : "a node name of the model");
        if (pos <= starts[k] || pos >= (long)g->n_nodes)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                           "pipeline cut '%s' (node #%ld) must come after the previous cut and before "
                           "the last node (#%zu)", tok, pos, g->n_nodes ? g->n_nodes - 1 : 0);
        if (k + 1 >= K)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%d pipeline cuts need %d devices; the session has %d",
                           k + 1, k + 2, K);
        starts[++k] = (int)pos;
    }
    *used = k + 1;
    return NULL;
}

/* Restricts g (a copy of the model) to nodes [b, e): see the file comment. drop
 * receives the stage inputs that nothing after the stage needs. */
tdm_status *tdm_pm_restrict_graph(tdm_graph *g, int b, int e, char ***drop, size_t *n_drop, const tdm_allocator *a) {
    size_t nv = g->n_values;
    unsigned char *use = tdm_calloc(a, nv ? nv : 1, 1); /* 1: read here, 2: read later */
    int *ins = tdm_calloc(a, nv + 1, sizeof *ins), *outs = tdm_calloc(a, nv + 1, sizeof *outs);
    (*drop) = tdm_calloc(a, nv + 1, sizeof *(*drop));
    tdm_status *st = NULL;
    if (!use || !ins || !outs || !(*drop)) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory cutting the model");
        goto done;
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        unsigned char bit = (int)i >= b && (int)i < e ? 1 : (int)i >= e ? 2 : 0;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) use[n->inputs[k]] |= bit;
        for (int k = 0; k < n->n_implicit; k++)
            if (n->implicit[k] >= 0) use[n->implicit[k]] |= bit;
    }
    for (size_t o = 0; o < g->n_outputs; o++) use[g->outputs[o]] |= 2;
    size_t ni = 0, no = 0;
    for (size_t v = 0; v < nv; v++) {
        tdm_value *val = &g->values[v];
        bool outside = (val->producer >= 0 && val->producer < b) || (val->producer < 0 && val->is_input);
        bool here = val->producer >= b && val->producer < e;
        bool is_in = (use[v] & 1) && outside, is_out = here && (use[v] & 2);
        if (is_in) ins[ni++] = (int)v;
        if (is_out) outs[no++] = (int)v;
        if (is_in && !(use[v] & 2) && !((*drop)[(*n_drop)++] = tdm_strdup(a, val->name))) {
            st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory cutting the model");
            goto done;
        }
        val->is_input = is_in;
        val->is_output = is_out;
    }
    for (size_t i = 0; i < g->n_nodes; i++) g->nodes[i].dead = (int)i < b || (int)i >= e;
    tdm_free(g->alloc, g->inputs);
    tdm_free(g->alloc, g->outputs);
    g->inputs = ins;
    g->outputs = outs;
    g->n_inputs = ni;
    g->n_outputs = no;
    ins = outs = NULL;
    st = tdm_graph_compact(g);
done:
    tdm_free(a, use);
    tdm_free(a, ins);
    tdm_free(a, outs);
    return st;
}

tdm_status *tdm_pm_stage_graph(const tdm_graph *g, int b, int e, char ***drop, size_t *n_drop,
                               const tdm_allocator *a, tdm_graph **out) {
    bool *keep = tdm_calloc(a, g->n_values + 1, sizeof *keep);
    if (!keep) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory cutting the model");
    for (int i = b; i < e && (size_t)i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) keep[n->inputs[k]] = true;
        for (int k = 0; k < n->n_implicit; k++)
            if (n->implicit[k] >= 0) keep[n->implicit[k]] = true;
    }
    tdm_graph *sg = NULL;
    tdm_status *st = tdm_graph_clone(g, keep, &sg);
    tdm_free(a, keep);
    if (!st) st = tdm_pm_restrict_graph(sg, b, e, drop, n_drop, a);
    if (st) {
        tdm_graph_free(sg);
        return st;
    }
    *out = sg;
    return NULL;
}

/* ---- throughput mode's choice ---- */

bool tdm_pipe_mode_preferred(const tdm_strategy_setup *su, const tdm_graph *g, char *why, size_t why_size) {
    const tdm_allocator *a = su->alloc;
    int K = su->n_devices;
    tdm_status *st = NULL;
    double *costs = NULL;
    size_t n = g->n_nodes;
    bool pipe = false;
    /* a dynamic leading dim on every input and output: split mode divides batches */
    bool split = tdm_batch_splittable(g);
    if (split) {
        snprintf(why, why_size, "split: every input and output has a dynamic batch dim, so batches are "
                 "divided between a replica per device (and single requests go to the replica "
                 "predicted to finish first)");
    } else if (!st && n && !(costs = tdm_calloc(a, n * (size_t)K, sizeof *costs))) {
        snprintf(why, why_size, "replicas: out of memory estimating a pipeline");
    } else if (st || !n || (st = tdm_pm_node_costs(su, g, K, costs))) {
        snprintf(why, why_size, "replicas: no cost estimate for a pipeline (%s)",
                 st ? tdm_status_message(st) : "no nodes");
    } else {
        /* replicas: every device runs whole requests, throughput = sum of 1 / T_device;
         * pipeline: throughput = 1 / slowest stage */
        double rate = 0, best = INFINITY;
        for (int k = 0; k < K; k++) {
            double t = 0;
            for (size_t i = 0; i < n; i++) t += costs[(size_t)k * n + i];
            if (t > 0) rate += 1.0 / t;
            if (t < best) best = t;
        }
        int starts[TDM_MAX_DEVICES];
        double stage_ms[TDM_MAX_DEVICES];
        int used = tdm_pm_auto_cut(costs, n, K, starts, stage_ms);
        double slowest = 0;
        for (int k = 0; k < used; k++) slowest = stage_ms[k] > slowest ? stage_ms[k] : slowest;
        double pipe_rate = slowest > 0 ? 1.0 / slowest : 0;
        /* a pipeline must win clearly: it pays a copy at every cut that the model ignores */
        pipe = used > 1 && pipe_rate > 1.15 * rate;
        snprintf(why, why_size,
                 "%s: predicted %.1f requests/s as a %d-stage pipeline (slowest stage %.3f ms) vs %.1f/s "
                 "with a replica per device (fastest alone %.3f ms)",
                 pipe ? "pipeline" : "replicas", pipe_rate * 1e3, used, slowest, rate * 1e3, best);
    }
    tdm_status_free(st);
    tdm_free(a, costs);
    return pipe;
}

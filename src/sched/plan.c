/* Plan creation: graph passes, placement, kernel preparation, value lifetimes. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "graph/fuse.h"
#include "graph/infer.h"
#include "sched/plan.h"

typedef struct fold_ctx {
    tdm_device *cpu;
    const tdm_allocator *a;
} fold_ctx;

static tdm_status *fold_eval(void *user, const tdm_node *n, const tdm_tensor *const *ins,
                             tdm_tensor **outs) {
    fold_ctx *fc = user;
    return tdm_eval_node(fc->cpu, fc->a, n, ins, outs);
}

static tdm_device *find_cpu(tdm_device **devs, int n) {
    for (int i = 0; i < n; i++)
        if (devs[i]->host_memory) return devs[i];
    return NULL;
}

/* Graph passes (opt_level >= 1): constant folding (to a fixed point, since folding a Shape
 * makes its consumers constant), dead-node removal, then fusion, then static shapes again. */
static tdm_status *optimise(tdm_graph *g, tdm_device *cpu, const tdm_allocator *a) {
    fold_ctx fc = {cpu, a};
    for (int round = 0; round < 8; round++) {
        int folded = 0, removed = 0;
        TDM_TRY(tdm_graph_fold_constants(g, fold_eval, &fc, &folded));
        TDM_TRY(tdm_graph_remove_dead(g, &removed));
        if (folded == 0 && removed == 0) break;
        TDM_TRY(tdm_graph_compact(g));
        TDM_TRY(tdm_graph_infer_shapes(g));
    }
    int fused = 0;
    TDM_TRY(tdm_graph_fuse(g, &fused));
    if (fused) {
        TDM_TRY(tdm_graph_compact(g));
        TDM_TRY(tdm_graph_infer_shapes(g));
    }
    return NULL;
}

/* Placement, first slice: the first device in preference order whose kernel table has the
 * node. Reports every unsupported node at once. */
static tdm_status *place(tdm_plan *p, const tdm_plan_options *opts) {
    tdm_graph *g = p->graph;
    char missing[1024] = "";
    size_t mlen = 0;
    int n_missing = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        tdm_node *n = &g->nodes[i];
        tdm_dtype types[64];
        int nt = n->n_inputs < 64 ? n->n_inputs : 64;
        for (int k = 0; k < nt; k++)
            types[k] = n->inputs[k] >= 0 ? g->values[n->inputs[k]].dtype : TDM_UNDEFINED;
        n->device = -1;
        int limit = opts->no_fallback ? 1 : p->n_devices;
        /* device memory holds no strings, and subgraph bodies run on the host */
        bool host_only = false;
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0 && g->values[n->outputs[k]].dtype == TDM_STRING) host_only = true;
        for (int k = 0; k < nt; k++)
            if (types[k] == TDM_STRING) host_only = true;
        for (int k = 0; k < n->n_attrs; k++)
            if (n->attrs[k].type == TDM_ATTR_GRAPH || n->attrs[k].type == TDM_ATTR_GRAPHS) host_only = true;
        for (int d = 0; d < limit && n->schema; d++) {
            if (host_only && !p->devices[d]->host_memory) continue;
            const tdm_kernel_def *k = tdm_device_find_kernel(p->devices[d], n, types, nt);
            if (!k) {
                /* dtype not known statically: accept the device if it has the op at all */
                bool unknown = false;
                for (int j = 0; j < nt; j++)
                    if (n->inputs[j] >= 0 && types[j] == TDM_UNDEFINED) unknown = true;
                if (!unknown) continue;
                n->device = d;
                break;
            }
            n->device = d;
            p->nodes[i].kernel = k;
            break;
        }
        if (n->device < 0) {
            n_missing++;
            if (mlen < sizeof missing - 80)
                mlen += (size_t)snprintf(missing + mlen, sizeof missing - mlen, "%s%s%s%s (node '%s')",
                                         n_missing > 1 ? ", " : "", n->domain,
                                         n->domain[0] ? "." : "", n->op_type, n->name);
        }
    }
    if (n_missing)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "%d node%s cannot run on %s: %s", n_missing,
                       n_missing > 1 ? "s" : "",
                       opts->no_fallback || p->n_devices == 1 ? p->devices[0]->name
                                                              : "any of the devices",
                       missing);
    return NULL;
}

static tdm_status *prepare_kernels(tdm_plan *p) {
    tdm_graph *g = p->graph;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_kernel_def *k = p->nodes[i].kernel;
        if (!k || !k->prepare) continue;
        tdm_node *n = &g->nodes[i];
        const tdm_tensor *ins[64] = {0};
        for (int j = 0; j < n->n_inputs && j < 64; j++) {
            int v = n->inputs[j];
            if (v >= 0 && g->values[v].data && !g->values[v].is_input) ins[j] = g->values[v].data;
        }
        tdm_status *st = k->prepare(n, n->opset, n->n_inputs, ins, p->alloc, &p->nodes[i].state);
        if (st) return tdm_status_wrap(st, "%s node '%s': ", n->op_type, n->name);
    }
    return NULL;
}

static void lifetimes(tdm_plan *p) {
    tdm_graph *g = p->graph;
    for (size_t v = 0; v < g->n_values; v++) p->release_after[v] = -1;
    for (size_t v = 0; v < g->n_values; v++) p->first_use[v] = -1;
    for (size_t i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_outputs; k++)
            if (g->nodes[i].outputs[k] >= 0) p->first_use[g->nodes[i].outputs[k]] = (int)i;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_outputs; k++) /* unread outputs go right away */
            if (n->outputs[k] >= 0) p->release_after[n->outputs[k]] = (int)i;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) p->release_after[n->inputs[k]] = (int)i;
        for (int k = 0; k < n->n_implicit; k++) p->release_after[n->implicit[k]] = (int)i;
    }
    for (size_t o = 0; o < g->n_outputs; o++) p->release_after[g->outputs[o]] = -1;
}

tdm_status *tdm_plan_create(const tdm_allocator *a, tdm_graph *graph, tdm_device **devices,
                            int n_devices, tdm_threadpool *pool, const tdm_plan_options *opts,
                            tdm_plan **out) {
    tdm_plan *p = tdm_calloc(a, 1, sizeof *p);
    if (!p) {
        tdm_graph_free(graph);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a plan");
    }
    p->alloc = a;
    p->graph = graph;
    pthread_mutex_init(&p->mem_mu, NULL);
    p->devices = devices;
    p->n_devices = n_devices;
    p->pool = pool;
    tdm_status *st = NULL;
    if (n_devices < 1) {
        st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "no devices to run on");
        goto fail;
    }
    if ((st = tdm_graph_infer_shapes(graph))) goto fail;
    tdm_device *cpu = find_cpu(devices, n_devices);
    if (opts->opt_level >= 1 && cpu && (st = optimise(graph, cpu, a))) goto fail;
    p->nodes = tdm_calloc(a, graph->n_nodes ? graph->n_nodes : 1, sizeof *p->nodes);
    p->release_after = tdm_calloc(a, graph->n_values ? graph->n_values : 1, sizeof(int));
    p->first_use = tdm_calloc(a, graph->n_values ? graph->n_values : 1, sizeof(int));
    p->const_on_device = tdm_calloc(a, (graph->n_values ? graph->n_values : 1) * (size_t)n_devices,
                                    sizeof(tdm_tensor *));
    if (!p->nodes || !p->release_after || !p->first_use || !p->const_on_device) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a plan");
        goto fail;
    }
    if ((st = place(p, opts))) goto fail;
    if ((st = prepare_kernels(p))) goto fail;
    lifetimes(p);
    *out = p;
    return NULL;
fail:
    tdm_plan_free(p);
    return st;
}

void tdm_plan_free(tdm_plan *p) {
    if (!p) return;
    if (p->nodes && p->graph)
        for (size_t i = 0; i < p->graph->n_nodes; i++)
            if (p->nodes[i].state && p->nodes[i].kernel && p->nodes[i].kernel->release)
                p->nodes[i].kernel->release(p->nodes[i].state, p->alloc);
    tdm_free(p->alloc, p->nodes);
    tdm_free(p->alloc, p->release_after);
    tdm_free(p->alloc, p->first_use);
    if (p->const_on_device && p->graph)
        for (size_t i = 0; i < p->graph->n_values * (size_t)p->n_devices; i++)
            tdm_tensor_destroy(p->const_on_device[i]);
    tdm_free(p->alloc, p->const_on_device);
    tdm_graph_free(p->graph);
    for (int i = 0; i < TDM_PLAN_MEM_SLOTS; i++) tdm_memplan_free(p->alloc, p->mem[i]);
    pthread_mutex_destroy(&p->mem_mu);
    tdm_free(p->alloc, p);
}

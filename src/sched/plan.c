/* Plan creation: graph passes, placement, kernel preparation, value lifetimes. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include <regex.h>
#include <stdlib.h>

#include "graph/clone.h"
#include "graph/fuse.h"
#include "graph/infer.h"
#include "ops/fused.h"
#include "sched/budget.h"
#include "sched/cost.h"
#include "sched/stream.h"
#include "sched/place.h"
#include "sched/xfer.h"
#include "sched/plan.h"
#include "sched/profile.h"

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

/* Constant folding to a fixed point (folding a Shape makes its consumers constant), shapes
 * inferred again after each round; unread nodes removed too when `dead`. */
static tdm_status *fold_rounds(tdm_graph *g, fold_ctx *fc, bool dead) {
    for (int round = 0; round < 8; round++) {
        int folded = 0, removed = 0;
        TDM_TRY(tdm_graph_fold_constants(g, fold_eval, fc, &folded));
        if (dead) TDM_TRY(tdm_graph_remove_dead(g, &removed));
        if (folded == 0 && removed == 0) break;
        TDM_TRY(tdm_graph_compact(g));
        TDM_TRY(tdm_graph_infer_shapes(g));
    }
    return NULL;
}

/* The shapes the cost model reads for placement. A graph whose inputs have symbolic dims (a
 * dynamic batch) has those at 1 in the cost model and no shapes at all past a Reshape whose
 * target comes from Shape -> Gather -> Concat: BERT-base exported with a dynamic batch had
 * its attention and the products after it predicted at a few microseconds, and placement put
 * them on the CPU beside an H200 (0.3-0.8 ms each there; the split ran 1.9x cuda:0's time).
 * So a copy of g (constants shared) gets each symbolic input dim at 1 (or at the size of
 * `given`'s tensor for that input, when given: a plan for a run's shapes), shape inference and
 * constant folding (the Shape chains fold) to a fixed point; *out is NULL when g has no
 * symbolic input dims or the copy fails (the estimates then come from g itself). */
static void cost_shapes(tdm_graph *g, tdm_device *cpu, const tdm_allocator *a,
                        const tdm_tensor *const *given, tdm_graph **out) {
    *out = NULL;
    bool symbolic = false;
    for (size_t k = 0; k < g->n_inputs && !symbolic; k++) {
        const tdm_value *v = &g->values[g->inputs[k]];
        for (int d = 0; d < v->rank; d++) symbolic |= v->dims[d] < 0;
    }
    if (!symbolic || !cpu) return;
    tdm_graph *c = NULL;
    tdm_status *st = tdm_graph_clone_sharing(g, &c);
    for (size_t k = 0; !st && k < c->n_inputs; k++) {
        tdm_value *v = &c->values[c->inputs[k]];
        const tdm_tensor *t = given ? given[k] : NULL;
        for (int d = 0; d < v->rank; d++)
            if (v->dims[d] < 0) v->dims[d] = t && t->rank == v->rank ? t->dims[d] : 1;
    }
    fold_ctx fc = {cpu, a};
    if (!st) st = tdm_graph_infer_shapes(c);
    if (!st) st = fold_rounds(c, &fc, false); /* (dead nodes kept: g's names find their twins) */
    if (st) {
        tdm_status_free(st);
        tdm_graph_free(c);
        return;
    }
    *out = c;
}

/* The node of c that makes the value g's node n makes first (by name), or NULL. */
static const tdm_node *cost_twin(const tdm_graph *g, const tdm_graph *c, const tdm_node *n) {
    if (!c || n->n_outputs < 1 || n->outputs[0] < 0) return NULL;
    int v = tdm_graph_find_value(c, g->values[n->outputs[0]].name);
    if (v < 0 || c->values[v].producer < 0) return NULL;
    const tdm_node *t = &c->nodes[c->values[v].producer];
    return strcmp(t->op_type, n->op_type) ? NULL : t;
}

/* Graph passes (opt_level >= 1): the QDQ pass (int8 operators from DequantizeLinear ->
 * op -> QuantizeLinear; before folding, which would dequantize the weights), constant folding (to a fixed point, since folding a Shape
 * makes its consumers constant), dead-node removal, then fusion, then static shapes again;
 * then, when `blocked`, the rewrites into CPU-only ops (FastGelu), the blocked-layout pass
 * (graph/fuse_blocked.c) and MatMulNBits' packed weights (graph/fuse_nbits.c), with shapes
 * again after each. */
static tdm_status *optimise(tdm_graph *g, tdm_device *cpu, bool blocked, int threads,
                            bool cpu_blocks, const tdm_allocator *a) {
    fold_ctx fc = {cpu, a};
    int qdq = 0;
    TDM_TRY(tdm_graph_fuse_qdq(g, &qdq));
    if (qdq) { /* (the DequantizeLinear nodes left unread go in the loop below) */
        TDM_TRY(tdm_graph_compact(g));
        TDM_TRY(tdm_graph_infer_shapes(g));
    }
    TDM_TRY(fold_rounds(g, &fc, true));
    int fused = 0;
    TDM_TRY(tdm_graph_fuse(g, &fused));
    if (fused) {
        TDM_TRY(tdm_graph_compact(g));
        TDM_TRY(tdm_graph_infer_shapes(g));
    }
    /* blocked layouts here only for a CPU alone; with several devices the pass runs after
     * placement on the CPU's part of the graph (relayout_cpu_regions). The channel block is
     * the one the CPU's convolutions take on this machine (8 on AVX2, 16 on AVX-512; 0:
     * plain layouts, no pass); channels-last instead where they prefer it and the graph
     * suits it (the pass judges). */
    if (blocked) {
        TDM_TRY(tdm_graph_fuse_cpu(g, &fused)); /* ops the CPU alone has (FastGelu) */
        if (fused) {
            TDM_TRY(tdm_graph_compact(g));
            TDM_TRY(tdm_graph_infer_shapes(g));
        }
        TDM_TRY(tdm_graph_fuse_blocked(g, tdm_device_channel_block(cpu),
                                       cpu_blocks ? TDM_CL_NEVER : tdm_device_channels_last(cpu),
                                       threads, &fused));
        if (fused) {
            TDM_TRY(tdm_graph_compact(g));
            TDM_TRY(tdm_graph_infer_shapes(g));
        }
        /* MatMulNBits' weights in the CPU kernels' packed form (also a CPU alone) */
        TDM_TRY(tdm_graph_pack_nbits(g, &fused));
        if (fused) {
            TDM_TRY(tdm_graph_compact(g));
            TDM_TRY(tdm_graph_infer_shapes(g));
        }
    }
    int flushed = 0; /* subnormal weights as 0 (graph/infer.h): the folded ones included */
    TDM_TRY(tdm_graph_flush_subnormal_constants(g, &flushed));
    return NULL;
}

/* Affinity rules, e.g. "Conv=cuda:0;/^decoder/=cpu;#10-20=cpu". Fills forced[node]. */
static tdm_status *parse_affinity(tdm_plan *p, const char *rules, int *forced) {
    tdm_graph *g = p->graph;
    char buf[2048];
    if (strlen(rules) >= sizeof buf) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "affinity rules are too long");
    snprintf(buf, sizeof buf, "%s", rules);
    char *save = NULL;
    for (char *rule = strtok_r(buf, ";", &save); rule; rule = strtok_r(NULL, ";", &save)) {
        while (*rule == ' ') rule++;
        if (!*rule) continue;
        char *eq = strrchr(rule, '=');
        if (!eq || eq == rule || !eq[1])
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "affinity rule '%s' is not PATTERN=DEVICE", rule);
        *eq = 0;
        const char *devname = eq + 1;
        int d = -1;
        for (int k = 0; k < p->n_devices; k++)
            if (strcmp(p->devices[k]->name, devname) == 0) d = k;
        if (d < 0)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "affinity rule '%s=%s': device '%s' is not in the "
                           "session's device list", rule, devname, devname);
        size_t len = strlen(rule);
        if (rule[0] == '/' && len >= 2 && rule[len - 1] == '/') {
            rule[len - 1] = 0;
            regex_t re;
            if (regcomp(&re, rule + 1, REG_EXTENDED | REG_NOSUB) != 0)
                return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "affinity rule: bad regular expression '%s'",
                               rule + 1);
            for (size_t i = 0; i < g->n_nodes; i++)
                if (regexec(&re, g->nodes[i].name, 0, NULL, 0) == 0) forced[i] = d;
            regfree(&re);
        } else if (rule[0] == '#') {
            char *end;
            long a = strtol(rule + 1, &end, 10), b = a;
            if (*end == '-') b = strtol(end + 1, &end, 10);
            if (*end || a < 0 || b < a)
                return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "affinity rule: bad node range '%s'", rule);
            for (long i = a; i <= b && (size_t)i < g->n_nodes; i++) forced[i] = d;
        } else {
            for (size_t i = 0; i < g->n_nodes; i++)
                if (strcmp(g->nodes[i].op_type, rule) == 0) forced[i] = d;
        }
    }
    return NULL;
}

/* Placement, in explicit passes:
 *  1. capability: which device has a kernel for each node (from each device's kernel table;
 *     strings and subgraph-bearing nodes only on host-memory devices);
 *  2. rules: affinity and the placement policy force devices;
 *  3. choice: one device: trivial; "first": preference order; "auto": cost model (device
 *     profiles + roofline per node) and HEFT list scheduling with copy costs (sched/place.c);
 *  4. the kernel of the chosen device is recorded for dispatch. */
static tdm_status *place(tdm_plan *p, const tdm_plan_options *opts, const int *keep) {
    tdm_graph *g = p->graph;
    size_t N = g->n_nodes;
    int D = p->n_devices;
    const tdm_allocator *a = p->alloc;
    char missing[1024] = "";
    size_t mlen = 0;
    int n_missing = 0;
    tdm_status *st = NULL;
    tdm_free(a, p->supported); /* (a second placement after the layout pass) */
    tdm_free(a, p->reason);
    tdm_free(a, p->node_ms);
    p->node_ms = NULL;
    const tdm_kernel_def **kern = tdm_calloc(a, N * (size_t)D + 1, sizeof *kern);
    int *forced = tdm_calloc(a, N + 1, sizeof *forced);
    p->supported = tdm_calloc(a, N * (size_t)D + 1, sizeof *p->supported);
    p->reason = tdm_calloc(a, N + 1, sizeof *p->reason);
    if (!kern || !forced || !p->supported || !p->reason) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory placing nodes");
        goto done;
    }
    /* 1. capability */
    for (size_t i = 0; i < N; i++) {
        tdm_node *n = &g->nodes[i];
        forced[i] = -1;
        tdm_dtype types[64];
        int nt = n->n_inputs < 64 ? n->n_inputs : 64;
        bool unknown = false, host_only = false;
        for (int k = 0; k < nt; k++) {
            types[k] = n->inputs[k] >= 0 ? g->values[n->inputs[k]].dtype : TDM_UNDEFINED;
            if (n->inputs[k] >= 0 && types[k] == TDM_UNDEFINED) unknown = true;
            if (tdm_dtype_has_ptrs(types[k])) host_only = true;
        }
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0 && tdm_dtype_has_ptrs(g->values[n->outputs[k]].dtype)) host_only = true;
        for (int k = 0; k < n->n_attrs; k++)
            if (n->attrs[k].type == TDM_ATTR_GRAPH || n->attrs[k].type == TDM_ATTR_GRAPHS) host_only = true;
        bool any = false;
        for (int d = 0; d < D && n->schema; d++) {
            if (opts->no_fallback && d > 0) break;
            if (host_only && !p->devices[d]->host_memory) continue;
            const tdm_kernel_def *k = tdm_device_find_kernel(p->devices[d], n, types, nt);
            /* dtype not known statically: the run-time lookup decides; accept host devices */
            if (!k && !(unknown && p->devices[d]->host_memory)) continue;
            kern[i * (size_t)D + (size_t)d] = k;
            p->supported[i * (size_t)D + (size_t)d] = true;
            any = true;
        }
        if (!any) {
            n_missing++;
            if (mlen < sizeof missing - 80)
                mlen += (size_t)snprintf(missing + mlen, sizeof missing - mlen, "%s%s%s%s (node '%s')",
                                         n_missing > 1 ? ", " : "", n->domain,
                                         n->domain[0] ? "." : "", n->op_type, n->name);
        }
    }
    if (n_missing) {
        st = TDM_ERR(TDM_ERR_UNSUPPORTED, "%d node%s cannot run on %s: %s", n_missing,
                     n_missing > 1 ? "s" : "",
                     opts->no_fallback || D == 1 ? p->devices[0]->name : "any of the devices", missing);
        goto done;
    }
    /* 2. rules */
    const char *policy = opts->placement && opts->placement[0] ? opts->placement : "auto";
    bool auto_policy = strcmp(policy, "auto") == 0, first_policy = strcmp(policy, "first") == 0;
    int pinned = -1;
    if (!auto_policy && !first_policy) {
        for (int d = 0; d < D; d++)
            if (strcmp(p->devices[d]->name, policy) == 0) pinned = d;
        if (pinned < 0) {
            st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "placement '%s' is not 'auto', 'first' or a device "
                         "of the session", policy);
            goto done;
        }
    }
    if (keep) { /* every node stays where the first placement put it */
        for (size_t i = 0; i < N; i++) forced[i] = keep[i];
        pinned = -1;
    } else if (opts->affinity && opts->affinity[0] &&
               (st = parse_affinity(p, opts->affinity, forced)))
        goto done;
    for (size_t i = 0; i < N; i++) {
        if (forced[i] < 0 && pinned >= 0 && p->supported[i * (size_t)D + (size_t)pinned]) forced[i] = pinned;
        if (forced[i] >= 0 && !p->supported[i * (size_t)D + (size_t)forced[i]]) {
            if (opts->no_fallback || pinned < 0) {
                st = TDM_ERR(TDM_ERR_UNSUPPORTED, "%s node '%s' is assigned to %s by a rule, which has "
                             "no kernel for it", g->nodes[i].op_type, g->nodes[i].name,
                             p->devices[forced[i]]->name);
                goto done;
            }
            forced[i] = -1;
        }
    }
    /* 3. choice */
    if (D == 1 || !auto_policy) {
        for (size_t i = 0; i < N; i++) {
            int d = forced[i];
            int count = 0;
            for (int e = 0; e < D; e++) count += p->supported[i * (size_t)D + (size_t)e];
            if (d < 0)
                for (d = 0; d < D && !p->supported[i * (size_t)D + (size_t)d]; d++) {
                }
            g->nodes[i].device = d;
            p->reason[i] = forced[i] >= 0 ? TDM_PLACE_AFFINITY
                           : count == 1  ? TDM_PLACE_ONLY_SUPPORTED
                                         : TDM_PLACE_FIRST_CHOICE;
        }
    } else {
        tdm_device_profile prof[TDM_MAX_DEVICES];
        bool host[TDM_MAX_DEVICES];
        for (int d = 0; d < D; d++) {
            host[d] = p->devices[d]->host_memory;
            if ((st = tdm_profile_device(p->devices[d], a, p->settings,
                                         opts->threads > 0 ? opts->threads : 1, false, &prof[d])))
                goto done;
        }
        p->node_ms = tdm_calloc(a, N * (size_t)D + 1, sizeof *p->node_ms);
        if (!p->node_ms) {
            st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory placing nodes");
            goto done;
        }
        tdm_graph *cg = NULL; /* shapes with the symbolic dims at 1 or given (cost_shapes) */
        cost_shapes(g, find_cpu(p->devices, D), a, opts->cost_inputs, &cg);
        for (size_t i = 0; i < N; i++) {
            const tdm_node *t = cost_twin(g, cg, &g->nodes[i]);
            for (int d = 0; d < D; d++)
                p->node_ms[i * (size_t)D + (size_t)d] =
                    t ? tdm_cost_node_ms(cg, t, &prof[d]) : tdm_cost_node_ms(g, &g->nodes[i], &prof[d]);
        }
        double *vbytes = cg ? tdm_alloc(a, (g->n_values + 1) * sizeof *vbytes) : NULL;
        for (size_t v = 0; vbytes && v < g->n_values; v++) {
            int cv = tdm_graph_find_value(cg, g->values[v].name);
            vbytes[v] = cv >= 0 ? tdm_value_bytes(&cg->values[cv]) : tdm_value_bytes(&g->values[v]);
        }
        tdm_graph_free(cg);
        p->measured_used = tdm_measured_apply(p); /* measured beats predicted */
        tdm_place_input in = {g, D, prof, host, p->supported, p->node_ms, forced, opts->no_fallback, vbytes};
        tdm_place_result r;
        st = tdm_place_heft(&in, a, &r);
        tdm_free(a, vbytes);
        if (st) goto done;
        for (size_t i = 0; i < N; i++) {
            g->nodes[i].device = r.device[i];
            p->reason[i] = (unsigned char)r.reason[i];
        }
        p->predicted_ms = r.serial_ms;
        p->predicted_copy_ms = r.copy_ms;
        p->predicted_copy_bytes = r.copy_bytes;
        memcpy(p->single_ms, r.single_ms, sizeof p->single_ms);
        p->has_prediction = true;
        tdm_place_result_free(a, &r);
    }
    /* 4. dispatch record */
    for (size_t i = 0; i < N; i++) {
        p->nodes[i].kernel = kern[i * (size_t)D + (size_t)g->nodes[i].device];
        if (g->nodes[i].device != g->nodes[0].device) p->multi_device = true;
    }
done:
    tdm_free(a, kern);
    tdm_free(a, forced);
    return st;
}

static tdm_status *prepare_kernels(tdm_plan *p) {
    tdm_graph *g = p->graph;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_kernel_def *k = p->nodes[i].kernel;
        int d = g->nodes[i].device;
        p->nodes[i].kflags = k && d >= 0 && d < p->n_devices
                                 ? tdm_device_kernel_flags(p->devices[d], k, &g->nodes[i])
                                 : 0;
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
    for (size_t v = 0; v < g->n_values; v++) p->const_vals[v] = g->values[v].data;
    for (size_t i = 0; i < g->n_nodes; i++)
        p->nodes[i].shape_only0 = tdm_node_reads_shape_only(&g->nodes[i], 0);
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

/* tdm_plan_node.inplace_in, from the kernel flags and the lifetimes. */
static void inplace_inputs(tdm_plan *p) {
    const tdm_graph *g = p->graph;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        int k = TDM_KF_INPLACE_INPUT(p->nodes[i].kflags), d = n->device;
        p->nodes[i].inplace_in = -1;
        if (k < 0 || k >= n->n_inputs || n->n_outputs < 1 || n->outputs[0] < 0 ||
            p->multi_device || d < 0 || d >= p->n_devices || !p->devices[d]->host_memory)
            continue;
        int u = n->inputs[k];
        bool once = u >= 0 && p->release_after[u] == (int)i;
        for (int j = 0; once && j < n->n_inputs; j++) once = j == k || n->inputs[j] != u;
        for (int j = 0; once && j < n->n_implicit; j++) once = n->implicit[j] != u;
        if (once) p->nodes[i].inplace_in = k;
    }
}

/* tdm_plan.const_twin: each constant of p's graph that q's graph holds under the same name
 * with the same bytes (both made from graphs sharing the model's constants) uses q's device
 * copy. Without memory (or budgets, whose streamed weights each plan manages) none is shared. */
static void const_twins(tdm_plan *p, tdm_plan *q) {
    const tdm_graph *g = p->graph, *h = q->graph;
    if (q->n_devices != p->n_devices) return;
    for (int d = 0; d < p->n_devices; d++)
        if (q->devices[d] != p->devices[d]) return;
    int *twin = tdm_alloc(p->alloc, (g->n_values ? g->n_values : 1) * sizeof *twin);
    if (!twin) return;
    size_t shared = 0;
    for (size_t v = 0; v < g->n_values; v++) {
        const tdm_tensor *t = g->values[v].data;
        int w = t ? tdm_graph_find_value(h, g->values[v].name) : -1;
        const tdm_tensor *u = w >= 0 ? h->values[w].data : NULL;
        twin[v] = u && u->data == t->data && u->nbytes == t->nbytes && u->dtype == t->dtype &&
                          u->rank == t->rank &&
                          !memcmp(u->dims, t->dims, (size_t)t->rank * sizeof *t->dims) && t->data && !u->device && !t->device
                      ? w
                      : -1;
        shared += twin[v] >= 0;
    }
    if (!shared) {
        tdm_free(p->alloc, twin);
        return;
    }
    p->const_from = q;
    p->const_twin = twin;
}

tdm_tensor **tdm_plan_const_slot(tdm_plan *p, int v, int di, pthread_mutex_t **mu) {
    if (p->const_twin && p->const_twin[v] >= 0) {
        tdm_plan *q = p->const_from;
        *mu = &q->mem_mu;
        return &q->const_on_device[(size_t)p->const_twin[v] * (size_t)q->n_devices + (size_t)di];
    }
    *mu = &p->mem_mu;
    return &p->const_on_device[(size_t)v * (size_t)p->n_devices + (size_t)di];
}

/* Per-node and per-value arrays of the plan, sized for the graph as it is now. */
static tdm_status *plan_arrays(tdm_plan *p) {
    const tdm_allocator *a = p->alloc;
    const tdm_graph *g = p->graph;
    tdm_free(a, p->nodes);
    tdm_free(a, p->release_after);
    tdm_free(a, p->first_use);
    tdm_free(a, p->const_vals);
    tdm_free(a, p->const_on_device);
    p->nodes = tdm_calloc(a, g->n_nodes ? g->n_nodes : 1, sizeof *p->nodes);
    p->release_after = tdm_calloc(a, g->n_values ? g->n_values : 1, sizeof(int));
    p->first_use = tdm_calloc(a, g->n_values ? g->n_values : 1, sizeof(int));
    p->const_vals = tdm_calloc(a, g->n_values ? g->n_values : 1, sizeof *p->const_vals);
    p->const_on_device = tdm_calloc(a, (g->n_values ? g->n_values : 1) * (size_t)p->n_devices,
                                    sizeof(tdm_tensor *));
    if (!p->nodes || !p->release_after || !p->first_use || !p->const_vals || !p->const_on_device)
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a plan");
    return NULL;
}

/* The blocked-layout pass on the CPU's part of a multi-device plan: after placement, nodes on
 * the CPU are marked (device -1 - reason) and the rest keep device + D * reason, so the pass
 * converts only CPU nodes (its new nodes inherit the mark: ToBlocked/BlockedConv/BlockedPool
 * of a CPU node, FromBlocked -1) and every tensor another device reads stays plain. Then the
 * graph is placed again with each node kept where it was, for the kernels and predictions. */
static tdm_status *relayout_cpu_regions(tdm_plan *p, const tdm_plan_options *opts,
                                        tdm_device *cpu) {
    tdm_graph *g = p->graph;
    const tdm_allocator *a = p->alloc;
    int D = p->n_devices, c = -1;
    size_t on_cpu = 0;
    for (int d = 0; d < D; d++)
        if (p->devices[d] == cpu) c = d;
    for (size_t i = 0; i < g->n_nodes; i++) on_cpu += g->nodes[i].device == c;
    if (c < 0 || on_cpu == 0) return NULL;
    for (size_t i = 0; i < g->n_nodes; i++) {
        tdm_node *n = &g->nodes[i];
        int r = p->reason ? p->reason[i] : 0;
        n->device = n->device == c ? -1 - r : n->device + D * r;
    }
    int fused = 0;
    tdm_status *st = tdm_graph_fuse_blocked(g, tdm_device_channel_block(cpu),
                                            tdm_device_channels_last(cpu), opts->threads, &fused);
    if (!st && fused && !(st = tdm_graph_compact(g))) st = tdm_graph_infer_shapes(g);
    size_t N = g->n_nodes;
    int *keep = tdm_calloc(a, N + 1, sizeof *keep);
    unsigned char *why = tdm_calloc(a, N + 1, sizeof *why);
    if (!st && (!keep || !why)) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a plan");
    for (size_t i = 0; i < N; i++) { /* decode (also on failure: devices stay valid) */
        tdm_node *n = &g->nodes[i];
        int d = n->device < 0 ? c : n->device % D;
        if (keep) keep[i] = d;
        if (why) why[i] = (unsigned char)(n->device < 0 ? -1 - n->device : n->device / D);
        n->device = d;
    }
    /* each device alone: the first placement's figures (the kept placement pins the blocked
     * nodes to the CPU, which would make every other device "cannot") */
    double single[TDM_MAX_DEVICES];
    memcpy(single, p->single_ms, sizeof single);
    if (!st && fused && !(st = plan_arrays(p)) && !(st = place(p, opts, keep))) {
        for (size_t i = 0; i < N; i++) p->reason[i] = why[i];
        for (int d = 0; d < D && d < TDM_MAX_DEVICES; d++)
            if (isinf(p->single_ms[d])) p->single_ms[d] = single[d];
    }
    tdm_free(a, keep);
    tdm_free(a, why);
    return st;
}

/* Memory budgets (sched/budget.h): the fit pass after placement; when it moves the nodes
 * that do not fit to the CPU (the layers plan), the graph is placed again with them there
 * and fitted once more (which keeps the first fit's decision for the explanation). */
static tdm_status *fit_budgets(tdm_plan *p, const tdm_plan_options *opts, bool *moved) {
    int *keep = NULL;
    TDM_TRY(tdm_budget_fit(p, opts->budget, *moved, &keep));
    if (!keep) return NULL;
    tdm_status *st = place(p, opts, keep);
    tdm_free(p->alloc, keep);
    keep = NULL;
    *moved = true;
    if (!st) st = tdm_budget_fit(p, opts->budget, true, &keep);
    tdm_free(p->alloc, keep);
    return st;
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
    p->model_hash = opts->model_hash;
    p->settings = tdm_settings_or_builtin(opts->settings);
    p->loop = opts->loop;
    pthread_mutex_init(&p->mem_mu, NULL);
    p->devices = tdm_calloc(a, (size_t)(n_devices > 0 ? n_devices : 1), sizeof *p->devices);
    if (!p->devices) {
        tdm_graph_free(graph);
        pthread_mutex_destroy(&p->mem_mu);
        tdm_free(a, p);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a plan");
    }
    for (int d = 0; d < n_devices; d++) p->devices[d] = devices[d];
    p->n_devices = n_devices;
    p->pool = pool;
    tdm_status *st = NULL;
    if (n_devices < 1) {
        st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "no devices to run on");
        goto fail;
    }
    if ((st = tdm_graph_infer_shapes(graph))) goto fail;
    tdm_device *cpu = find_cpu(devices, n_devices);
    bool blocked = cpu && n_devices == 1;
    if (opts->opt_level >= 1 && cpu &&
        (st = optimise(graph, cpu, blocked, opts->threads, opts->cpu_blocks, a)))
        goto fail;
    if ((st = plan_arrays(p))) goto fail;
    if ((st = place(p, opts, NULL))) goto fail;
    bool moved = false; /* the budgets moved nodes to the CPU */
    if (opts->budget && (st = fit_budgets(p, opts, &moved))) goto fail;
    if (opts->opt_level >= 1 && cpu && !blocked) {
        size_t before = p->graph->n_nodes;
        if ((st = relayout_cpu_regions(p, opts, cpu))) goto fail;
        /* the layout pass changed the graph: the residency tables again, on the final one */
        if (opts->budget && p->graph->n_nodes != before && (st = fit_budgets(p, opts, &moved)))
            goto fail;
    }
    if (opts->const_from && !opts->budget) const_twins(p, opts->const_from);
    size_t nn = graph->n_nodes ? graph->n_nodes : 1;
    if (opts->profile && (!(p->measured_ms = tdm_calloc(a, nn, sizeof(double))) ||
                          !(p->measured_flops = tdm_calloc(a, nn, sizeof(double))) ||
                          !(p->measured_bytes = tdm_calloc(a, nn, sizeof(double))))) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a plan");
        goto fail;
    }
    if ((st = tdm_kv_plan_build(p))) goto fail; /* where each KV cache layer lives */
    if ((st = prepare_kernels(p))) goto fail;
    lifetimes(p);
    inplace_inputs(p);
    *out = p;
    return NULL;
fail:
    tdm_plan_free(p);
    return st;
}

bool tdm_plan_channels_last(const tdm_plan *p) {
    const tdm_graph *g = p->graph;
    for (size_t i = 0; i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].op_type, "BlockedConv") &&
            tdm_attr_int(&g->nodes[i], "block", 0) == TDM_BLOCK_CHANNELS_LAST)
            return true;
    return false;
}

void tdm_plan_free(tdm_plan *p) {
    if (!p) return;
    tdm_stream_pool_free(p); /* device buffers: while p->devices is there */
    if (p->nodes && p->graph)
        for (size_t i = 0; i < p->graph->n_nodes; i++)
            if (p->nodes[i].state && p->nodes[i].kernel && p->nodes[i].kernel->release)
                p->nodes[i].kernel->release(p->nodes[i].state, p->alloc);
    tdm_exec_bodies_free(p); /* before the graph: their kernels' states point into it */
    tdm_free(p->alloc, p->nodes);
    tdm_free(p->alloc, p->release_after);
    tdm_free(p->alloc, p->first_use);
    tdm_free(p->alloc, p->const_vals);
    if (p->const_on_device && p->graph)
        for (size_t i = 0; i < p->graph->n_values * (size_t)p->n_devices; i++)
            tdm_tensor_destroy(p->const_on_device[i]);
    tdm_free(p->alloc, p->const_on_device);
    tdm_free(p->alloc, p->const_twin);
    tdm_free(p->alloc, p->supported);
    tdm_free(p->alloc, p->node_ms);
    tdm_free(p->alloc, p->reason);
    tdm_free(p->alloc, p->measured_ms);
    tdm_free(p->alloc, p->measured_flops);
    tdm_free(p->alloc, p->measured_bytes);
    tdm_free(p->alloc, p->devices);
    tdm_graph_free(p->graph);
    for (int i = 0; i < TDM_PLAN_MEM_SLOTS; i++) tdm_memplan_free(p->alloc, p->mem[i]);
    tdm_xfer_pool_free(p->staging, p->alloc);
    tdm_budget_plan_free(p->alloc, p->budget);
    tdm_kv_plan_free(p->alloc, p->kv);
    pthread_mutex_destroy(&p->mem_mu);
    tdm_free(p->alloc, p);
}

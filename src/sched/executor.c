/* Runs plans node by node. Each node: shapes from the schema's infer on the real inputs,
 * outputs allocated, kernel executed on the node's device; values are released after their
 * last reader. Subgraphs (If/Loop/Scan bodies) run through the same loop in a child frame
 * whose outer-scope names resolve in the enclosing frames. Multi-device plans run in
 * executor_multi.c, copies between memories are in executor_copy.c (executor_internal.h). */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/hash.h"
#include "graph/infer.h"
#include "ops/op.h"
#include "sched/budget.h"
#include "sched/cost.h"
#include "sched/executor_internal.h"

tdm_status *tdm_exec_between_nodes(const frame *f, size_t next) {
    tdm_status *st = tdm_run_ctl_check(f->ctl); /* tdm_session_cancel, run deadline */
    if (st && next < f->g->n_nodes)
        st = tdm_status_wrap(st, "before node '%s': ", f->g->nodes[next].name);
    return st;
}

/* Output tensor for value v: a view into the arena when the memory plan has a slot of this
 * exact size, else a heap tensor. Zeroed (kernels may rely on it) unless the kernel writes
 * all of it (kflags, backend.h). A slot shared with an input (in place) is taken only when
 * the kernel running now is the one that allows it. */
/* The graph output that value v is (main graph of a bound run), or -1. Outputs are the only
 * values kept to the end of a run (release_after -1), so most values are not looked up. */
static int frame_output_index(const frame *f, int v) {
    if (!f->bound || v < 0 || f->release_after[v] >= 0) return -1;
    for (size_t o = 0; o < f->g->n_outputs; o++)
        if (f->g->outputs[o] == v) return (int)o;
    return -1;
}

/* v takes t's rank and dims (profiling's per-run shapes). */
static void note_shape(tdm_value *v, const tdm_tensor *t) {
    if (!t || t->rank < 0 || t->rank > TDM_MAX_RANK) return;
    v->rank = t->rank;
    if (t->rank) memcpy(v->dims, t->dims, (size_t)t->rank * sizeof *v->dims);
}

void tdm_exec_note_run(frame *f, size_t i, const tdm_node *n, const tdm_tensor *const *ins,
                       tdm_tensor *const *outs) {
    if (!f->shapes) return;
    for (int k = 0; k < n->n_outputs; k++)
        if (n->outputs[k] >= 0) note_shape(&f->shapes[n->outputs[k]], outs[k]);
    double fl = 0, by = 0;
    if (!f->work || !tdm_node_run_cost(n, n->n_inputs, ins, n->n_outputs, outs, &fl, &by)) return;
    double *w = f->work + 2 * i; /* FLOPs, bytes; -1 until a run of the node counts them */
    w[0] = (w[0] > 0 ? w[0] : 0) + fl;
    w[1] = (w[1] > 0 ? w[1] : 0) + by;
}

static bool same_shape(const tdm_tensor *t, tdm_dtype dtype, int rank, const int64_t *dims) {
    return t->dtype == dtype && t->rank == rank &&
           (rank == 0 || memcmp(t->dims, dims, (size_t)rank * sizeof *dims) == 0);
}

static tdm_status *bound_mismatch(const frame *f, int o, const tdm_tensor *b, tdm_dtype dtype,
                                  int rank, const int64_t *dims) {
    char want[160], got[160];
    return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "output '%s' is bound to a %s %s tensor, but the run "
                   "produces %s %s", f->g->values[f->g->outputs[o]].name, tdm_dtype_name(b->dtype),
                   tdm_shape_str(b->rank, b->dims, got, sizeof got), tdm_dtype_name(dtype),
                   tdm_shape_str(rank, dims, want, sizeof want));
}

/* Output o bound to the caller's tensor: a header over its memory (no allocation when the
 * run has header storage). Its memory is zeroed as a new output would be, unless the kernel
 * writes all of it or it is also one of the node's inputs (an in-place update, such as a
 * KV cache whose present output shares the past input's buffer). A tensor in a device's
 * memory (a plan state, tdm_plan_state_new) is bound for nodes on that device, updated in
 * place or written whole, through the run's header storage. */
static tdm_status *frame_bound_output(frame *f, tdm_device *dev, int o, tdm_dtype dtype, int rank,
                                      const int64_t *dims, unsigned kflags, int n_in,
                                      const tdm_tensor *const *ins, tdm_tensor **out) {
    tdm_tensor *b = f->bound[o];
    if (!same_shape(b, dtype, rank, dims)) return bound_mismatch(f, o, b, dtype, rank, dims);
    bool on_dev = dev && !dev->host_memory;
    bool shares_input = false;
    for (int k = 0; k < n_in && !shares_input; k++) shares_input = ins[k] && ins[k]->data == b->data;
    if (on_dev ? b->device != dev : b->device != NULL)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "output '%s' is bound to a tensor in %s memory, but "
                       "the node making it runs on %s", f->g->values[f->g->outputs[o]].name,
                       b->device ? ((const tdm_device *)b->device)->name : "host",
                       dev ? dev->name : "the host");
    if (b->device && (!f->bound_hdr || (!shares_input && !(kflags & TDM_KF_WRITES_ALL))))
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "output '%s': a tensor in %s memory can be bound only "
                       "for an update in place or a kernel that writes all of it",
                       f->g->values[f->g->outputs[o]].name, dev->name);
    tdm_tensor *t = NULL;
    if (f->bound_hdr) {
        t = &f->bound_hdr[o];
        memset(t, 0, sizeof *t);
        t->dtype = dtype;
        t->rank = rank;
        if (rank) memcpy(t->dims, dims, (size_t)rank * sizeof *dims);
        t->count = b->count;
        t->nbytes = b->nbytes;
        t->data = b->data;
        t->alloc = f->a;
        t->device = b->device;
        t->pooled = true; /* the binding's: destroy leaves it alone */
    } else {
        TDM_TRY(tdm_tensor_new_view(f->a, dtype, rank, dims, b->data, &t));
    }
    if (!b->device && !shares_input && !(kflags & TDM_KF_WRITES_ALL) && b->nbytes)
        memset(b->data, 0, b->nbytes);
    *out = t;
    return NULL;
}

static tdm_status *frame_new_output(frame *f, tdm_device *dev, int v, tdm_dtype dtype, int rank,
                                    const int64_t *dims, unsigned kflags, int n_in,
                                    const tdm_tensor *const *ins, tdm_tensor **out) {
    int bo = f ? frame_output_index(f, v) : -1;
    if (bo >= 0 && f->bound[bo])
        return frame_bound_output(f, dev, bo, dtype, rank, dims, kflags, n_in, ins, out);
    if (dev && !dev->host_memory) return tdm_device_tensor_new(dev, f ? f->a : NULL, dtype, rank, dims, out);
    bool shared = f && f->mp && v >= 0 && f->mp->alias_of[v] >= 0;
    if (shared && TDM_KF_INPLACE_INPUT(kflags) < 0) {
        /* another kernel than planned: its own memory, and the plan stays as it is */
        return tdm_tensor_new(f->a, dtype, rank, dims, out);
    }
    if (f && f->mp && v >= 0 && f->mp->offset[v] >= 0 && !tdm_dtype_has_ptrs(dtype)) {
        int64_t count;
        size_t nbytes;
        tdm_status *st = tdm_shape_count(rank, dims, dtype, "output", &count, &nbytes);
        if (st) return st;
        if (nbytes == f->mp->size[v]) {
            tdm_tensor *t = &f->mp->headers[v];
            memset(t, 0, sizeof *t);
            t->dtype = dtype;
            t->rank = rank;
            memcpy(t->dims, dims, (size_t)rank * sizeof *dims);
            t->count = count;
            t->nbytes = nbytes;
            t->data = f->mp->arena + f->mp->offset[v];
            t->alloc = f->a;
            t->pooled = true;
            if (!shared && !(kflags & TDM_KF_WRITES_ALL)) memset(t->data, 0, nbytes);
            *out = t;
            return NULL;
        }
    }
    /* (a kernel that writes all of its output gets it unzeroed: a graph output of megabytes,
     * e.g. a recognizer's class scores, was zeroed on every run) */
    TDM_TRY(kflags & TDM_KF_WRITES_ALL ? tdm_tensor_new_uninit(f ? f->a : NULL, dtype, rank, dims, out)
                                       : tdm_tensor_new(f ? f->a : NULL, dtype, rank, dims, out));
    if (f && f->record && v >= 0 && !tdm_dtype_has_ptrs(dtype)) f->record[v] = (*out)->nbytes;
    return NULL;
}

static tdm_status *run_subgraph(tdm_kernel_ctx *ctx, const tdm_graph *body, int n_in,
                                const tdm_tensor *const *in, int n_out, tdm_tensor **out);

static tdm_status *kctx_alloc_output(tdm_kernel_ctx *ctx, int i, tdm_dtype dtype, int rank,
                                     const int64_t *dims) {
    if (i < 0 || i >= ctx->n_out)
        return TDM_ERR(TDM_ERR_INTERNAL, "alloc_output: output %d out of range", i);
    if (ctx->out[i]) {
        tdm_tensor_destroy(ctx->out[i]);
        ctx->out[i] = NULL;
    }
    tdm_status *st = ctx->device && !ctx->device->host_memory
                         ? tdm_device_tensor_new(ctx->device, ctx->alloc, dtype, rank, dims, &ctx->out[i])
                         : tdm_tensor_new(ctx->alloc, dtype, rank, dims, &ctx->out[i]);
    return st ? tdm_status_wrap(st, "%s node '%s' output %d: ", ctx->node->op_type,
                                ctx->node->name, i)
              : NULL;
}

tdm_status *tdm_exec_run_node(tdm_device *dev, const tdm_kernel_def *k, void *state,
                            const tdm_allocator *a, tdm_threadpool *pool, const tdm_node *n,
                            const tdm_tensor *const *ins, tdm_tensor **outs, frame *f) {
    if (!n->schema)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "operator %s%s%s (node '%s') is not supported",
                       n->domain[0] ? n->domain : "", n->domain[0] ? "." : "", n->op_type, n->name);
    if (n->n_inputs > MAX_IO || n->n_outputs > MAX_IO)
        return TDM_ERR(TDM_ERR_LIMIT, "node '%s' has too many inputs or outputs", n->name);
    tdm_value_info in_stack[16], out_stack[16];
    tdm_value_info *in = in_stack, *out = out_stack;
    tdm_dtype types_stack[16], *types = types_stack;
    tdm_status *st = NULL;
    void *own_state = NULL; /* prepare() made here, for this run only */
    bool heap = n->n_inputs > 16 || n->n_outputs > 16;
    if (heap) {
        in = tdm_calloc(a, (size_t)n->n_inputs + 1, sizeof *in);
        out = tdm_calloc(a, (size_t)n->n_outputs + 1, sizeof *out);
        types = tdm_calloc(a, (size_t)n->n_inputs + 1, sizeof *types);
        if (!in || !out || !types) {
            st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory running node '%s'", n->name);
            goto done;
        }
    }
    for (int i = 0; i < n->n_outputs; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].rank = -1;
        out[i].present = n->outputs[i] >= 0;
        outs[i] = NULL;
    }
    /* shapes seen before for these input shapes: no infer, no input descriptions */
    size_t node_i = 0;
    struct tdm_shape_cache *sc = tdm_exec_shape_cache_of(f, n, ins, &node_i);
    bool cached = sc && tdm_exec_shape_cache_get(sc, node_i, n, ins, out);
    for (int i = 0; i < n->n_inputs; i++) {
        const tdm_tensor *t = ins[i];
        types[i] = t ? t->dtype : TDM_UNDEFINED;
        if (cached) continue;
        tdm_value_info *vi = &in[i];
        memset(vi, 0, sizeof *vi);
        types[i] = TDM_UNDEFINED;
        if (!t) {
            vi->rank = -1;
            continue;
        }
        vi->present = true;
        vi->dtype = t->dtype;
        vi->rank = t->rank;
        memcpy(vi->dims, t->dims, sizeof t->dims);
        vi->data = t->device ? NULL : t;
        if (t->device && f && (n->schema->shape_inputs & (1u << (i & 31))) && n->inputs[i] >= 0) {
            const tdm_tensor *h = NULL;
            if ((st = tdm_exec_input_for(f, n->inputs[i], NULL, &h, NULL))) goto done;
            vi->data = h;
        }
        types[i] = t->dtype;
    }
    if (n->schema->infer && !cached) {
        tdm_infer_ctx ictx = {n, n->opset, n->n_inputs, in, n->n_outputs, out};
        if ((st = n->schema->infer(&ictx))) goto done;
        if (sc) tdm_exec_shape_cache_put(sc, node_i, n, ins, out);
    }
    if (!k || (k->type_input >= 0 && (k->type_input >= n->n_inputs ||
                                       !(k->types & tdm_kernel_type_bit(types[k->type_input]))))) {
        k = tdm_device_find_kernel(dev, n, types, n->n_inputs);
        state = NULL;
        if (!k) {
            st = TDM_ERR(TDM_ERR_UNSUPPORTED,
                         "%s node '%s': device %s has no kernel for input type %s (opset %d)",
                         n->op_type, n->name, dev->name,
                         n->n_inputs ? tdm_dtype_name(types[0]) : "-", n->opset);
            goto done;
        }
        if (k->prepare) {
            /* no plan-time state here (subgraph bodies, constant folding, dtypes unknown at
             * plan time): prepared for this run only, no input taken as constant */
            const tdm_tensor **none = tdm_calloc(a, (size_t)n->n_inputs + 1, sizeof *none);
            if (!none) {
                st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory running node '%s'", n->name);
                goto done;
            }
            st = k->prepare(n, n->opset, n->n_inputs, none, a, &own_state);
            tdm_free(a, none);
            if (st) {
                st = tdm_status_wrap(st, "%s node '%s': ", n->op_type, n->name);
                goto done;
            }
            state = own_state;
        }
    }
    /* the plan's promises hold for the plan's own kernel only */
    const tdm_plan_node *pn = NULL;
    if (f && f->plan && f->plan->graph == f->g && n >= f->g->nodes &&
        n < f->g->nodes + f->g->n_nodes && f->plan->nodes[n - f->g->nodes].kernel == k &&
        !(n->schema->flags & TDM_OP_DATA_DEPENDENT))
        pn = &f->plan->nodes[n - f->g->nodes];
    unsigned kflags = pn ? pn->kflags : f && f->body ? tdm_exec_body_kflags(f->body, n, k) : 0;
    if (!(n->schema->flags & TDM_OP_DATA_DEPENDENT)) {
        for (int i = 0; i < n->n_outputs; i++) {
            if (n->outputs[i] < 0 && !out[i].present) continue;
            if (out[i].dtype == TDM_UNDEFINED || out[i].rank < 0) {
                st = TDM_ERR(TDM_ERR_INTERNAL, "%s node '%s': output %d shape was not inferred",
                             n->op_type, n->name, i);
                goto done;
            }
            st = f ? frame_new_output(f, dev, n->outputs[i], out[i].dtype, out[i].rank, out[i].dims,
                                      kflags, n->n_inputs, ins, &outs[i])
                   : tdm_tensor_new(a, out[i].dtype, out[i].rank, out[i].dims, &outs[i]);
            if (st) {
                st = tdm_status_wrap(st, "%s node '%s' output %d: ", n->op_type, n->name, i);
                goto done;
            }
        }
    }
    /* A kernel that may write over an input always does (the same arithmetic on every run,
     * bit for bit): when the plan did not give output 0 that input's memory, the input is
     * copied there first. */
    const tdm_tensor *ins_own[16];
    int ik = pn ? pn->inplace_in : -1;
    if (ik >= 0 && n->n_inputs <= 16 && outs[0]) {
        const tdm_tensor *t = ins[ik];
        if (t && t->data != outs[0]->data && !t->device && !outs[0]->device &&
            !tdm_dtype_has_ptrs(t->dtype) &&
            t->dtype == outs[0]->dtype && t->nbytes == outs[0]->nbytes) {
            memcpy(outs[0]->data, t->data, t->nbytes);
            memcpy(ins_own, ins, (size_t)n->n_inputs * sizeof *ins);
            ins_own[ik] = outs[0];
            ins = ins_own;
        }
    }
    {
        tdm_kernel_ctx kctx = {
            .node = n, .opset = n->opset, .n_in = n->n_inputs, .in = ins,
            .n_out = n->n_outputs, .out = outs, .pool = pool, .alloc = a, .state = state,
            .alloc_output = kctx_alloc_output, .run_subgraph = run_subgraph, .exec = f,
            .device = dev, .run_ctl = f ? f->ctl : NULL, .loop = f ? f->loop : NULL,
        };
        st = tdm_device_execute(dev, k, &kctx);
    }
    if (!st)
        for (int i = 0; i < n->n_outputs; i++)
            if (n->outputs[i] >= 0 && !outs[i]) {
                st = TDM_ERR(TDM_ERR_INTERNAL, "%s node '%s': kernel produced no output %d",
                             n->op_type, n->name, i);
                break;
            }
done:
    if (own_state && k && k->release) k->release(own_state, a);
    if (st)
        for (int i = 0; i < n->n_outputs; i++) {
            tdm_tensor_destroy(outs[i]);
            outs[i] = NULL;
        }
    if (heap) {
        tdm_free(a, in);
        tdm_free(a, out);
        tdm_free(a, types);
    }
    return st;
}

tdm_status *tdm_eval_node(tdm_device *cpu, const tdm_allocator *a, const tdm_node *n,
                          const tdm_tensor *const *ins, tdm_tensor **outs) {
    return tdm_exec_run_node(cpu, NULL, NULL, a, NULL, n, ins, outs, NULL);
}

void tdm_exec_trace_kernel(tdm_trace *tr, tdm_device *dev, const tdm_node *n, size_t i, int64_t t0,
                         int64_t t1, const uint64_t *flows, int n_flows) {
    char args[160];
    snprintf(args, sizeof args, "\"op\":\"%s\",\"node\":%zu,\"device\":\"%s\"", n->op_type, i,
             dev ? dev->name : "cpu");
    tdm_trace_event_flows(tr, dev ? dev->name : "cpu", n->name, n->op_type, t0, t1, args, 0, flows,
                          n_flows);
}

/* ---- launch windows (backend.h version 4) ----------------------------------------------
 * A window is a segment of the main graph: consecutive nodes on one device whose kernel was
 * chosen at plan time (its prepared state lives as long as the plan), run without per-node
 * synchronisation (no profiling or tracing). Its key: the plan, the segment's first node and
 * the run's input shapes. */
uint64_t tdm_exec_segment_key(const frame *f, size_t start) {
    uint64_t h = tdm_hash_u64(TDM_HASH_INIT, (uint64_t)(uintptr_t)f->plan);
    h = tdm_hash_u64(h, (uint64_t)start);
    for (size_t i = 0; i < f->g->n_inputs; i++) {
        const tdm_tensor *t = f->vals[f->g->inputs[i]];
        uint64_t parts[2 + TDM_MAX_RANK] = {t ? (uint64_t)t->dtype + 1 : 0, t ? (uint64_t)t->rank : 0};
        for (int d = 0; t && d < t->rank; d++) parts[2 + d] = (uint64_t)t->dims[d];
        for (int k = 0; k < 2 + (t ? t->rank : 0); k++) h = tdm_hash_u64(h, parts[k]);
    }
    return h;
}

bool tdm_exec_windowed(const frame *f, size_t i) {
    if (!f->plan || !f->plan->nodes[i].kernel || f->times || f->plan->trace) return false;
    if (f->stream && f->plan->budget->any_streamed) return false; /* uploads between kernels */
    int d = f->g->nodes[i].device;
    const tdm_device *dev = f->plan->devices[d >= 0 ? d : 0];
    return tdm_device_has_segments(dev); /* a device that uses them */
}

static void release(frame *f, int v, int node) {
    if (v >= 0 && f->release_after[v] == node) tdm_exec_drop_replicas(f, v);
    if (v >= 0 && f->owned[v] && f->release_after[v] == node) {
        tdm_exec_mon_hold(f, f->vals[v], -1);
        tdm_tensor_destroy((tdm_tensor *)f->vals[v]);
        f->vals[v] = NULL;
        f->owned[v] = false;
    }
}

/* ---- the next nodes' records, asked for ahead -----------------------------------------
 * A decode step of a language model streams ~100 MB of weights through the caches, so the
 * executor's own records of each node (the node, its input and output lists, its plan
 * entry, cached shapes, value slots, tensor headers, attributes, the kernel's state) come
 * from memory on every step, one dependent miss after another. Before each node's kernel
 * the loop asks for the records of the nodes after it in stages, each stage reading only
 * what the stage before asked for one node earlier (so its own reads hit a cache):
 *   node i + 4: the node and its plan entry;
 *   node i + 3: its lists, attributes, kernel, state, shape-cache slots;
 *   node i + 2: its value slots, arena headers, cached shapes, attribute names;
 *   node i + 1: the tensor headers its inputs have now, the state's next lines. */
#define AHEAD_IO 16 /* inputs, outputs and attributes asked for per node, at most */

static inline void pf_lines(const void *p, size_t bytes) {
    for (size_t b = 0; p && b < bytes && b < 8 * 64; b += 64) __builtin_prefetch((const char *)p + b);
}

static inline int ahead_count(int n) { return n < AHEAD_IO ? n : AHEAD_IO; }

static void exec_ahead(const frame *f, size_t i) {
    const tdm_graph *g = f->g;
    const tdm_memplan *mp = f->mp;
    const struct tdm_shape_cache *sc = mp ? mp->shapes : NULL;
    size_t j = i + 4;
    if (j < g->n_nodes) {
        pf_lines(&g->nodes[j], sizeof g->nodes[j]);
        __builtin_prefetch(&f->plan->nodes[j]);
        if (sc) tdm_exec_shape_cache_prefetch(sc, j, 0, 0);
    }
    if ((j = i + 3) < g->n_nodes) {
        const tdm_node *n = &g->nodes[j];
        pf_lines(n->inputs, (size_t)ahead_count(n->n_inputs) * sizeof *n->inputs);
        pf_lines(n->outputs, (size_t)ahead_count(n->n_outputs) * sizeof *n->outputs);
        pf_lines(n->attrs, (size_t)ahead_count(n->n_attrs) * sizeof *n->attrs);
        __builtin_prefetch(n->op_type);
        __builtin_prefetch(n->schema);
        __builtin_prefetch(f->plan->nodes[j].kernel);
        pf_lines(f->plan->nodes[j].state, 128);
    }
    if ((j = i + 2) < g->n_nodes) {
        const tdm_node *n = &g->nodes[j];
        for (int k = 0; k < ahead_count(n->n_inputs); k++) {
            int v = n->inputs[k];
            if (v < 0) continue;
            __builtin_prefetch(&f->vals[v]);
            if (mp) __builtin_prefetch(&mp->headers[v]);
        }
        for (int k = 0; k < ahead_count(n->n_outputs); k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            __builtin_prefetch(&f->vals[v]);
            __builtin_prefetch(&f->owned[v]);
            __builtin_prefetch(&f->release_after[v]);
            if (mp) {
                pf_lines(&mp->headers[v], sizeof mp->headers[v]);
                __builtin_prefetch(&mp->offset[v]);
                __builtin_prefetch(&mp->size[v]);
                __builtin_prefetch(&mp->alias_of[v]);
            }
        }
        for (int k = 0; k < ahead_count(n->n_attrs); k++) __builtin_prefetch(n->attrs[k].name);
        if (sc) tdm_exec_shape_cache_prefetch(sc, j, 1, (size_t)ahead_count(n->n_inputs + n->n_outputs));
    }
    if ((j = i + 1) < g->n_nodes) {
        const tdm_node *n = &g->nodes[j];
        for (int k = 0; k < ahead_count(n->n_inputs); k++) {
            int v = n->inputs[k];
            if (v >= 0 && f->vals[v]) pf_lines(f->vals[v], sizeof *f->vals[v]);
        }
        const char *state = f->plan->nodes[j].state;
        if (state) pf_lines(state + 128, 128);
    }
}

/* Runs every node of f->g in order. f->vals holds the inputs and constants. */
static tdm_status *exec_frame(frame *f) {
    const tdm_graph *g = f->g;
    size_t max_in = 1, max_out = 1;
    for (size_t i = 0; i < g->n_nodes; i++) {
        if ((size_t)g->nodes[i].n_inputs > max_in) max_in = (size_t)g->nodes[i].n_inputs;
        if ((size_t)g->nodes[i].n_outputs > max_out) max_out = (size_t)g->nodes[i].n_outputs;
    }
    bool scratch = f->mp && f->mp->ins; /* made with the memory plan for max_io */
    const tdm_tensor **ins = scratch ? f->mp->ins : tdm_calloc(f->a, max_in, sizeof *ins);
    tdm_tensor **outs = scratch ? f->mp->outs : tdm_calloc(f->a, max_out, sizeof *outs);
    tdm_status *st = NULL;
    tdm_device *mon_whole = NULL;
    int64_t ran = 0; /* nodes run, for mon_whole */
    tdm_device *seg_dev = NULL; /* the device of the open launch window, if any */
    if (!ins || !outs) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory starting a run");
        goto done;
    }
    /* The monitor's busy time: per node when the frame spans devices (a node's inputs may wait
     * for another device), else one interval around the whole frame, which saves two clock
     * reads and two locks per node (measured: 6% of a DLRM-like model's batch-1 run). */
    tdm_monitor *mon = tdm_exec_mon(f);
    if (mon && f->plan && g->n_nodes > 0) {
        int d0 = g->nodes[0].device >= 0 ? g->nodes[0].device : 0;
        bool one = true;
        for (size_t i = 1; i < g->n_nodes && one; i++)
            one = (g->nodes[i].device >= 0 ? g->nodes[i].device : 0) == d0;
        if (one) {
            mon_whole = f->plan->devices[d0];
            tdm_monitor_node_begin(mon, mon_whole->index);
            mon = NULL;
        }
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        if ((st = tdm_exec_between_nodes(f, i))) goto done;
        const tdm_node *n = &g->nodes[i];
        tdm_device *dev = f->dev;
        const tdm_kernel_def *k = NULL;
        void *state = NULL;
        bool open_after = false;
        uint64_t flows[4];
        int n_flows = 0;
        if (f->plan) {
            dev = f->plan->devices[n->device >= 0 ? n->device : 0];
            k = f->plan->nodes[i].kernel;
            state = f->plan->nodes[i].state;
            bool win = tdm_exec_windowed(f, i);
            bool moves = (seg_dev || win) && tdm_exec_node_moves(f, n, dev);
            if (seg_dev && (seg_dev != dev || !win || moves)) {
                tdm_device *end = seg_dev;
                seg_dev = NULL;
                if ((st = tdm_device_segment_end(end, true))) goto done;
            }
            if (!seg_dev && win && !moves) {
                if ((st = tdm_device_segment_begin(dev, tdm_exec_segment_key(f, i)))) goto done;
                seg_dev = dev;
            }
            open_after = !seg_dev && win && moves; /* opens once the copies are made */
        }
        if (f->stream && (st = tdm_stream_prefetch(f, i))) goto done; /* streamed weights */
        for (int k2 = 0; k2 < n->n_inputs; k2++) {
            int v = n->inputs[k2];
            ins[k2] = NULL;
            if (v < 0) continue;
            if (!f->vals[v]) {
                st = TDM_ERR(TDM_ERR_INTERNAL, "%s node '%s' reads '%s', which is not available",
                             n->op_type, n->name, g->values[v].name);
                goto done;
            }
            uint64_t flow = 0;
            st = f->plan ? tdm_exec_input_at(f, n, k2, dev, &ins[k2], &flow)
                         : tdm_exec_input_for(f, v, dev, &ins[k2], &flow);
            if (flow && n_flows < 4) flows[n_flows++] = flow;
            if (st) {
                st = tdm_status_wrap(st, "%s node '%s': ", n->op_type, n->name);
                goto done;
            }
        }
        if (open_after) {
            if ((st = tdm_device_segment_begin(dev, tdm_exec_segment_key(f, i)))) goto done;
            seg_dev = dev;
        }
        if (f->body) /* a control-flow body: its kernels looked up and prepared once */
            tdm_exec_body_kernel(f->body, i, (const tdm_tensor *const *)ins, f->a, &k, &state);
        if (f->plan) exec_ahead(f, i); /* the next nodes' records, asked for ahead */
        tdm_trace *tr = f->plan ? f->plan->trace : NULL;
        int64_t t0 = f->times || tr ? tdm_now_ns() : 0;
        if (mon) tdm_monitor_node_begin(mon, dev->index);
        st = tdm_exec_run_node(dev, k, state, f->a, f->pool, n, (const tdm_tensor *const *)ins, outs, f);
        if (mon) tdm_monitor_node_end(mon, dev->index);
        if (st) goto done;
        ran++;
        if (f->times || tr) {
            tdm_device_synchronize(dev); /* a queued device's time counts where it is spent */
            int64_t t1 = tdm_now_ns();
            if (f->times) f->times[i] += (double)(t1 - t0) / 1e6;
            tdm_exec_note_run(f, i, n, (const tdm_tensor *const *)ins, outs);
            if (tr) tdm_exec_trace_kernel(tr, dev, n, i, t0, t1, flows, n_flows);
        }
        for (int k2 = 0; k2 < n->n_outputs; k2++) {
            int v = n->outputs[k2];
            if (v < 0) {
                tdm_tensor_destroy(outs[k2]);
                continue;
            }
            if (f->owned[v]) {
                tdm_exec_mon_hold(f, f->vals[v], -1);
                tdm_tensor_destroy((tdm_tensor *)f->vals[v]);
            }
            f->vals[v] = outs[k2];
            f->owned[v] = true;
            tdm_exec_mon_hold(f, outs[k2], 1);
        }
        for (int k2 = 0; k2 < n->n_inputs; k2++) release(f, n->inputs[k2], (int)i);
        for (int k2 = 0; k2 < n->n_implicit; k2++) release(f, n->implicit[k2], (int)i);
        for (int k2 = 0; k2 < n->n_outputs; k2++) release(f, n->outputs[k2], (int)i);
        tdm_stream_after(f, i);
    }
done:
    if (seg_dev) { /* the window's held-back work is issued (or dropped on failure) */
        tdm_status *end = tdm_device_segment_end(seg_dev, st == NULL);
        if (!st) st = end;
        else tdm_status_free(end);
    }
    if (mon_whole) tdm_monitor_nodes_end(tdm_exec_mon(f), mon_whole->index, ran);
    if (!scratch) {
        tdm_free(f->a, ins);
        tdm_free(f->a, outs);
    }
    return st;
}

static void frame_clear(frame *f) {
    if (f->replicas) {
        for (size_t i = 0; i < f->g->n_values * (1 + TDM_MAX_DEVICES); i++) {
            tdm_exec_mon_hold(f, f->replicas[i], -1);
            tdm_tensor_destroy(f->replicas[i]);
        }
        tdm_free(f->a, f->replicas);
        f->replicas = NULL;
    }
    if (f->vals && f->owned)
        for (size_t v = 0; v < f->g->n_values; v++)
            if (f->owned[v]) {
                tdm_exec_mon_hold(f, f->vals[v], -1);
                tdm_tensor_destroy((tdm_tensor *)f->vals[v]);
            }
    if (!f->scratch) {
        tdm_free(f->a, f->vals);
        tdm_free(f->a, f->owned);
    }
}

/* Moves (or copies) the values listed in `which` out of the frame. */
static tdm_status *take_outputs(frame *f, const int *which, size_t n, tdm_tensor **out) {
    size_t handed = 0;
    tdm_status *st = NULL;
    for (size_t j = 0; j < n; j++, handed++) {
        int v = which[j];
        if (!f->vals[v]) {
            st = TDM_ERR(TDM_ERR_INTERNAL, "output '%s' was not computed", f->g->values[v].name);
            break;
        }
        if (f->bound && f->bound[j]) { /* written into the caller's tensor */
            out[j] = NULL;
            const tdm_tensor *t = f->vals[v];
            tdm_tensor *b = f->bound[j];
            if (t->data == b->data) continue;
            /* made elsewhere (a kernel that sizes its outputs itself, an input passed
             * through): copied in */
            if (!same_shape(b, t->dtype, t->rank, t->dims)) {
                st = bound_mismatch(f, (int)j, b, t->dtype, t->rank, t->dims);
                break;
            }
            if (t->device || tdm_dtype_has_ptrs(t->dtype)) {
                st = TDM_ERR(TDM_ERR_UNSUPPORTED, "output '%s': a bound output must be a "
                             "numeric tensor in host memory", f->g->values[v].name);
                break;
            }
            if (t->nbytes) memcpy(b->data, t->data, t->nbytes);
            continue;
        }
        const tdm_tensor *staged = NULL;
        if ((st = tdm_exec_staged_output(f, v, &staged))) break;
        if (staged) { /* downloaded while the run went on */
            if ((st = tdm_tensor_clone(f->a, staged, &out[j]))) break;
        } else if (f->vals[v]->device) { /* results go to the caller in host memory */
            if ((st = tdm_device_to_host(f->a, f->vals[v], &out[j]))) break;
            tdm_exec_mon_copy(f, f->vals[v]->device, false, f->vals[v]->nbytes, v);
        } else if (f->owned[v]) {
            tdm_exec_mon_hold(f, f->vals[v], -1); /* handed to the caller */
            out[j] = (tdm_tensor *)f->vals[v];
            f->owned[v] = false; /* moved; a second mention of the same value is copied */
        } else if ((st = tdm_tensor_clone(f->a, f->vals[v], &out[j]))) {
            break;
        }
    }
    if (st) /* the caller gets nothing on failure */
        for (size_t j = 0; j < handed; j++) {
            tdm_tensor_destroy(out[j]);
            out[j] = NULL;
        }
    return st;
}

const tdm_tensor *tdm_exec_lookup_outer(const frame *f, const char *name) {
    for (; f; f = f->parent) {
        int v = tdm_graph_find_value(f->g, name);
        if (v >= 0 && f->vals[v]) return f->vals[v];
    }
    return NULL;
}

/* The plan a frame runs under (subgraph frames: their outermost frame's). */
static tdm_plan *root_plan(const frame *f) {
    while (f->parent) f = f->parent;
    return (tdm_plan *)f->plan; /* its body caches are guarded by mem_mu */
}

static tdm_status *run_subgraph(tdm_kernel_ctx *ctx, const tdm_graph *body, int n_in,
                                const tdm_tensor *const *in, int n_out, tdm_tensor **out) {
    const frame *parent = ctx->exec;
    if (!parent)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "%s node '%s': subgraphs cannot run here",
                       ctx->node->op_type, ctx->node->name);
    if ((size_t)n_in != body->n_inputs && (size_t)n_in > body->n_inputs)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s node '%s': the body takes %zu inputs, got %d",
                       ctx->node->op_type, ctx->node->name, body->n_inputs, n_in);
    if ((size_t)n_out != body->n_outputs)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s node '%s': the body has %zu outputs, need %d",
                       ctx->node->op_type, ctx->node->name, body->n_outputs, n_out);
    frame f = {.g = body, .parent = parent, .dev = ctx->device, .a = ctx->alloc, .pool = ctx->pool,
               .ctl = parent->ctl, .loop = parent->loop};
    /* the body's cache (executor_body.c): kernels, states, memory plan kept between runs */
    tdm_plan *root = root_plan(parent);
    tdm_body *bc = root && ctx->device ? tdm_exec_body_acquire(root, body, ctx->device) : NULL;
    size_t nv = body->n_values ? body->n_values : 1;
    int *rel = NULL;
    uint64_t key = 0;
    tdm_status *st = NULL;
    f.body = bc;
    if (bc) {
        f.release_after = tdm_exec_body_release_after(bc);
        /* the memory plan is keyed by the shapes of the inputs and outer values: look them
         * up first (into the plan's scratch when it turns out to fit) */
        const tdm_tensor **probe = tdm_exec_body_probe(bc);
        memset(probe, 0, nv * sizeof *probe);
        tdm_exec_body_outer(bc, parent, probe);
        for (int i = 0; i < n_in; i++) probe[body->inputs[i]] = in[i];
        f.vals = probe;
        key = tdm_exec_body_key(&f);
        f.vals = NULL;
        bool record = false;
        f.mp = tdm_exec_body_memplan(bc, key, &record);
        if (f.mp) {
            f.scratch = true;
            f.vals = f.mp->vals;
            f.owned = f.mp->owned;
            memcpy(f.vals, probe, nv * sizeof *f.vals);
            memset(f.owned, 0, nv * sizeof *f.owned);
        } else {
            if (record) f.record = tdm_calloc(f.a, nv, sizeof *f.record);
            f.vals = tdm_calloc(f.a, nv, sizeof *f.vals);
            f.owned = tdm_calloc(f.a, nv, sizeof *f.owned);
            if (f.vals) memcpy(f.vals, probe, nv * sizeof *f.vals);
        }
        if (!f.vals || !f.owned) {
            st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory running a subgraph");
            goto done;
        }
        for (size_t v = 0; v < body->n_values; v++) {
            const tdm_value *val = &body->values[v];
            if (val->data && !f.vals[v]) f.vals[v] = val->data;
            if (val->is_outer && !f.vals[v]) {
                st = TDM_ERR(TDM_ERR_INTERNAL, "%s node '%s': outer value '%s' is not available",
                             ctx->node->op_type, ctx->node->name, val->name);
                goto done;
            }
        }
    } else {
        f.vals = tdm_calloc(f.a, nv, sizeof *f.vals);
        f.owned = tdm_calloc(f.a, nv, sizeof *f.owned);
        rel = tdm_calloc(f.a, nv, sizeof *rel);
        if (!f.vals || !f.owned || !rel) {
            st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory running a subgraph");
            goto done;
        }
        f.release_after = rel;
        for (size_t v = 0; v < body->n_values; v++) {
            rel[v] = -1;
            const tdm_value *val = &body->values[v];
            if (val->data) f.vals[v] = val->data;
            if (val->is_outer && !(f.vals[v] = tdm_exec_lookup_outer(parent, val->name))) {
                st = TDM_ERR(TDM_ERR_INTERNAL, "%s node '%s': outer value '%s' is not available",
                             ctx->node->op_type, ctx->node->name, val->name);
                goto done;
            }
        }
        for (int i = 0; i < n_in; i++) f.vals[body->inputs[i]] = in[i];
        for (size_t i = 0; i < body->n_nodes; i++) {
            const tdm_node *n = &body->nodes[i];
            for (int k = 0; k < n->n_inputs; k++)
                if (n->inputs[k] >= 0) rel[n->inputs[k]] = (int)i;
            for (int k = 0; k < n->n_implicit; k++) rel[n->implicit[k]] = (int)i;
            for (int k = 0; k < n->n_outputs; k++)
                if (n->outputs[k] >= 0 && rel[n->outputs[k]] < (int)i) rel[n->outputs[k]] = (int)i;
        }
        for (size_t o = 0; o < body->n_outputs; o++) rel[body->outputs[o]] = -1;
    }
    if ((st = exec_frame(&f))) goto done;
    st = take_outputs(&f, body->outputs, (size_t)n_out, out);
done:
    if (f.vals) frame_clear(&f);
    else tdm_free(f.a, f.owned);
    if (bc) {
        if (!st && f.record) tdm_exec_body_record(bc, f.a, f.record, key);
        tdm_exec_body_release(root, bc);
    }
    tdm_free(f.a, f.record);
    tdm_free(ctx->alloc, rel);
    return st ? tdm_status_wrap(st, "in the body of %s node '%s': ", ctx->node->op_type,
                                ctx->node->name)
              : NULL;
}

static tdm_status *check_input(const tdm_value *v, const tdm_tensor *t) {
    if (v->dtype != TDM_UNDEFINED && t->dtype != v->dtype)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "input '%s' must be %s, got %s", v->name,
                       tdm_dtype_name(v->dtype), tdm_dtype_name(t->dtype));
    if (v->item_dtype != TDM_UNDEFINED && (t->dtype == TDM_SEQUENCE || t->dtype == TDM_OPTIONAL))
        for (size_t i = 0; i < tdm_value_item_count(t); i++) { /* the declared tensor type */
            const tdm_tensor *e = tdm_value_item(t, i);
            if (e && e->dtype != v->item_dtype)
                return TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                               "input '%s' is a %s of %s tensors, but its item %zu is %s",
                               v->name, t->dtype == TDM_SEQUENCE ? "sequence" : "optional",
                               tdm_dtype_name(v->item_dtype), i, tdm_dtype_name(e->dtype));
        }
    if (v->rank >= 0 && t->rank != v->rank)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "input '%s' must have rank %d, got rank %d",
                       v->name, v->rank, t->rank);
    if (v->rank >= 0)
        for (int d = 0; d < v->rank; d++)
            if (v->dims[d] >= 0 && v->dims[d] != t->dims[d]) {
                char a[160], b[160];
                return TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                               "input '%s' has shape %s, but the model requires dimension %d = %lld "
                               "(model shape %s)", v->name, tdm_shape_str(t->rank, t->dims, a, sizeof a),
                               d, (long long)v->dims[d], tdm_shape_str(v->rank, v->dims, b, sizeof b));
            }
    return NULL;
}


tdm_status *tdm_plan_run(tdm_plan *p, const tdm_tensor *const *inputs, tdm_tensor **outputs) {
    return tdm_plan_run_ctl(p, inputs, outputs, NULL);
}

tdm_status *tdm_plan_run_ctl(tdm_plan *p, const tdm_tensor *const *inputs, tdm_tensor **outputs,
                             const tdm_run_ctl *ctl) {
    return tdm_plan_run_bound(p, inputs, NULL, NULL, outputs, ctl);
}

tdm_status *tdm_plan_run_bound(tdm_plan *p, const tdm_tensor *const *inputs,
                               tdm_tensor *const *bound, tdm_tensor *bound_hdr,
                               tdm_tensor **outputs, const tdm_run_ctl *ctl) {
    tdm_graph *g = p->graph;
    size_t nv = g->n_values ? g->n_values : 1;
    frame f = {.g = g, .release_after = p->release_after, .plan = p, .a = p->alloc,
               .pool = p->pool, .ctl = ctl, .loop = &p->loop, .bound = bound,
               .bound_hdr = bound_hdr};
    tdm_status *st = NULL;
    if (bound) {
        bool any = false;
        for (size_t o = 0; o < g->n_outputs; o++) any = any || bound[o];
        /* each bound output is checked against the memory of the node making it
         * (frame_bound_output) */
        if (!any) f.bound = NULL;
    }
    uint64_t key = tdm_exec_shapes_key(g, inputs);
    if (!p->multi_device) tdm_exec_acquire_memplan(p, key, &f, nv);
    if (f.mp && f.mp->vals) { /* the plan's scratch: nothing allocated for the run itself */
        f.scratch = true;
        f.vals = f.mp->vals;
        f.owned = f.mp->owned;
        memset(f.owned, 0, nv * sizeof *f.owned);
    } else {
        f.vals = tdm_calloc(f.a, nv, sizeof *f.vals);
        f.owned = tdm_calloc(f.a, nv, sizeof *f.owned);
    }
    if (f.vals) memcpy(f.vals, p->const_vals, g->n_values * sizeof *f.vals); /* the constants */
    int64_t run_t0 = p->trace ? tdm_now_ns() : 0;
    int mon_devs[TDM_MAX_DEVICES], n_mon = 0; /* runs in flight per device */
    for (int d = 0; p->monitor && d < p->n_devices && n_mon < TDM_MAX_DEVICES; d++)
        mon_devs[n_mon++] = p->devices[d]->index;
    tdm_monitor_runs(p->monitor, mon_devs, n_mon, 1);
    if (!f.vals || !f.owned) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory starting a run");
        goto done;
    }
    if ((st = tdm_xfer_begin(p, f.a, nv, &f.xfer))) goto done; /* asynchronous copies */
    if (p->measured_ms && (!(f.times = tdm_calloc(f.a, g->n_nodes + 1, sizeof *f.times)) ||
                           !(f.shapes = tdm_calloc(f.a, nv ? nv : 1, sizeof *f.shapes)) ||
                           !(f.work = tdm_calloc(f.a, 2 * g->n_nodes + 1, sizeof *f.work)))) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory starting a run");
        goto done;
    }
    for (size_t i = 0; f.work && i < 2 * g->n_nodes; i++) f.work[i] = -1;
    if (f.shapes) memcpy(f.shapes, g->values, g->n_values * sizeof *f.shapes);
    for (size_t i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        if (inputs[i]) {
            if ((st = check_input(&g->values[v], inputs[i]))) goto done;
            f.vals[v] = inputs[i];
            if (f.shapes) note_shape(&f.shapes[v], inputs[i]);
        } else if (!g->values[v].data) {
            st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "input '%s' was not given", g->values[v].name);
            goto done;
        }
    }
    if ((st = tdm_stream_begin(&f, inputs))) goto done; /* budgets, streamed weights */
    if ((st = p->multi_device ? tdm_exec_parallel(&f) : exec_frame(&f))) goto done;
    st = take_outputs(&f, g->outputs, g->n_outputs, outputs);
done:
    if (f.times) {
        if (!st) {
            pthread_mutex_lock(&p->mem_mu);
            tdm_graph run_g = *g; /* the graph with this run's shapes */
            run_g.values = f.shapes;
            for (size_t i = 0; i < g->n_nodes; i++) {
                p->measured_ms[i] += f.times[i];
                const double *w = f.work + 2 * i; /* from the run's values, else its shapes */
                p->measured_flops[i] += w[0] >= 0 ? w[0] : tdm_node_flops(&run_g, &g->nodes[i]);
                p->measured_bytes[i] += w[1] >= 0 ? w[1] : tdm_node_bytes(&run_g, &g->nodes[i]);
            }
            p->measured_runs++;
            pthread_mutex_unlock(&p->mem_mu);
        }
        tdm_free(f.a, f.times);
        tdm_free(f.a, f.shapes);
    }
    tdm_free(f.a, f.work);
    frame_clear(&f);
    st = tdm_exec_finish(&f, st, outputs, g->n_outputs);
    tdm_stream_end(&f);
    tdm_exec_release_memplan(p, &f, key, st == NULL);
    tdm_monitor_runs(p->monitor, mon_devs, n_mon, -1);
    if (p->trace) {
        char args[64];
        snprintf(args, sizeof args, "\"ok\":%s", st ? "false" : "true");
        tdm_trace_event(p->trace, "runs", "run", "run", run_t0, tdm_now_ns(), args, 0, 0);
    }
    return st;
}
/* Runs plans node by node. Each node: shapes from the schema's infer on the real inputs,
 * outputs allocated, kernel executed on the node's device; values are released after their
 * last reader. */
#include <string.h>

#include "core/alloc.h"
#include "graph/infer.h"
#include "ops/op.h"
#include "sched/plan.h"

#define MAX_IO 4096

static tdm_status *kctx_alloc_output(tdm_kernel_ctx *ctx, int i, tdm_dtype dtype, int rank,
                                     const int64_t *dims) {
    if (i < 0 || i >= ctx->n_out)
        return TDM_ERR(TDM_ERR_INTERNAL, "alloc_output: output %d out of range", i);
    if (ctx->out[i]) {
        tdm_tensor_destroy(ctx->out[i]);
        ctx->out[i] = NULL;
    }
    tdm_status *st = tdm_tensor_new(ctx->alloc, dtype, rank, dims, &ctx->out[i]);
    return st ? tdm_status_wrap(st, "%s node '%s' output %d: ", ctx->node->op_type,
                                ctx->node->name, i)
              : NULL;
}

static tdm_status *run_node(tdm_device *dev, const tdm_kernel_def *k, void *state,
                            const tdm_allocator *a, tdm_threadpool *pool, const tdm_node *n,
                            const tdm_tensor *const *ins, tdm_tensor **outs) {
    if (!n->schema)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "operator %s%s%s (node '%s') is not supported",
                       n->domain[0] ? n->domain : "", n->domain[0] ? "." : "", n->op_type, n->name);
    if (n->n_inputs > MAX_IO || n->n_outputs > MAX_IO)
        return TDM_ERR(TDM_ERR_LIMIT, "node '%s' has too many inputs or outputs", n->name);
    tdm_value_info in_stack[16], out_stack[16];
    tdm_value_info *in = in_stack, *out = out_stack;
    tdm_dtype types_stack[16], *types = types_stack;
    tdm_status *st = NULL;
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
    for (int i = 0; i < n->n_inputs; i++) {
        tdm_value_info *vi = &in[i];
        memset(vi, 0, sizeof *vi);
        const tdm_tensor *t = ins[i];
        types[i] = TDM_UNDEFINED;
        if (!t) {
            vi->rank = -1;
            continue;
        }
        vi->present = true;
        vi->dtype = t->dtype;
        vi->rank = t->rank;
        memcpy(vi->dims, t->dims, sizeof t->dims);
        vi->data = t;
        types[i] = t->dtype;
    }
    for (int i = 0; i < n->n_outputs; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].rank = -1;
        out[i].present = n->outputs[i] >= 0;
        outs[i] = NULL;
    }
    if (n->schema->infer) {
        tdm_infer_ctx ictx = {n, n->opset, n->n_inputs, in, n->n_outputs, out};
        if ((st = n->schema->infer(&ictx))) goto done;
    }
    if (!k || (k->type_input >= 0 && (k->type_input >= n->n_inputs ||
                                       !(k->types & TDM_T(types[k->type_input]))))) {
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
            st = TDM_ERR(TDM_ERR_INTERNAL, "%s node '%s': kernel needs preparation", n->op_type,
                         n->name);
            goto done;
        }
    }
    if (!(n->schema->flags & TDM_OP_DATA_DEPENDENT)) {
        for (int i = 0; i < n->n_outputs; i++) {
            if (n->outputs[i] < 0 && !out[i].present) continue;
            if (out[i].dtype == TDM_UNDEFINED || out[i].rank < 0) {
                st = TDM_ERR(TDM_ERR_INTERNAL, "%s node '%s': output %d shape was not inferred",
                             n->op_type, n->name, i);
                goto done;
            }
            st = tdm_tensor_new(a, out[i].dtype, out[i].rank, out[i].dims, &outs[i]);
            if (st) {
                st = tdm_status_wrap(st, "%s node '%s' output %d: ", n->op_type, n->name, i);
                goto done;
            }
        }
    }
    {
        tdm_kernel_ctx kctx = {
            .node = n, .opset = n->opset, .n_in = n->n_inputs, .in = ins,
            .n_out = n->n_outputs, .out = outs, .pool = pool, .alloc = a, .state = state,
            .alloc_output = kctx_alloc_output,
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
    return run_node(cpu, NULL, NULL, a, NULL, n, ins, outs);
}

static tdm_status *check_input(const tdm_value *v, const tdm_tensor *t) {
    if (v->dtype != TDM_UNDEFINED && t->dtype != v->dtype)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "input '%s' must be %s, got %s", v->name,
                       tdm_dtype_name(v->dtype), tdm_dtype_name(t->dtype));
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
    tdm_graph *g = p->graph;
    const tdm_allocator *a = p->alloc;
    size_t nv = g->n_values;
    const tdm_tensor **vals = tdm_calloc(a, nv ? nv : 1, sizeof *vals);
    bool *owned = tdm_calloc(a, nv ? nv : 1, sizeof *owned);
    tdm_tensor **outs = NULL;
    const tdm_tensor **ins = NULL;
    tdm_status *st = NULL;
    size_t max_in = 1, max_out = 1;
    for (size_t i = 0; i < g->n_nodes; i++) {
        if ((size_t)g->nodes[i].n_inputs > max_in) max_in = (size_t)g->nodes[i].n_inputs;
        if ((size_t)g->nodes[i].n_outputs > max_out) max_out = (size_t)g->nodes[i].n_outputs;
    }
    ins = tdm_calloc(a, max_in, sizeof *ins);
    outs = tdm_calloc(a, max_out, sizeof *outs);
    if (!vals || !owned || !ins || !outs) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory starting a run");
        goto done;
    }
    for (size_t v = 0; v < nv; v++)
        if (g->values[v].data) vals[v] = g->values[v].data;
    for (size_t i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        if (inputs[i]) {
            if ((st = check_input(&g->values[v], inputs[i]))) goto done;
            vals[v] = inputs[i];
        } else if (!g->values[v].data) {
            st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "input '%s' was not given", g->values[v].name);
            goto done;
        }
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            ins[k] = v >= 0 ? vals[v] : NULL;
            if (v >= 0 && !ins[k]) {
                st = TDM_ERR(TDM_ERR_UNSUPPORTED,
                             "%s node '%s' reads '%s', which is not available (outer-scope values "
                             "are not supported)", n->op_type, n->name, g->values[v].name);
                goto done;
            }
        }
        tdm_device *dev = p->devices[n->device >= 0 ? n->device : 0];
        st = run_node(dev, p->nodes[i].kernel, p->nodes[i].state, a, p->pool, n,
                      (const tdm_tensor *const *)ins, outs);
        if (st) goto done;
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0) {
                tdm_tensor_destroy(outs[k]);
                continue;
            }
            vals[v] = outs[k];
            owned[v] = true;
        }
        /* release values whose last reader was this node */
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v >= 0 && owned[v] && p->release_after[v] == (int)i) {
                tdm_tensor_destroy((tdm_tensor *)vals[v]);
                vals[v] = NULL;
                owned[v] = false;
            }
        }
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v >= 0 && owned[v] && p->release_after[v] == (int)i) {
                tdm_tensor_destroy((tdm_tensor *)vals[v]);
                vals[v] = NULL;
                owned[v] = false;
            }
        }
    }
    size_t handed = 0;
    for (size_t j = 0; j < g->n_outputs; j++, handed++) {
        int v = g->outputs[j];
        if (!vals[v]) {
            st = TDM_ERR(TDM_ERR_INTERNAL, "output '%s' was not computed", g->values[v].name);
            break;
        }
        if (owned[v]) {
            outputs[j] = (tdm_tensor *)vals[v];
            owned[v] = false; /* moved; a second mention of the same value is cloned */
        } else if ((st = tdm_tensor_clone(a, vals[v], &outputs[j]))) {
            break;
        }
    }
    if (st) /* the caller gets nothing on failure */
        for (size_t j = 0; j < handed; j++) {
            tdm_tensor_destroy(outputs[j]);
            outputs[j] = NULL;
        }
done:
    if (vals)
        for (size_t v = 0; v < nv; v++)
            if (owned && owned[v]) tdm_tensor_destroy((tdm_tensor *)vals[v]);
    tdm_free(a, vals);
    tdm_free(a, owned);
    tdm_free(a, ins);
    tdm_free(a, outs);
    return st;
}

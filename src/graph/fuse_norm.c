/* LayerNorm pass: the decomposed layer normalization exporters write becomes the opset-17
 * LayerNormalization op:
 *   m = ReduceMean(X, [-1]); d = X - m; v = ReduceMean(d^2, [-1]);
 *   n = d / Sqrt(v + eps); y = n * gamma + beta          (gamma and beta optional)
 * d^2 is Pow(d, 2) or Mul(d, d); both means keep the reduced axis (keepdims = 1). */
#include <string.h>

#include "core/alloc.h"
#include "graph/fuse_impl.h"

/* ReduceMean over the last axis only, keepdims, one output. */
static bool mean_last_axis(const fz_ctx *fz, int i, int x, int rank) {
    if (!fz_is_op(fz, i, "ReduceMean")) return false;
    const tdm_node *n = fz_node(fz, i);
    if (n->inputs[0] != x || n->n_outputs != 1 || tdm_attr_int(n, "keepdims", 1) != 1) return false;
    int64_t axes[TDM_MAX_RANK];
    int c;
    return fz_reduce_axes(fz, n, rank, axes, &c) && c == 1 && axes[0] == rank - 1;
}

static int out0(const fz_ctx *fz, int i) { return fz_node(fz, i)->outputs[0]; }

/* The single reader of v when it is the binary `op` with v as input `pos` (-1 = either). */
static int next_binary(const fz_ctx *fz, int v, const char *op, int pos) {
    int i = fz_sole_consumer(fz, v);
    if (!fz_is_op(fz, i, op)) return -1;
    const tdm_node *n = fz_node(fz, i);
    if (n->n_inputs != 2 || n->n_outputs != 1 || n->outputs[0] < 0) return -1;
    if (pos >= 0 && n->inputs[pos] != v) return -1;
    return i;
}

/* Matches the pattern from its first ReduceMean. Exact: LayerNormalization (axis -1)
 * computes the same mean, biased variance and (x - mean) / sqrt(var + eps) * scale + bias.
 * Every inner value has readers inside the pattern only (d: the square and the Div). The
 * node needs opset 17, which nodes take from the graph's import (finalize sets it): the
 * pass runs only for graphs that import opset 17 or later. */
static tdm_status *fuse_layernorm(fz_ctx *fz, int ri) {
    tdm_graph *g = fz->g;
    int x = fz_node(fz, ri)->inputs[0];
    if (x < 0 || !fz_is_f32(fz, x)) return NULL;
    int rank = g->values[x].rank;
    if (rank < 1 || g->values[x].dims[rank - 1] < 1 || !mean_last_axis(fz, ri, x, rank)) return NULL;
    int64_t N = g->values[x].dims[rank - 1];
    int nodes[10], nn = 0;
    nodes[nn++] = ri;
    int sub = next_binary(fz, out0(fz, ri), "Sub", 1);
    if (sub < 0 || fz_node(fz, sub)->inputs[0] != x) return NULL;
    nodes[nn++] = sub;
    int d = out0(fz, sub);
    /* d is read by the square (once as Pow, twice as Mul(d, d)) and by the Div */
    const int *cons;
    int nc = fz_consumers(fz, d, &cons);
    if (nc != fz_uses(fz, d) || nc < 2 || nc > 3) return NULL;
    int sq = -1, div = -1;
    for (int c = 0; c < nc; c++) {
        const tdm_node *n = fz_node(fz, cons[c]);
        float e;
        if (fz_is_op(fz, cons[c], "Div") && n->inputs[0] == d && n->inputs[1] != d) div = cons[c];
        else if (fz_is_op(fz, cons[c], "Pow") && n->n_inputs == 2 && n->inputs[0] == d &&
                 fz_scalar(fz, n->inputs[1], rank, &e) && e == 2.0f && nc == 2)
            sq = cons[c];
        else if (fz_is_op(fz, cons[c], "Mul") && n->n_inputs == 2 && n->inputs[0] == d &&
                 n->inputs[1] == d && nc == 3)
            sq = cons[c];
    }
    if (sq < 0 || div < 0 || fz_node(fz, sq)->n_outputs != 1 || fz_node(fz, div)->n_outputs != 1)
        return NULL;
    nodes[nn++] = sq;
    nodes[nn++] = div;
    int r2 = fz_sole_consumer(fz, out0(fz, sq));
    if (!mean_last_axis(fz, r2, out0(fz, sq), rank)) return NULL;
    nodes[nn++] = r2;
    int add = next_binary(fz, out0(fz, r2), "Add", -1);
    float eps;
    if (add < 0 || !fz_scalar(fz, fz_other_input(fz_node(fz, add), out0(fz, r2)), rank, &eps))
        return NULL;
    nodes[nn++] = add;
    int sqrt_i = fz_sole_consumer(fz, out0(fz, add));
    if (!fz_is_op(fz, sqrt_i, "Sqrt") || fz_node(fz, sqrt_i)->n_outputs != 1 ||
        fz_sole_consumer(fz, out0(fz, sqrt_i)) != div || fz_node(fz, div)->inputs[1] != out0(fz, sqrt_i))
        return NULL;
    nodes[nn++] = sqrt_i;
    int y = out0(fz, div), gamma = -1, beta = -1;
    int mul = next_binary(fz, y, "Mul", -1);
    if (mul >= 0) {
        TDM_TRY(fz_vector_const(fz, fz_other_input(fz_node(fz, mul), y), N, rank, &gamma));
        if (gamma >= 0) {
            nodes[nn++] = mul;
            y = out0(fz, mul);
        }
    }
    int badd = next_binary(fz, y, "Add", -1);
    if (badd >= 0) {
        TDM_TRY(fz_vector_const(fz, fz_other_input(fz_node(fz, badd), y), N, rank, &beta));
        if (beta >= 0) {
            nodes[nn++] = badd;
            y = out0(fz, badd);
        }
    }
    if (gamma < 0) { /* LayerNormalization needs a scale: ones */
        tdm_tensor *t;
        TDM_TRY(tdm_tensor_new(g->alloc, TDM_FLOAT, 1, &N, &t));
        for (int64_t k = 0; k < N; k++) ((float *)t->data)[k] = 1.0f;
        TDM_TRY(fz_new_const(fz, g->values[x].name, t, &gamma));
    }

    char *name = tdm_strdup(g->alloc, fz_node(fz, ri)->name);
    if (!name) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
    int li;
    tdm_status *st = fz_new_node(fz, "LayerNormalization", "", name, beta >= 0 ? 3 : 2, 1, &li);
    tdm_free(g->alloc, name);
    TDM_TRY(st);
    tdm_node *ln = fz_node(fz, li);
    ln->inputs[0] = x;
    ln->inputs[1] = gamma;
    if (beta >= 0) ln->inputs[2] = beta;
    ln->outputs[0] = y;
    TDM_TRY(fz_attr_int(fz, li, "axis", -1));
    TDM_TRY(fz_attr_float(fz, li, "epsilon", eps));
    for (int k = 0; k < nn; k++) fz_kill(fz, nodes[k]);
    fz->count++;
    return NULL;
}

tdm_status *fz_pass_layernorm(fz_ctx *fz) {
    if (tdm_graph_opset(fz->g, "") < 17) return NULL;
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        TDM_TRY(fz_refresh(fz));
        if (fz_is_op(fz, (int)i, "ReduceMean")) TDM_TRY(fuse_layernorm(fz, (int)i));
    }
    return NULL;
}

/* One-hot encoding times a constant matrix -> a row lookup (Gather).
 *
 * JAX / TensorFlow exports write jax.nn.one_hot(x, K) @ W as
 *     Cast<float>(Equal(Expand(X, S), C)) -> MatMul(., W) [-> Add(., b)]
 * with X integer of last dim 1, C = [0, 1, ..., K-1] along the last axis and W constant
 * [K, N]: a dense [.., K] x [K, N] product over zeros and ones (magika: 8 x 2048 bytes x 257
 * classes x 64, 0.54 GFLOP, a 17 MB integer copy and a 17 MB float temporary per run). Each
 * output row is row X of W, or zeros when X is outside [0, K) (no class matches). Rewritten:
 *     Reshape(Gather(T, Clip(X', -1, K)), [0, .., 0, N])
 * where T = [W + b; b] has K + 1 rows: an index below 0 becomes -1 (Gather counts it from the
 * end: the last row), one at K or above becomes K (the same row), both the row a one-hot of
 * no class gives. X' is X, or with the Expand Expand(X, S') where S' is S with its last entry
 * 1 (Slice + Concat on the small shape vector): the same leading dims as the Equal's result,
 * without the copy along the classes. Exact: a sum of one product 1 * w and zeros is w (W
 * must be finite: 0 * inf would be NaN in the product), and b is added once either way.
 * Needs opset 13 (Clip on integers with min / max inputs, negative Gather indices). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "graph/fuse_impl.h"

/* c is an integer constant (dtype dt) [1, .., 1, K] of rank <= r holding 0, 1, .., K-1. */
static bool is_arange(const fz_ctx *fz, int c, tdm_dtype dt, int r, int64_t K) {
    const tdm_tensor *t = fz_const(fz, c);
    if (!t || t->dtype != dt || t->rank < 1 || t->rank > r || t->count != K) return false;
    for (int d = 0; d + 1 < t->rank; d++)
        if (t->dims[d] != 1) return false;
    for (int64_t k = 0; k < K; k++) {
        int64_t v = dt == TDM_INT32 ? ((const int32_t *)t->data)[k] : ((const int64_t *)t->data)[k];
        if (v != k) return false;
    }
    return true;
}

/* A float32 constant [N] or [1, .., 1, N] of rank <= r (an Add's bias), or NULL. */
static const float *bias_const(const fz_ctx *fz, int c, int r, int64_t N) {
    const tdm_tensor *t = fz_const(fz, c);
    if (!t || t->dtype != TDM_FLOAT || t->rank < 1 || t->rank > r || t->count != N) return NULL;
    for (int d = 0; d + 1 < t->rank; d++)
        if (t->dims[d] != 1) return NULL;
    return t->data;
}

typedef struct oh_match {
    int mm, cast, eq, expand, add; /* nodes (expand, add: -1 when absent) */
    int x, shape, out;              /* X, the Expand's shape (or -1), the result */
    int r;                          /* the result's rank */
    int64_t K, N;
    const float *w, *bias;
} oh_match;

static bool onehot_match(fz_ctx *fz, int mi, oh_match *m) {
    tdm_graph *g = fz->g;
    const tdm_node *mm = fz_node(fz, mi);
    if (mm->n_inputs != 2 || mm->n_outputs != 1 || mm->outputs[0] < 0) return false;
    int a = mm->inputs[0], wv = mm->inputs[1], y = mm->outputs[0];
    const tdm_tensor *w = fz_const(fz, wv);
    int r = a >= 0 ? g->values[a].rank : -1;
    if (!w || w->dtype != TDM_FLOAT || w->rank != 2 || r < 2 || a == wv) return false;
    int64_t K = w->dims[0], N = w->dims[1];
    if (K < 1 || N < 1 || g->values[a].dims[r - 1] != K || g->values[y].rank != r) return false;
    /* Cast<float> read by the MatMul alone, of an Equal read by the Cast alone */
    int ci = fz_producer(fz, a);
    if (!fz_is_op(fz, ci, "Cast") || fz_sole_consumer(fz, a) != mi) return false;
    const tdm_node *cast = fz_node(fz, ci);
    if (cast->n_inputs != 1 || tdm_attr_int(cast, "to", 0) != TDM_FLOAT) return false;
    int e = cast->inputs[0], ei = fz_producer(fz, e);
    if (!fz_is_op(fz, ei, "Equal") || fz_sole_consumer(fz, e) != ci) return false;
    const tdm_node *eq = fz_node(fz, ei);
    if (eq->n_inputs != 2) return false;
    /* one side the class numbers, the other (rank r, so that the Equal's leading dims are
     * its own) X of last dim 1, maybe through an Expand read by the Equal alone */
    *m = (oh_match){.mm = mi, .cast = ci, .eq = ei, .expand = -1, .add = -1, .x = -1,
                    .shape = -1, .out = y, .r = r, .K = K, .N = N, .w = w->data};
    for (int s = 0; s < 2 && m->x < 0; s++) {
        int p = eq->inputs[s], q = eq->inputs[1 - s];
        if (p < 0 || q < 0 || p == q || g->values[p].rank != r) continue;
        tdm_dtype dt = g->values[p].dtype;
        if ((dt != TDM_INT32 && dt != TDM_INT64) || !is_arange(fz, q, dt, r, K)) continue;
        int pi = fz_producer(fz, p);
        if (fz_is_op(fz, pi, "Expand") && fz_sole_consumer(fz, p) == ei &&
            fz_node(fz, pi)->n_inputs == 2 && fz_node(fz, pi)->inputs[0] >= 0 &&
            fz_node(fz, pi)->inputs[1] >= 0) {
            const tdm_node *xn = fz_node(fz, pi);
            int x = xn->inputs[0], sv = xn->inputs[1];
            const tdm_value *xv = &g->values[x], *svv = &g->values[sv];
            if (xv->dtype != dt || xv->rank < 1 || xv->rank > r || xv->dims[xv->rank - 1] != 1 ||
                svv->dtype != TDM_INT64 || svv->rank != 1)
                continue;
            m->expand = pi, m->x = x, m->shape = sv;
        } else if (g->values[p].dims[r - 1] == 1) {
            m->x = p;
        }
    }
    if (m->x < 0) return false;
    for (int64_t k = 0; k < K * N; k++)
        if (!isfinite(m->w[k])) return false;
    /* an Add of a constant [N] after the MatMul goes into the table */
    int ai = fz_sole_consumer(fz, y);
    if (fz_is_op(fz, ai, "Add") && fz_node(fz, ai)->n_inputs == 2 &&
        fz_node(fz, ai)->n_outputs == 1 && fz_node(fz, ai)->outputs[0] >= 0) {
        const tdm_node *an = fz_node(fz, ai);
        int o = an->outputs[0];
        const float *b = bias_const(fz, fz_other_input(an, y), r, N);
        if (b && g->values[o].rank == r && g->values[o].dtype == TDM_FLOAT) {
            m->bias = b;
            m->add = ai;
            m->out = o;
        }
    }
    return true;
}

/* A new constant: dtype dt, rank (0 or 1), n values from v (int64, converted). */
static tdm_status *int_const(fz_ctx *fz, const char *base, tdm_dtype dt, int rank, int64_t n,
                             const int64_t *v, int *out) {
    tdm_tensor *t;
    TDM_TRY(tdm_tensor_new(fz->g->alloc, dt, rank, rank ? &n : NULL, &t));
    for (int64_t i = 0; i < n; i++) {
        if (dt == TDM_INT32) ((int32_t *)t->data)[i] = (int32_t)v[i];
        else ((int64_t *)t->data)[i] = v[i];
    }
    return fz_new_const(fz, base, t, out);
}

/* Appends node op named `name` + `suffix` with the given inputs and one output. */
static tdm_status *add_node(fz_ctx *fz, const char *op, const char *name, const char *suffix,
                            int n_in, const int *in, int out, int *index) {
    size_t len = strlen(name) + strlen(suffix) + 1;
    char *nm = tdm_alloc(fz->g->alloc, len);
    if (!nm) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
    snprintf(nm, len, "%s%s", name, suffix);
    tdm_status *st = fz_new_node(fz, op, "", nm, n_in, 1, index);
    tdm_free(fz->g->alloc, nm);
    TDM_TRY(st);
    tdm_node *n = fz_node(fz, *index);
    for (int k = 0; k < n_in; k++) n->inputs[k] = in[k];
    n->outputs[0] = out;
    return NULL;
}

static tdm_status *onehot_rewrite(fz_ctx *fz, const oh_match *m, const char *name,
                                  const char *base) {
    tdm_graph *g = fz->g;
    int r = m->r;
    int64_t K = m->K, N = m->N;
    tdm_dtype xdt = g->values[m->x].dtype;
    int64_t td[2] = {K + 1, N};
    tdm_tensor *tt;
    TDM_TRY(tdm_tensor_new(g->alloc, TDM_FLOAT, 2, td, &tt));
    float *tab = tt->data;
    for (int64_t k = 0; k <= K; k++)
        for (int64_t n = 0; n < N; n++)
            tab[k * N + n] = (k < K ? m->w[k * N + n] : 0.0f) + (m->bias ? m->bias[n] : 0.0f);
    int tv, lov, hiv, shv;
    TDM_TRY(fz_new_const(fz, base, tt, &tv));
    int64_t lo = -1, shape[TDM_MAX_RANK];
    for (int d = 0; d + 1 < r; d++) shape[d] = 0; /* (0: the dim as it is) */
    shape[r - 1] = N;
    TDM_TRY(int_const(fz, base, xdt, 0, 1, &lo, &lov));
    TDM_TRY(int_const(fz, base, xdt, 0, 1, &K, &hiv));
    TDM_TRY(int_const(fz, base, TDM_INT64, 1, r, shape, &shv));
    int x = m->x, node;
    if (m->expand >= 0) { /* X expanded to the leading dims alone: S' = S[:-1] ++ [1] */
        int64_t zero = 0, minus1 = -1, one = 1;
        int st0, en, ax, onev, lead, s2, xe;
        TDM_TRY(int_const(fz, base, TDM_INT64, 1, 1, &zero, &st0));
        TDM_TRY(int_const(fz, base, TDM_INT64, 1, 1, &minus1, &en));
        TDM_TRY(int_const(fz, base, TDM_INT64, 1, 1, &zero, &ax));
        TDM_TRY(int_const(fz, base, TDM_INT64, 1, 1, &one, &onev));
        TDM_TRY(fz_new_value(fz, base, TDM_INT64, -1, NULL, &lead));
        TDM_TRY(fz_new_value(fz, base, TDM_INT64, -1, NULL, &s2));
        TDM_TRY(fz_new_value(fz, base, xdt, -1, NULL, &xe));
        int sin[4] = {m->shape, st0, en, ax}, cin[2] = {lead, onev}, ein[2] = {m->x, s2};
        TDM_TRY(add_node(fz, "Slice", name, "_shape_lead", 4, sin, lead, &node));
        TDM_TRY(add_node(fz, "Concat", name, "_shape", 2, cin, s2, &node));
        TDM_TRY(fz_attr_int(fz, node, "axis", 0));
        TDM_TRY(add_node(fz, "Expand", name, "_expand", 2, ein, xe, &node));
        x = xe;
    }
    int cl, gv;
    TDM_TRY(fz_new_value(fz, base, xdt, -1, NULL, &cl));
    TDM_TRY(fz_new_value(fz, base, TDM_FLOAT, -1, NULL, &gv));
    int clin[3] = {x, lov, hiv}, gin[2] = {tv, cl}, rin[2] = {gv, shv};
    TDM_TRY(add_node(fz, "Clip", name, "_clip", 3, clin, cl, &node));
    TDM_TRY(add_node(fz, "Gather", name, "", 2, gin, gv, &node)); /* (the MatMul's name) */
    TDM_TRY(fz_attr_int(fz, node, "axis", 0));
    TDM_TRY(add_node(fz, "Reshape", name, "_reshape", 2, rin, m->out, &node));
    if (m->add >= 0) fz_kill(fz, m->add);
    fz_kill(fz, m->mm);
    fz_kill(fz, m->cast);
    fz_kill(fz, m->eq);
    if (m->expand >= 0) fz_kill(fz, m->expand);
    fz->count++;
    return NULL;
}

tdm_status *fz_pass_onehot_matmul(fz_ctx *fz) {
    if (tdm_graph_opset(fz->g, "") < 13) return NULL;
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        TDM_TRY(fz_refresh(fz));
        oh_match m;
        if (!fz_is_op(fz, (int)i, "MatMul") || !onehot_match(fz, (int)i, &m)) continue;
        /* (names copied: adding nodes and values moves the arrays holding them) */
        const tdm_allocator *al = fz->g->alloc;
        char *name = tdm_strdup(al, fz_node(fz, (int)i)->name);
        char *base = tdm_strdup(al, fz->g->values[fz_node(fz, (int)i)->inputs[1]].name);
        tdm_status *st = name && base ? onehot_rewrite(fz, &m, name, base)
                                      : TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in fusion");
        tdm_free(al, name);
        tdm_free(al, base);
        TDM_TRY(st);
    }
    return NULL;
}

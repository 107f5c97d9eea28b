/* Layout clean-up: chains of Transposes and of Reshapes collapse to one node; an element-wise
 * op over equally transposed inputs runs before the transpose, which is done once. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "graph/fuse_impl.h"

/* The permutation of a Transpose (attribute, or reversed axes when absent); false when the
 * rank is unknown or the attribute is not a permutation. */
static bool transpose_perm(const fz_ctx *fz, const tdm_node *n, int64_t *perm, int *rank) {
    size_t np;
    const int64_t *p = tdm_attr_ints(n, "perm", &np);
    int r;
    if (p && np) {
        if (np > TDM_MAX_RANK) return false;
        r = (int)np;
        for (int i = 0; i < r; i++) perm[i] = p[i];
    } else {
        r = fz->g->values[n->inputs[0]].rank;
        if (r < 0) return false;
        for (int i = 0; i < r; i++) perm[i] = r - 1 - i;
    }
    bool seen[TDM_MAX_RANK] = {false};
    for (int i = 0; i < r; i++) {
        if (perm[i] < 0 || perm[i] >= r || seen[perm[i]]) return false;
        seen[perm[i]] = true;
    }
    *rank = r;
    return true;
}

/* Points every reader of `from` at `to` (only for values that are no graph output and that
 * no subgraph reads by name). */
static void rewire(fz_ctx *fz, int from, int to) {
    const int *cons;
    int nc = fz_consumers(fz, from, &cons);
    for (int c = 0; c < nc; c++) {
        tdm_node *n = fz_node(fz, cons[c]);
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] == from) n->inputs[k] = to;
    }
    fz->dirty = true;
}

/* Transpose(Transpose(x, p1), p2) -> Transpose(x, p) with p[j] = p1[p2[j]] (output axis j
 * of the second reads axis p2[j] of the first, which reads axis p1[p2[j]] of x). Safe when
 * the middle value has no other reader. An identity p removes both: readers of the result
 * read x instead, or an Identity keeps the result's name when it is a graph output. */
static tdm_status *fuse_transposes(fz_ctx *fz, int i) {
    tdm_node *t2 = fz_node(fz, i);
    if (t2->n_inputs != 1 || t2->n_outputs != 1 || t2->outputs[0] < 0) return NULL;
    int mid = t2->inputs[0], p = fz_producer(fz, mid);
    if (!fz_is_op(fz, p, "Transpose") || fz_sole_consumer(fz, mid) != i) return NULL;
    tdm_node *t1 = fz_node(fz, p);
    int64_t p1[TDM_MAX_RANK], p2[TDM_MAX_RANK], pc[TDM_MAX_RANK];
    int r1, r2;
    if (t1->n_inputs != 1 || !transpose_perm(fz, t1, p1, &r1) || !transpose_perm(fz, t2, p2, &r2) ||
        r1 != r2)
        return NULL;
    bool identity = true;
    for (int j = 0; j < r2; j++) {
        pc[j] = p1[p2[j]];
        if (pc[j] != j) identity = false;
    }
    int x = t1->inputs[0], y = t2->outputs[0];
    fz_kill(fz, p);
    fz_kill(fz, i);
    fz->count++;
    if (identity && fz->extra_uses[y] == 0) {
        rewire(fz, y, x);
        return NULL;
    }
    char *name = tdm_strdup(fz->g->alloc, fz_node(fz, i)->name);
    if (!name) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
    int nn;
    tdm_status *st = fz_new_node(fz, identity ? "Identity" : "Transpose", "", name, 1, 1, &nn);
    tdm_free(fz->g->alloc, name);
    TDM_TRY(st);
    fz_node(fz, nn)->inputs[0] = x;
    fz_node(fz, nn)->outputs[0] = y;
    return identity ? NULL : fz_attr_ints(fz, nn, "perm", pc, r2);
}

/* Reshape(Reshape(x, s1), s2) -> Reshape(x, s2) when s2 is a constant that does not refer
 * to the middle shape: no 0 entry ("copy that dim") unless allowzero makes 0 literal; a -1
 * is resolved from the element count, which the first Reshape preserves. The middle value
 * must have no other reader. */
static tdm_status *fuse_reshapes(fz_ctx *fz, int i) {
    tdm_node *r2 = fz_node(fz, i);
    if (r2->opset < 5 || r2->n_inputs != 2 || r2->n_outputs != 1) return NULL;
    int mid = r2->inputs[0], p = fz_producer(fz, mid);
    if (!fz_is_op(fz, p, "Reshape") || fz_sole_consumer(fz, mid) != i) return NULL;
    const tdm_tensor *shape = fz_const(fz, r2->inputs[1]);
    if (!shape || shape->dtype != TDM_INT64 || shape->rank != 1) return NULL;
    if (!tdm_attr_int(r2, "allowzero", 0))
        for (int64_t k = 0; k < shape->count; k++)
            if (((const int64_t *)shape->data)[k] == 0) return NULL;
    tdm_node *r1 = fz_node(fz, p);
    if (r1->n_inputs < 1 || r1->inputs[0] < 0) return NULL;
    r2->inputs[0] = r1->inputs[0];
    fz_kill(fz, p);
    fz->count++;
    return NULL;
}

tdm_status *fz_pass_layout(fz_ctx *fz) {
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        TDM_TRY(fz_refresh(fz));
        if (fz_is_op(fz, (int)i, "Transpose")) TDM_TRY(fuse_transposes(fz, (int)i));
        else if (fz_is_op(fz, (int)i, "Reshape")) TDM_TRY(fuse_reshapes(fz, (int)i));
    }
    return NULL;
}

/* Op(Transpose(a1, p), ..., Transpose(ak, p)) -> Transpose(Op(a1, ..., ak), p) for an
 * element-wise op whose inputs all have a1's shape (no broadcasting): one transpose instead
 * of k (attacut's three convolution branches, each transposed back to [N, L, C] before an
 * element-wise Max). Each transposed value must be read by the op alone. */
static tdm_status *sink_transposes(fz_ctx *fz, int i) {
    const tdm_node *n = fz_node(fz, i);
    int k = n->n_inputs, y = n->n_outputs == 1 ? n->outputs[0] : -1;
    if (k < 2 || k > 64 || y < 0) return NULL;
    int srcs[64], tr[64];
    int64_t perm[TDM_MAX_RANK], pj[TDM_MAX_RANK];
    int rank = -1, rj;
    for (int j = 0; j < k; j++) {
        int v = n->inputs[j], t = v >= 0 ? fz_producer(fz, v) : -1;
        if (!fz_is_op(fz, t, "Transpose") || fz_uses(fz, v) != 1 || fz_sole_consumer(fz, v) != i)
            return NULL;
        const tdm_node *tn = fz_node(fz, t);
        if (tn->n_inputs != 1 || tn->inputs[0] < 0 || !transpose_perm(fz, tn, pj, &rj)) return NULL;
        if (j == 0) {
            rank = rj;
            memcpy(perm, pj, sizeof perm);
        } else if (rj != rank || memcmp(perm, pj, (size_t)rank * sizeof *perm) != 0 ||
                   !fz_same_shape(fz, tn->inputs[0], srcs[0]) ||
                   fz->g->values[tn->inputs[0]].dtype != fz->g->values[srcs[0]].dtype) {
            return NULL;
        }
        srcs[j] = tn->inputs[0];
        tr[j] = t;
    }
    const tdm_value *a = &fz->g->values[srcs[0]];
    if (a->rank != rank || fz->g->values[y].dtype != a->dtype) return NULL;
    int64_t dims[TDM_MAX_RANK]; /* (copied: adding a value may move the value array) */
    memcpy(dims, a->dims, sizeof dims);
    int mid;
    TDM_TRY(fz_new_value(fz, fz->g->values[y].name, a->dtype, rank, dims, &mid));
    /* (the strings stay where they are when fz_new_node moves the node array) */
    const char *name = fz_node(fz, i)->name, *op = fz_node(fz, i)->op_type;
    size_t len = strlen(name) + 16;
    char *tname = tdm_alloc(fz->g->alloc, len); /* its own name (profiles, affinity rules) */
    if (!tname) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
    snprintf(tname, len, "%s_transpose", name);
    int on, tn;
    tdm_status *st = fz_new_node(fz, op, "", name, k, 1, &on);
    if (!st) st = fz_new_node(fz, "Transpose", "", tname, 1, 1, &tn);
    tdm_free(fz->g->alloc, tname);
    TDM_TRY(st);
    for (int j = 0; j < k; j++) fz_node(fz, on)->inputs[j] = srcs[j];
    fz_node(fz, on)->outputs[0] = mid;
    fz_node(fz, tn)->inputs[0] = mid;
    fz_node(fz, tn)->outputs[0] = y;
    for (int j = 0; j < k; j++) fz_kill(fz, tr[j]);
    fz_kill(fz, i);
    fz->count++;
    return fz_attr_ints(fz, tn, "perm", perm, rank);
}

tdm_status *fz_pass_sink_transpose(fz_ctx *fz) {
    static const char *const ops[] = {"Max", "Min", "Sum", "Mean", "Add", "Sub", "Mul", "Div"};
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        TDM_TRY(fz_refresh(fz));
        const tdm_node *n = fz_node(fz, (int)i);
        if (n->dead || n->domain[0] || n->n_attrs) continue;
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
            if (!strcmp(n->op_type, ops[o])) {
                TDM_TRY(sink_transposes(fz, (int)i));
                break;
            }
    }
    return NULL;
}

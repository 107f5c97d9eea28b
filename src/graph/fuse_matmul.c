/* MatMul passes: MatMul [-> Add(constant bias over the last axis)] [-> Relu | GELU] becomes
 * one FusedMatMul (ops/fused.h). GELU is recognised as the Gelu op and as the decomposed
 * forms exporters write:
 *   erf:  x * 0.5 * (1 + Erf(x / sqrt(2)))          (or x * (1/sqrt(2)))
 *   tanh: x * 0.5 * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))   (x^3 = Pow(x, 3) or x*x*x;
 *         0.044715 * x^3 also as x * (x * (0.044715 * x)))
 * with the final product of x, (1 + ...) and 0.5 in any association and operand order.
 * Gemm (A.B + C with a bias-like C) followed by an activation becomes FusedMatMul too.
 * A decomposed tanh GELU that neither takes (after a Conv's Slice/Squeeze/Add, as in magika)
 * becomes one FastGelu node (fz_pass_gelu): one vectorised pass over the tensor instead of
 * nine element-wise nodes. */
#include <string.h>

#include "core/alloc.h"
#include "graph/fuse_impl.h"
#include "ops/fused.h"

#define GELU_MAX_NODES 12
_Static_assert(GELU_MAX_NODES <= FZ_ACT_MAX_NODES, "fz_match_gelu copies every node");

typedef struct gelu_match {
    int nodes[GELU_MAX_NODES];
    int n;
    int out; /* the GELU result */
} gelu_match;

static bool take(gelu_match *m, int node) {
    if (node < 0 || m->n >= GELU_MAX_NODES) return false;
    m->nodes[m->n++] = node;
    return true;
}

/* Node i is op with one output; its operand other than v is a scalar constant close to c
 * (rank <= max_rank, so it does not change the shape). */
static bool op_with_const(const fz_ctx *fz, int i, const char *op, int v, float c, int max_rank) {
    if (!fz_is_op(fz, i, op)) return false;
    const tdm_node *n = fz_node(fz, i);
    if (n->n_outputs != 1 || n->outputs[0] < 0) return false;
    if (strcmp(op, "Div") == 0 && n->inputs[0] != v) return false; /* x / c, not c / x */
    float k;
    return fz_scalar(fz, fz_other_input(n, v), max_rank, &k) && fz_close(k, c);
}

/* The single reader of v when it is `op` with one output; else -1. */
static int next_op(const fz_ctx *fz, int v, const char *op) {
    int i = fz_sole_consumer(fz, v);
    if (!fz_is_op(fz, i, op)) return -1;
    const tdm_node *n = fz_node(fz, i);
    return n->n_outputs == 1 && n->outputs[0] >= 0 ? i : -1;
}

static int out0(const fz_ctx *fz, int i) { return fz_node(fz, i)->outputs[0]; }

/* x * a * 0.5 in any association: (x*a)*0.5, (a*0.5)*x, a*(x*0.5). */
static bool match_half_product(const fz_ctx *fz, int x, int a, int xr, gelu_match *m) {
    int m1 = next_op(fz, a, "Mul");
    if (m1 < 0) return false;
    const tdm_node *n1 = fz_node(fz, m1);
    int other = fz_other_input(n1, a), t = n1->outputs[0];
    float c;
    if (other < 0) return false;
    if (other == x) { /* (x * a) * 0.5 */
        int m2 = next_op(fz, t, "Mul");
        if (m2 < 0 || !op_with_const(fz, m2, "Mul", t, 0.5f, xr)) return false;
        m->out = out0(fz, m2);
        return take(m, m1) && take(m, m2);
    }
    if (fz_scalar(fz, other, xr, &c) && fz_close(c, 0.5f)) { /* (a * 0.5) * x */
        int m2 = next_op(fz, t, "Mul");
        if (m2 < 0 || fz_other_input(fz_node(fz, m2), t) != x) return false;
        m->out = out0(fz, m2);
        return take(m, m1) && take(m, m2);
    }
    int h = fz_producer(fz, other); /* a * (x * 0.5) */
    if (fz_sole_consumer(fz, other) != m1 || !op_with_const(fz, h, "Mul", x, 0.5f, xr))
        return false;
    m->out = t;
    return take(m, h) && take(m, m1);
}

/* 1 + v (either order): the Add's output, or -1. */
static int one_plus(const fz_ctx *fz, int v, int xr, gelu_match *m) {
    int i = next_op(fz, v, "Add");
    if (i < 0 || !op_with_const(fz, i, "Add", v, 1.0f, xr) || !take(m, i)) return -1;
    return out0(fz, i);
}

/* Every reader of x is a matched node (so x may be read only by the GELU). */
static bool x_only_in(const fz_ctx *fz, int x, const gelu_match *m) {
    int slots = 0;
    for (int k = 0; k < m->n; k++) {
        const tdm_node *n = fz_node(fz, m->nodes[k]);
        for (int j = 0; j < n->n_inputs; j++) slots += n->inputs[j] == x;
    }
    return slots == fz_uses(fz, x);
}

static bool match_gelu_erf(const fz_ctx *fz, int x, int xr, gelu_match *m) {
    const int *cons;
    int nc = fz_consumers(fz, x, &cons);
    for (int c = 0; c < nc; c++) {
        m->n = 0;
        int d = cons[c];
        if (!op_with_const(fz, d, "Div", x, 1.41421356f, xr) &&
            !op_with_const(fz, d, "Mul", x, 0.70710678f, xr))
            continue;
        int e = next_op(fz, out0(fz, d), "Erf");
        if (e < 0 || !take(m, d) || !take(m, e)) continue;
        int a = one_plus(fz, out0(fz, e), xr, m);
        if (a >= 0 && match_half_product(fz, x, a, xr, m) && x_only_in(fz, x, m)) return true;
    }
    return false;
}

static bool match_gelu_tanh(const fz_ctx *fz, int x, int xr, gelu_match *m) {
    const int *cons;
    int nc = fz_consumers(fz, x, &cons);
    for (int c = 0; c < nc; c++) {
        m->n = 0;
        int p = cons[c], cube = -1, scaled = -1; /* x^3, 0.044715 x^3 */
        const tdm_node *pn = fz_node(fz, p);
        if (op_with_const(fz, p, "Pow", x, 3.0f, xr) && pn->inputs[0] == x) {
            cube = pn->outputs[0];
            take(m, p);
        } else if (fz_is_op(fz, p, "Mul") && pn->n_inputs == 2 && pn->inputs[0] == x &&
                   pn->inputs[1] == x && pn->n_outputs == 1) {
            int s2 = next_op(fz, pn->outputs[0], "Mul");
            if (s2 < 0 || fz_other_input(fz_node(fz, s2), pn->outputs[0]) != x) continue;
            cube = out0(fz, s2);
            take(m, p);
            take(m, s2);
        } else if (op_with_const(fz, p, "Mul", x, 0.044715f, xr)) {
            /* x * (x * (0.044715 * x)): the constant first (jax2tf, magika) */
            int s1 = next_op(fz, pn->outputs[0], "Mul");
            if (s1 < 0 || fz_other_input(fz_node(fz, s1), pn->outputs[0]) != x) continue;
            int s2 = next_op(fz, out0(fz, s1), "Mul");
            if (s2 < 0 || fz_other_input(fz_node(fz, s2), out0(fz, s1)) != x) continue;
            scaled = out0(fz, s2);
            take(m, p);
            take(m, s1);
            take(m, s2);
        } else {
            continue;
        }
        if (scaled < 0) {
            int q = next_op(fz, cube, "Mul");
            if (q < 0 || !op_with_const(fz, q, "Mul", cube, 0.044715f, xr) || !take(m, q))
                continue;
            scaled = out0(fz, q);
        }
        int r = next_op(fz, scaled, "Add");
        if (r < 0 || fz_other_input(fz_node(fz, r), scaled) != x || !take(m, r)) continue;
        int s = next_op(fz, out0(fz, r), "Mul");
        if (s < 0 || !op_with_const(fz, s, "Mul", out0(fz, r), 0.7978845608f, xr) || !take(m, s))
            continue;
        int t = next_op(fz, out0(fz, s), "Tanh");
        if (t < 0 || !take(m, t)) continue;
        int a = one_plus(fz, out0(fz, t), xr, m);
        if (a >= 0 && match_half_product(fz, x, a, xr, m) && x_only_in(fz, x, m)) return true;
    }
    return false;
}

bool fz_match_gelu(const fz_ctx *fz, int x, int rank, fz_act_match *m) {
    gelu_match gm;
    if (match_gelu_erf(fz, x, rank, &gm)) m->name = "Gelu";
    else if (match_gelu_tanh(fz, x, rank, &gm)) m->name = "GeluTanh";
    else return false;
    m->n_params = 0;
    m->n = gm.n;
    for (int k = 0; k < gm.n; k++) m->nodes[k] = gm.nodes[k];
    m->out = gm.out;
    return true;
}

/* The activation behind value cur (read by it alone, or by the decomposed GELU's nodes
 * alone): fills the node(s) to remove and the result value. NULL when there is none. */
typedef struct act_match {
    const char *name;
    int node;      /* Relu / Gelu node, or -1 */
    gelu_match gm; /* decomposed GELU nodes (gm.n == 0 when none) */
    int out;
} act_match;

static bool match_activation(const fz_ctx *fz, int cur, int rank, act_match *am) {
    am->name = NULL;
    am->node = -1;
    am->gm.n = 0;
    am->out = cur;
    int next = fz_sole_consumer(fz, cur);
    const tdm_node *n = next >= 0 ? fz_node(fz, next) : NULL;
    if (n && !n->dead && n->n_inputs == 1 && n->n_outputs == 1 && n->outputs[0] >= 0) {
        bool onnx = !n->domain[0], ms = strcmp(n->domain, "com.microsoft") == 0;
        const char *approx = tdm_attr_string(n, "approximate", "none");
        if (onnx && strcmp(n->op_type, "Relu") == 0) am->name = "Relu";
        else if ((onnx || ms) && strcmp(n->op_type, "Gelu") == 0 && strcmp(approx, "none") == 0)
            am->name = "Gelu";
        else if (onnx && strcmp(n->op_type, "Gelu") == 0 && strcmp(approx, "tanh") == 0)
            am->name = "GeluTanh";
        if (am->name) {
            am->node = next;
            am->out = n->outputs[0];
            return true;
        }
    }
    if (match_gelu_erf(fz, cur, rank, &am->gm)) am->name = "Gelu";
    else if (match_gelu_tanh(fz, cur, rank, &am->gm)) am->name = "GeluTanh";
    else return false;
    am->out = am->gm.out;
    return true;
}

/* Emits FusedMatMul(a, b, bias) writing `out` and removes `anchor`, `add` and the
 * activation's nodes. */
static tdm_status *emit(fz_ctx *fz, int anchor, int add, int a, int b, int bias,
                        const act_match *am) {
    char *name = tdm_strdup(fz->g->alloc, fz_node(fz, anchor)->name);
    if (!name) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
    int fi;
    tdm_status *st = fz_new_node(fz, "FusedMatMul", TDM_FUSED_DOMAIN, name, bias >= 0 ? 3 : 2, 1, &fi);
    tdm_free(fz->g->alloc, name);
    TDM_TRY(st);
    tdm_node *f = fz_node(fz, fi);
    f->inputs[0] = a;
    f->inputs[1] = b;
    if (bias >= 0) f->inputs[2] = bias;
    f->outputs[0] = am->out;
    TDM_TRY(fz_attr_string(fz, fi, "activation", am->name ? am->name : ""));
    fz_kill(fz, anchor);
    if (add >= 0) fz_kill(fz, add);
    if (am->node >= 0) fz_kill(fz, am->node);
    for (int k = 0; k < am->gm.n; k++) fz_kill(fz, am->gm.nodes[k]);
    fz->count++;
    return NULL;
}

/* MatMul(A, B) [-> Add(., bias)] [-> activation] -> FusedMatMul(A, B, bias). The bias is a
 * float32 constant over the last axis: N values (or one, repeated) where N = B's last dim,
 * every other dim 1 and rank <= the product's, so adding it never changes the shape. The
 * activation is Relu, Gelu (op or decomposed) or GELU's tanh form. Inner values have one
 * reader (the decomposed GELU: its input is read by the GELU's nodes only). */
static tdm_status *fuse_matmul(fz_ctx *fz, int mi) {
    const tdm_node *mm = fz_node(fz, mi);
    if (mm->n_inputs != 2 || mm->n_outputs != 1 || mm->outputs[0] < 0) return NULL;
    int a = mm->inputs[0], b = mm->inputs[1], y = mm->outputs[0];
    int brank = fz->g->values[b].rank, yr = fz->g->values[y].rank;
    int64_t n = brank >= 2 ? fz->g->values[b].dims[brank - 1] : TDM_DIM_UNKNOWN;
    if (!fz_is_f32(fz, a) || !fz_is_f32(fz, b) || yr < 1) return NULL;
    int cur = y, bias = -1, add = -1;
    int next = fz_sole_consumer(fz, cur);
    if (fz_is_op(fz, next, "Add") && n >= 1 && fz_node(fz, next)->n_outputs == 1) {
        int o = fz_other_input(fz_node(fz, next), cur);
        if (o >= 0 && fz_const(fz, o)) {
            TDM_TRY(fz_vector_const(fz, o, n, yr, &bias));
            if (bias >= 0) {
                add = next;
                cur = out0(fz, next);
            }
        }
    }
    act_match am;
    bool act = match_activation(fz, cur, yr, &am);
    if (bias < 0 && !act) return NULL;
    return emit(fz, mi, add, a, b, bias, &am);
}

/* Gemm(A, B, C) (alpha = beta = 1, A not transposed) followed by an activation ->
 * FusedMatMul(A, B or B^T, C): exact, Gemm is then A.B + C. B^T needs a constant B (a
 * transposed copy is made); C must be a bias over the columns (fz_vector_const). Without
 * an activation a Gemm stays a Gemm. */
static tdm_status *fuse_gemm(fz_ctx *fz, int gi) {
    const tdm_node *gm = fz_node(fz, gi);
    if (gm->n_inputs < 2 || gm->n_inputs > 3 || gm->n_outputs != 1 || gm->outputs[0] < 0) return NULL;
    int a = gm->inputs[0], b = gm->inputs[1], c = gm->n_inputs > 2 ? gm->inputs[2] : -1;
    const tdm_value *vb = &fz->g->values[b];
    bool tb = tdm_attr_int(gm, "transB", 0) != 0;
    if (!fz_is_f32(fz, a) || fz->g->values[a].rank != 2 || !fz_is_f32(fz, b) || vb->rank != 2 ||
        tdm_attr_int(gm, "transA", 0) || tdm_attr_float(gm, "alpha", 1.0f) != 1.0f ||
        (c >= 0 && tdm_attr_float(gm, "beta", 1.0f) != 1.0f))
        return NULL;
    int64_t n = vb->dims[tb ? 0 : 1], k = vb->dims[tb ? 1 : 0];
    const tdm_tensor *bt = fz_const(fz, b);
    if (n < 1 || k < 0 || (tb && (!bt || bt->dtype != TDM_FLOAT))) return NULL;
    if (c >= 0 && !fz_const(fz, c)) return NULL;
    act_match am;
    if (!match_activation(fz, gm->outputs[0], 2, &am)) return NULL;
    int bias = -1;
    if (c >= 0) {
        TDM_TRY(fz_vector_const(fz, c, n, 2, &bias));
        if (bias < 0) return NULL;
    }
    if (tb) { /* B^T as a new [K, N] constant */
        tdm_tensor *t;
        int64_t dims[2] = {k, n};
        TDM_TRY(tdm_tensor_new(fz->g->alloc, TDM_FLOAT, 2, dims, &t));
        const float *src = bt->data;
        float *dst = t->data;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < k; j++) dst[j * n + i] = src[i * k + j];
        TDM_TRY(fz_new_const(fz, fz->g->values[b].name, t, &b));
    }
    return emit(fz, gi, -1, a, b, bias, &am);
}

tdm_status *fz_pass_matmul(fz_ctx *fz) {
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        TDM_TRY(fz_refresh(fz));
        if (fz_is_op(fz, (int)i, "MatMul")) TDM_TRY(fuse_matmul(fz, (int)i));
        else if (fz_is_op(fz, (int)i, "Gemm")) TDM_TRY(fuse_gemm(fz, (int)i));
    }
    return NULL;
}

/* A decomposed tanh GELU left over by the MatMul and Conv fusions -> com.microsoft FastGelu
 * (without its bias), float32 tensors of known rank. */
tdm_status *fz_pass_gelu(fz_ctx *fz) {
    size_t nv = fz->g->n_values;
    for (size_t v = 0; v < nv; v++) {
        TDM_TRY(fz_refresh(fz));
        int x = (int)v, xr = fz->g->values[x].rank;
        gelu_match gm;
        if (xr < 1 || !fz_is_f32(fz, x) || !match_gelu_tanh(fz, x, xr, &gm)) continue;
        char *name = tdm_strdup(fz->g->alloc, fz_node(fz, gm.nodes[gm.n - 1])->name);
        if (!name) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
        int fi;
        tdm_status *st = fz_new_node(fz, "FastGelu", "com.microsoft", name, 1, 1, &fi);
        tdm_free(fz->g->alloc, name);
        TDM_TRY(st);
        tdm_node *f = fz_node(fz, fi);
        f->inputs[0] = x;
        f->outputs[0] = gm.out;
        for (int k = 0; k < gm.n; k++) fz_kill(fz, gm.nodes[k]);
        fz->count++;
    }
    return NULL;
}

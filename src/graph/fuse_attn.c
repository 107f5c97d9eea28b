/* Attention pass: scaled dot-product attention as exporters write it,
 *   S = MatMul(Q, K^T) [-> Div(., c) | Mul(., c)] [-> Add(., mask)] -> Softmax(last axis)
 *   Y = MatMul(S, V)
 * with rank-4 Q, K^T, V, becomes one Attention node (ops/fused.h). K^T is usually
 * Transpose(K') for some layout K'; the Attention input K is then Transpose(K') with the
 * last two axes of the permutation swapped (or K' itself when that is the identity), else
 * a Transpose(K^T, [0,1,3,2]) is inserted. */
#include <string.h>

#include "core/alloc.h"
#include "graph/fuse_impl.h"
#include "ops/fused.h"

static int out0(const fz_ctx *fz, int i) { return fz_node(fz, i)->outputs[0]; }

static bool rank4_f32(const fz_ctx *fz, int v) {
    return v >= 0 && fz_is_f32(fz, v) && fz->g->values[v].rank == 4;
}

/* The node producing v when it is `op` with one output and v has no other reader. */
static int single_producer(const fz_ctx *fz, int v, const char *op, int reader) {
    int p = fz_producer(fz, v);
    if (!fz_is_op(fz, p, op) || fz_sole_consumer(fz, v) != reader) return -1;
    return fz_node(fz, p)->n_outputs == 1 ? p : -1;
}

typedef struct attn_match {
    int qk, scale_node, add, softmax, pv; /* nodes (-1 when absent) */
    int q, kt, v, mask;                   /* values */
    float scale;
} attn_match;

/* Walks back from the scores value s (read by `reader`) through the optional scale to the
 * Q.K^T MatMul. */
static bool match_scores(const fz_ctx *fz, int s, int reader, attn_match *m) {
    m->scale = 1.0f;
    m->scale_node = -1;
    int p = fz_producer(fz, s);
    if (fz_sole_consumer(fz, s) != reader || p < 0 || fz_node(fz, p)->n_outputs != 1) return false;
    const tdm_node *n = fz_node(fz, p);
    float c;
    if (fz_is_op(fz, p, "Div") && n->n_inputs == 2 && fz_scalar(fz, n->inputs[1], 4, &c) && c != 0.0f) {
        m->scale = 1.0f / c;
        m->scale_node = p;
        s = n->inputs[0];
    } else if (fz_is_op(fz, p, "Mul") && n->n_inputs == 2) {
        float c0;
        bool k1 = fz_scalar(fz, n->inputs[1], 4, &c), k0 = fz_scalar(fz, n->inputs[0], 4, &c0);
        if (k0 != k1) { /* exactly one constant factor */
            m->scale = k1 ? c : c0;
            m->scale_node = p;
            s = n->inputs[k1 ? 0 : 1];
        }
    }
    if (m->scale_node >= 0) {
        reader = m->scale_node;
        p = fz_producer(fz, s);
        if (fz_sole_consumer(fz, s) != reader) return false;
    }
    if (!fz_is_op(fz, p, "MatMul")) return false;
    n = fz_node(fz, p);
    if (n->n_inputs != 2 || n->n_outputs != 1 || !rank4_f32(fz, n->inputs[0]) ||
        !rank4_f32(fz, n->inputs[1]))
        return false;
    m->qk = p;
    m->q = n->inputs[0];
    m->kt = n->inputs[1];
    return true;
}

/* Softmax over the last axis of a rank-4 input (opset < 13: the axis attribute defaults to
 * 1 and flattens from it; axis 3 of rank 4 is still the last axis alone). */
static bool softmax_last(const fz_ctx *fz, int i) {
    const tdm_node *n = fz_node(fz, i);
    if (n->n_inputs != 1 || n->n_outputs != 1 || !rank4_f32(fz, n->inputs[0])) return false;
    int64_t axis = tdm_attr_int(n, "axis", n->opset >= 13 ? -1 : 1);
    return axis == -1 || axis == 3;
}

/* Exact: Attention computes Softmax(Q.K^T * scale + mask) . V with MatMul's batch
 * broadcasting over the first two axes (ops/fused.h; the kernel broadcasts like the
 * original ops). Division by c becomes scale 1/c (one rounding apart). The mask has known
 * rank <= 4 so it cannot raise the scores' rank. Inner values (scores, scaled, masked,
 * probabilities) each have one reader; the K^T Transpose is absorbed only when K^T has no
 * other reader. */
static tdm_status *fuse_attention(fz_ctx *fz, int si) {
    if (!softmax_last(fz, si)) return NULL;
    attn_match m = {.add = -1, .mask = -1, .softmax = si};
    int probs = out0(fz, si);
    m.pv = fz_sole_consumer(fz, probs);
    if (!fz_is_op(fz, m.pv, "MatMul") || fz_node(fz, m.pv)->inputs[0] != probs ||
        fz_node(fz, m.pv)->n_outputs != 1 || !rank4_f32(fz, fz_node(fz, m.pv)->inputs[1]))
        return NULL;
    m.v = fz_node(fz, m.pv)->inputs[1];
    int s = fz_node(fz, si)->inputs[0];
    int add = single_producer(fz, s, "Add", si);
    bool found = false;
    if (add >= 0 && fz_node(fz, add)->n_inputs == 2) {
        for (int k = 0; k < 2 && !found; k++) {
            int scores = fz_node(fz, add)->inputs[k], mask = fz_node(fz, add)->inputs[1 - k];
            const tdm_value *mv = &fz->g->values[mask];
            if (scores == mask || !fz_is_f32(fz, mask) || mv->rank < 0 || mv->rank > 4) continue;
            if (match_scores(fz, scores, add, &m)) {
                m.add = add;
                m.mask = mask;
                found = true;
            }
        }
    }
    if (!found && !match_scores(fz, s, si, &m)) return NULL;

    /* K from K^T */
    int k = -1, tp = single_producer(fz, m.kt, "Transpose", m.qk);
    int64_t perm[4] = {0, 1, 3, 2};
    bool absorb = false;
    if (tp >= 0) {
        size_t np;
        const int64_t *p = tdm_attr_ints(fz_node(fz, tp), "perm", &np);
        int src = fz_node(fz, tp)->inputs[0];
        if (src >= 0 && ((p && np == 4) || (!p && fz->g->values[src].rank == 4))) {
            int64_t p1[4];
            for (int j = 0; j < 4; j++) p1[j] = p ? p[j] : 3 - j;
            /* K = Transpose(K^T, [0,1,3,2]) = Transpose(src, p1 with the last two swapped) */
            perm[0] = p1[0];
            perm[1] = p1[1];
            perm[2] = p1[3];
            perm[3] = p1[2];
            absorb = true;
            if (perm[0] == 0 && perm[1] == 1 && perm[2] == 2 && perm[3] == 3) k = src;
        }
    }
    int k_src = absorb ? fz_node(fz, tp)->inputs[0] : m.kt;
    if (k < 0) {
        const tdm_value *kv = &fz->g->values[m.kt];
        int64_t kd[4] = {kv->dims[0], kv->dims[1], kv->dims[3], kv->dims[2]};
        TDM_TRY(fz_new_value(fz, kv->name, TDM_FLOAT, 4, kd, &k));
        int ti;
        char *tname = tdm_strdup(fz->g->alloc, fz->g->values[k].name);
        if (!tname) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
        tdm_status *st = fz_new_node(fz, "Transpose", "", tname, 1, 1, &ti);
        tdm_free(fz->g->alloc, tname);
        TDM_TRY(st);
        fz_node(fz, ti)->inputs[0] = k_src;
        fz_node(fz, ti)->outputs[0] = k;
        TDM_TRY(fz_attr_ints(fz, ti, "perm", perm, 4));
    }

    char *name = tdm_strdup(fz->g->alloc, fz_node(fz, m.qk)->name);
    if (!name) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
    int ai;
    tdm_status *st = fz_new_node(fz, "Attention", TDM_FUSED_DOMAIN, name, m.mask >= 0 ? 4 : 3, 1, &ai);
    tdm_free(fz->g->alloc, name);
    TDM_TRY(st);
    tdm_node *an = fz_node(fz, ai);
    an->inputs[0] = m.q;
    an->inputs[1] = k;
    an->inputs[2] = m.v;
    if (m.mask >= 0) an->inputs[3] = m.mask;
    an->outputs[0] = out0(fz, m.pv);
    TDM_TRY(fz_attr_float(fz, ai, "scale", m.scale));
    int dead[] = {m.qk, m.scale_node, m.add, m.softmax, m.pv, absorb ? tp : -1};
    for (size_t j = 0; j < sizeof dead / sizeof dead[0]; j++)
        if (dead[j] >= 0) fz_kill(fz, dead[j]);
    fz->count++;
    return NULL;
}

tdm_status *fz_pass_attention(fz_ctx *fz) {
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        TDM_TRY(fz_refresh(fz));
        if (fz_is_op(fz, (int)i, "Softmax")) TDM_TRY(fuse_attention(fz, (int)i));
    }
    return NULL;
}

/* dnnl family: MatMul, Gemm and FusedMatMul (float32) on oneDNN's matmul primitive.
 *  - MatMul: numpy batching with broadcast batch dims; a 2-D (or 1-D) B makes one
 *    [batch*M, K] x [K, N] product. A constant B is reordered once into the layout oneDNN
 *    prefers.
 *  - Gemm: transposes as strides, alpha as the output scale, beta * C either as the bias
 *    (C of shape [N] or [1, N], alpha = beta = 1) or as C broadcast into Y plus a sum
 *    post-op with scale beta.
 *  - FusedMatMul: the bias (1-D, N values) and the activation as post-ops. */
#include <string.h>

#include "backends/cpu/k_dnnl.h"
#include "core/alloc.h"

enum { MM_MATMUL, MM_GEMM, MM_FUSED };
enum { C_NONE, C_BIAS, C_SUM }; /* how Gemm applies C (entry aux[0]) */

typedef struct mm_state {
    dn_state base; /* first */
    int kind;
    bool ta, tb;
    float alpha, beta;
    const char *act;
} mm_state;

tdm_status *dn_matmul_prepare(const tdm_node *node, int opset, int n_in,
                              const tdm_tensor *const *in, const tdm_allocator *a, void **state) {
    (void)opset;
    mm_state *s;
    TDM_TRY(dn_state_new(a, sizeof *s, (dn_state **)&s));
    *state = s;
    s->kind = !strcmp(node->op_type, "Gemm")          ? MM_GEMM
              : !strcmp(node->op_type, "FusedMatMul") ? MM_FUSED
                                                      : MM_MATMUL;
    if (n_in < 2) s->base.generic = true;
    if (n_in >= 2 && in[1] && in[1]->dtype == TDM_FLOAT) s->base.wconst = in[1];
    s->alpha = 1.0f;
    s->beta = 1.0f;
    if (s->kind == MM_GEMM) {
        s->ta = tdm_attr_int(node, "transA", 0) != 0;
        s->tb = tdm_attr_int(node, "transB", 0) != 0;
        s->alpha = tdm_attr_float(node, "alpha", 1.0f);
        s->beta = tdm_attr_float(node, "beta", 1.0f);
    }
    if (s->kind == MM_FUSED) {
        s->act = tdm_attr_string(node, "activation", "");
        if (strcmp(s->act, "") && strcmp(s->act, "Relu") && strcmp(s->act, "Gelu") &&
            strcmp(s->act, "GeluTanh"))
            s->base.generic = true;
    }
    return NULL;
}

/* Shapes of one matmul as oneDNN sees it: nd dims each (batch..., rows, cols). */
typedef struct mm_shape {
    int nd;
    int64_t a[DNNL_MAX_NDIMS], b[DNNL_MAX_NDIMS], y[DNNL_MAX_NDIMS];
    int64_t as[DNNL_MAX_NDIMS], bs[DNNL_MAX_NDIMS]; /* strides (Gemm transposes) */
} mm_shape;

static void contiguous(int nd, const int64_t *d, int64_t *s) {
    int64_t st = 1;
    for (int i = nd - 1; i >= 0; i--) {
        s[i] = st;
        st *= d[i];
    }
}

/* MatMul / FusedMatMul shapes; false if oneDNN cannot take them. */
static bool matmul_shape(const tdm_tensor *A, const tdm_tensor *B, mm_shape *m) {
    int ra = A->rank, rb = B->rank;
    if (ra < 1 || rb < 1 || ra > DNNL_MAX_NDIMS || rb > DNNL_MAX_NDIMS) return false;
    int64_t K = A->dims[ra - 1];
    int64_t M = ra >= 2 ? A->dims[ra - 2] : 1;
    int64_t N = rb >= 2 ? B->dims[rb - 1] : 1;
    if ((rb >= 2 ? B->dims[rb - 2] : B->dims[0]) != K) return false;
    int na = ra > 2 ? ra - 2 : 0, nb = rb > 2 ? rb - 2 : 0;
    if (nb == 0) { /* one product: [batch*M, K] x [K, N] */
        int64_t rows = M;
        for (int i = 0; i < na; i++) rows *= A->dims[i];
        m->nd = 2;
        m->a[0] = rows, m->a[1] = K;
        m->b[0] = K, m->b[1] = N;
        m->y[0] = rows, m->y[1] = N;
    } else {
        int nbat = na > nb ? na : nb;
        if (nbat + 2 > DNNL_MAX_NDIMS) return false;
        m->nd = nbat + 2;
        for (int i = 0; i < nbat; i++) {
            int ia = i - (nbat - na), ib = i - (nbat - nb);
            int64_t da = ia >= 0 ? A->dims[ia] : 1, db = ib >= 0 ? B->dims[ib] : 1;
            if (da != db && da != 1 && db != 1) return false;
            m->a[i] = da;
            m->b[i] = db;
            m->y[i] = da == 1 ? db : da;
        }
        m->a[nbat] = M, m->a[nbat + 1] = K;
        m->b[nbat] = K, m->b[nbat + 1] = N;
        m->y[nbat] = M, m->y[nbat + 1] = N;
    }
    contiguous(m->nd, m->a, m->as);
    contiguous(m->nd, m->b, m->bs);
    return true;
}

static bool gemm_shape(const mm_state *s, const tdm_tensor *A, const tdm_tensor *B, mm_shape *m) {
    if (A->rank != 2 || B->rank != 2) return false;
    int64_t M = A->dims[s->ta ? 1 : 0], K = A->dims[s->ta ? 0 : 1];
    int64_t N = B->dims[s->tb ? 0 : 1];
    if (B->dims[s->tb ? 1 : 0] != K) return false;
    m->nd = 2;
    m->a[0] = M, m->a[1] = K;
    m->b[0] = K, m->b[1] = N;
    m->y[0] = M, m->y[1] = N;
    m->as[0] = s->ta ? 1 : K, m->as[1] = s->ta ? M : 1;
    m->bs[0] = s->tb ? 1 : N, m->bs[1] = s->tb ? K : 1;
    return true;
}

static const tdm_tensor *input(tdm_kernel_ctx *ctx, int i) {
    return ctx->n_in > i ? ctx->in[i] : NULL;
}

/* How Gemm applies C for this run. */
static int gemm_c_mode(const mm_state *s, const tdm_tensor *C, int64_t N) {
    if (!C || s->beta == 0.0f) return C_NONE;
    bool row = (C->rank == 1 && C->dims[0] == N) || (C->rank == 2 && C->dims[0] == 1 && C->dims[1] == N);
    if (row && s->alpha == 1.0f && s->beta == 1.0f) return C_BIAS;
    return C_SUM;
}

static tdm_status *mm_build(dn_state *bs, tdm_kernel_ctx *ctx, dn_entry *e) {
    mm_state *s = (mm_state *)bs;
    const tdm_tensor *A = ctx->in[0], *B = ctx->in[1], *bias = input(ctx, 2);
    mm_shape m;
    e->generic = true;
    if (!(s->kind == MM_GEMM ? gemm_shape(s, A, B, &m) : matmul_shape(A, B, &m))) return NULL;
    int nd = m.nd;
    int64_t N = m.y[nd - 1];
    int cmode = C_NONE;
    if (s->kind == MM_GEMM) {
        cmode = gemm_c_mode(s, bias, N);
        e->aux[0] = cmode;
    } else if (bias) {
        if (bias->rank != 1 || bias->dims[0] != N) return NULL;
        cmode = C_BIAS;
    }
    dn_md_strided(&e->usr_src, nd, m.a, m.as);
    dn_md_strided(&e->usr_wei, nd, m.b, m.bs);
    dn_md_plain(&e->usr_dst, nd, m.y);
    int64_t bd[DNNL_MAX_NDIMS];
    for (int i = 0; i < nd; i++) bd[i] = i == nd - 1 ? N : 1;
    dn_md_plain(&e->bias_md, nd, bd);
    e->src_md = e->usr_src;
    e->dst_md = e->usr_dst;
    bool constant = B == bs->wconst;
    dnnl_primitive_attr_t attr;
    TDM_TRY(dn_attr_new(&attr));
    dnnl_post_ops_t po = NULL;
    bool ok = dnnl_post_ops_create(&po) == dnnl_success;
    if (ok && cmode == C_SUM) ok = dnnl_post_ops_append_sum(po, s->beta) == dnnl_success;
    if (ok && s->kind == MM_FUSED) ok = dn_append_activation(po, s->act, NULL, 0);
    if (ok) ok = dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    if (po) dnnl_post_ops_destroy(po);
    if (ok && s->alpha != 1.0f)
        ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &s->alpha) == dnnl_success;
    dnnl_primitive_desc_t pd = NULL;
    /* a constant B in the layout oneDNN prefers; else (or if that fails) B as it is */
    for (int attempt = constant ? 0 : 1; ok && attempt < 2 && !pd; attempt++) {
        dnnl_memory_desc_t wei;
        if (attempt == 0) {
            dnnl_dims_t d;
            for (int i = 0; i < nd; i++) d[i] = m.b[i];
            dnnl_memory_desc_init_by_tag(&wei, nd, d, dnnl_f32, dnnl_format_tag_any);
        } else {
            wei = e->usr_wei;
        }
        dnnl_matmul_desc_t md;
        if (dnnl_matmul_desc_init(&md, &e->src_md, &wei, cmode == C_BIAS ? &e->bias_md : NULL,
                                  &e->dst_md) != dnnl_success)
            continue;
        if (dnnl_primitive_desc_create(&pd, &md, attr, bs->eng, NULL) != dnnl_success) pd = NULL;
    }
    dnnl_primitive_attr_destroy(attr);
    if (!pd) return NULL;
    e->wei_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    TDM_TRY(dn_prim_from_pd(pd, &e->main));
    TDM_TRY(dn_reorder_new(bs->eng, &e->usr_wei, &e->wei_md, &e->r_wei));
    if (constant) TDM_TRY(dn_weights_cache(bs, ctx, e, B->data));
    e->generic = false;
    return NULL;
}

/* Y = C broadcast to [M, N] (Gemm's beta * C goes through the sum post-op). */
static void fill_c(const tdm_tensor *C, float *y, int64_t M, int64_t N) {
    const float *c = C->data;
    int64_t cd[2] = {1, 1};
    if (C->rank == 1) cd[1] = C->dims[0];
    if (C->rank == 2) cd[0] = C->dims[0], cd[1] = C->dims[1];
    int64_t rs = cd[0] == 1 ? 0 : cd[1], cs = cd[1] == 1 ? 0 : 1;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) y[i * N + j] = c[i * rs + j * cs];
}

static bool c_broadcasts(const tdm_tensor *C, int64_t M, int64_t N) {
    if (C->rank > 2) return false;
    int64_t r = C->rank == 2 ? C->dims[0] : 1, c = C->rank >= 1 ? C->dims[C->rank - 1] : 1;
    return (r == 1 || r == M) && (c == 1 || c == N);
}

static tdm_status *mm_exec(mm_state *s, tdm_kernel_ctx *ctx, dn_entry *e) {
    const tdm_tensor *A = ctx->in[0], *B = ctx->in[1], *bias = input(ctx, 2);
    tdm_tensor *Y = ctx->out[0];
    const void *wei = e->wei_cached;
    void *ws = NULL;
    tdm_status *st = NULL;
    if (!wei && !e->r_wei.p) wei = B->data;
    if (!wei) {
        size_t n = dnnl_memory_desc_get_size(&e->wei_md);
        if (!(ws = tdm_kscratch(ctx, n ? n : 1)))
            return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
        st = dn_exec_reorder(ctx, s->base.eng, &e->r_wei, &e->usr_wei, B->data, &e->wei_md, ws);
        wei = ws;
    }
    bool has_bias = s->kind == MM_GEMM ? e->aux[0] == C_BIAS : bias != NULL;
    if (!st && s->kind == MM_GEMM && e->aux[0] == C_SUM) {
        int nd = e->usr_dst.ndims;
        fill_c(bias, Y->data, e->usr_dst.dims[nd - 2], e->usr_dst.dims[nd - 1]);
    }
    if (!st) {
        dn_arg args[4] = {{DNNL_ARG_SRC, &e->src_md, A->data},
                          {DNNL_ARG_WEIGHTS, &e->wei_md, wei},
                          {DNNL_ARG_DST, &e->dst_md, Y->data},
                          {DNNL_ARG_BIAS, &e->bias_md, has_bias ? bias->data : NULL}};
        st = dn_exec(ctx, s->base.eng, &e->main, has_bias ? 4 : 3, args);
    }
    tdm_free(ctx->alloc, ws);
    return st;
}

tdm_status *dn_matmul_run(tdm_kernel_ctx *ctx) {
    mm_state *s = ctx->state;
    if (!s || s->base.generic || ctx->n_in < 2 || !ctx->in[0] || !ctx->in[1] || !ctx->out[0])
        return dn_fallback(ctx);
    const tdm_tensor *A = ctx->in[0], *B = ctx->in[1], *C = input(ctx, 2);
    const tdm_tensor *Y = ctx->out[0];
    if (A->dtype != TDM_FLOAT || B->dtype != TDM_FLOAT || (C && C->dtype != TDM_FLOAT) ||
        A->count == 0 || B->count == 0 || Y->count == 0 || A->rank > DNNL_MAX_NDIMS ||
        B->rank > DNNL_MAX_NDIMS || (C && C->rank > DNNL_MAX_NDIMS))
        return dn_fallback(ctx);
    if (s->kind == MM_GEMM && C && (Y->rank != 2 || !c_broadcasts(C, Y->dims[0], Y->dims[1])))
        return dn_fallback(ctx);
    int64_t key[DN_KEY];
    int nk = 0;
    key[nk++] = dn_threads(ctx);
    key[nk++] = (C ? 1 : 0) | (B == s->base.wconst ? 2 : 0);
    const tdm_tensor *parts[3] = {A, B, C};
    for (int t = 0; t < 3; t++) {
        if (!parts[t]) continue;
        if (nk + 1 + parts[t]->rank > DN_KEY) return dn_fallback(ctx);
        key[nk++] = parts[t]->rank;
        for (int i = 0; i < parts[t]->rank; i++) key[nk++] = parts[t]->dims[i];
    }
    dn_entry tmp, *e;
    TDM_TRY(dn_cache_get(&s->base, ctx, key, nk, mm_build, &tmp, &e));
    tdm_status *st = e->generic ? dn_fallback(ctx) : mm_exec(s, ctx, e);
    dn_entry_done(e, &tmp);
    return st;
}

/* CPU kernels: contrib family — the attention operators (ops/contrib_attn.c): Attention,
 * QAttention, MultiHeadAttention, and EmbedLayerNormalization; with the kernel table of the
 * second part of the family (tdm_cpu_kernels_contrib_attn, which also lists the integer
 * matmuls of k_contrib_qmm.c and DynamicQuantizeLSTM of k_contrib_lstm.c).
 *
 * Every attention op comes down to one core (attn_run): Q rows addressed by strides, K and V
 * as [B, N, T, H] (the present tensors, past rows first), and per query row an additive bias
 * built as ONNX Runtime's CPU kernels build theirs: mask_filter_value (default -10000) where
 * the mask hides a key, plus mask_filter_value again above the diagonal when unidirectional
 * (offset by the past length), plus attention_bias. With 8 query rows or more (and a
 * (batch, head) pair per thread) each pair is two GEMMs (oneDNN's serial sgemm) around the
 * rows' softmax (the device's vectorised softmax row); otherwise (decode) each row is the
 * llm family's attention row (k_llm_simd.c: the scores and the weighted sum of V in the
 * device's SIMD variant, AVX2 or AVX-512, portable C under a TANDEM_CPU_ISA cap), rows in
 * parallel over (batch, head, query).
 * Input projections (Attention's packed QKV weights, QAttention's integer product) are one
 * tdm_sgemm each. Subnormal results flush to zero while a thread runs its rows or pairs
 * (tdm_cpu_flush_subnormals, cpu_simd.h). */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_contrib.h"
#include "backends/cpu/k_dnnl.h"
#include "backends/cpu/k_llm.h"
#include "core/alloc.h"

typedef enum mask_kind {
    MASK_NONE,
    MASK_END,   /* [B]: keys at or after end[b] are hidden */
    MASK_RANGE, /* [2B]: end[b], then start[b]: keys outside [start, end) are hidden */
    MASK_2D,    /* [B, T]: 0 hides */
    MASK_3D,    /* [B, S, T]: 0 hides */
} mask_kind;

typedef struct attn_core {
    const float *q;
    int64_t q_bs, q_ss, q_ns; /* strides of a Q row: batch, sequence, head */
    const float *k, *v;       /* [B, N, T, D] and [B, N, T, Dv] */
    float *y;                 /* [B, S, N * Dv] */
    int64_t B, N, S, T, D, Dv, P;
    mask_kind mk;
    const int32_t *mask;
    const float *ab; /* attention_bias rows of T, or NULL */
    int64_t ab_bs, ab_ns;
    bool causal;
    float mfv, scale;
    tdm_kernel_ctx *ctx;
    const tdm_llm_fns *f;
    const tdm_cpu_simd *simd;
    int failed;
} attn_core;

/* The additive bias of query row s of (b, n) into bias[0..T); false when there is none. */
static bool row_bias(const attn_core *c, int64_t b, int64_t n, int64_t s, float *bias) {
    int64_t T = c->T;
    if (c->mk == MASK_NONE && !c->causal && !c->ab) return false;
    memset(bias, 0, (size_t)T * sizeof(float));
    switch (c->mk) {
    case MASK_NONE: break;
    case MASK_END:
    case MASK_RANGE: {
        int64_t end = c->mask[b], start = c->mk == MASK_RANGE ? c->mask[b + c->B] : 0;
        for (int64_t t = 0; t < T; t++)
            if (t >= end || t < start) bias[t] = c->mfv;
        break;
    }
    case MASK_2D:
    case MASK_3D: {
        const int32_t *m = c->mask + (c->mk == MASK_2D ? b * T : (b * c->S + s) * T);
        for (int64_t t = 0; t < T; t++)
            if (m[t] <= 0) bias[t] = c->mfv;
        break;
    }
    }
    if (c->causal)
        for (int64_t t = c->P + s + 1; t < T; t++) bias[t] += c->mfv;
    if (c->ab) {
        const float *a = c->ab + b * c->ab_bs + n * c->ab_ns + s * T;
        for (int64_t t = 0; t < T; t++) bias[t] += a[t];
    }
    return true;
}

/* Few query rows (decode): one row at a time, the scores and V sums in the SIMD row routines. */
static void attn_rows(void *arg, int64_t r0, int64_t r1) {
    attn_core *c = arg;
    int64_t T = c->T;
    float *buf = tdm_kscratch(c->ctx, (size_t)(2 * T + 2) * sizeof(float));
    if (!buf) {
        __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float *bias = buf, *scores = buf + T + 1;
    unsigned csr = tdm_cpu_flush_subnormals(); /* products of tiny weights: see cpu_simd.h */
    for (int64_t r = r0; r < r1; r++) { /* r = (b * N + n) * S + s */
        int64_t s = r % c->S, bn = r / c->S, n = bn % c->N, b = bn / c->N;
        bool any = row_bias(c, b, n, s, bias);
        const float *q = c->q + b * c->q_bs + s * c->q_ss + n * c->q_ns;
        const float *k = c->k + bn * T * c->D, *v = c->v + bn * T * c->Dv;
        float *y = c->y + (b * c->S + s) * c->N * c->Dv + n * c->Dv;
        tdm_llm_attn_row(c->f, c->simd, q, k, c->D, v, c->Dv, T, c->D, c->Dv, c->scale, 0.0f,
                         any ? bias : NULL, false, 0.0f, scores, y);
    }
    tdm_cpu_subnormals_restore(csr);
    tdm_free(c->ctx->alloc, buf);
}

/* Many query rows: per (batch, head) the scores as one GEMM (oneDNN's serial sgemm), the
 * rows' softmax (the device's vectorised row), the product with V as one GEMM. */
static void attn_pairs(void *arg, int64_t p0, int64_t p1) {
    attn_core *c = arg;
    int64_t T = c->T, S = c->S;
    float *buf = tdm_kscratch(c->ctx, (size_t)(S * T + T + 2) * sizeof(float));
    if (!buf) {
        __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float *bias = buf, *sc = buf + T + 1;
    unsigned csr = tdm_cpu_flush_subnormals();
    for (int64_t bn = p0; bn < p1; bn++) {
        int64_t n = bn % c->N, b = bn / c->N;
        const float *q = c->q + b * c->q_bs + n * c->q_ns;
        const float *k = c->k + bn * T * c->D, *v = c->v + bn * T * c->Dv;
        float *y = c->y + b * S * c->N * c->Dv + n * c->Dv;
        if (dnnl_sgemm('N', 'T', S, T, c->D, c->scale, q, c->q_ss, k, c->D, 0.0f, sc, T) != dnnl_success)
            tdm_sgemm(c->simd, NULL, false, true, S, T, c->D, c->scale, q, c->q_ss, k, c->D, 0.0f, sc, T);
        for (int64_t s = 0; s < S; s++) {
            bool any = row_bias(c, b, n, s, bias);
            if (!tdm_llm_softmax(c->simd, sc + s * T, T, 0.0f, any ? bias : NULL, false, 0.0f))
                memset(sc + s * T, 0, (size_t)T * sizeof(float));
        }
        int64_t ldy = c->N * c->Dv;
        if (dnnl_sgemm('N', 'N', S, c->Dv, T, 1.0f, sc, T, v, c->Dv, 0.0f, y, ldy) != dnnl_success)
            tdm_sgemm(c->simd, NULL, false, false, S, c->Dv, T, 1.0f, sc, T, v, c->Dv, 0.0f, y, ldy);
    }
    tdm_cpu_subnormals_restore(csr);
    tdm_free(c->ctx->alloc, buf);
}

/* Reads the mask (mask_index / key_padding_mask) against B, S, T. */
static tdm_status *attn_mask(attn_core *c, const tdm_tensor *m) {
    c->mk = MASK_NONE;
    if (!m) return NULL;
    const tdm_node *node = c->ctx->node;
    if (m->dtype != TDM_INT32)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "the mask must be int32");
    c->mask = m->data;
    if (m->rank == 1 && m->dims[0] == c->B) c->mk = MASK_END;
    else if (m->rank == 1 && m->dims[0] == 2 * c->B) c->mk = MASK_RANGE;
    else if (m->rank == 2 && m->dims[0] == c->B && m->dims[1] == c->T) c->mk = MASK_2D;
    else if (m->rank == 3 && m->dims[0] == c->B && m->dims[1] == c->S && m->dims[2] == c->T) c->mk = MASK_3D;
    else
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "the mask must be [%lld], [%lld], [%lld, %lld] or [%lld, %lld, %lld]",
                              (long long)c->B, (long long)(2 * c->B), (long long)c->B, (long long)c->T,
                              (long long)c->B, (long long)c->S, (long long)c->T);
    return NULL;
}

static tdm_status *attn_bias(attn_core *c, const tdm_tensor *ab) {
    if (!ab) return NULL;
    if (ab->dtype != TDM_FLOAT || ab->rank != 4 || (ab->dims[0] != 1 && ab->dims[0] != c->B) ||
        (ab->dims[1] != 1 && ab->dims[1] != c->N) || ab->dims[2] != c->S || ab->dims[3] != c->T)
        return tdm_node_error(c->ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "attention_bias must be float32 [%lld or 1, %lld or 1, %lld, %lld]",
                              (long long)c->B, (long long)c->N, (long long)c->S, (long long)c->T);
    c->ab = ab->data;
    c->ab_ns = ab->dims[1] == 1 ? 0 : c->S * c->T;
    c->ab_bs = ab->dims[0] == 1 ? 0 : ab->dims[1] * c->S * c->T;
    return NULL;
}

static tdm_status *attn_run(attn_core *c) {
    tdm_kernel_ctx *ctx = c->ctx;
    c->mfv = tdm_attr_float(ctx->node, "mask_filter_value", -10000.0f);
    c->causal = tdm_attr_int(ctx->node, "unidirectional", 0) != 0;
    float sc = tdm_attr_float(ctx->node, "scale", 0.0f);
    c->scale = sc != 0.0f ? sc : 1.0f / sqrtf((float)c->D);
    c->simd = tdm_cpu_simd_of(ctx);
    c->f = tdm_llm_fns_for(c->simd->level);
    int64_t rows = c->B * c->N * c->S, pairs = c->B * c->N;
    if (rows == 0) return NULL;
    if (c->T == 0) { /* nothing to attend to: zeros */
        memset(c->y, 0, (size_t)(c->B * c->S * c->N * c->Dv) * sizeof(float));
        return NULL;
    }
    int threads = tdm_threadpool_size(ctx->pool);
    if (c->S >= 8 && pairs >= threads) {
        int prev = dn_omp_begin();
        tdm_parallel_for(ctx->pool, pairs, 1, attn_pairs, c);
        dn_omp_end(prev);
    } else {
        tdm_parallel_for(ctx->pool, rows, 4, attn_rows, c);
    }
    if (c->failed) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    return NULL;
}

/* K or V into present [B, N, P + L, H]: past rows [B, N, P, H] (may be NULL), then the new rows
 * src[b, l, n * H + h] (row stride ld, batch stride bs) plus bias[n * H + h] (may be NULL). */
static void fill_present(float *dst, const float *past, const float *src, int64_t bs, int64_t ld,
                         const float *bias, int64_t B, int64_t N, int64_t P, int64_t L, int64_t H) {
    int64_t T = P + L;
    for (int64_t b = 0; b < B; b++)
        for (int64_t n = 0; n < N; n++) {
            float *d = dst + (b * N + n) * T * H;
            if (P) memcpy(d, past + (b * N + n) * P * H, (size_t)(P * H) * sizeof(float));
            for (int64_t l = 0; l < L; l++) {
                const float *s = src + b * bs + l * ld + n * H;
                float *o = d + (P + l) * H;
                for (int64_t h = 0; h < H; h++) o[h] = s[h] + (bias ? bias[n * H + h] : 0.0f);
            }
        }
}

/* Attention and QAttention after the projection: qkv [B, S, hq + hk + hv] (bias added). */
static tdm_status *attn_packed(tdm_kernel_ctx *ctx, const float *qkv, int64_t B, int64_t S, int64_t hq,
                               int64_t hk, int64_t hv, const tdm_tensor *mask, const tdm_tensor *past,
                               const tdm_tensor *ab, int present_out) {
    int64_t N = tdm_attr_int(ctx->node, "num_heads", 1), tot = hq + hk + hv;
    attn_core c = {.ctx = ctx, .B = B, .N = N, .S = S, .D = hq / N, .Dv = hv / N};
    int64_t P = 0;
    if (past) {
        if (past->dtype != TDM_FLOAT || past->rank != 5 || past->dims[0] != 2 || past->dims[1] != B ||
            past->dims[2] != N || past->dims[4] != c.D || hk != hv)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "past must be float32 [2, %lld, %lld, P, %lld]",
                                  (long long)B, (long long)N, (long long)c.D);
        P = past->dims[3];
    }
    c.P = P;
    c.T = P + S;
    TDM_TRY(attn_mask(&c, mask));
    TDM_TRY(attn_bias(&c, ab));
    tdm_tensor *pres = ctx->n_out > present_out ? ctx->out[present_out] : NULL;
    size_t kv = (size_t)(B * N * c.T) * (size_t)(c.D + c.Dv);
    float *own = NULL, *kbuf;
    if (pres) {
        kbuf = pres->data;
    } else {
        own = tdm_kscratch(ctx, (kv ? kv : 1) * sizeof(float));
        if (!own) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
        kbuf = own;
    }
    const float *pk = past ? (const float *)past->data : NULL;
    const float *pv = past ? pk + B * N * P * c.D : NULL;
    float *vbuf = kbuf + B * N * c.T * c.D;
    fill_present(kbuf, pk, qkv + hq, S * tot, tot, NULL, B, N, P, S, c.D);
    fill_present(vbuf, pv, qkv + hq + hk, S * tot, tot, NULL, B, N, P, S, c.Dv);
    c.q = qkv;
    c.q_bs = S * tot;
    c.q_ss = tot;
    c.q_ns = c.D;
    c.k = kbuf;
    c.v = vbuf;
    c.y = ctx->out[0]->data;
    tdm_status *st = attn_run(&c);
    tdm_free(ctx->alloc, own);
    return st;
}

/* hidden sizes of Attention's packed weights (qkv_hidden_sizes or thirds) */
static void qkv_sizes(const tdm_node *node, int64_t total, int64_t *h) {
    size_t n;
    const int64_t *q = tdm_attr_ints(node, "qkv_hidden_sizes", &n);
    for (int i = 0; i < 3; i++) h[i] = q && n == 3 ? q[i] : total / 3;
}

tdm_status *tdm_contrib_run_attention(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *w = ctx->in[1];
    const tdm_tensor *bias = ctx->n_in > 2 ? ctx->in[2] : NULL, *mask = ctx->n_in > 3 ? ctx->in[3] : NULL;
    const tdm_tensor *past = ctx->n_in > 4 ? ctx->in[4] : NULL, *ab = ctx->n_in > 5 ? ctx->in[5] : NULL;
    if (x->rank != 3 || w->rank != 2 || w->dtype != TDM_FLOAT || x->dims[2] != w->dims[0])
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input must be [B, S, in] and weights [in, Q + K + V]");
    int64_t B = x->dims[0], S = x->dims[1], tot = w->dims[1], h[3];
    qkv_sizes(ctx->node, tot, h);
    if (bias && (bias->dtype != TDM_FLOAT || bias->count != tot))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "bias must be float32 [%lld]", (long long)tot);
    float *qkv = tdm_kscratch(ctx, (size_t)(B * S * tot + 1) * sizeof(float));
    if (!qkv) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    if (B * S > 0 && tot > 0) {
        const float *bv = bias ? bias->data : NULL;
        if (bv)
            for (int64_t r = 0; r < B * S; r++) memcpy(qkv + r * tot, bv, (size_t)tot * sizeof(float));
        tdm_contrib_gemm(ctx, false, false, B * S, tot, x->dims[2], 1.0f, x->data,
                  x->dims[2], w->data, tot, bv ? 1.0f : 0.0f, qkv, tot);
    }
    tdm_status *st = attn_packed(ctx, qkv, B, S, h[0], h[1], h[2], mask, past, ab, 1);
    tdm_free(ctx->alloc, qkv);
    return st;
}

/* ---- QAttention: qkv = (input - izp) . (weight - wzp) * input_scale * weight_scale + bias ---- */

/* weight [in, tot] minus its zero points (scalar or per column) as floats */
static void weight_to_float(const tdm_tensor *w, const tdm_tensor *wzp, float *wf) {
    int64_t tot = w->dims[1];
    for (int64_t i = 0; i < w->count; i++) {
        int z = wzp ? tdm_contrib_ld_q(wzp->dtype, wzp->data, wzp->count == 1 ? 0 : i % tot) : 0;
        wf[i] = (float)(tdm_contrib_ld_q(w->dtype, w->data, i) - z);
    }
}

/* Prepared state: a constant weight (with a constant or no zero point) converted once. */
typedef struct qatt_state {
    const void *w_data;
    int64_t count;
    float *wf;
} qatt_state;

static tdm_status *qatt_prepare(const tdm_node *node, int opset, int n_in, const tdm_tensor *const *in,
                                const tdm_allocator *a, void **state) {
    (void)opset;
    *state = NULL;
    const tdm_tensor *w = n_in > 1 ? in[1] : NULL, *wzp = n_in > 7 ? in[7] : NULL;
    bool zp_given = node->n_inputs > 7 && node->inputs[7] >= 0;
    if (!w || w->rank != 2 || (zp_given && !wzp) || (w->dtype != TDM_INT8 && w->dtype != TDM_UINT8) ||
        (wzp && (wzp->dtype != w->dtype || (wzp->count != 1 && wzp->count != w->dims[1]))))
        return NULL;
    qatt_state *s = tdm_calloc(a, 1, sizeof *s);
    float *wf = s ? tdm_alloc(a, (size_t)(w->count + 1) * sizeof(float)) : NULL;
    if (!wf) {
        tdm_free(a, s);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory preparing QAttention");
    }
    weight_to_float(w, wzp, wf);
    s->w_data = w->data;
    s->count = w->count;
    s->wf = wf;
    *state = s;
    return NULL;
}

static void qatt_release(void *state, const tdm_allocator *a) {
    qatt_state *s = state;
    if (!s) return;
    tdm_free(a, s->wf);
    tdm_free(a, s);
}

tdm_status *tdm_contrib_run_qattention(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *w = ctx->in[1], *bias = ctx->in[2], *is = ctx->in[3], *ws = ctx->in[4];
    const tdm_tensor *mask = ctx->n_in > 5 ? ctx->in[5] : NULL, *izp = ctx->n_in > 6 ? ctx->in[6] : NULL;
    const tdm_tensor *wzp = ctx->n_in > 7 ? ctx->in[7] : NULL, *past = ctx->n_in > 8 ? ctx->in[8] : NULL;
    const tdm_node *node = ctx->node;
    if (x->rank != 3 || w->rank != 2 || x->dims[2] != w->dims[0])
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input must be [B, S, in] and weight [in, 3 x hidden]");
    int64_t B = x->dims[0], S = x->dims[1], in = x->dims[2], tot = w->dims[1];
    if (bias->dtype != TDM_FLOAT || bias->count != tot || is->dtype != TDM_FLOAT || is->count != 1 ||
        ws->dtype != TDM_FLOAT || (ws->count != 1 && ws->count != tot))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "bias must be float32 [%lld], input_scale a scalar, weight_scale a scalar or [%lld]",
                              (long long)tot, (long long)tot);
    if ((izp && (izp->dtype != x->dtype || izp->count != 1)) ||
        (wzp && (wzp->dtype != w->dtype || (wzp->count != 1 && wzp->count != tot))))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "the zero points must have their tensors' types, input's a scalar, weight's a scalar or [%lld]",
                              (long long)tot);
    const qatt_state *ps = ctx->state;
    bool cached = ps && ps->w_data == w->data && ps->count == w->count;
    size_t nx = (size_t)(B * S * in), nw = cached ? 0 : (size_t)(in * tot), nq = (size_t)(B * S * tot);
    float *buf = tdm_kscratch(ctx, (nx + nw + nq + 1) * sizeof(float));
    if (!buf) return tdm_node_error(node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    float *xf = buf, *wf = cached ? ps->wf : buf + nx, *qkv = buf + nx + nw;
    int xz = izp ? tdm_contrib_ld_q(izp->dtype, izp->data, 0) : 0;
    for (size_t i = 0; i < nx; i++) xf[i] = (float)(tdm_contrib_ld_q(x->dtype, x->data, (int64_t)i) - xz);
    if (!cached) weight_to_float(w, wzp, wf);
    if (nq && in)
        tdm_contrib_gemm(ctx, false, false, B * S, tot, in, 1.0f, xf, in, wf, tot, 0.0f, qkv, tot);
    else
        memset(qkv, 0, nq * sizeof(float));
    float xs = *(const float *)is->data;
    const float *wsv = ws->data, *bv = bias->data;
    for (int64_t r = 0; r < B * S; r++)
        for (int64_t col = 0; col < tot; col++)
            qkv[r * tot + col] = qkv[r * tot + col] * (xs * wsv[ws->count == 1 ? 0 : col]) + bv[col];
    int64_t h = tot / 3;
    tdm_status *st = attn_packed(ctx, qkv, B, S, h, h, h, mask, past, NULL, 1);
    tdm_free(ctx->alloc, buf);
    return st;
}

/* ---- MultiHeadAttention: query [B, S, hq], key [B, L, hq] / value [B, L, hv] (or both
 * [B, N, L, H], already projected), bias [hq + hq + hv] ---- */

tdm_status *tdm_contrib_run_mha(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *q = ctx->in[0], *k = ctx->in[1], *v = ctx->in[2];
    const tdm_tensor *bias = ctx->n_in > 3 ? ctx->in[3] : NULL, *mask = ctx->n_in > 4 ? ctx->in[4] : NULL;
    const tdm_tensor *ab = ctx->n_in > 5 ? ctx->in[5] : NULL, *pk = ctx->n_in > 6 ? ctx->in[6] : NULL;
    const tdm_tensor *pv = ctx->n_in > 7 ? ctx->in[7] : NULL;
    int64_t N = tdm_attr_int(node, "num_heads", 1);
    if (!k || !v || q->rank != 3 || k->rank != v->rank || (k->rank != 3 && k->rank != 4))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "query must be 3-D, key and value both 3-D or both 4-D");
    bool bnsh = k->rank == 4;
    int64_t B = q->dims[0], S = q->dims[1], hq = q->dims[2], D = hq / N;
    int64_t L = bnsh ? k->dims[2] : k->dims[1];
    int64_t Dv = bnsh ? v->dims[3] : v->dims[2] / N;
    bool ok = k->dims[0] == B && v->dims[0] == B && hq % N == 0;
    if (bnsh) ok = ok && k->dims[1] == N && v->dims[1] == N && k->dims[3] == D && v->dims[2] == L && !pk && !bias;
    else ok = ok && k->dims[2] == hq && v->dims[1] == L && v->dims[2] % N == 0;
    if (!ok)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "query [B, S, N x H], key [B, L, N x H] and value [B, L, N x Hv] (or key and "
                              "value [B, N, L, H]) do not agree");
    if (bias && (bias->dtype != TDM_FLOAT || bias->count != 2 * hq + N * Dv))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "bias must be float32 [%lld]", (long long)(2 * hq + N * Dv));
    int64_t P = 0;
    if (pk || pv) {
        if (!pk || !pv || pk->rank != 4 || pv->rank != 4 || pk->dims[0] != B || pk->dims[1] != N ||
            pk->dims[3] != D || pv->dims[0] != B || pv->dims[1] != N || pv->dims[2] != pk->dims[2] ||
            pv->dims[3] != Dv)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "past_key and past_value must be [%lld, %lld, P, %lld] and [%lld, %lld, P, %lld]",
                                  (long long)B, (long long)N, (long long)D, (long long)B, (long long)N, (long long)Dv);
        P = pk->dims[2];
    }
    attn_core c = {.ctx = ctx, .B = B, .N = N, .S = S, .D = D, .Dv = Dv, .P = P, .T = P + L};
    TDM_TRY(attn_mask(&c, mask));
    TDM_TRY(attn_bias(&c, ab));
    tdm_tensor *ok_out = ctx->n_out > 1 ? ctx->out[1] : NULL, *ov_out = ctx->n_out > 2 ? ctx->out[2] : NULL;
    size_t nk = (size_t)(B * N * c.T * D), nv = (size_t)(B * N * c.T * Dv), nqb = bias ? (size_t)(B * S * hq) : 0;
    float *buf = tdm_kscratch(ctx, (nk + nv + nqb + 1) * sizeof(float));
    if (!buf) return tdm_node_error(node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    float *kb = ok_out ? ok_out->data : buf, *vb = ov_out ? ov_out->data : buf + nk, *qb = buf + nk + nv;
    const float *bv = bias ? bias->data : NULL;
    if (bnsh) {
        memcpy(kb, k->data, nk * sizeof(float));
        memcpy(vb, v->data, nv * sizeof(float));
    } else {
        fill_present(kb, pk ? pk->data : NULL, k->data, L * hq, hq, bv ? bv + hq : NULL, B, N, P, L, D);
        fill_present(vb, pv ? pv->data : NULL, v->data, L * N * Dv, N * Dv, bv ? bv + 2 * hq : NULL, B, N, P, L, Dv);
    }
    const float *qd = q->data;
    if (bv) {
        for (int64_t r = 0; r < B * S; r++)
            for (int64_t i = 0; i < hq; i++) qb[r * hq + i] = qd[r * hq + i] + bv[i];
        qd = qb;
    }
    c.q = qd;
    c.q_bs = S * hq;
    c.q_ss = hq;
    c.q_ns = D;
    c.k = kb;
    c.v = vb;
    c.y = ctx->out[0]->data;
    tdm_status *st = attn_run(&c);
    tdm_free(ctx->alloc, buf);
    return st;
}

/* ---- EmbedLayerNormalization ---- */

tdm_status *tdm_contrib_run_embed_ln(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *ids = ctx->in[0], *seg = ctx->in[1], *we = ctx->in[2], *pe = ctx->in[3];
    const tdm_tensor *se = ctx->in[4], *g = ctx->in[5], *be = ctx->in[6];
    const tdm_tensor *mask = ctx->n_in > 7 ? ctx->in[7] : NULL, *pid = ctx->n_in > 8 ? ctx->in[8] : NULL;
    if (ids->rank != 2 || we->rank != 2 || pe->rank != 2 || (se && se->rank != 2))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input_ids must be [B, S] and the embeddings 2-D");
    int64_t B = ids->dims[0], S = ids->dims[1], H = we->dims[1];
    if (pe->dims[1] != H || (se && se->dims[1] != H) || g->count != H || be->count != H ||
        (seg && (seg->rank != 2 || seg->dims[0] != B || seg->dims[1] != S)) ||
        (mask && (mask->rank != 2 || mask->dims[0] != B || mask->dims[1] != S)) ||
        (pid && (pid->rank != 2 || (pid->dims[0] != B && pid->dims[0] != 1) || pid->dims[1] != S)))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "segment_ids, mask and position_ids must be [B, S] (position_ids [1, S] too), "
                              "the embeddings, gamma and beta of hidden size %lld", (long long)H);
    const int32_t *id = ids->data, *sg = seg ? seg->data : NULL, *pp = pid ? pid->data : NULL;
    float eps = tdm_attr_float(node, "epsilon", 1e-12f);
    float *y = ctx->out[0]->data, *esum = ctx->n_out > 2 && ctx->out[2] ? ctx->out[2]->data : NULL;
    const float *W = we->data, *Pm = pe->data, *Sm = se ? se->data : NULL, *gm = g->data, *bm = be->data;
    for (int64_t r = 0; r < B * S; r++) {
        int64_t b = r / S, s = r % S;
        int64_t wi = id[r], pi = pp ? pp[(pid->dims[0] == 1 ? 0 : b * S) + s] : s, si = sg ? sg[r] : 0;
        if (wi < 0 || wi >= we->dims[0] || pi < 0 || pi >= pe->dims[0] || (se && (si < 0 || si >= se->dims[0])))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "an id is out of range (word %lld of %lld, position %lld of %lld, segment %lld)",
                                  (long long)wi, (long long)we->dims[0], (long long)pi, (long long)pe->dims[0],
                                  (long long)si);
        float *o = y + r * H;
        double acc = 0.0;
        for (int64_t i = 0; i < H; i++) {
            o[i] = W[wi * H + i] + Pm[pi * H + i] + (Sm ? Sm[si * H + i] : 0.0f);
            acc += o[i];
        }
        if (esum) memcpy(esum + r * H, o, (size_t)H * sizeof(float));
        double mean = H ? acc / (double)H : 0.0, var = 0.0;
        for (int64_t i = 0; i < H; i++) var += ((double)o[i] - mean) * ((double)o[i] - mean);
        float inv = (float)(1.0 / sqrt((H ? var / (double)H : 0.0) + (double)eps)), m = (float)mean;
        for (int64_t i = 0; i < H; i++) o[i] = (o[i] - m) * inv * gm[i] + bm[i];
    }
    if (ctx->n_out > 1 && ctx->out[1]) { /* mask_index: the count of non-zero mask values per row */
        int32_t *mi = ctx->out[1]->data;
        const int32_t *m = mask ? mask->data : NULL;
        for (int64_t b = 0; b < B; b++) {
            int32_t n = 0;
            for (int64_t s = 0; m && s < S; s++) n += m[b * S + s] != 0;
            mi[b] = n;
        }
    }
    return NULL;
}

#define MS "com.microsoft"
#define F32 TDM_T(TDM_FLOAT)
#define Q8 (TDM_T(TDM_INT8) | TDM_T(TDM_UINT8))
const tdm_kernel_def tdm_cpu_kernels_contrib_attn[] = {
    {MS, "Attention", 1, 0, 0, F32, tdm_contrib_run_attention, NULL, NULL, 0},
    {MS, "QAttention", 1, 0, 0, Q8, tdm_contrib_run_qattention, qatt_prepare, qatt_release, 0},
    {MS, "MultiHeadAttention", 1, 0, 0, F32, tdm_contrib_run_mha, NULL, NULL, 0},
    {MS, "EmbedLayerNormalization", 1, 0, 2, F32, tdm_contrib_run_embed_ln, NULL, NULL, 0},
    {MS, "MatMulIntegerToFloat", 1, 0, 0, Q8, tdm_contrib_run_matmul_integer_to_float,
     tdm_contrib_qmm_prepare, tdm_contrib_qmm_release, 0},
    {MS, "DynamicQuantizeMatMul", 1, 0, 0, F32, tdm_contrib_run_dynamic_quantize_matmul,
     tdm_contrib_qmm_prepare, tdm_contrib_qmm_release, 0},
    {MS, "DynamicQuantizeLSTM", 1, 0, 0, F32, tdm_contrib_run_dq_lstm, NULL, NULL, 0},
};
const int tdm_cpu_kernels_contrib_attn_count =
    (int)(sizeof tdm_cpu_kernels_contrib_attn / sizeof tdm_cpu_kernels_contrib_attn[0]);

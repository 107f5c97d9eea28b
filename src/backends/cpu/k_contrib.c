/* CPU kernels: contrib family (ops/contrib.c) — the kernel table and the float32 ops:
 * BiasGelu, FastGelu, QuickGelu (the device's vectorised unary loops, cpu_simd.h), BiasAdd,
 * SkipLayerNormalization, FusedMatMul (tdm_sgemm per batch, one GEMM when B is a plain
 * matrix) and com.microsoft FusedConv (runs tandem's own FusedConv kernel: oneDNN's
 * convolution with post-ops). The quantized element-wise ops and NhwcMaxPool are in
 * k_contrib_q.c, the attention ops in k_contrib_attn.c, the integer matmuls in
 * k_contrib_qmm.c, DynamicQuantizeLSTM in k_contrib_lstm.c. */
#include <math.h>
#include <string.h>

#include <omp.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_contrib.h"
#include "backends/cpu/k_dnnl.h"
#include "backends/cpu/k_unary.h"
#include "core/alloc.h"
#include "ops/fused.h"

#define CHUNK 1024

/* ---- BiasGelu, FastGelu, QuickGelu ---- */

typedef struct act_job {
    const float *x, *bias;
    float *y;
    int64_t cols, bias_n; /* row length; bias values (0: none) */
    tdm_uparams p;
    float alpha; /* QuickGelu */
    bool quick;
    const tdm_cpu_simd *simd;
} act_job;

static void act_range(void *arg, int64_t b, int64_t e) {
    const act_job *j = arg;
    float tmp[CHUNK], sx[CHUNK], sg[CHUNK];
    for (int64_t i = b; i < e; i += CHUNK) {
        int64_t n = e - i < CHUNK ? e - i : CHUNK;
        const float *x = j->x + i;
        if (j->bias_n) {
            for (int64_t k = 0; k < n; k++) tmp[k] = x[k] + j->bias[(i + k) % j->bias_n];
            x = tmp;
        }
        if (j->quick) { /* x * sigmoid(alpha * x) */
            for (int64_t k = 0; k < n; k++) sx[k] = j->alpha * x[k];
            j->simd->unary_f32(&j->p, sx, sg, n);
            for (int64_t k = 0; k < n; k++) j->y[i + k] = x[k] * sg[k];
        } else {
            j->simd->unary_f32(&j->p, x, j->y + i, n);
        }
    }
}

static tdm_status *run_act(tdm_kernel_ctx *ctx, tdm_uop op, bool quick) {
    const tdm_tensor *x = ctx->in[0], *bias = ctx->n_in > 1 ? ctx->in[1] : NULL;
    act_job j = {.x = x->data, .y = ctx->out[0]->data, .simd = tdm_cpu_simd_of(ctx), .quick = quick};
    j.p.op = op;
    j.alpha = tdm_attr_float(ctx->node, "alpha", 1.702f);
    if (bias) {
        int64_t h = x->rank > 0 ? x->dims[x->rank - 1] : 1;
        if (bias->dtype != TDM_FLOAT || bias->count != h)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "bias must be float32 with %lld values (the last dim)", (long long)h);
        j.bias = bias->data;
        j.bias_n = h;
    }
    if (x->count == 0) return NULL;
    tdm_parallel_for(ctx->pool, x->count, 1 << 14, act_range, &j);
    return NULL;
}

static tdm_status *run_bias_gelu(tdm_kernel_ctx *ctx) { return run_act(ctx, TDM_U_GELU, false); }
static tdm_status *run_fast_gelu(tdm_kernel_ctx *ctx) { return run_act(ctx, TDM_U_GELU_TANH, false); }
static tdm_status *run_quick_gelu(tdm_kernel_ctx *ctx) { return run_act(ctx, TDM_U_SIGMOID, true); }

/* ---- BiasAdd ---- */

typedef struct bias_add_job {
    const float *x, *bias, *skip;
    float *y;
    int64_t c;
} bias_add_job;

static void bias_add_rows(void *arg, int64_t b, int64_t e) {
    const bias_add_job *j = arg;
    for (int64_t r = b; r < e; r++) {
        const float *x = j->x + r * j->c, *s = j->skip + r * j->c;
        float *y = j->y + r * j->c;
        for (int64_t i = 0; i < j->c; i++) y[i] = x[i] + j->bias[i] + s[i];
    }
}

static tdm_status *run_bias_add(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *bias = ctx->in[1], *skip = ctx->in[2];
    if (x->rank != 3 || skip->count != x->count || bias->count != x->dims[2] ||
        bias->dtype != TDM_FLOAT || skip->dtype != TDM_FLOAT)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "X and skip must be float32 [N, S, C] and bias [C]");
    bias_add_job j = {x->data, bias->data, skip->data, ctx->out[0]->data, x->dims[2]};
    if (j.c && x->count) tdm_parallel_for(ctx->pool, x->count / j.c, 64, bias_add_rows, &j);
    return NULL;
}

/* ---- SkipLayerNormalization ---- */

typedef struct sln_job {
    const float *x, *skip, *gamma, *beta, *bias;
    float *y, *mean, *inv, *sum;
    int64_t h, skip_rows;
    float eps;
} sln_job;

static void sln_rows(void *arg, int64_t b, int64_t e) {
    const sln_job *j = arg;
    for (int64_t r = b; r < e; r++) {
        const float *x = j->x + r * j->h, *k = j->skip + (r % j->skip_rows) * j->h;
        float *y = j->y + r * j->h, *s = j->sum ? j->sum + r * j->h : y;
        double acc = 0.0;
        for (int64_t i = 0; i < j->h; i++) {
            s[i] = x[i] + k[i] + (j->bias ? j->bias[i] : 0.0f);
            acc += s[i];
        }
        double mean = acc / (double)j->h, var = 0.0;
        for (int64_t i = 0; i < j->h; i++) var += ((double)s[i] - mean) * ((double)s[i] - mean);
        float inv = (float)(1.0 / sqrt(var / (double)j->h + (double)j->eps)), m = (float)mean;
        if (j->mean) j->mean[r] = m;
        if (j->inv) j->inv[r] = inv;
        for (int64_t i = 0; i < j->h; i++)
            y[i] = (s[i] - m) * inv * j->gamma[i] + (j->beta ? j->beta[i] : 0.0f);
    }
}

static tdm_status *run_skip_ln(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *skip = ctx->in[1], *g = ctx->in[2];
    const tdm_tensor *beta = ctx->n_in > 3 ? ctx->in[3] : NULL, *bias = ctx->n_in > 4 ? ctx->in[4] : NULL;
    if (x->rank < 2 || x->rank > 3)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input must have rank 2 or 3");
    int64_t h = x->dims[x->rank - 1];
    const tdm_tensor *vecs[3] = {g, beta, bias};
    for (int i = 0; i < 3; i++)
        if (vecs[i] && (vecs[i]->dtype != TDM_FLOAT || vecs[i]->count != h))
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "gamma, beta and bias must be float32 [%lld]", (long long)h);
    /* skip: the input's shape, [1, S, H] or [S, H]: rows repeat with its row count */
    bool ok = skip->dtype == TDM_FLOAT && skip->rank >= 2 && skip->rank <= x->rank && h > 0 &&
              skip->count % h == 0 && skip->count > 0 && x->count % skip->count == 0;
    for (int d = 1; ok && d <= 2; d++) ok = skip->dims[skip->rank - d] == x->dims[x->rank - d];
    if (!ok && x->count > 0)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "skip must be float32 with the input's shape, [1, S, H] or [S, H]");
    if (x->count == 0 || h == 0) return NULL;
    sln_job j = {.x = x->data, .skip = skip->data, .gamma = g->data, .y = ctx->out[0]->data, .h = h};
    j.beta = beta ? beta->data : NULL;
    j.bias = bias ? bias->data : NULL;
    j.skip_rows = skip->count / h;
    j.eps = tdm_attr_float(ctx->node, "epsilon", 1e-12f);
    if (ctx->n_out > 1 && ctx->out[1]) j.mean = ctx->out[1]->data;
    if (ctx->n_out > 2 && ctx->out[2]) j.inv = ctx->out[2]->data;
    if (ctx->n_out > 3 && ctx->out[3]) j.sum = ctx->out[3]->data;
    tdm_parallel_for(ctx->pool, x->count / h, 16, sln_rows, &j);
    return NULL;
}

/* ---- GEMM: row blocks on the pool, each oneDNN's serial sgemm ---- */

typedef struct gemm_job {
    bool ta, tb;
    int64_t M, N, K, lda, ldb, ldc, rows;
    float alpha, beta;
    const float *A, *B;
    float *C;
    const tdm_cpu_simd *simd;
} gemm_job;

static tdm_status *gemm_block(void *arg, tdm_kernel_ctx *ctx, int64_t item) {
    (void)ctx;
    const gemm_job *j = arg;
    int64_t r0 = item * j->rows, m = j->M - r0 < j->rows ? j->M - r0 : j->rows;
    const float *a = j->A + (j->ta ? r0 : r0 * j->lda);
    float *c = j->C + r0 * j->ldc;
    if (dnnl_sgemm(j->ta ? 'T' : 'N', j->tb ? 'T' : 'N', m, j->N, j->K, j->alpha, a, j->lda, j->B, j->ldb,
                   j->beta, c, j->ldc) != dnnl_success)
        tdm_sgemm(j->simd, NULL, j->ta, j->tb, m, j->N, j->K, j->alpha, a, j->lda, j->B, j->ldb, j->beta, c, j->ldc);
    return NULL;
}

void tdm_contrib_gemm(tdm_kernel_ctx *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    int threads = tdm_threadpool_size(ctx->pool);
    gemm_job j = {ta, tb, M, N, K, lda, ldb, ldc, M, alpha, beta, A, B, C, tdm_cpu_simd_of(ctx)};
    /* a block of rows per piece: about 4 pieces per thread, 16 rows at least */
    if (threads > 1) {
        int64_t per = (M + 4 * threads - 1) / (4 * threads);
        j.rows = per < 16 ? 16 : per;
    }
    int prev = dn_omp_begin();
    tdm_status *st = dn_parallel(ctx, (M + j.rows - 1) / j.rows, gemm_block, &j);
    dn_omp_end(prev);
    tdm_status_free(st);
}

/* ---- FusedMatMul: Y = alpha * op(A) . op(B), MatMul's batch broadcast ---- */

tdm_status *tdm_contrib_matmul(tdm_kernel_ctx *ctx, int ra_full, const int64_t *adims, const float *A,
                               int rb_full, const int64_t *bdims, const float *B, bool ta, bool tb,
                               float alpha, float *Y, int64_t ycount) {
    if (ra_full < 1 || rb_full < 1 || (ta && ra_full < 2) || (tb && rb_full < 2))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "A and B must have rank 1 or more (2 or more where transposed)");
    /* 1-D operands: A [K] is a row, B [K] a column (MatMul's rule) */
    int64_t M = ra_full == 1 ? 1 : adims[ra_full - (ta ? 1 : 2)];
    int64_t K = adims[ra_full - (ra_full == 1 ? 1 : (ta ? 2 : 1))];
    int64_t KB = rb_full == 1 ? bdims[0] : bdims[rb_full - (tb ? 1 : 2)];
    int64_t N = rb_full == 1 ? 1 : bdims[rb_full - (tb ? 2 : 1)];
    if (K != KB)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "op(A) has %lld columns, op(B) %lld rows",
                              (long long)K, (long long)KB);
    int ra = ra_full > 2 ? ra_full - 2 : 0, rb = rb_full > 2 ? rb_full - 2 : 0;
    int rank = ra > rb ? ra : rb;
    int64_t bd[TDM_MAX_RANK], sa[TDM_MAX_RANK], sb[TDM_MAX_RANK], batches = 1;
    int64_t amat = ra_full == 1 ? K : adims[ra_full - 1] * adims[ra_full - 2];
    int64_t bmat = rb_full == 1 ? K : bdims[rb_full - 1] * bdims[rb_full - 2];
    int64_t stra = amat, strb = bmat;
    for (int d = rank - 1; d >= 0; d--) {
        int da = d - (rank - ra), db = d - (rank - rb);
        int64_t xa = da >= 0 ? adims[da] : 1, xb = db >= 0 ? bdims[db] : 1;
        if (xa != xb && xa != 1 && xb != 1)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "batch dims %lld and %lld do not broadcast",
                                  (long long)xa, (long long)xb);
        bd[d] = xa > xb ? xa : xb;
        sa[d] = xa == 1 ? 0 : stra;
        sb[d] = xb == 1 ? 0 : strb;
        stra *= xa;
        strb *= xb;
        batches *= bd[d];
    }
    if (batches * M * N != ycount)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "the output does not match the product");
    if (ycount == 0 || K == 0) return NULL; /* y stays zero */
    int64_t lda = ra_full == 1 ? K : adims[ra_full - 1], ldb = rb_full == 1 ? 1 : bdims[rb_full - 1];
    /* B one matrix, A not transposed: the batches of A are rows of one GEMM */
    if (!ta && rb == 0) {
        tdm_contrib_gemm(ctx, false, tb, batches * M, N, K, alpha, A, lda, B, ldb, 0.0f, Y, N);
        return NULL;
    }
    for (int64_t i = 0; i < batches; i++) {
        int64_t oa = 0, ob = 0, rem = i;
        for (int d = rank - 1; d >= 0; d--) {
            int64_t c = rem % bd[d];
            rem /= bd[d];
            oa += c * sa[d];
            ob += c * sb[d];
        }
        tdm_contrib_gemm(ctx, ta, tb, M, N, K, alpha, A + oa, lda, B + ob, ldb, 0.0f, Y + i * M * N, N);
    }
    return NULL;
}

static tdm_status *run_fused_matmul(tdm_kernel_ctx *ctx) {
    const tdm_tensor *a = ctx->in[0], *b = ctx->in[1];
    tdm_tensor *y = ctx->out[0];
    if (a->dtype != TDM_FLOAT || b->dtype != TDM_FLOAT)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "A and B must be float32");
    bool ta = tdm_attr_int(ctx->node, "transA", 0) != 0, tb = tdm_attr_int(ctx->node, "transB", 0) != 0;
    return tdm_contrib_matmul(ctx, a->rank, a->dims, a->data, b->rank, b->dims, b->data, ta, tb,
                              tdm_attr_float(ctx->node, "alpha", 1.0f), y->data, y->count);
}

/* ---- com.microsoft FusedConv: tandem's FusedConv kernel on a copy of the node in tandem's
 * domain (the same inputs, attributes and semantics: Y = act(Conv(X, W) + B + Z)) ---- */

typedef struct fconv_state {
    tdm_node shadow;
    const tdm_kernel_def *k;
    void *inner;
} fconv_state;

static tdm_status *fconv_prepare(const tdm_node *node, int opset, int n_in, const tdm_tensor *const *in,
                                 const tdm_allocator *a, void **state) {
    *state = NULL;
    fconv_state *s = tdm_calloc(a, 1, sizeof *s);
    if (!s) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    s->shadow = *node;
    s->shadow.domain = (char *)TDM_FUSED_DOMAIN;
    tdm_dtype types[4] = {TDM_FLOAT, TDM_FLOAT, TDM_FLOAT, TDM_FLOAT};
    s->k = tdm_cpu_find_kernel(&s->shadow, types, n_in < 4 ? n_in : 4);
    if (!s->k) {
        tdm_free(a, s);
        return tdm_node_error(node, TDM_ERR_INTERNAL, "no FusedConv kernel");
    }
    if (s->k->prepare) {
        tdm_status *st = s->k->prepare(&s->shadow, opset, n_in, in, a, &s->inner);
        if (st) {
            tdm_free(a, s);
            return st;
        }
    }
    *state = s;
    return NULL;
}

static void fconv_release(void *state, const tdm_allocator *a) {
    fconv_state *s = state;
    if (!s) return;
    if (s->k->release) s->k->release(s->inner, a);
    tdm_free(a, s);
}

static tdm_status *run_fused_conv(tdm_kernel_ctx *ctx) {
    fconv_state *s = ctx->state;
    bool own = !s; /* run without a prepared state: prepare for this call */
    if (own) TDM_TRY(fconv_prepare(ctx->node, ctx->opset, ctx->n_in, ctx->in, ctx->alloc, (void **)&s));
    tdm_kernel_ctx sub = *ctx;
    sub.node = &s->shadow;
    sub.state = s->inner;
    tdm_status *st = s->k->run(&sub);
    if (own) fconv_release(s, ctx->alloc);
    return st;
}

#define MS "com.microsoft"
#define F32 TDM_T(TDM_FLOAT)
#define Q8 (TDM_T(TDM_INT8) | TDM_T(TDM_UINT8))
const tdm_kernel_def tdm_cpu_kernels_contrib[] = {
    {MS, "BiasGelu", 1, 0, 0, F32, run_bias_gelu, NULL, NULL, 0},
    {MS, "FastGelu", 1, 0, 0, F32, run_fast_gelu, NULL, NULL, 0},
    {MS, "QuickGelu", 1, 0, 0, F32, run_quick_gelu, NULL, NULL, 0},
    {MS, "BiasAdd", 1, 0, 0, F32, run_bias_add, NULL, NULL, 0},
    {MS, "SkipLayerNormalization", 1, 0, 0, F32, run_skip_ln, NULL, NULL, 0},
    {MS, "FusedMatMul", 1, 0, 0, F32, run_fused_matmul, NULL, NULL, 0},
    {MS, "FusedConv", 1, 0, 0, F32, run_fused_conv, fconv_prepare, fconv_release, 0},
    {MS, "QLinearAdd", 1, 0, 0, Q8, tdm_contrib_run_qlinear_add, NULL, NULL, 0},
    {MS, "QLinearMul", 1, 0, 0, Q8, tdm_contrib_run_qlinear_mul, NULL, NULL, 0},
    {MS, "QLinearSigmoid", 1, 0, 0, Q8, tdm_contrib_run_qlinear_lut, NULL, NULL, 0},
    {MS, "QLinearLeakyRelu", 1, 0, 0, Q8, tdm_contrib_run_qlinear_lut, NULL, NULL, 0},
    {MS, "QLinearGlobalAveragePool", 1, 0, 0, Q8, tdm_contrib_run_qlinear_gap, NULL, NULL, 0},
    {MS, "QLinearConcat", 1, 0, 1, Q8, tdm_contrib_run_qlinear_concat, NULL, NULL, 0},
    {MS, "NhwcMaxPool", 1, 0, 0, Q8, tdm_contrib_run_nhwc_max_pool, NULL, NULL, 0},
    {MS, "QGemm", 1, 0, 0, Q8, tdm_contrib_run_qgemm, NULL, NULL, 0},
    {MS, "QLinearAveragePool", 1, 0, 0, Q8, tdm_contrib_run_qlinear_avg_pool, NULL, NULL, 0},
};
const int tdm_cpu_kernels_contrib_count =
    (int)(sizeof tdm_cpu_kernels_contrib / sizeof tdm_cpu_kernels_contrib[0]);

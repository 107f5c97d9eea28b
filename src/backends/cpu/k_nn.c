/* CPU kernels: nn family. This file holds the family's kernel table, the dtype conversion
 * helpers and MatMul / Gemm / MatMulInteger. Convolutions are in k_nn_conv.c, pooling in
 * k_nn_pool.c, normalizations in k_nn_norm.c and Einsum in k_nn_einsum.c. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_nn.h"
#include "core/alloc.h"
#include "core/checked.h"

/* ---- dtype conversion ---- */

static double clamp_f64(double v, double lo, double hi) {
    if (v != v) return 0;
    return v < lo ? lo : v > hi ? hi : v;
}

void tdm_nn_convert(const void *src, tdm_dtype st, void *dst, tdm_dtype dt, int64_t n) {
    if (dt == TDM_FLOAT) {
        float *d = dst;
        switch (st) {
        case TDM_FLOAT: memcpy(d, src, (size_t)n * 4); return;
        case TDM_FLOAT16:
            for (int64_t i = 0; i < n; i++) d[i] = tdm_f16_to_f32(((const uint16_t *)src)[i]);
            return;
        case TDM_BFLOAT16:
            for (int64_t i = 0; i < n; i++) d[i] = tdm_bf16_to_f32(((const uint16_t *)src)[i]);
            return;
        case TDM_DOUBLE:
            for (int64_t i = 0; i < n; i++) d[i] = (float)((const double *)src)[i];
            return;
        case TDM_INT8:
            for (int64_t i = 0; i < n; i++) d[i] = ((const int8_t *)src)[i];
            return;
        case TDM_UINT8:
            for (int64_t i = 0; i < n; i++) d[i] = ((const uint8_t *)src)[i];
            return;
        default: break;
        }
    }
    if (st == TDM_FLOAT) {
        const float *s = src;
        switch (dt) {
        case TDM_FLOAT16:
            for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = tdm_f32_to_f16(s[i]);
            return;
        case TDM_BFLOAT16:
            for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = tdm_f32_to_bf16(s[i]);
            return;
        case TDM_DOUBLE:
            for (int64_t i = 0; i < n; i++) ((double *)dst)[i] = s[i];
            return;
        case TDM_INT8:
            for (int64_t i = 0; i < n; i++)
                ((int8_t *)dst)[i] = (int8_t)clamp_f64(nearbyint(s[i]), -128, 127);
            return;
        case TDM_UINT8:
            for (int64_t i = 0; i < n; i++)
                ((uint8_t *)dst)[i] = (uint8_t)clamp_f64(nearbyint(s[i]), 0, 255);
            return;
        default: break;
        }
    }
    /* everything else goes through double */
    tdm_tensor t = {.dtype = st, .data = (void *)src};
    for (int64_t i = 0; i < n; i++) {
        double v = tdm_tensor_get_f64(&t, i);
        switch (dt) {
        case TDM_DOUBLE: ((double *)dst)[i] = v; break;
        case TDM_FLOAT: ((float *)dst)[i] = (float)v; break;
        case TDM_FLOAT16: ((uint16_t *)dst)[i] = tdm_f32_to_f16((float)v); break;
        case TDM_BFLOAT16: ((uint16_t *)dst)[i] = tdm_f32_to_bf16((float)v); break;
        case TDM_INT8: ((int8_t *)dst)[i] = (int8_t)clamp_f64(v, -128, 127); break;
        case TDM_UINT8: ((uint8_t *)dst)[i] = (uint8_t)clamp_f64(v, 0, 255); break;
        case TDM_INT16: ((int16_t *)dst)[i] = (int16_t)clamp_f64(v, -32768, 32767); break;
        case TDM_UINT16: ((uint16_t *)dst)[i] = (uint16_t)clamp_f64(v, 0, 65535); break;
        case TDM_INT32:
            ((int32_t *)dst)[i] = (int32_t)clamp_f64(v, -2147483648.0, 2147483647.0);
            break;
        case TDM_UINT32: ((uint32_t *)dst)[i] = (uint32_t)clamp_f64(v, 0, 4294967295.0); break;
        case TDM_INT64:
            ((int64_t *)dst)[i] = (int64_t)clamp_f64(v, -9.2e18, 9.2e18);
            break;
        case TDM_UINT64: ((uint64_t *)dst)[i] = (uint64_t)clamp_f64(v, 0, 1.8e19); break;
        case TDM_BOOL: ((uint8_t *)dst)[i] = v != 0; break;
        default: break;
        }
    }
}

static bool run_as_match(tdm_dtype dt, tdm_dtype from, tdm_dtype work) {
    if (from != TDM_UNDEFINED) return dt == from;
    return dt != work && (dt == TDM_FLOAT || dt == TDM_DOUBLE || dt == TDM_FLOAT16 ||
                          dt == TDM_BFLOAT16);
}

tdm_status *tdm_nn_run_as(tdm_kernel_ctx *ctx, tdm_dtype from, tdm_dtype work,
                          tdm_kernel_fn fn) {
    const tdm_tensor *ins[TDM_EINSUM_MAX_OPS + 8];
    tdm_tensor *tmp_in[TDM_EINSUM_MAX_OPS + 8] = {0};
    tdm_tensor *outs[8], *tmp_out[8] = {0};
    if (ctx->n_in > (int)(sizeof ins / sizeof ins[0]) || ctx->n_out > 8)
        return tdm_node_error(ctx->node, TDM_ERR_LIMIT, "too many inputs or outputs");
    tdm_status *st = NULL;
    for (int i = 0; i < ctx->n_in && !st; i++) {
        const tdm_tensor *t = ctx->in[i];
        ins[i] = t;
        if (!t || !run_as_match(t->dtype, from, work)) continue;
        st = tdm_tensor_new(ctx->alloc, work, t->rank, t->dims, &tmp_in[i]);
        if (st) break;
        tdm_nn_convert(t->data, t->dtype, tmp_in[i]->data, work, t->count);
        ins[i] = tmp_in[i];
    }
    for (int i = 0; i < ctx->n_out && !st; i++) {
        tdm_tensor *t = ctx->out[i];
        outs[i] = t;
        if (!t || !run_as_match(t->dtype, from, work)) continue;
        st = tdm_tensor_new(ctx->alloc, work, t->rank, t->dims, &tmp_out[i]);
        outs[i] = tmp_out[i];
    }
    if (!st) {
        tdm_kernel_ctx sub = *ctx;
        sub.in = ins;
        sub.out = outs;
        st = fn(&sub);
    }
    for (int i = 0; i < ctx->n_out; i++) {
        if (!tmp_out[i]) continue;
        if (!st)
            tdm_nn_convert(tmp_out[i]->data, work, ctx->out[i]->data, ctx->out[i]->dtype,
                           ctx->out[i]->count);
        tdm_tensor_destroy(tmp_out[i]);
    }
    for (int i = 0; i < ctx->n_in; i++) tdm_tensor_destroy(tmp_in[i]);
    return st;
}

/* ---- double GEMM ---- */

void tdm_nn_dgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                  const double *A, int64_t lda, const double *B, int64_t ldb, double beta,
                  double *C, int64_t ldc) {
    for (int64_t i = 0; i < M; i++) {
        double *cr = C + i * ldc;
        if (beta == 0.0) {
            for (int64_t j = 0; j < N; j++) cr[j] = 0.0;
        } else if (beta != 1.0) {
            for (int64_t j = 0; j < N; j++) cr[j] *= beta;
        }
        if (!tb) {
            for (int64_t k = 0; k < K; k++) {
                double a = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);
                const double *br = B + k * ldb;
                for (int64_t j = 0; j < N; j++) cr[j] += a * br[j];
            }
        } else {
            for (int64_t j = 0; j < N; j++) {
                const double *br = B + j * ldb;
                double s = 0.0;
                for (int64_t k = 0; k < K; k++) s += (ta ? A[k * lda + i] : A[i * lda + k]) * br[k];
                cr[j] += alpha * s;
            }
        }
    }
}

/* ---- MatMul ---- */

/* Batched product layout for numpy matmul semantics. */
typedef struct mm_plan {
    int64_t M, N, K;
    int64_t batch;                 /* number of products */
    int nb;                        /* batch rank of the output */
    int64_t bdims[TDM_MAX_RANK];   /* output batch dims */
    int64_t astr[TDM_MAX_RANK], bstr[TDM_MAX_RANK]; /* batch strides in matrices */
    bool a_flat;                   /* A's batch equals the output batch and B has none */
} mm_plan;

static void mm_make_plan(const tdm_tensor *a, const tdm_tensor *b, const tdm_tensor *y,
                         mm_plan *p) {
    int ra = a->rank, rb = b->rank;
    p->K = a->dims[ra - 1];
    p->M = ra >= 2 ? a->dims[ra - 2] : 1;
    p->N = rb >= 2 ? b->dims[rb - 1] : 1;
    p->nb = y->rank - (ra >= 2) - (rb >= 2);
    p->batch = 1;
    for (int i = 0; i < p->nb; i++) {
        p->bdims[i] = y->dims[i];
        p->batch *= y->dims[i];
    }
    int na = ra > 2 ? ra - 2 : 0, nbb = rb > 2 ? rb - 2 : 0;
    tdm_broadcast_strides(na, a->dims, p->nb, p->bdims, p->astr);
    tdm_broadcast_strides(nbb, b->dims, p->nb, p->bdims, p->bstr);
    int64_t abatch = 1;
    for (int i = 0; i < na; i++) abatch *= a->dims[i];
    p->a_flat = nbb == 0 && abatch == p->batch;
}

static void mm_offsets(const mm_plan *p, int64_t b, int64_t *ao, int64_t *bo) {
    int64_t x = 0, y = 0;
    for (int i = p->nb - 1; i >= 0; i--) {
        int64_t idx = b % p->bdims[i];
        b /= p->bdims[i];
        x += idx * p->astr[i];
        y += idx * p->bstr[i];
    }
    *ao = x;
    *bo = y;
}

typedef struct mm_job {
    const mm_plan *p;
    const void *A, *B;
    void *C;
    bool dbl;
    tdm_threadpool *pool;
    const tdm_cpu_simd *simd;
} mm_job;

static void mm_batch_range(void *arg, int64_t b0, int64_t b1) {
    const mm_job *j = arg;
    const mm_plan *p = j->p;
    int64_t M = p->M, N = p->N, K = p->K;
    for (int64_t b = b0; b < b1; b++) {
        int64_t ao, bo;
        mm_offsets(p, b, &ao, &bo);
        if (j->dbl) {
            tdm_nn_dgemm(false, false, M, N, K, 1.0, (const double *)j->A + ao * M * K, K,
                         (const double *)j->B + bo * K * N, N, 0.0,
                         (double *)j->C + b * M * N, N);
        } else {
            tdm_sgemm(j->simd, j->pool, false, false, M, N, K, 1.0f, (const float *)j->A + ao * M * K, K,
                      (const float *)j->B + bo * K * N, N, 0.0f, (float *)j->C + b * M * N, N);
        }
    }
}

static tdm_status *matmul_real(tdm_kernel_ctx *ctx) {
    const tdm_tensor *a = ctx->in[0], *b = ctx->in[1];
    tdm_tensor *y = ctx->out[0];
    bool dbl = a->dtype == TDM_DOUBLE;
    if (b->dtype != a->dtype)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "A and B types differ");
    mm_plan p;
    mm_make_plan(a, b, y, &p);
    if (y->count == 0) return NULL;
    mm_job job = {&p, a->data, b->data, y->data, dbl, ctx->pool, tdm_cpu_simd_of(ctx)};
    if (p.a_flat) { /* one product of [batch*M, K] x [K, N] */
        mm_plan flat = p;
        flat.M = p.M * p.batch;
        flat.batch = 1;
        flat.nb = 0;
        job.p = &flat;
        mm_batch_range(&job, 0, 1);
        return NULL;
    }
    double flops = 2.0 * (double)p.M * (double)p.N * (double)p.K;
    int threads = tdm_threadpool_size(ctx->pool);
    if (threads > 1 && p.batch >= threads && flops < 4.0e6) {
        int64_t grain = (int64_t)(1.0e6 / (flops + 1.0)) + 1;
        tdm_parallel_for(ctx->pool, p.batch, grain, mm_batch_range, &job);
    } else {
        mm_batch_range(&job, 0, p.batch);
    }
    return NULL;
}

static tdm_status *run_matmul(tdm_kernel_ctx *ctx) {
    tdm_dtype dt = ctx->in[0]->dtype;
    if (dt == TDM_FLOAT || dt == TDM_DOUBLE) return matmul_real(ctx);
    if (dt == TDM_FLOAT16 || dt == TDM_BFLOAT16) return tdm_nn_run_as(ctx, dt, TDM_FLOAT, matmul_real);
    return tdm_nn_run_as(ctx, dt, TDM_DOUBLE, matmul_real);
}

/* ---- MatMulInteger ---- */

/* Widens an 8-bit operand to int32 minus its zero point; the zero point is a scalar or
 * one value per row (A: per row of each matrix) or per column (B). */
static tdm_status *widen_zp(tdm_kernel_ctx *ctx, const tdm_tensor *x, const tdm_tensor *zp,
                            bool per_row, int32_t *out) {
    int64_t rows = x->rank >= 2 ? x->dims[x->rank - 2] : 1, cols = x->dims[x->rank - 1];
    int64_t per = per_row ? rows : cols;
    if (zp && zp->dtype != x->dtype)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "zero point type differs from its operand");
    if (zp && zp->count != 1 && zp->count != per)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "zero point must be a scalar or have %lld values", (long long)per);
    bool s8 = x->dtype == TDM_INT8;
    for (int64_t i = 0; i < x->count; i++) {
        int32_t v = s8 ? ((const int8_t *)x->data)[i] : ((const uint8_t *)x->data)[i];
        int32_t z = 0;
        if (zp) {
            int64_t zi = zp->count == 1 ? 0 : per_row ? (i / cols) % rows : i % cols;
            z = s8 ? ((const int8_t *)zp->data)[zi] : ((const uint8_t *)zp->data)[zi];
        }
        out[i] = v - z;
    }
    return NULL;
}

static tdm_status *run_matmul_integer(tdm_kernel_ctx *ctx) {
    const tdm_tensor *a = ctx->in[0], *b = ctx->in[1];
    const tdm_tensor *az = ctx->n_in > 2 ? ctx->in[2] : NULL, *bz = ctx->n_in > 3 ? ctx->in[3] : NULL;
    tdm_tensor *y = ctx->out[0];
    if ((b->dtype != TDM_INT8 && b->dtype != TDM_UINT8))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "B must be int8 or uint8");
    mm_plan p;
    mm_make_plan(a, b, y, &p);
    int32_t *wa = tdm_kscratch(ctx, (size_t)(a->count + b->count) * sizeof(int32_t));
    if (!wa) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    int32_t *wb = wa + a->count;
    tdm_status *st = widen_zp(ctx, a, az, true, wa);
    if (!st) st = widen_zp(ctx, b, bz, false, wb);
    int32_t *out = y->data;
    for (int64_t bi = 0; !st && bi < p.batch; bi++) {
        int64_t ao, bo;
        mm_offsets(&p, bi, &ao, &bo);
        const int32_t *A = wa + ao * p.M * p.K, *B = wb + bo * p.K * p.N;
        int32_t *C = out + bi * p.M * p.N;
        for (int64_t i = 0; i < p.M; i++)
            for (int64_t k = 0; k < p.K; k++) {
                uint32_t av = (uint32_t)A[i * p.K + k];
                for (int64_t j = 0; j < p.N; j++)
                    C[i * p.N + j] = (int32_t)((uint32_t)C[i * p.N + j] + av * (uint32_t)B[k * p.N + j]);
            }
    }
    tdm_free(ctx->alloc, wa);
    return st;
}

/* ---- Gemm ---- */

static tdm_status *gemm_real(tdm_kernel_ctx *ctx) {
    const tdm_tensor *a = ctx->in[0], *b = ctx->in[1];
    const tdm_tensor *c = ctx->n_in > 2 ? ctx->in[2] : NULL;
    tdm_tensor *y = ctx->out[0];
    bool ta = tdm_attr_int(ctx->node, "transA", 0) != 0;
    bool tb = tdm_attr_int(ctx->node, "transB", 0) != 0;
    float alpha = tdm_attr_float(ctx->node, "alpha", 1.0f);
    float beta = tdm_attr_float(ctx->node, "beta", 1.0f);
    bool dbl = a->dtype == TDM_DOUBLE;
    if (b->dtype != a->dtype || (c && c->dtype != a->dtype))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input types differ");
    int64_t M = y->dims[0], N = y->dims[1], K = a->dims[ta ? 0 : 1];
    if (y->count == 0) return NULL;
    if (c && beta != 0.0f) {
        int64_t cs[2];
        tdm_broadcast_strides(c->rank, c->dims, 2, y->dims, cs);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                int64_t o = i * cs[0] + j * cs[1];
                if (dbl) ((double *)y->data)[i * N + j] = ((const double *)c->data)[o];
                else ((float *)y->data)[i * N + j] = ((const float *)c->data)[o];
            }
    } else {
        beta = 0.0f;
    }
    if (dbl)
        tdm_nn_dgemm(ta, tb, M, N, K, alpha, a->data, a->dims[1], b->data, b->dims[1], beta,
                     y->data, N);
    else
        tdm_sgemm(tdm_cpu_simd_of(ctx), ctx->pool, ta, tb, M, N, K, alpha, a->data, a->dims[1], b->data, b->dims[1],
                  beta, y->data, N);
    return NULL;
}

static tdm_status *run_gemm(tdm_kernel_ctx *ctx) {
    tdm_dtype dt = ctx->in[0]->dtype;
    if (dt == TDM_FLOAT || dt == TDM_DOUBLE) return gemm_real(ctx);
    if (dt == TDM_FLOAT16 || dt == TDM_BFLOAT16) return tdm_nn_run_as(ctx, dt, TDM_FLOAT, gemm_real);
    return tdm_nn_run_as(ctx, dt, TDM_DOUBLE, gemm_real);
}

#define T_MM (TDM_T_FLOATS | TDM_T(TDM_INT32) | TDM_T(TDM_INT64) | TDM_T(TDM_UINT32) | TDM_T(TDM_UINT64))
#define T_Q8 (TDM_T(TDM_INT8) | TDM_T(TDM_UINT8))

const tdm_kernel_def tdm_cpu_kernels_nn[] = {
    {"", "MatMul", 1, 0, 0, T_MM, run_matmul, NULL, NULL},
    {"", "MatMulInteger", 10, 0, 0, T_Q8, run_matmul_integer, NULL, NULL},
    {"", "Gemm", 1, 0, 0, T_MM, run_gemm, NULL, NULL},
    {"", "Conv", 1, 0, 0, TDM_T_FLOATS, tdm_nn_run_conv, NULL, NULL},
    {"", "ConvInteger", 10, 0, 0, T_Q8, tdm_nn_run_conv_integer, NULL, NULL},
    {"", "ConvTranspose", 1, 0, 0, TDM_T_FLOATS, tdm_nn_run_conv_transpose, NULL, NULL},
    {"", "MaxPool", 1, 0, 0, TDM_T_FLOATS | T_Q8, tdm_nn_run_max_pool, NULL, NULL},
    {"", "AveragePool", 1, 0, 0, TDM_T_FLOATS, tdm_nn_run_avg_pool, NULL, NULL},
    {"", "LpPool", 1, 0, 0, TDM_T_FLOATS, tdm_nn_run_lp_pool, NULL, NULL},
    {"", "GlobalAveragePool", 1, 0, 0, TDM_T_FLOATS, tdm_nn_run_global_avg_pool, NULL, NULL},
    {"", "GlobalMaxPool", 1, 0, 0, TDM_T_FLOATS, tdm_nn_run_global_max_pool, NULL, NULL},
    {"", "GlobalLpPool", 1, 0, 0, TDM_T_FLOATS, tdm_nn_run_global_lp_pool, NULL, NULL},
    {"", "MaxUnpool", 9, 0, 0, TDM_T_FLOATS, tdm_nn_run_max_unpool, NULL, NULL},
    {"", "BatchNormalization", 1, 0, 0, TDM_T_FLOATS, tdm_nn_run_batchnorm, NULL, NULL},
    {"", "InstanceNormalization", 1, 0, 0, TDM_T_FLOATS, tdm_nn_run_instancenorm, NULL, NULL},
    {"", "LRN", 1, 0, 0, TDM_T_FLOATS, tdm_nn_run_lrn, NULL, NULL},
    {"", "MeanVarianceNormalization", 9, 0, 0, TDM_T_FLOATS, tdm_nn_run_mvn, NULL, NULL},
    {"", "Einsum", 12, 0, 0, T_MM, tdm_nn_run_einsum, NULL, NULL},
};
const int tdm_cpu_kernels_nn_count = (int)(sizeof tdm_cpu_kernels_nn / sizeof tdm_cpu_kernels_nn[0]);

/* CPU kernels: llm family (ops/llm.c) — the kernel table, RotaryEmbedding (com.microsoft and
 * ONNX 23) and the RMS normalisations (SimplifiedLayerNormalization,
 * SkipSimplifiedLayerNormalization, RMSNormalization). GroupQueryAttention is in
 * k_llm_gqa.c, PagedAttention in k_llm_paged.c, ONNX Attention in k_llm_attn.c, the SIMD row
 * routines in k_llm_simd.c.
 * float32 only. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/k_llm.h"

/* ---- RotaryEmbedding ----
 * com.microsoft: input, position_ids (int64 [1] = offset of row 0, or [B, S]), cos, sin
 *   [max_pos, rot/2]; attributes interleaved, num_heads, rotary_embedding_dim.
 * ONNX 23: X, cos, sin, position_ids (optional: without it cos/sin are [B, S, rot/2]).
 * X is [B, H, S, D] or [B, S, H*D]; the first rot values of each head vector rotate, the rest
 * pass through. */

typedef struct rope_job {
    const float *x, *cos, *sin;
    float *y;
    const int64_t *pid;
    int64_t B, H, S, D, rot, cstride, maxpos, pid_mode; /* 0: none (cos per [b,s]); 1: offset; 2: [B,S] */
    bool four_d, interleaved;
} rope_job;

static void rope_rows(void *arg, int64_t r0, int64_t r1) {
    const rope_job *j = arg;
    for (int64_t r = r0; r < r1; r++) { /* r = (b * S + s) */
        int64_t b = r / j->S, s = r % j->S;
        int64_t crow = j->pid_mode == 0 ? r : j->pid_mode == 1 ? j->pid[0] + s : j->pid[r];
        const float *c = j->cos + crow * j->cstride, *sn = j->sin + crow * j->cstride;
        for (int64_t h = 0; h < j->H; h++) {
            int64_t off = j->four_d ? ((b * j->H + h) * j->S + s) * j->D : (r * j->H + h) * j->D;
            float *y = j->y + off;
            if (y != j->x + off) memcpy(y, j->x + off, (size_t)j->D * sizeof(float));
            tdm_llm_rotate(y, c, sn, j->rot, j->interleaved);
        }
    }
}

tdm_status *tdm_llm_run_rotary(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    bool ms = strcmp(node->domain, "com.microsoft") == 0;
    const tdm_tensor *x = ctx->in[0];
    const tdm_tensor *pid = ms ? ctx->in[1] : (ctx->n_in > 3 ? ctx->in[3] : NULL);
    const tdm_tensor *cosc = ctx->in[ms ? 2 : 1], *sinc = ctx->in[ms ? 3 : 2];
    rope_job j;
    memset(&j, 0, sizeof j);
    if (x->dtype != TDM_FLOAT || cosc->dtype != TDM_FLOAT || sinc->dtype != TDM_FLOAT)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input and caches must be float32");
    if (x->rank != 3 && x->rank != 4)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input must have rank 3 or 4");
    int64_t nh = tdm_attr_int(node, "num_heads", 0), rd = tdm_attr_int(node, "rotary_embedding_dim", 0);
    j.four_d = x->rank == 4;
    j.B = x->dims[0];
    j.interleaved = tdm_attr_int(node, "interleaved", 0) != 0;
    if (cosc->rank != sinc->rank || cosc->rank < 2 || cosc->rank > 3)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "cos/sin caches must have rank 2 (or 3)");
    for (int d = 0; d < cosc->rank; d++)
        if (cosc->dims[d] != sinc->dims[d])
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "cos and sin caches differ in shape");
    int64_t half = cosc->dims[cosc->rank - 1];
    if (j.four_d) {
        j.H = x->dims[1];
        j.S = x->dims[2];
        j.D = x->dims[3];
    } else {
        j.S = x->dims[1];
        if (nh <= 0 && ms) nh = half > 0 && x->dims[2] % (2 * half) == 0 ? x->dims[2] / (2 * half) : 0;
        if (nh <= 0 || x->dims[2] % nh)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "a 3-D input's hidden size (%lld) must be num_heads (%lld) heads",
                                  (long long)x->dims[2], (long long)nh);
        j.H = nh;
        j.D = x->dims[2] / nh;
    }
    j.rot = rd > 0 ? rd : j.D;
    if (j.rot > j.D || j.rot % 2)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "rotary_embedding_dim %lld must be even and at most the head size %lld",
                              (long long)j.rot, (long long)j.D);
    if (half != j.rot / 2 && !(ms && half > j.rot / 2))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "cos/sin caches have %lld columns, rotary dim / 2 is %lld",
                              (long long)half, (long long)(j.rot / 2));
    j.cstride = half;
    if (pid) {
        if (pid->dtype != TDM_INT64 || cosc->rank != 2)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "position_ids must be int64 and the caches 2-D");
        j.maxpos = cosc->dims[0];
        if (pid->count == 1 && ms) j.pid_mode = 1;
        else if (pid->rank == 2 && pid->dims[0] == j.B && pid->dims[1] == j.S) j.pid_mode = 2;
        else
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "position_ids must be [batch, sequence]%s", ms ? " or [1]" : "");
        j.pid = pid->data;
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (int64_t i = 0; i < pid->count; i++) {
            lo = j.pid[i] < lo ? j.pid[i] : lo;
            hi = j.pid[i] > hi ? j.pid[i] : hi;
        }
        if (j.pid_mode == 1) hi += j.S - 1;
        if (pid->count && (lo < 0 || hi >= j.maxpos))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "position id %lld is outside the caches' %lld rows",
                                  (long long)(lo < 0 ? lo : hi), (long long)j.maxpos);
    } else {
        if (ms) return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "position_ids is required");
        if (cosc->rank != 3 || cosc->dims[0] != j.B || cosc->dims[1] != j.S)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "without position_ids, cos/sin caches must be [batch, sequence, rot/2]");
    }
    j.x = x->data;
    j.y = ctx->out[0]->data;
    j.cos = cosc->data;
    j.sin = sinc->data;
    tdm_parallel_for(ctx->pool, j.B * j.S, 16, rope_rows, &j);
    return NULL;
}

/* ---- RMS normalisations ---- */

/* 1 / sqrt(mean(x^2) + eps) over n values (double sums: eight running ones, so the adds
 * overlap instead of waiting on each other; a row's value never depends on other rows). */
__attribute__((always_inline)) static inline float inv_rms(const float *x, int64_t n, float eps) {
    double p[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) p[l] += (double)x[i + l] * x[i + l];
    for (; i < n; i++) p[0] += (double)x[i] * x[i];
    double s = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
    return (float)(1.0 / sqrt(s / (double)(n > 0 ? n : 1) + (double)eps));
}

typedef struct rms_job {
    const float *x, *skip, *bias, *scale;
    float *y, *inv, *mean, *sum;
    int64_t cols, skip_rows, scale_n;
    float eps;
} rms_job;

/* The rows' loops, compiled for the baseline and (below) for AVX2 and AVX-512, where the
 * compiler vectorizes them: the same operations on each element in the same order (lane l of
 * the double sums is running sum l; x * x is exact in double, so a fused multiply-add rounds
 * as the add did), so every level gives the same values (test_llm_attn's test_rms_levels).
 * 8 rows of 576 with the caches warm, TSC cycles: 4670-4850 at the baseline (SSE2), 3310-3350
 * AVX2, 3210-3220 AVX-512; in SmolLM2's 8-stream decode step the 60 SkipSimplifiedLayerNorms
 * took 0.18 against 0.25-0.27 ms at 1 thread and 0.21-0.24 against 0.25-0.26 at 2 (AMX Xeon,
 * bench/llm/results-2026-12-06-s40-amx.md). */
__attribute__((always_inline)) static inline void rms_rows_of(void *arg, int64_t r0, int64_t r1) {
    const rms_job *j = arg;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->x + r * j->cols;
        float *y = j->y + r * j->cols;
        const float *src = x;
        if (j->skip) { /* sum = input + skip (+ bias), kept in the sum output or in y */
            float *s = j->sum ? j->sum + r * j->cols : y;
            const float *k = j->skip + (r % j->skip_rows) * j->cols;
            for (int64_t i = 0; i < j->cols; i++) s[i] = x[i] + k[i] + (j->bias ? j->bias[i] : 0.0f);
            src = s;
        }
        float inv = inv_rms(src, j->cols, j->eps);
        if (j->inv) j->inv[r] = inv;
        if (j->mean) j->mean[r] = 0.0f;
        for (int64_t i = 0; i < j->cols; i++)
            y[i] = src[i] * inv * j->scale[j->scale_n == 1 ? 0 : i];
    }
}

static void rms_rows(void *arg, int64_t r0, int64_t r1) { rms_rows_of(arg, r0, r1); }
#ifdef TDM_SIMD_X86
TDM_TARGET_AVX2 static void rms_rows_avx2(void *arg, int64_t r0, int64_t r1) {
    rms_rows_of(arg, r0, r1);
}
TDM_TARGET_AVX512 static void rms_rows_avx512(void *arg, int64_t r0, int64_t r1) {
    rms_rows_of(arg, r0, r1);
}
#endif

static tdm_range_fn rms_rows_for(const tdm_kernel_ctx *ctx) {
#ifdef TDM_SIMD_X86
    tdm_cpu_isa level = tdm_cpu_simd_of(ctx)->level;
    if (level >= TDM_ISA_AVX512_CORE) return rms_rows_avx512;
    if (level >= TDM_ISA_AVX2) return rms_rows_avx2;
#endif
    (void)ctx;
    return rms_rows;
}

static tdm_status *run_rms(tdm_kernel_ctx *ctx, rms_job *j, const tdm_tensor *x, int axis_rank) {
    int64_t rows = 1, cols = 1;
    for (int d = 0; d < x->rank; d++) {
        if (d < axis_rank) rows *= x->dims[d];
        else cols *= x->dims[d];
    }
    if (j->scale_n != cols && j->scale_n != 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "scale has %lld values, the normalised shape %lld",
                              (long long)j->scale_n, (long long)cols);
    j->cols = cols;
    j->x = x->data;
    j->y = ctx->out[0]->data;
    /* runs of about 2048 values: an LLM engine's decode step of a few rows shares them out */
    if (rows && cols) tdm_parallel_for(ctx->pool, rows, 2048 / cols + 1, rms_rows_for(ctx), j);
    for (int64_t r = 0; !cols && r < rows; r++) { /* nothing normalised: the per-row outputs 0 */
        if (j->inv) j->inv[r] = 0.0f;
        if (j->mean) j->mean[r] = 0.0f;
    }
    return NULL;
}

static tdm_status *axis_of(tdm_kernel_ctx *ctx, const tdm_tensor *x, int *axis) {
    return tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", -1), x->rank, axis);
}

tdm_status *tdm_llm_run_simplified_ln(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *sc = ctx->in[1];
    if (sc->dtype != TDM_FLOAT)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "scale must be float32");
    int axis;
    TDM_TRY(axis_of(ctx, x, &axis));
    rms_job j = {.scale = sc->data, .scale_n = sc->count, .eps = tdm_attr_float(ctx->node, "epsilon", 1e-5f)};
    if (ctx->n_out > 1 && ctx->out[1]) j.inv = ctx->out[1]->data;
    return run_rms(ctx, &j, x, axis);
}

tdm_status *tdm_llm_run_rms_norm(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *sc = ctx->in[1];
    if (sc->dtype != TDM_FLOAT)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "scale must be float32");
    int axis;
    TDM_TRY(axis_of(ctx, x, &axis));
    rms_job j = {.scale = sc->data, .scale_n = sc->count, .eps = tdm_attr_float(ctx->node, "epsilon", 1e-5f)};
    return run_rms(ctx, &j, x, axis);
}

tdm_status *tdm_llm_run_skip_simplified_ln(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *skip = ctx->in[1], *g = ctx->in[2];
    const tdm_tensor *bias = ctx->n_in > 3 ? ctx->in[3] : NULL;
    if (x->rank < 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input must have rank 2 or 3");
    int64_t hidden = x->dims[x->rank - 1];
    if (skip->dtype != TDM_FLOAT || g->dtype != TDM_FLOAT || g->count != hidden ||
        (bias && (bias->dtype != TDM_FLOAT || bias->count != hidden)))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "gamma (and bias) must be float32 [%lld]", (long long)hidden);
    /* skip: the input's shape, or its trailing dims (broadcast over the leading ones) */
    bool ok = skip->rank >= 1 && skip->rank <= x->rank && skip->count > 0 && x->count % skip->count == 0;
    for (int d = 1; ok && d <= skip->rank; d++)
        ok = skip->dims[skip->rank - d] == x->dims[x->rank - d];
    if (!ok && x->count > 0)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "skip must have the input's shape or its trailing dims");
    rms_job j = {.scale = g->data, .scale_n = hidden, .eps = tdm_attr_float(ctx->node, "epsilon", 1e-5f)};
    j.skip = skip->data;
    j.skip_rows = hidden ? skip->count / hidden : 1;
    if (j.skip_rows < 1) j.skip_rows = 1;
    j.bias = bias ? bias->data : NULL;
    if (ctx->n_out > 1 && ctx->out[1]) j.mean = ctx->out[1]->data;
    if (ctx->n_out > 2 && ctx->out[2]) j.inv = ctx->out[2]->data;
    if (ctx->n_out > 3 && ctx->out[3]) j.sum = ctx->out[3]->data;
    return run_rms(ctx, &j, x, x->rank - 1);
}

/* WRITES_ALL (tests/unit/test_kflags.c lists and checks each promise): the RMS normalisations
 * write every row of every output (an LLM decode step had its norms' outputs zeroed by the
 * executor first, on the engine thread alone: 60 a step for SmolLM2); the other entries' outputs
 * are zeroed first. */
#define F32 TDM_T(TDM_FLOAT)
const tdm_kernel_def tdm_cpu_kernels_llm[] = {
    {"com.microsoft", "GroupQueryAttention", 1, 0, 0, F32, tdm_llm_run_gqa, tdm_llm_gqa_prepare,
     tdm_llm_gqa_release},
    {"com.microsoft", "GroupQueryAttention", 1, 0, 0, TDM_T(TDM_FLOAT16), tdm_llm_run_gqa_f16,
     tdm_llm_gqa_prepare, tdm_llm_gqa_release},
    {"com.microsoft", "PagedAttention", 1, 0, 0, F32, tdm_llm_run_paged, tdm_llm_gqa_prepare,
     tdm_llm_gqa_release},
    {"com.microsoft", "RotaryEmbedding", 1, 0, 0, F32, tdm_llm_run_rotary, NULL, NULL},
    {"", "RotaryEmbedding", 23, 0, 0, F32, tdm_llm_run_rotary, NULL, NULL},
    {"", "SimplifiedLayerNormalization", 1, 0, 0, F32, tdm_llm_run_simplified_ln, NULL, NULL,
     TDM_KF_WRITES_ALL},
    {"com.microsoft", "SimplifiedLayerNormalization", 1, 0, 0, F32, tdm_llm_run_simplified_ln, NULL,
     NULL},
    {"com.microsoft", "SkipSimplifiedLayerNormalization", 1, 0, 0, F32,
     tdm_llm_run_skip_simplified_ln, NULL, NULL, TDM_KF_WRITES_ALL},
    {"", "RMSNormalization", 23, 0, 0, F32, tdm_llm_run_rms_norm, NULL, NULL},
    {"", "Attention", 23, 0, 0, F32, tdm_llm_run_attention23, NULL, NULL},
};
const int tdm_cpu_kernels_llm_count = (int)(sizeof tdm_cpu_kernels_llm / sizeof tdm_cpu_kernels_llm[0]);

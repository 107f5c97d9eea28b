/* CPU kernels: contrib family — the quantized element-wise ops (QLinearAdd, QLinearMul,
 * QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearConcat), QGemm and NhwcMaxPool,
 * int8 and uint8. Rounding follows ONNX Runtime's MLAS so that results agree bit for bit:
 * values are computed in float, rounded half to even, offset by the zero point and
 * saturated. The unary ops and a requantizing concat go through a 256-entry table built per
 * run (dequantize, the function in float, quantize), as ONNX Runtime does. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_contrib.h"
#include "core/alloc.h"
#include "ops/nn_geom.h"

/* A scale: a float32 scalar. */
static tdm_status *read_scale(const tdm_kernel_ctx *ctx, int i, float *s) {
    const tdm_tensor *t = i < ctx->n_in ? ctx->in[i] : NULL;
    if (!t || t->dtype != TDM_FLOAT || t->count != 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input %d (a scale) must be a float32 scalar", i);
    *s = *(const float *)t->data;
    return NULL;
}

/* A zero point: a scalar of type qt, or 0 when omitted. */
static tdm_status *read_zp(const tdm_kernel_ctx *ctx, int i, tdm_dtype qt, int *zp) {
    const tdm_tensor *t = i < ctx->n_in ? ctx->in[i] : NULL;
    *zp = 0;
    if (!t) return NULL;
    if (t->dtype != qt || t->count != 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "input %d (a zero point) must be a %s scalar", i, tdm_dtype_name(qt));
    *zp = qt == TDM_INT8 ? *(const int8_t *)t->data : *(const uint8_t *)t->data;
    return NULL;
}

static inline int ld_q(tdm_dtype t, const void *p, int64_t i) {
    return t == TDM_INT8 ? ((const int8_t *)p)[i] : ((const uint8_t *)p)[i];
}
static inline void st_q(tdm_dtype t, void *p, int64_t i, int v) {
    if (t == TDM_INT8) ((int8_t *)p)[i] = (int8_t)v;
    else ((uint8_t *)p)[i] = (uint8_t)v;
}
/* MLAS's QuantizeLinear of one value: round(v / scale) + zp, saturated */
static inline int quantize(tdm_dtype t, float v, float scale, int zp) {
    return tdm_contrib_sat(t, nearbyintf(v / scale) + (float)zp);
}

/* ---- QLinearAdd / QLinearMul (numpy broadcast) ---- */

#ifdef TDM_SIMD_X86
#include <immintrin.h>

/* c[i] = the formula for a[i] and b[i] (b[0] when b_scalar), n values of int8 (sgn) or uint8:
 * 8 at a time in float, the same operations in the same order (explicit FMAs for add, a
 * multiply then an add for mul), rounded to nearest even by cvtps, saturated by the packs. */
/* mul's multiply and add stay two roundings (TDM_NO_CONTRACT): a fused one changes ties */
TDM_TARGET_AVX2 TDM_NO_CONTRACT static int64_t qbin_avx2(
    bool mul, bool sgn, const uint8_t *a, const uint8_t *b, bool b_scalar, uint8_t *c, int64_t n, int za, int zb,
    int zc, float rac, float rbc, float fixed) {
    const float lo = sgn ? -128.0f : 0.0f, hi = sgn ? 127.0f : 255.0f;
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi), vrac = _mm256_set1_ps(rac);
    const __m256 vrbc = _mm256_set1_ps(rbc), vfix = _mm256_set1_ps(fixed), vzc = _mm256_set1_ps((float)zc);
    const __m256i vza = _mm256_set1_epi32(za), vzb = _mm256_set1_epi32(zb);
    __m256i bs = _mm256_set1_epi32(sgn ? (int)(int8_t)b[0] : (int)b[0]);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i a8 = _mm_loadl_epi64((const __m128i *)(a + i));
        __m256i ai = sgn ? _mm256_cvtepi8_epi32(a8) : _mm256_cvtepu8_epi32(a8);
        __m256i bi = bs;
        if (!b_scalar) {
            __m128i b8 = _mm_loadl_epi64((const __m128i *)(b + i));
            bi = sgn ? _mm256_cvtepi8_epi32(b8) : _mm256_cvtepu8_epi32(b8);
        }
        __m256 v;
        if (mul) {
            __m256i p = _mm256_mullo_epi32(_mm256_sub_epi32(ai, vza), _mm256_sub_epi32(bi, vzb));
            v = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(p), vrac), vzc);
        } else {
            __m256 inner = _mm256_fmadd_ps(_mm256_cvtepi32_ps(bi), vrbc, vfix);
            v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai), vrac, inner);
        }
        v = _mm256_min_ps(_mm256_max_ps(v, vlo), vhi); /* NaN -> lo */
        __m256i r = _mm256_cvtps_epi32(v);
        __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        __m128i p8 = sgn ? _mm_packs_epi16(p16, p16) : _mm_packus_epi16(p16, p16);
        _mm_storel_epi64((__m128i *)(c + i), p8);
    }
    return i;
}
#endif

typedef struct qbin_job {
    tdm_dtype t;
    const void *a, *b;
    void *c;
    int rank;
    int64_t dims[TDM_MAX_RANK], sa[TDM_MAX_RANK], sb[TDM_MAX_RANK];
    int64_t cols;     /* last output dim */
    int64_t tail;     /* the last row's length (cols, or less for the flat form's last piece) */
    int64_t rows;
    bool mul, avx2; /* avx2: the device's level allows the AVX2 rows */
    int za, zb, zc;
    float rac, rbc, fixed; /* add: a * rac + b * rbc + fixed; mul: (a - za)(b - zb) * rac + zc */
} qbin_job;

static inline float mul_add_value(const qbin_job *j, int a, int b) {
    if (j->mul) return (float)((a - j->za) * (b - j->zb)) * j->rac + (float)j->zc;
    return fmaf((float)a, j->rac, fmaf((float)b, j->rbc, j->fixed));
}

static void qbin_rows(void *arg, int64_t r0, int64_t r1) {
    const qbin_job *j = arg;
    int last = j->rank - 1;
    for (int64_t r = r0; r < r1; r++) {
        int64_t oa = 0, ob = 0, rem = r;
        for (int d = last - 1; d >= 0; d--) {
            int64_t c = rem % j->dims[d];
            rem /= j->dims[d];
            oa += c * j->sa[d];
            ob += c * j->sb[d];
        }
        int64_t ia = last >= 0 ? j->sa[last] : 0, ib = last >= 0 ? j->sb[last] : 0, i = 0;
        int64_t len = r == j->rows - 1 ? j->tail : j->cols;
#ifdef TDM_SIMD_X86
        if (j->avx2 && ia == 1 && (ib == 1 || ib == 0))
            i = qbin_avx2(j->mul, j->t == TDM_INT8, (const uint8_t *)j->a + oa, (const uint8_t *)j->b + ob, ib == 0,
                          (uint8_t *)j->c + r * j->cols, len, j->za, j->zb, j->zc, j->rac, j->rbc, j->fixed);
#endif
        for (; i < len; i++) {
            int a = ld_q(j->t, j->a, oa + i * ia), b = ld_q(j->t, j->b, ob + i * ib);
            /* as MLAS on x86-64 computes them (the order and the fused multiply-adds decide
             * the ties): mul round(ab * ratio + zc); add round(fma(a, rac, fma(b, rbc, fixed))) */
            float v = mul_add_value(j, a, b);
            st_q(j->t, j->c, r * j->cols + i, tdm_contrib_sat(j->t, nearbyintf(v)));
        }
    }
}

static tdm_status *run_qbin(tdm_kernel_ctx *ctx, bool mul) {
    const tdm_tensor *a = ctx->in[0], *b = ctx->in[3];
    tdm_tensor *c = ctx->out[0];
    qbin_job j = {.t = a->dtype, .a = a->data, .b = b->data, .c = c->data, .mul = mul};
    if (b->dtype != a->dtype)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "A and B must have the same type");
    float sa = 0, sb = 0, sc = 1;
    TDM_TRY(read_scale(ctx, 1, &sa));
    TDM_TRY(read_scale(ctx, 4, &sb));
    TDM_TRY(read_scale(ctx, 6, &sc));
    TDM_TRY(read_zp(ctx, 2, j.t, &j.za));
    TDM_TRY(read_zp(ctx, 5, j.t, &j.zb));
    TDM_TRY(read_zp(ctx, 7, j.t, &j.zc));
    if (mul) {
        j.rac = sa * sb / sc;
    } else {
        j.rac = sa / sc;
        j.rbc = sb / sc;
        j.fixed = (float)j.zc - (j.rac * (float)j.za + j.rbc * (float)j.zb);
    }
    j.avx2 = tdm_cpu_simd_of(ctx)->level >= TDM_ISA_AVX2;
    if (c->count == 0) return NULL;
    if (a->count == c->count && (b->count == c->count || b->count == 1)) {
        /* no broadcast (or a scalar B): one flat row, cut into pieces */
        int64_t piece = c->count < 4096 ? c->count : 4096;
        j.rank = 2;
        j.dims[0] = (c->count + piece - 1) / piece;
        j.dims[1] = piece;
        j.sa[0] = piece;
        j.sa[1] = 1;
        j.sb[0] = b->count == 1 ? 0 : piece;
        j.sb[1] = b->count == 1 ? 0 : 1;
        j.cols = piece;
        j.tail = c->count - (j.dims[0] - 1) * piece;
        j.rows = j.dims[0];
        tdm_parallel_for(ctx->pool, j.rows, 1, qbin_rows, &j);
        return NULL;
    }
    j.rank = c->rank;
    for (int d = 0; d < c->rank; d++) j.dims[d] = c->dims[d];
    tdm_broadcast_strides(a->rank, a->dims, c->rank, c->dims, j.sa);
    tdm_broadcast_strides(b->rank, b->dims, c->rank, c->dims, j.sb);
    j.cols = c->rank ? c->dims[c->rank - 1] : 1;
    j.tail = j.cols;
    j.rows = c->count / j.cols;
    tdm_parallel_for(ctx->pool, j.rows, 64, qbin_rows, &j);
    return NULL;
}

tdm_status *tdm_contrib_run_qlinear_add(tdm_kernel_ctx *ctx) { return run_qbin(ctx, false); }
tdm_status *tdm_contrib_run_qlinear_mul(tdm_kernel_ctx *ctx) { return run_qbin(ctx, true); }

/* ---- table ops: QLinearSigmoid, QLinearLeakyRelu ---- */

/* table[x & 255] for every input value x of type t: quantize(f(dequantize(x))) */
static void build_table(tdm_dtype t, float xs, int xz, float ys, int yz, int fn, float alpha,
                        uint8_t *table) {
    for (int k = 0; k < 256; k++) {
        int x = t == TDM_INT8 ? (int)(int8_t)k : k;
        float v = (float)(x - xz) * xs;
        if (fn == 1) v = 1.0f / (1.0f + expf(-v));
        else if (fn == 2) v = v >= 0.0f ? v : v * alpha;
        table[k] = (uint8_t)quantize(t, v, ys, yz);
    }
}

typedef struct lut_job {
    const uint8_t *x;
    uint8_t *y;
    const uint8_t *table;
} lut_job;

static void lut_range(void *arg, int64_t b, int64_t e) {
    const lut_job *j = arg;
    for (int64_t i = b; i < e; i++) j->y[i] = j->table[j->x[i]];
}

tdm_status *tdm_contrib_run_qlinear_lut(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    float xs = 0, ys = 1;
    int xz, yz;
    TDM_TRY(read_scale(ctx, 1, &xs));
    TDM_TRY(read_zp(ctx, 2, x->dtype, &xz));
    TDM_TRY(read_scale(ctx, 3, &ys));
    TDM_TRY(read_zp(ctx, 4, x->dtype, &yz));
    bool sig = strcmp(ctx->node->op_type, "QLinearSigmoid") == 0;
    uint8_t table[256];
    build_table(x->dtype, xs, xz, ys, yz, sig ? 1 : 2, tdm_attr_float(ctx->node, "alpha", 0.01f), table);
    lut_job j = {x->data, ctx->out[0]->data, table};
    if (x->count) tdm_parallel_for(ctx->pool, x->count, 1 << 16, lut_range, &j);
    return NULL;
}

/* ---- QLinearGlobalAveragePool ---- */

typedef struct gap_job {
    tdm_dtype t;
    const void *x;
    void *y;
    int64_t C, image; /* channels, spatial size */
    bool last;        /* channels last */
    int xz, yz;
    float scale;
} gap_job;

static void gap_items(void *arg, int64_t b, int64_t e) {
    const gap_job *j = arg;
    for (int64_t it = b; it < e; it++) {
        if (!j->last) { /* item = (n, c) plane */
            int64_t s = 0;
            for (int64_t i = 0; i < j->image; i++) s += ld_q(j->t, j->x, it * j->image + i);
            float v = (float)(int32_t)(s - (int64_t)j->xz * j->image) * j->scale;
            st_q(j->t, j->y, it, tdm_contrib_sat(j->t, nearbyintf(v) + (float)j->yz));
        } else { /* item = image n: [image, C] */
            for (int64_t c = 0; c < j->C; c++) {
                int64_t s = 0;
                for (int64_t i = 0; i < j->image; i++) s += ld_q(j->t, j->x, (it * j->image + i) * j->C + c);
                float v = (float)(int32_t)(s - (int64_t)j->xz * j->image) * j->scale;
                st_q(j->t, j->y, it * j->C + c, tdm_contrib_sat(j->t, nearbyintf(v) + (float)j->yz));
            }
        }
    }
}

tdm_status *tdm_contrib_run_qlinear_gap(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    gap_job j = {.t = x->dtype, .x = x->data, .y = ctx->out[0]->data};
    float xs = 0, ys = 1;
    TDM_TRY(read_scale(ctx, 1, &xs));
    TDM_TRY(read_zp(ctx, 2, j.t, &j.xz));
    TDM_TRY(read_scale(ctx, 3, &ys));
    TDM_TRY(read_zp(ctx, 4, j.t, &j.yz));
    if (x->rank < 3) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "X must have rank 3 or more");
    j.last = tdm_attr_int(ctx->node, "channels_last", 0) != 0;
    j.C = j.last ? x->dims[x->rank - 1] : x->dims[1];
    j.image = 1;
    for (int d = j.last ? 1 : 2; d < (j.last ? x->rank - 1 : x->rank); d++) j.image *= x->dims[d];
    if (j.image >= (1 << 24))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "the image has %lld values; at most 2^24 are supported",
                              (long long)j.image);
    if (ctx->out[0]->count == 0) return NULL;
    if (j.image == 0)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "X has an empty spatial extent");
    j.scale = xs / (ys * (float)j.image);
    int64_t items = j.last ? x->dims[0] : x->dims[0] * j.C;
    tdm_parallel_for(ctx->pool, items, 1, gap_items, &j);
    return NULL;
}

/* ---- QLinearConcat ---- */

tdm_status *tdm_contrib_run_qlinear_concat(tdm_kernel_ctx *ctx) {
    tdm_tensor *y = ctx->out[0];
    tdm_dtype t = y->dtype;
    float ys = 1;
    int yz;
    TDM_TRY(read_scale(ctx, 0, &ys));
    TDM_TRY(read_zp(ctx, 1, t, &yz));
    int k = (ctx->n_in - 2) / 3, axis;
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", 0), y->rank, &axis));
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= y->dims[d];
    for (int d = axis + 1; d < y->rank; d++) inner *= y->dims[d];
    int64_t yrow = y->dims[axis] * inner, off = 0;
    uint8_t *Y = y->data;
    for (int i = 0; i < k; i++) {
        const tdm_tensor *x = ctx->in[2 + 3 * i];
        if (x->dtype != t || x->rank != y->rank)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input %d must be %s of rank %d", 2 + 3 * i,
                                  tdm_dtype_name(t), y->rank);
        float xs = 0;
        int xz;
        TDM_TRY(read_scale(ctx, 3 + 3 * i, &xs));
        TDM_TRY(read_zp(ctx, 4 + 3 * i, t, &xz));
        bool same = xs == ys && xz == yz;
        uint8_t table[256];
        if (!same) build_table(t, xs, xz, ys, yz, 0, 0.0f, table);
        int64_t xrow = x->dims[axis] * inner;
        const uint8_t *X = x->data;
        for (int64_t o = 0; o < outer; o++) {
            uint8_t *dst = Y + o * yrow + off;
            const uint8_t *src = X + o * xrow;
            if (same) memcpy(dst, src, (size_t)xrow);
            else
                for (int64_t e = 0; e < xrow; e++) dst[e] = table[src[e]];
        }
        off += xrow;
    }
    return NULL;
}

/* ---- NhwcMaxPool: MaxPool over the spatial dims of a channels-last tensor ---- */

typedef struct nmp_job {
    tdm_dtype t;
    const void *x;
    void *y;
    int nsp;
    int64_t C;
    tdm_nn_geom g;
    int64_t out_sp; /* output positions per image */
    int64_t in_sp;
} nmp_job;

static void nmp_rows(void *arg, int64_t r0, int64_t r1) {
    const nmp_job *j = arg;
    int64_t C = j->C;
    int acc[512];
    for (int64_t r = r0; r < r1; r++) { /* r = n * out_sp + output position */
        int64_t n = r / j->out_sp, pos = r % j->out_sp, o[TDM_MAX_RANK], rem = pos;
        for (int d = j->nsp - 1; d >= 0; d--) {
            o[d] = rem % j->g.out[d];
            rem /= j->g.out[d];
        }
        for (int64_t c0 = 0; c0 < C; c0 += 512) {
            int64_t cn = C - c0 < 512 ? C - c0 : 512;
            for (int64_t c = 0; c < cn; c++) acc[c] = j->t == TDM_INT8 ? -129 : -1;
            int64_t kw[TDM_MAX_RANK] = {0}, kcount = 1;
            for (int d = 0; d < j->nsp; d++) kcount *= j->g.kernel[d];
            for (int64_t kk = 0; kk < kcount; kk++) {
                int64_t krem = kk, idx = 0;
                bool inside = true;
                for (int d = j->nsp - 1; d >= 0; d--) {
                    kw[d] = krem % j->g.kernel[d];
                    krem /= j->g.kernel[d];
                }
                for (int d = 0; d < j->nsp && inside; d++) {
                    int64_t p = o[d] * j->g.stride[d] - j->g.pad_b[d] + kw[d] * j->g.dil[d];
                    inside = p >= 0 && p < j->g.in[d];
                    idx = idx * j->g.in[d] + p;
                }
                if (!inside) continue;
                int64_t base = (n * j->in_sp + idx) * C + c0;
                if (j->t == TDM_INT8) {
                    const int8_t *x = (const int8_t *)j->x + base;
                    for (int64_t c = 0; c < cn; c++) acc[c] = x[c] > acc[c] ? x[c] : acc[c];
                } else {
                    const uint8_t *x = (const uint8_t *)j->x + base;
                    for (int64_t c = 0; c < cn; c++) acc[c] = x[c] > acc[c] ? x[c] : acc[c];
                }
            }
            /* a window entirely in the padding has no value; MLAS leaves the type's minimum */
            for (int64_t c = 0; c < cn; c++) {
                int v = acc[c] < (j->t == TDM_INT8 ? -128 : 0) ? (j->t == TDM_INT8 ? -128 : 0) : acc[c];
                st_q(j->t, j->y, r * C + c0 + c, v);
            }
        }
    }
}

tdm_status *tdm_contrib_run_nhwc_max_pool(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    int r = x->rank;
    if (r < 3) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "x must have rank 3 or more");
    int64_t nchw[TDM_MAX_RANK];
    nchw[0] = x->dims[0];
    nchw[1] = x->dims[r - 1];
    for (int d = 2; d < r; d++) nchw[d] = x->dims[d - 1];
    nmp_job j = {.t = x->dtype, .x = x->data, .y = y->data, .nsp = r - 2, .C = x->dims[r - 1]};
    TDM_TRY(tdm_nn_geom_init(ctx->node, 12, TDM_NN_POOL, r, nchw, NULL, &j.g));
    j.out_sp = 1;
    j.in_sp = 1;
    for (int d = 0; d < j.nsp; d++) {
        j.out_sp *= j.g.out[d];
        j.in_sp *= j.g.in[d];
    }
    if (y->count == 0 || j.out_sp == 0) return NULL;
    tdm_parallel_for(ctx->pool, x->dims[0] * j.out_sp, 16, nmp_rows, &j);
    return NULL;
}

/* ---- QGemm: the integer sums of (A - a_zp)(B - b_zp) exactly, + C, then float (scale =
 * alpha * a_scale * b_scale[n], / y_scale) or requantized (round half to even + y_zp,
 * saturated) ---- */

/* The exact int64 sums S[m, n] = sum_k (A - a_zp)[m, k] (B - b_zp)[k, n]: float GEMMs over
 * slices of 256 k (each slice's sums are integers below 2^24, so exact in float), added up in
 * int64. */
static tdm_status *qgemm_sums(tdm_kernel_ctx *ctx, const tdm_tensor *a, const tdm_tensor *b, bool ta, bool tb,
                              int64_t M, int64_t N, int64_t K, int az, const int32_t *bz, int64_t *S) {
    const int64_t KS = 256;
    size_t na = (size_t)(M * KS), nb = (size_t)(KS * N), nc = (size_t)(M * N);
    float *buf = tdm_kscratch(ctx, (na + nb + nc + 1) * sizeof(float));
    if (!buf) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    float *af = buf, *bf = buf + na, *cf = bf + nb;
    memset(S, 0, nc * sizeof(int64_t));
    for (int64_t k0 = 0; k0 < K; k0 += KS) {
        int64_t kn = K - k0 < KS ? K - k0 : KS;
        for (int64_t m = 0; m < M; m++)
            for (int64_t k = 0; k < kn; k++)
                af[m * kn + k] = (float)(ld_q(a->dtype, a->data, ta ? (k0 + k) * M + m : m * K + k0 + k) - az);
        for (int64_t k = 0; k < kn; k++)
            for (int64_t n = 0; n < N; n++)
                bf[k * N + n] = (float)(ld_q(b->dtype, b->data, tb ? n * K + k0 + k : (k0 + k) * N + n) - bz[n]);
        tdm_contrib_gemm(ctx, false, false, M, N, kn, 1.0f, af, kn, bf, N, 0.0f, cf, N);
        for (size_t i = 0; i < nc; i++) S[i] += (int64_t)cf[i];
    }
    tdm_free(ctx->alloc, buf);
    return NULL;
}

tdm_status *tdm_contrib_run_qgemm(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *a = ctx->in[0], *b = ctx->in[3], *bs = ctx->in[4], *bzt = ctx->in[5];
    const tdm_tensor *c = ctx->n_in > 6 ? ctx->in[6] : NULL, *ys = ctx->n_in > 7 ? ctx->in[7] : NULL;
    const tdm_tensor *yzt = ctx->n_in > 8 ? ctx->in[8] : NULL;
    tdm_tensor *y = ctx->out[0];
    bool ta = tdm_attr_int(node, "transA", 0) != 0, tb = tdm_attr_int(node, "transB", 0) != 0;
    if (a->rank != 2 || b->rank != 2 || (b->dtype != TDM_INT8 && b->dtype != TDM_UINT8))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "A and B must be 2-D int8 / uint8");
    int64_t M = y->dims[0], N = y->dims[1], K = a->dims[ta ? 0 : 1];
    float as = 0.0f, yscale = 1.0f;
    int az = 0, yz = 0;
    TDM_TRY(read_scale(ctx, 1, &as));
    TDM_TRY(read_zp(ctx, 2, a->dtype, &az));
    if (ys) TDM_TRY(read_scale(ctx, 7, &yscale));
    if (yzt) TDM_TRY(read_zp(ctx, 8, y->dtype, &yz));
    if (bs->dtype != TDM_FLOAT || (bs->count != 1 && bs->count != N) || bzt->dtype != b->dtype ||
        (bzt->count != 1 && bzt->count != N))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "b_scale (float32) and b_zero_point must be scalars or [%lld]",
                              (long long)N);
    const int32_t *cv = NULL;
    int64_t cs0 = 0, cs1 = 0;
    if (c) {
        bool ok = c->dtype == TDM_INT32 && c->rank <= 2;
        int64_t cd[2] = {1, 1};
        for (int d = 0; ok && d < c->rank; d++) cd[2 - c->rank + d] = c->dims[d];
        ok = ok && (cd[0] == 1 || cd[0] == M) && (cd[1] == 1 || cd[1] == N);
        if (!ok)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "C must be int32 and broadcast to [%lld, %lld]",
                                  (long long)M, (long long)N);
        cv = c->data;
        cs1 = cd[1] == 1 ? 0 : 1;
        cs0 = cd[0] == 1 ? 0 : cd[1];
    }
    if (y->count == 0) return NULL;
    float alpha = tdm_attr_float(node, "alpha", 1.0f);
    size_t bytes = (size_t)(N + 1) * (sizeof(int32_t) + sizeof(float)) + (size_t)(M * N) * sizeof(int64_t);
    int64_t *S = tdm_kscratch(ctx, bytes);
    if (!S) return tdm_node_error(node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    int32_t *bz = (int32_t *)(S + M * N);
    float *scale = (float *)(bz + N + 1);
    const float *bsv = bs->data;
    for (int64_t n = 0; n < N; n++) {
        bz[n] = ld_q(bzt->dtype, bzt->data, bzt->count == 1 ? 0 : n);
        scale[n] = alpha * as * bsv[bs->count == 1 ? 0 : n]; /* ONNX Runtime's order */
        if (ys) scale[n] /= yscale;
    }
    tdm_status *st = qgemm_sums(ctx, a, b, ta, tb, M, N, K, az, bz, S);
    for (int64_t m = 0; !st && m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            /* int32 in ONNX Runtime (the sum wraps there; int64 here never overflows) */
            int64_t acc = S[m * N + n] + (cv ? cv[m * cs0 + n * cs1] : 0);
            float v = (float)acc * scale[n];
            if (yzt) st_q(y->dtype, y->data, m * N + n, tdm_contrib_sat(y->dtype, nearbyintf(v) + (float)yz));
            else ((float *)y->data)[m * N + n] = v;
        }
    tdm_free(ctx->alloc, S);
    return st;
}

/* ---- QLinearAveragePool: the window's dequantized values summed in float (row-major window
 * order), divided by the count of values in the input (with count_include_pad: the kernel's
 * size, as ONNX Runtime does, also for ceil_mode windows past the padding), quantized ---- */

typedef struct qap_job {
    tdm_dtype t;
    const void *x;
    void *y;
    int nsp;
    bool last, include_pad;
    int64_t C, in_sp, out_sp;
    tdm_nn_geom g;
    float xs, ys;
    int xz, yz;
} qap_job;

static void qap_rows(void *arg, int64_t r0, int64_t r1) {
    const qap_job *j = arg;
    for (int64_t r = r0; r < r1; r++) { /* r = (n * C + c) * out_sp + pos */
        int64_t pos = r % j->out_sp, nc = r / j->out_sp, c = nc % j->C, n = nc / j->C;
        int64_t o[TDM_MAX_RANK], rem = pos, lo[TDM_MAX_RANK], hi[TDM_MAX_RANK], div = 1;
        for (int d = j->nsp - 1; d >= 0; d--) {
            o[d] = rem % j->g.out[d];
            rem /= j->g.out[d];
        }
        for (int d = 0; d < j->nsp; d++) {
            int64_t st = o[d] * j->g.stride[d] - j->g.pad_b[d];
            int64_t en = st + (j->g.kernel[d] - 1) * j->g.dil[d] + 1;
            if (j->include_pad) div *= j->g.kernel[d]; /* ONNX Runtime: the whole kernel, also past the padding */
            lo[d] = st;
            hi[d] = en;
        }
        float sum = 0.0f;
        int64_t cnt = 0, kk[TDM_MAX_RANK];
        for (int d = 0; d < j->nsp; d++) kk[d] = lo[d];
        for (;;) {
            bool inside = true;
            int64_t idx = 0;
            for (int d = 0; d < j->nsp; d++) {
                inside = inside && kk[d] >= 0 && kk[d] < j->g.in[d];
                idx = idx * j->g.in[d] + kk[d];
            }
            if (inside) {
                int64_t at = j->last ? (n * j->in_sp + idx) * j->C + c : (n * j->C + c) * j->in_sp + idx;
                sum += (float)(ld_q(j->t, j->x, at) - j->xz) * j->xs;
                cnt++;
            }
            int d = j->nsp - 1;
            while (d >= 0) {
                kk[d] += j->g.dil[d];
                if (kk[d] < hi[d]) break;
                kk[d] = lo[d];
                d--;
            }
            if (d < 0) break;
        }
        if (!j->include_pad) div = cnt;
        float v = div > 0 ? sum / (float)div : 0.0f;
        int64_t oat = j->last ? (n * j->out_sp + pos) * j->C + c : r;
        /* ONNX Runtime's pooling rounds v / y_scale + y_zp (not MLAS's QuantizeLinear order) */
        st_q(j->t, j->y, oat, tdm_contrib_sat(j->t, nearbyintf(v / j->ys + (float)j->yz)));
    }
}

tdm_status *tdm_contrib_run_qlinear_avg_pool(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    int r = x->rank;
    if (r < 3) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "X must have rank 3 or more");
    qap_job j = {.t = x->dtype, .x = x->data, .y = y->data, .nsp = r - 2};
    j.last = tdm_attr_int(ctx->node, "channels_last", 0) != 0;
    j.include_pad = tdm_attr_int(ctx->node, "count_include_pad", 0) != 0;
    TDM_TRY(read_scale(ctx, 1, &j.xs));
    TDM_TRY(read_zp(ctx, 2, x->dtype, &j.xz));
    TDM_TRY(read_scale(ctx, 3, &j.ys));
    TDM_TRY(read_zp(ctx, 4, x->dtype, &j.yz));
    int64_t nchw[TDM_MAX_RANK];
    for (int d = 0; d < r; d++) nchw[d] = x->dims[d];
    if (j.last) {
        nchw[1] = x->dims[r - 1];
        for (int d = 2; d < r; d++) nchw[d] = x->dims[d - 1];
    }
    TDM_TRY(tdm_nn_geom_init(ctx->node, 19, TDM_NN_POOL, r, nchw, NULL, &j.g));
    j.C = nchw[1];
    j.in_sp = j.out_sp = 1;
    for (int d = 0; d < j.nsp; d++) {
        j.in_sp *= j.g.in[d];
        j.out_sp *= j.g.out[d];
    }
    if (y->count == 0 || j.out_sp == 0) return NULL;
    tdm_parallel_for(ctx->pool, nchw[0] * j.C * j.out_sp, 64, qap_rows, &j);
    return NULL;
}

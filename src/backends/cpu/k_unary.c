/* CPU kernels: unary family. The kernel table, attribute reading, and the element loops for
 * double, integer and bool tensors; float32 loops are in k_unary_f32.c, Cast in
 * k_unary_cast.c. Every kernel splits its tensor over the thread pool. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_unary.h"

/* ---- parameters ------------------------------------------------------------------------ */

static tdm_status *read_bound(tdm_kernel_ctx *ctx, int i, tdm_uparams *p) {
    const tdm_tensor *b = ctx->in[i];
    const tdm_tensor *x = ctx->in[0];
    const char *what = i == 1 ? "min" : "max";
    if (b->dtype != x->dtype)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "%s has type %s but the input is %s", what,
                              tdm_dtype_name(b->dtype), tdm_dtype_name(x->dtype));
    if (b->count != 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "%s must be a scalar, it has %lld elements", what,
                              (long long)b->count);
    double d = tdm_tensor_get_f64(b, 0);
    int64_t iv = tdm_tensor_get_i64(b, 0);
    uint64_t uv = b->dtype == TDM_UINT64 ? ((const uint64_t *)b->data)[0] : (uint64_t)iv;
    if (i == 1) {
        p->lo = (float)d;
        p->dlo = d;
        p->ilo = iv;
        p->ulo = uv;
    } else {
        p->hi = (float)d;
        p->dhi = d;
        p->ihi = iv;
        p->uhi = uv;
    }
    return NULL;
}

static tdm_status *read_params(tdm_kernel_ctx *ctx, tdm_uop op, tdm_uparams *p) {
    const tdm_node *nd = ctx->node;
    memset(p, 0, sizeof *p);
    p->op = op;
    switch (op) {
    case TDM_U_LEAKY_RELU: p->alpha = tdm_attr_float(nd, "alpha", 0.01f); break;
    case TDM_U_ELU:
    case TDM_U_CELU:
    case TDM_U_THRESHOLDED_RELU: p->alpha = tdm_attr_float(nd, "alpha", 1.0f); break;
    case TDM_U_SELU:
        p->alpha = tdm_attr_float(nd, "alpha", 1.67326319217681884765625f);
        p->gamma = tdm_attr_float(nd, "gamma", 1.05070102214813232421875f);
        break;
    case TDM_U_HARD_SIGMOID:
        p->alpha = tdm_attr_float(nd, "alpha", 0.2f);
        p->beta = tdm_attr_float(nd, "beta", 0.5f);
        break;
    case TDM_U_SHRINK:
        p->lambd = tdm_attr_float(nd, "lambd", 0.5f);
        p->bias = tdm_attr_float(nd, "bias", 0.0f);
        break;
    case TDM_U_GELU: {
        const char *ap = tdm_attr_string(nd, "approximate", "none");
        if (strcmp(ap, "tanh") == 0)
            p->op = TDM_U_GELU_TANH;
        else if (strcmp(ap, "none") != 0)
            return tdm_node_error(nd, TDM_ERR_INVALID_ARGUMENT,
                                  "approximate must be \"none\" or \"tanh\", not \"%s\"", ap);
        break;
    }
    case TDM_U_CLIP:
        p->ilo = INT64_MIN;
        p->ihi = INT64_MAX;
        p->ulo = 0;
        p->uhi = UINT64_MAX;
        if (ctx->opset < 11) { /* bounds are attributes; only float types existed then */
            p->lo = tdm_attr_float(nd, "min", -FLT_MAX);
            p->hi = tdm_attr_float(nd, "max", FLT_MAX);
            p->dlo = p->lo;
            p->dhi = p->hi;
            break;
        }
        p->lo = -INFINITY;
        p->hi = INFINITY;
        p->dlo = -INFINITY;
        p->dhi = INFINITY;
        if (ctx->n_in > 1 && ctx->in[1]) TDM_TRY(read_bound(ctx, 1, p));
        if (ctx->n_in > 2 && ctx->in[2]) TDM_TRY(read_bound(ctx, 2, p));
        break;
    default: break;
    }
    return NULL;
}

/* Cheap ops get bigger chunks per thread. */
static int64_t grain_for(tdm_uop op) {
    switch (op) {
    case TDM_U_ABS:
    case TDM_U_NEG:
    case TDM_U_RELU:
    case TDM_U_LEAKY_RELU:
    case TDM_U_CLIP:
    case TDM_U_SIGN:
    case TDM_U_CEIL:
    case TDM_U_FLOOR:
    case TDM_U_RECIPROCAL:
    case TDM_U_SQRT:
    case TDM_U_HARD_SIGMOID:
    case TDM_U_HARD_SWISH:
    case TDM_U_SOFTSIGN:
    case TDM_U_THRESHOLDED_RELU:
    case TDM_U_SHRINK: return 1 << 16;
    default: return 1 << 13;
    }
}

/* ---- double ---------------------------------------------------------------------------- */

/* min(max(v, 0), 1), NaN stays NaN. */
static inline double clamp01(double v) {
    v = v < 0 ? 0 : v;
    return v > 1 ? 1 : v;
}

#define DLOOP(expr)                                                                      \
    do {                                                                                 \
        for (int64_t i = 0; i < n; i++) {                                                \
            double v = x[i];                                                             \
            y[i] = (expr);                                                               \
        }                                                                                \
    } while (0)

static void unary_f64(const tdm_uparams *p, const double *restrict x, double *restrict y,
                      int64_t n) {
    const double alpha = p->alpha, beta = p->beta, gamma = p->gamma;
    switch (p->op) {
    case TDM_U_ABS: DLOOP(fabs(v)); break;
    case TDM_U_NEG: DLOOP(-v); break;
    case TDM_U_RECIPROCAL: DLOOP(1.0 / v); break;
    case TDM_U_SQRT: DLOOP(sqrt(v)); break;
    case TDM_U_EXP: DLOOP(exp(v)); break;
    case TDM_U_LOG: DLOOP(log(v)); break;
    case TDM_U_ERF: DLOOP(erf(v)); break;
    case TDM_U_SIN: DLOOP(sin(v)); break;
    case TDM_U_COS: DLOOP(cos(v)); break;
    case TDM_U_TAN: DLOOP(tan(v)); break;
    case TDM_U_ASIN: DLOOP(asin(v)); break;
    case TDM_U_ACOS: DLOOP(acos(v)); break;
    case TDM_U_ATAN: DLOOP(atan(v)); break;
    case TDM_U_SINH: DLOOP(sinh(v)); break;
    case TDM_U_COSH: DLOOP(cosh(v)); break;
    case TDM_U_ASINH: DLOOP(asinh(v)); break;
    case TDM_U_ACOSH: DLOOP(acosh(v)); break;
    case TDM_U_ATANH: DLOOP(atanh(v)); break;
    case TDM_U_CEIL: DLOOP(ceil(v)); break;
    case TDM_U_FLOOR: DLOOP(floor(v)); break;
    case TDM_U_ROUND: DLOOP(nearbyint(v)); break;
    case TDM_U_SIGN: DLOOP(v > 0 ? 1.0 : (v < 0 ? -1.0 : v)); break;
    case TDM_U_RELU: DLOOP(v < 0 ? 0.0 : v); break;
    case TDM_U_LEAKY_RELU: DLOOP(v < 0 ? v * alpha : v); break;
    case TDM_U_SIGMOID: DLOOP(v >= 0 ? 1.0 / (1.0 + exp(-v)) : exp(v) / (1.0 + exp(v))); break;
    case TDM_U_TANH: DLOOP(tanh(v)); break;
    case TDM_U_HARD_SIGMOID: DLOOP(clamp01(alpha * v + beta)); break;
    case TDM_U_HARD_SWISH: DLOOP(v * clamp01(v / 6.0 + 0.5)); break;
    case TDM_U_ELU: DLOOP(v < 0 ? alpha * expm1(v) : v); break;
    case TDM_U_SELU: DLOOP(v <= 0 ? gamma * alpha * expm1(v) : gamma * v); break;
    case TDM_U_CELU: DLOOP(v < 0 ? alpha * expm1(v / alpha) : v); break;
    case TDM_U_SOFTPLUS: DLOOP(fmax(v, 0.0) + log1p(exp(-fabs(v)))); break;
    case TDM_U_SOFTSIGN: DLOOP(v / (1.0 + fabs(v))); break;
    case TDM_U_THRESHOLDED_RELU: DLOOP(v > alpha ? v : 0.0); break;
    case TDM_U_SHRINK: {
        const double l = p->lambd, b = p->bias;
        DLOOP(v < -l ? v + b : (v > l ? v - b : 0.0));
        break;
    }
    case TDM_U_MISH: DLOOP(v * tanh(v > 0 ? v + log1p(exp(-v)) : log1p(exp(v)))); break;
    case TDM_U_GELU: DLOOP(0.5 * v * erfc(-v * 0.70710678118654752440)); break;
    case TDM_U_GELU_TANH:
        DLOOP(0.5 * v * (1.0 + tanh(0.79788456080286535588 * (v + 0.044715 * v * v * v))));
        break;
    case TDM_U_CLIP: {
        const double lo = p->dlo, hi = p->dhi;
        DLOOP(v < lo ? (lo > hi ? hi : lo) : (v > hi ? hi : v));
        break;
    }
    }
}

/* ---- integers -------------------------------------------------------------------------- */

/* Saturating double -> integer conversion (NaN -> 0), for ops computed through double. */
#define SAT(T, TMIN, TMAX, v)                                                            \
    ((v) != (v)                ? (T)0                                                    \
     : (v) <= (double)(TMIN) ? (T)(TMIN)                                                 \
     : (v) >= (double)(TMAX) ? (T)(TMAX)                                                 \
                             : (T)(v))

/* Signed: U is the unsigned type of the same width (wrapping Abs/Neg of the minimum). */
#define DEF_SINT(NAME, T, U, TMIN, TMAX)                                                 \
    static tdm_status *NAME(const tdm_uparams *p, const T *restrict x, T *restrict y,    \
                            int64_t n) {                                                 \
        switch (p->op) {                                                                 \
        case TDM_U_ABS:                                                                  \
            for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0 ? (T)(U)(0u - (U)x[i]) : x[i]; \
            return NULL;                                                                 \
        case TDM_U_NEG:                                                                  \
            for (int64_t i = 0; i < n; i++) y[i] = (T)(U)(0u - (U)x[i]);                 \
            return NULL;                                                                 \
        case TDM_U_SIGN:                                                                 \
            for (int64_t i = 0; i < n; i++) y[i] = (T)((x[i] > 0) - (x[i] < 0));         \
            return NULL;                                                                 \
        case TDM_U_RELU:                                                                 \
            for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0 ? 0 : x[i];                  \
            return NULL;                                                                 \
        case TDM_U_CLIP: {                                                               \
            int64_t lo = p->ilo, hi = p->ihi;                                            \
            for (int64_t i = 0; i < n; i++) {                                            \
                int64_t v = x[i] < lo ? lo : x[i];                                       \
                y[i] = (T)(v > hi ? hi : v);                                             \
            }                                                                            \
            return NULL;                                                                 \
        }                                                                                \
        case TDM_U_SHRINK: {                                                             \
            double l = p->lambd, b = p->bias;                                            \
            for (int64_t i = 0; i < n; i++) {                                            \
                double v = (double)x[i];                                                 \
                double r = v < -l ? v + b : (v > l ? v - b : 0.0);                       \
                y[i] = SAT(T, TMIN, TMAX, r);                                            \
            }                                                                            \
            return NULL;                                                                 \
        }                                                                                \
        case TDM_U_ERF:                                                                  \
            for (int64_t i = 0; i < n; i++) y[i] = (T)erf((double)x[i]);                 \
            return NULL;                                                                 \
        default: return TDM_ERR(TDM_ERR_UNSUPPORTED, "op not available for signed integers"); \
        }                                                                                \
    }

#define DEF_UINT(NAME, T, TMAX)                                                          \
    static tdm_status *NAME(const tdm_uparams *p, const T *restrict x, T *restrict y,    \
                            int64_t n) {                                                 \
        switch (p->op) {                                                                 \
        case TDM_U_ABS:                                                                  \
        case TDM_U_RELU: memcpy(y, x, (size_t)n * sizeof(T)); return NULL;               \
        case TDM_U_SIGN:                                                                 \
            for (int64_t i = 0; i < n; i++) y[i] = (T)(x[i] != 0);                       \
            return NULL;                                                                 \
        case TDM_U_CLIP: {                                                               \
            uint64_t lo = p->ulo, hi = p->uhi;                                           \
            for (int64_t i = 0; i < n; i++) {                                            \
                uint64_t v = x[i] < lo ? lo : x[i];                                      \
                y[i] = (T)(v > hi ? hi : v);                                             \
            }                                                                            \
            return NULL;                                                                 \
        }                                                                                \
        case TDM_U_SHRINK: {                                                             \
            double l = p->lambd, b = p->bias;                                            \
            for (int64_t i = 0; i < n; i++) {                                            \
                double v = (double)x[i];                                                 \
                double r = v < -l ? v + b : (v > l ? v - b : 0.0);                       \
                y[i] = SAT(T, 0, TMAX, r);                                               \
            }                                                                            \
            return NULL;                                                                 \
        }                                                                                \
        case TDM_U_ERF:                                                                  \
            for (int64_t i = 0; i < n; i++) y[i] = (T)erf((double)x[i]);                 \
            return NULL;                                                                 \
        default: return TDM_ERR(TDM_ERR_UNSUPPORTED, "op not available for unsigned integers"); \
        }                                                                                \
    }

DEF_SINT(unary_i8, int8_t, uint8_t, INT8_MIN, INT8_MAX)
DEF_SINT(unary_i16, int16_t, uint16_t, INT16_MIN, INT16_MAX)
DEF_SINT(unary_i32, int32_t, uint32_t, INT32_MIN, INT32_MAX)
DEF_SINT(unary_i64, int64_t, uint64_t, INT64_MIN, INT64_MAX)
DEF_UINT(unary_u8, uint8_t, UINT8_MAX)
DEF_UINT(unary_u16, uint16_t, UINT16_MAX)
DEF_UINT(unary_u32, uint32_t, UINT32_MAX)
DEF_UINT(unary_u64, uint64_t, UINT64_MAX)

/* ---- parallel drivers ------------------------------------------------------------------- */

typedef struct ujob {
    const tdm_uparams *p;
    tdm_dtype dtype;
    const void *x;
    void *y;
    size_t esize;
    tdm_status *err; /* set (by chunk 0 only) when the op is missing for the dtype */
    tdm_simd_unary_f32 f32; /* the float32 loops (cpu_simd.h) */
} ujob;

#define HALF_BLOCK 256

static void range_fn(void *arg, int64_t b, int64_t e) {
    ujob *j = arg;
    const char *x = (const char *)j->x + (size_t)b * j->esize;
    char *y = (char *)j->y + (size_t)b * j->esize;
    int64_t n = e - b;
    tdm_status *st = NULL;
    switch (j->dtype) {
    case TDM_FLOAT: j->f32(j->p, (const float *)x, (float *)y, n); break;
    case TDM_DOUBLE: unary_f64(j->p, (const double *)x, (double *)y, n); break;
    case TDM_FLOAT16:
    case TDM_BFLOAT16: {
        float in[HALF_BLOCK], out[HALF_BLOCK];
        const uint16_t *hx = (const uint16_t *)x;
        uint16_t *hy = (uint16_t *)y;
        bool bf = j->dtype == TDM_BFLOAT16;
        for (int64_t i = 0; i < n; i += HALF_BLOCK) {
            int64_t m = n - i < HALF_BLOCK ? n - i : HALF_BLOCK;
            for (int64_t k = 0; k < m; k++)
                in[k] = bf ? tdm_bf16_to_f32(hx[i + k]) : tdm_f16_to_f32(hx[i + k]);
            j->f32(j->p, in, out, m);
            for (int64_t k = 0; k < m; k++)
                hy[i + k] = bf ? tdm_f32_to_bf16(out[k]) : tdm_f32_to_f16(out[k]);
        }
        break;
    }
    case TDM_INT8: st = unary_i8(j->p, (const int8_t *)x, (int8_t *)y, n); break;
    case TDM_INT16: st = unary_i16(j->p, (const int16_t *)x, (int16_t *)y, n); break;
    case TDM_INT32: st = unary_i32(j->p, (const int32_t *)x, (int32_t *)y, n); break;
    case TDM_INT64: st = unary_i64(j->p, (const int64_t *)x, (int64_t *)y, n); break;
    case TDM_UINT8: st = unary_u8(j->p, (const uint8_t *)x, (uint8_t *)y, n); break;
    case TDM_UINT16: st = unary_u16(j->p, (const uint16_t *)x, (uint16_t *)y, n); break;
    case TDM_UINT32: st = unary_u32(j->p, (const uint32_t *)x, (uint32_t *)y, n); break;
    case TDM_UINT64: st = unary_u64(j->p, (const uint64_t *)x, (uint64_t *)y, n); break;
    default: st = TDM_ERR(TDM_ERR_UNSUPPORTED, "unsupported data type"); break;
    }
    if (st) {
        if (b == 0)
            j->err = st;
        else
            tdm_status_free(st);
    }
}

static tdm_status *run_unary(tdm_kernel_ctx *ctx, tdm_uop op) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    tdm_uparams p;
    TDM_TRY(read_params(ctx, op, &p));
    if (y->dtype != x->dtype || y->count != x->count)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "output does not match the input");
    if (x->count == 0) return NULL;
    ujob j = {&p, x->dtype, x->data, y->data, tdm_dtype_elem_size(x->dtype), NULL,
              tdm_cpu_simd_of(ctx)->unary_f32};
    tdm_parallel_for(ctx->pool, x->count, grain_for(p.op), range_fn, &j);
    if (j.err) return tdm_status_wrap(j.err, "%s node '%s'", ctx->node->op_type, ctx->node->name);
    return NULL;
}

/* ---- bool outputs and bit ops ------------------------------------------------------------- */

typedef struct bjob {
    const tdm_tensor *x;
    tdm_tensor *y;
    int mode; /* 0 IsNaN, 1 IsInf, 2 Not, 3 BitwiseNot */
    bool pos, neg;
} bjob;

static void bool_range(void *arg, int64_t b, int64_t e) {
    bjob *j = arg;
    const void *xd = j->x->data;
    uint8_t *out = j->y->data;
    tdm_dtype dt = j->x->dtype;
    if (j->mode == 2) {
        const uint8_t *x = xd;
        for (int64_t i = b; i < e; i++) out[i] = !x[i];
        return;
    }
    if (j->mode == 3) {
        size_t es = tdm_dtype_elem_size(dt);
        const uint8_t *x = (const uint8_t *)xd + (size_t)b * es;
        uint8_t *y = (uint8_t *)j->y->data + (size_t)b * es;
        size_t nb = (size_t)(e - b) * es;
        for (size_t i = 0; i < nb; i++) y[i] = (uint8_t)~x[i];
        return;
    }
    bool pos = j->pos, neg = j->neg;
    for (int64_t i = b; i < e; i++) {
        double v;
        switch (dt) {
        case TDM_FLOAT: v = ((const float *)xd)[i]; break;
        case TDM_DOUBLE: v = ((const double *)xd)[i]; break;
        default: v = tdm_tensor_get_f64(j->x, i); break;
        }
        if (j->mode == 0)
            out[i] = v != v;
        else
            out[i] = (pos && v == INFINITY) || (neg && v == -INFINITY);
    }
}

static tdm_status *run_bool(tdm_kernel_ctx *ctx, int mode) {
    bjob j = {ctx->in[0], ctx->out[0], mode, true, true};
    if (mode == 1) {
        j.pos = tdm_attr_int(ctx->node, "detect_positive", 1) != 0;
        j.neg = tdm_attr_int(ctx->node, "detect_negative", 1) != 0;
    }
    if (j.y->count != j.x->count)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "output does not match the input");
    tdm_parallel_for(ctx->pool, j.x->count, 1 << 16, bool_range, &j);
    return NULL;
}

static tdm_status *run_isnan(tdm_kernel_ctx *ctx) { return run_bool(ctx, 0); }
static tdm_status *run_isinf(tdm_kernel_ctx *ctx) { return run_bool(ctx, 1); }
static tdm_status *run_not(tdm_kernel_ctx *ctx) { return run_bool(ctx, 2); }
static tdm_status *run_bitwise_not(tdm_kernel_ctx *ctx) { return run_bool(ctx, 3); }

/* ---- table ---------------------------------------------------------------------------------- */

#define RUN(fn, uop)                                                                     \
    static tdm_status *fn(tdm_kernel_ctx *ctx) { return run_unary(ctx, uop); }
RUN(run_abs, TDM_U_ABS)
RUN(run_neg, TDM_U_NEG)
RUN(run_reciprocal, TDM_U_RECIPROCAL)
RUN(run_sqrt, TDM_U_SQRT)
RUN(run_exp, TDM_U_EXP)
RUN(run_log, TDM_U_LOG)
RUN(run_erf, TDM_U_ERF)
RUN(run_sin, TDM_U_SIN)
RUN(run_cos, TDM_U_COS)
RUN(run_tan, TDM_U_TAN)
RUN(run_asin, TDM_U_ASIN)
RUN(run_acos, TDM_U_ACOS)
RUN(run_atan, TDM_U_ATAN)
RUN(run_sinh, TDM_U_SINH)
RUN(run_cosh, TDM_U_COSH)
RUN(run_asinh, TDM_U_ASINH)
RUN(run_acosh, TDM_U_ACOSH)
RUN(run_atanh, TDM_U_ATANH)
RUN(run_ceil, TDM_U_CEIL)
RUN(run_floor, TDM_U_FLOOR)
RUN(run_round, TDM_U_ROUND)
RUN(run_sign, TDM_U_SIGN)
RUN(run_relu, TDM_U_RELU)
RUN(run_leaky_relu, TDM_U_LEAKY_RELU)
RUN(run_sigmoid, TDM_U_SIGMOID)
RUN(run_tanh, TDM_U_TANH)
RUN(run_hard_sigmoid, TDM_U_HARD_SIGMOID)
RUN(run_hard_swish, TDM_U_HARD_SWISH)
RUN(run_elu, TDM_U_ELU)
RUN(run_selu, TDM_U_SELU)
RUN(run_celu, TDM_U_CELU)
RUN(run_softplus, TDM_U_SOFTPLUS)
RUN(run_softsign, TDM_U_SOFTSIGN)
RUN(run_thresholded_relu, TDM_U_THRESHOLDED_RELU)
RUN(run_shrink, TDM_U_SHRINK)
RUN(run_mish, TDM_U_MISH)
RUN(run_gelu, TDM_U_GELU)
RUN(run_clip, TDM_U_CLIP)

#define FL TDM_T_FLOATS
#define SIGNED_NUM (TDM_T_FLOATS | TDM_T_SINTS)
#define K(op, since, types, fn) {"", op, since, 0, 0, types, fn, NULL, NULL}

const tdm_kernel_def tdm_cpu_kernels_unary[] = {
    K("Abs", 1, TDM_T_NUMERIC, run_abs),
    K("Neg", 1, SIGNED_NUM, run_neg),
    K("Reciprocal", 1, FL, run_reciprocal),
    K("Sqrt", 1, FL, run_sqrt),
    K("Exp", 1, FL, run_exp),
    K("Log", 1, FL, run_log),
    K("Erf", 9, TDM_T_NUMERIC, run_erf),
    K("Sin", 7, FL, run_sin),
    K("Cos", 7, FL, run_cos),
    K("Tan", 7, FL, run_tan),
    K("Asin", 7, FL, run_asin),
    K("Acos", 7, FL, run_acos),
    K("Atan", 7, FL, run_atan),
    K("Sinh", 9, FL, run_sinh),
    K("Cosh", 9, FL, run_cosh),
    K("Asinh", 9, FL, run_asinh),
    K("Acosh", 9, FL, run_acosh),
    K("Atanh", 9, FL, run_atanh),
    K("Ceil", 1, FL, run_ceil),
    K("Floor", 1, FL, run_floor),
    K("Round", 11, FL, run_round),
    K("Sign", 9, TDM_T_NUMERIC, run_sign),
    K("IsNaN", 9, FL, run_isnan),
    K("IsInf", 10, FL, run_isinf),
    K("Relu", 1, SIGNED_NUM, run_relu),
    K("LeakyRelu", 1, FL, run_leaky_relu),
    K("Sigmoid", 1, FL, run_sigmoid),
    K("Tanh", 1, FL, run_tanh),
    K("HardSigmoid", 1, FL, run_hard_sigmoid),
    K("HardSwish", 14, FL, run_hard_swish),
    K("Elu", 1, FL, run_elu),
    K("Selu", 1, FL, run_selu),
    K("Celu", 12, FL, run_celu),
    K("Softplus", 1, FL, run_softplus),
    K("Softsign", 1, FL, run_softsign),
    K("ThresholdedRelu", 10, FL, run_thresholded_relu),
    K("Shrink", 9, TDM_T_NUMERIC, run_shrink),
    K("Mish", 18, FL, run_mish),
    K("Gelu", 20, FL, run_gelu),
    {"com.microsoft", "Gelu", 1, 0, 0, FL, run_gelu, NULL, NULL},
    K("Clip", 1, TDM_T_NUMERIC, run_clip),
    K("Not", 1, TDM_T(TDM_BOOL), run_not),
    K("BitwiseNot", 18, TDM_T_INTS, run_bitwise_not),
    K("Cast", 1, TDM_T_ALL, tdm_unary_cast),
    K("CastLike", 15, TDM_T_ALL, tdm_unary_cast),
};
const int tdm_cpu_kernels_unary_count =
    (int)(sizeof tdm_cpu_kernels_unary / sizeof tdm_cpu_kernels_unary[0]);

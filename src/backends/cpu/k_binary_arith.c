/* CPU kernels, binary family: arithmetic inner loops (Add, Sub, Mul, Div, Mod, Max, Min,
 * PRelu, Pow) for every numeric dtype. float16 / bfloat16 compute in float. Integer
 * arithmetic wraps (computed in unsigned types); integer division or modulo by zero gives 0. */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_binary_impl.h"

/* All numeric dtypes of one op. FE(T): float expression computed in T; IS(T, W) / IU(T, W):
 * signed / unsigned integer expression, W the unsigned type at least as wide as int. */
#define KB_GEN(op, FE, IS, IU)                                                                     \
    KB_LOOP(op##_f32, float, float, float, KB_ID, KB_ID, KB_ID, FE(float))                         \
    KB_LOOP(op##_f64, double, double, double, KB_ID, KB_ID, KB_ID, FE(double))                     \
    KB_LOOP(op##_f16, uint16_t, uint16_t, uint16_t, KB_F16, KB_F16, KB_TOF16, FE(float))           \
    KB_LOOP(op##_bf16, uint16_t, uint16_t, uint16_t, KB_BF16, KB_BF16, KB_TOBF16, FE(float))       \
    KB_LOOP(op##_i8, int8_t, int8_t, int8_t, KB_ID, KB_ID, KB_ID, IS(int8_t, uint32_t))            \
    KB_LOOP(op##_i16, int16_t, int16_t, int16_t, KB_ID, KB_ID, KB_ID, IS(int16_t, uint32_t))       \
    KB_LOOP(op##_i32, int32_t, int32_t, int32_t, KB_ID, KB_ID, KB_ID, IS(int32_t, uint32_t))       \
    KB_LOOP(op##_i64, int64_t, int64_t, int64_t, KB_ID, KB_ID, KB_ID, IS(int64_t, uint64_t))       \
    KB_LOOP(op##_u8, uint8_t, uint8_t, uint8_t, KB_ID, KB_ID, KB_ID, IU(uint8_t, uint32_t))        \
    KB_LOOP(op##_u16, uint16_t, uint16_t, uint16_t, KB_ID, KB_ID, KB_ID, IU(uint16_t, uint32_t))   \
    KB_LOOP(op##_u32, uint32_t, uint32_t, uint32_t, KB_ID, KB_ID, KB_ID, IU(uint32_t, uint32_t))   \
    KB_LOOP(op##_u64, uint64_t, uint64_t, uint64_t, KB_ID, KB_ID, KB_ID, IU(uint64_t, uint64_t))

#define KB_TABLE(op)                                                                       \
    {                                                                                      \
        [TDM_FLOAT] = op##_f32, [TDM_DOUBLE] = op##_f64, [TDM_FLOAT16] = op##_f16,         \
        [TDM_BFLOAT16] = op##_bf16, [TDM_INT8] = op##_i8, [TDM_INT16] = op##_i16,          \
        [TDM_INT32] = op##_i32, [TDM_INT64] = op##_i64, [TDM_UINT8] = op##_u8,             \
        [TDM_UINT16] = op##_u16, [TDM_UINT32] = op##_u32, [TDM_UINT64] = op##_u64,         \
    }

/* ---- helpers for the expressions ---- */

static inline float kb_pymod_float(float x, float y) {
    float r = fmodf(x, y);
    return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r;
}
static inline double kb_pymod_double(double x, double y) {
    double r = fmod(x, y);
    return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r;
}
static inline float kb_fmod_float(float x, float y) { return fmodf(x, y); }
static inline double kb_fmod_double(double x, double y) { return fmod(x, y); }

/* Signed modulo with the sign of the divisor; 0 for y == 0 (and y == -1, avoiding the
 * INT64_MIN trap). */
static inline int64_t kb_pymod_s(int64_t x, int64_t y) {
    if (y == 0 || y == -1) return 0;
    int64_t r = x % y;
    return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r;
}
static inline int64_t kb_fmod_s(int64_t x, int64_t y) {
    if (y == 0 || y == -1) return 0;
    return x % y;
}
static inline uint64_t kb_mod_u(uint64_t x, uint64_t y) { return y ? x % y : 0; }

/* PRelu selects with bit masks: written as `x < 0 ? x * y : x`, the compiler moves the
 * product into a branch (under trapping math) and the loop no longer vectorizes. */
static inline float kb_prelu_float(float x, float y) {
    float m = x * y;
    uint32_t ux, um, k = -(uint32_t)(x < 0);
    memcpy(&ux, &x, 4);
    memcpy(&um, &m, 4);
    ux = (um & k) | (ux & ~k);
    memcpy(&m, &ux, 4);
    return m;
}
static inline double kb_prelu_double(double x, double y) {
    double m = x * y;
    uint64_t ux, um, k = -(uint64_t)(x < 0);
    memcpy(&ux, &x, 8);
    memcpy(&um, &m, 8);
    ux = (um & k) | (ux & ~k);
    memcpy(&m, &ux, 8);
    return m;
}

/* ---- expressions ---- */

#define ADD_F(T) (x + y)
#define ADD_I(T, W) ((T)((W)x + (W)y))
#define SUB_F(T) (x - y)
#define SUB_I(T, W) ((T)((W)x - (W)y))
#define MUL_F(T) (x * y)
#define MUL_I(T, W) ((T)((W)x * (W)y))
#define DIV_F(T) (x / y)
#define DIV_S(T, W) (y == 0 ? (T)0 : y == -1 ? (T)(0 - (W)x) : (T)(x / y))
#define DIV_U(T, W) (y == 0 ? (T)0 : (T)(x / y))
#define MOD_F(T) kb_pymod_##T(x, y)
#define MOD_S(T, W) ((T)kb_pymod_s(x, y))
#define MOD_U(T, W) ((T)kb_mod_u(x, y))
#define FMOD_F(T) kb_fmod_##T(x, y)
#define FMOD_S(T, W) ((T)kb_fmod_s(x, y))
/* NaN in either input gives NaN (as numpy.maximum / minimum). */
#define MAX_F(T) ((x != x || x > y) ? x : y)
#define MAX_I(T, W) (x > y ? x : y)
#define MIN_F(T) ((x != x || x < y) ? x : y)
#define MIN_I(T, W) (x < y ? x : y)
#define PRELU_F(T) kb_prelu_##T(x, y)
#define PRELU_S(T, W) (x < 0 ? (T)((W)x * (W)y) : x)
#define PRELU_U(T, W) ((void)y, x)

KB_GEN(add, ADD_F, ADD_I, ADD_I)
KB_GEN(sub, SUB_F, SUB_I, SUB_I)
KB_GEN(mul, MUL_F, MUL_I, MUL_I)
KB_GEN(div, DIV_F, DIV_S, DIV_U)
KB_GEN(mod, MOD_F, MOD_S, MOD_U)
KB_GEN(fmod, FMOD_F, FMOD_S, MOD_U)
KB_GEN(max, MAX_F, MAX_I, MAX_I)
KB_GEN(min, MIN_F, MIN_I, MIN_I)
KB_GEN(prelu, PRELU_F, PRELU_S, PRELU_U)

static const tdm_kb_fn2 arith_tables[TDM_KB_ARITH_COUNT][TDM_DTYPE_COUNT] = {
    [TDM_KB_ADD] = KB_TABLE(add),   [TDM_KB_SUB] = KB_TABLE(sub),
    [TDM_KB_MUL] = KB_TABLE(mul),   [TDM_KB_DIV] = KB_TABLE(div),
    [TDM_KB_MOD] = KB_TABLE(mod),   [TDM_KB_FMOD] = KB_TABLE(fmod),
    [TDM_KB_MAX] = KB_TABLE(max),   [TDM_KB_MIN] = KB_TABLE(min),
    [TDM_KB_PRELU] = KB_TABLE(prelu),
};

tdm_kb_fn2 tdm_kb_arith_fn(tdm_kb_arith op, tdm_dtype dt) {
    if ((unsigned)op >= TDM_KB_ARITH_COUNT || (unsigned)dt >= TDM_DTYPE_COUNT) return NULL;
    return arith_tables[op][dt];
}

/* ---- Pow ---- */

/* float ** float, with exact shortcuts for the common scalar exponents. */
static void pow_f32(const void *pa, const void *pb, void *po, int64_t n, unsigned mode) {
    const float *restrict a = pa;
    const float *restrict b = pb;
    float *restrict o = po;
    if (mode == 0) {
        for (int64_t i = 0; i < n; i++) o[i] = powf(a[i], b[i]);
    } else if (mode == 2) {
        float y = b[0];
        if (y == 2.0f) {
            for (int64_t i = 0; i < n; i++) o[i] = a[i] * a[i];
        } else if (y == 1.0f) {
            for (int64_t i = 0; i < n; i++) o[i] = a[i];
        } else if (y == 0.5f) { /* pow(-0, .5) = +0 and pow(-inf, .5) = +inf, unlike sqrt */
            for (int64_t i = 0; i < n; i++)
                o[i] = a[i] == -INFINITY ? INFINITY : sqrtf(a[i]) + 0.0f;
        } else {
            for (int64_t i = 0; i < n; i++) o[i] = powf(a[i], y);
        }
    } else if (mode == 1) {
        float x = a[0];
        for (int64_t i = 0; i < n; i++) o[i] = powf(x, b[i]);
    } else {
        float r = powf(a[0], b[0]);
        for (int64_t i = 0; i < n; i++) o[i] = r;
    }
}

/* double -> integer without undefined behaviour: NaN gives 0, out of range saturates. */
static inline int64_t kb_d2i(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}
static inline uint64_t kb_d2u(double v) {
    if (v != v || v <= 0) return 0;
    if (v >= 18446744073709551615.0) return UINT64_MAX;
    return (uint64_t)v;
}

/* Integer power by squaring, wrapping. A negative exponent gives 0 except for bases 1
 * and -1 (signed). */
static inline uint64_t kb_ipow(uint64_t x, int64_t y, int is_signed) {
    if (y < 0) {
        if (x == 1) return 1;
        if (is_signed && x == UINT64_MAX) return (y & 1) ? UINT64_MAX : 1;
        return 0;
    }
    uint64_t r = 1;
    while (y) {
        if (y & 1) r *= x;
        x *= x;
        y >>= 1;
    }
    return r;
}

KB_LOOP(pow_f64, double, double, double, KB_ID, KB_ID, KB_ID, pow(x, y))
KB_LOOP(pow_f32d, float, double, float, KB_ID, KB_ID, KB_ID, (float)pow((double)x, y))
KB_LOOP(pow_f16d, uint16_t, double, uint16_t, KB_F16, KB_ID, KB_TOF16, (float)pow((double)x, y))
KB_LOOP(pow_bf16d, uint16_t, double, uint16_t, KB_BF16, KB_ID, KB_TOBF16, (float)pow((double)x, y))

#define KB_POW_INT(sfx, T, S)                                                              \
    KB_LOOP(pow_##sfx##d, T, double, T, KB_ID, KB_ID, KB_ID,                                       \
            (T)(S ? (uint64_t)kb_d2i(pow((double)x, y)) : kb_d2u(pow((double)x, y))))      \
    KB_LOOP(pow_##sfx##i, T, int64_t, T, KB_ID, KB_ID, KB_ID,                                      \
            (T)kb_ipow((uint64_t)(S ? (uint64_t)(int64_t)x : (uint64_t)x), y, S))
KB_POW_INT(i8, int8_t, 1)
KB_POW_INT(i16, int16_t, 1)
KB_POW_INT(i32, int32_t, 1)
KB_POW_INT(i64, int64_t, 1)
KB_POW_INT(u8, uint8_t, 0)
KB_POW_INT(u16, uint16_t, 0)
KB_POW_INT(u32, uint32_t, 0)
KB_POW_INT(u64, uint64_t, 0)

tdm_kb_fn2 tdm_kb_pow_fn(tdm_dtype base, tdm_dtype exp_dt) {
    static const tdm_kb_fn2 with_double[TDM_DTYPE_COUNT] = {
        [TDM_FLOAT] = pow_f32d,  [TDM_DOUBLE] = pow_f64,   [TDM_FLOAT16] = pow_f16d,
        [TDM_BFLOAT16] = pow_bf16d, [TDM_INT8] = pow_i8d,  [TDM_INT16] = pow_i16d,
        [TDM_INT32] = pow_i32d,  [TDM_INT64] = pow_i64d,   [TDM_UINT8] = pow_u8d,
        [TDM_UINT16] = pow_u16d, [TDM_UINT32] = pow_u32d,  [TDM_UINT64] = pow_u64d,
    };
    static const tdm_kb_fn2 with_int[TDM_DTYPE_COUNT] = {
        [TDM_INT8] = pow_i8i,   [TDM_INT16] = pow_i16i,  [TDM_INT32] = pow_i32i,
        [TDM_INT64] = pow_i64i, [TDM_UINT8] = pow_u8i,   [TDM_UINT16] = pow_u16i,
        [TDM_UINT32] = pow_u32i, [TDM_UINT64] = pow_u64i,
    };
    if ((unsigned)base >= TDM_DTYPE_COUNT) return NULL;
    if (base == TDM_FLOAT && exp_dt == TDM_FLOAT) return pow_f32;
    if (exp_dt == TDM_DOUBLE) return with_double[base];
    if (exp_dt == TDM_INT64) return with_int[base];
    return NULL;
}

/* ---- Mean ---- */

void tdm_kb_scale_div(tdm_dtype dt, void *data, int64_t count, int64_t n) {
    switch (dt) {
    case TDM_FLOAT: {
        float *p = data, d = (float)n;
        for (int64_t i = 0; i < count; i++) p[i] /= d;
        break;
    }
    case TDM_DOUBLE: {
        double *p = data, d = (double)n;
        for (int64_t i = 0; i < count; i++) p[i] /= d;
        break;
    }
    case TDM_FLOAT16: {
        uint16_t *p = data;
        for (int64_t i = 0; i < count; i++) p[i] = tdm_f32_to_f16(tdm_f16_to_f32(p[i]) / (float)n);
        break;
    }
    case TDM_BFLOAT16: {
        uint16_t *p = data;
        for (int64_t i = 0; i < count; i++)
            p[i] = tdm_f32_to_bf16(tdm_bf16_to_f32(p[i]) / (float)n);
        break;
    }
    default:
        break;
    }
}

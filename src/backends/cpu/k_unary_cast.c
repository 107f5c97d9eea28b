/* CPU kernels, unary family: Cast and CastLike.
 *
 * Numeric conversions go block by block through an intermediate: double for floating-point
 * sources (exact for float16/bfloat16/float/double) and int64 for integer and bool sources
 * (uint64 carried as its bit pattern), so each element costs one typed load loop and one
 * typed store loop. Float to integer truncates toward zero; NaN becomes 0; values beyond
 * int64 saturate, then narrower targets wrap like a C/numpy integer conversion. Double to
 * float16 rounds once (directly, to nearest even); to bfloat16 truncates the float32 (as the
 * ONNX test data expects).
 *
 * Strings: parsing accepts decimal and scientific forms and the case-insensitive literals
 * NaN, INF, +INF, -INF (strtod also takes "infinity"); anything else is an error. Floats
 * print as the shortest decimal that reads back to the same value in the source type,
 * positional for 1e-4 <= |x| < 1e16 ("0.039187793", "1.0") and scientific otherwise
 * ("1e-05", "1.5e+16"), like numpy's repr; NaN/INF/-INF as the literals above. Integers
 * print in decimal, bool as "1"/"0". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backends/cpu/k_unary.h"
#include "core/alloc.h"

#define CAST_BLOCK 256

static bool is_real(tdm_dtype t) {
    return t == TDM_FLOAT || t == TDM_DOUBLE || t == TDM_FLOAT16 || t == TDM_BFLOAT16;
}

/* double -> float16, round to nearest even, in one step. */
static uint16_t d2h(double d) {
    uint64_t x;
    memcpy(&x, &d, sizeof x);
    uint16_t sign = (uint16_t)((x >> 48) & 0x8000);
    uint64_t absx = x & 0x7fffffffffffffffull;
    if (absx >= 0x7ff0000000000000ull) /* inf, nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7ff0000000000000ull ? 0x200 : 0));
    int e = (int)(absx >> 52) - 1023;
    if (e >= 16) return (uint16_t)(sign | 0x7c00);
    if (e < -25) return sign;
    uint64_t m = (absx & 0xfffffffffffffull) | (1ull << 52);
    int shift = e >= -14 ? 42 : 28 - e; /* normal: keep 11 bits; subnormal: units of 2^-24 */
    uint64_t h = m >> shift;
    uint64_t rem = m & ((1ull << shift) - 1);
    uint64_t half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    if (e >= -14) h += (uint64_t)(e + 14) << 10; /* (e + 15 - 1) plus the implicit 0x400 */
    return (uint16_t)(sign | h);
}

/* float -> bfloat16 by truncation (NaN stays NaN). The ONNX test data of Cast to BFLOAT16
 * keeps the upper 16 bits of the float32, so Cast does the same. */
static uint16_t f2bf_trunc(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)(x >> 16);
}

/* ---- loads into the intermediate ---------------------------------------------------------- */

static void load_real(const tdm_tensor *x, int64_t i0, int64_t n, double *buf) {
    switch (x->dtype) {
    case TDM_FLOAT: {
        const float *s = (const float *)x->data + i0;
        for (int64_t i = 0; i < n; i++) buf[i] = s[i];
        break;
    }
    case TDM_DOUBLE: memcpy(buf, (const double *)x->data + i0, (size_t)n * sizeof *buf); break;
    case TDM_FLOAT16: {
        const uint16_t *s = (const uint16_t *)x->data + i0;
        for (int64_t i = 0; i < n; i++) buf[i] = tdm_f16_to_f32(s[i]);
        break;
    }
    case TDM_BFLOAT16: {
        const uint16_t *s = (const uint16_t *)x->data + i0;
        for (int64_t i = 0; i < n; i++) buf[i] = tdm_bf16_to_f32(s[i]);
        break;
    }
    default: break;
    }
}

#define LOAD_INT(T)                                                                      \
    do {                                                                                 \
        const T *s = (const T *)x->data + i0;                                            \
        for (int64_t i = 0; i < n; i++) buf[i] = (int64_t)s[i];                          \
    } while (0)

static void load_int(const tdm_tensor *x, int64_t i0, int64_t n, int64_t *buf) {
    switch (x->dtype) {
    case TDM_INT8: LOAD_INT(int8_t); break;
    case TDM_INT16: LOAD_INT(int16_t); break;
    case TDM_INT32: LOAD_INT(int32_t); break;
    case TDM_INT64: LOAD_INT(int64_t); break;
    case TDM_UINT8: LOAD_INT(uint8_t); break;
    case TDM_UINT16: LOAD_INT(uint16_t); break;
    case TDM_UINT32: LOAD_INT(uint32_t); break;
    case TDM_UINT64: LOAD_INT(uint64_t); break; /* bit pattern */
    case TDM_BOOL: {
        const uint8_t *s = (const uint8_t *)x->data + i0;
        for (int64_t i = 0; i < n; i++) buf[i] = s[i] != 0;
        break;
    }
    default: break;
    }
}

/* ---- stores from the intermediate --------------------------------------------------------- */

/* Float to int64 truncating toward zero; NaN -> 0, saturating. */
static inline int64_t real_to_i64(double v) {
    if (v != v) return 0;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    return (int64_t)v;
}

static inline uint64_t real_to_u64(double v) {
    if (v != v) return 0;
    if (v >= 18446744073709551616.0) return UINT64_MAX;
    if (v >= 9223372036854775808.0) return (uint64_t)v;
    return (uint64_t)real_to_i64(v); /* negative values wrap */
}

#define STORE(T, expr)                                                                   \
    do {                                                                                 \
        T *d = (T *)y->data + i0;                                                        \
        for (int64_t i = 0; i < n; i++) d[i] = (T)(expr);                                \
    } while (0)

static void store_real(tdm_tensor *y, int64_t i0, int64_t n, const double *buf) {
    switch (y->dtype) {
    case TDM_FLOAT: STORE(float, buf[i]); break;
    case TDM_DOUBLE: STORE(double, buf[i]); break;
    case TDM_FLOAT16: STORE(uint16_t, d2h(buf[i])); break;
    case TDM_BFLOAT16: STORE(uint16_t, f2bf_trunc((float)buf[i])); break;
    case TDM_BOOL: STORE(uint8_t, buf[i] != 0); break;
    case TDM_INT8: STORE(int8_t, real_to_i64(buf[i])); break;
    case TDM_INT16: STORE(int16_t, real_to_i64(buf[i])); break;
    case TDM_INT32: STORE(int32_t, real_to_i64(buf[i])); break;
    case TDM_INT64: STORE(int64_t, real_to_i64(buf[i])); break;
    case TDM_UINT8: STORE(uint8_t, real_to_i64(buf[i])); break;
    case TDM_UINT16: STORE(uint16_t, real_to_i64(buf[i])); break;
    case TDM_UINT32: STORE(uint32_t, real_to_i64(buf[i])); break;
    case TDM_UINT64: STORE(uint64_t, real_to_u64(buf[i])); break;
    default: break;
    }
}

static void store_int(tdm_tensor *y, int64_t i0, int64_t n, const int64_t *buf, bool src_u64) {
    if (src_u64 && is_real(y->dtype)) { /* values above INT64_MAX must not turn negative */
        double tmp[CAST_BLOCK];
        for (int64_t i = 0; i < n; i++) tmp[i] = (double)(uint64_t)buf[i];
        store_real(y, i0, n, tmp);
        return;
    }
    switch (y->dtype) {
    case TDM_FLOAT: STORE(float, buf[i]); break;
    case TDM_DOUBLE: STORE(double, buf[i]); break;
    case TDM_FLOAT16: STORE(uint16_t, d2h((double)buf[i])); break;
    case TDM_BFLOAT16: STORE(uint16_t, f2bf_trunc((float)buf[i])); break;
    case TDM_BOOL: STORE(uint8_t, buf[i] != 0); break;
    case TDM_INT8: STORE(int8_t, buf[i]); break;
    case TDM_INT16: STORE(int16_t, buf[i]); break;
    case TDM_INT32: STORE(int32_t, buf[i]); break;
    case TDM_INT64: STORE(int64_t, buf[i]); break;
    case TDM_UINT8: STORE(uint8_t, buf[i]); break;
    case TDM_UINT16: STORE(uint16_t, buf[i]); break;
    case TDM_UINT32: STORE(uint32_t, buf[i]); break;
    case TDM_UINT64: STORE(uint64_t, buf[i]); break;
    default: break;
    }
}

/* ---- numeric <-> numeric -------------------------------------------------------------------- */

typedef struct cjob {
    const tdm_tensor *x;
    tdm_tensor *y;
} cjob;

static void numeric_range(void *arg, int64_t b, int64_t e) {
    cjob *j = arg;
    bool real = is_real(j->x->dtype);
    bool src_u64 = j->x->dtype == TDM_UINT64;
    union {
        double d[CAST_BLOCK];
        int64_t i[CAST_BLOCK];
    } buf;
    for (int64_t i0 = b; i0 < e; i0 += CAST_BLOCK) {
        int64_t n = e - i0 < CAST_BLOCK ? e - i0 : CAST_BLOCK;
        if (real) {
            load_real(j->x, i0, n, buf.d);
            store_real(j->y, i0, n, buf.d);
        } else {
            load_int(j->x, i0, n, buf.i);
            store_int(j->y, i0, n, buf.i, src_u64);
        }
    }
}

/* ---- strings -------------------------------------------------------------------------------- */

static bool reads_back(const char *s, double v, tdm_dtype t) {
    switch (t) {
    case TDM_FLOAT: return strtof(s, NULL) == (float)v;
    case TDM_FLOAT16: return d2h(strtod(s, NULL)) == d2h(v);
    case TDM_BFLOAT16: return f2bf_trunc(strtof(s, NULL)) == f2bf_trunc((float)v);
    default: return strtod(s, NULL) == v;
    }
}

/* Shortest round-trip decimal of v (a value of type t), numpy repr style. */
static void format_real(char *out, size_t size, double v, tdm_dtype t) {
    if (v != v) {
        snprintf(out, size, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, size, v > 0 ? "INF" : "-INF");
        return;
    }
    if (v == 0) {
        snprintf(out, size, signbit(v) ? "-0.0" : "0.0");
        return;
    }
    int maxp = t == TDM_DOUBLE ? 17 : t == TDM_FLOAT16 ? 5 : 9;
    char e[48];
    for (int p = 1; p <= maxp; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (reads_back(e, v, t)) break;
    }
    /* e is "[-]d[.ddd]e(+|-)XX": split into sign, digits and decimal exponent. */
    const char *s = e;
    bool neg = *s == '-';
    if (neg) s++;
    char digits[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9' && nd < (int)sizeof digits - 1) digits[nd++] = *s;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int exp10 = *s == 'e' ? atoi(s + 1) : 0;
    double a = fabs(v);
    size_t pos = 0;
    char buf[64];
    if (neg) buf[pos++] = '-';
    if (a >= 1e-4 && a < 1e16) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++) buf[pos++] = i < nd ? digits[i] : '0';
            buf[pos++] = '.';
            if (nd > exp10 + 1) {
                for (int i = exp10 + 1; i < nd; i++) buf[pos++] = digits[i];
            } else {
                buf[pos++] = '0';
            }
        } else {
            buf[pos++] = '0';
            buf[pos++] = '.';
            for (int i = 0; i < -exp10 - 1; i++) buf[pos++] = '0';
            for (int i = 0; i < nd; i++) buf[pos++] = digits[i];
        }
        buf[pos] = 0;
    } else {
        buf[pos++] = digits[0];
        if (nd > 1) {
            buf[pos++] = '.';
            for (int i = 1; i < nd; i++) buf[pos++] = digits[i];
        }
        snprintf(buf + pos, sizeof buf - pos, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    snprintf(out, size, "%s", buf);
}

static tdm_status *to_string(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    char **out = y->data;
    char text[64];
    for (int64_t i = 0; i < x->count; i++) {
        const char *s = text;
        switch (x->dtype) {
        case TDM_STRING: {
            const char *src = ((char *const *)x->data)[i];
            s = src ? src : "";
            break;
        }
        case TDM_FLOAT:
        case TDM_DOUBLE:
        case TDM_FLOAT16:
        case TDM_BFLOAT16:
            format_real(text, sizeof text, tdm_tensor_get_f64(x, i), x->dtype);
            break;
        case TDM_BOOL: snprintf(text, sizeof text, "%d", ((const uint8_t *)x->data)[i] != 0); break;
        case TDM_UINT64:
            snprintf(text, sizeof text, "%llu", (unsigned long long)((const uint64_t *)x->data)[i]);
            break;
        default: snprintf(text, sizeof text, "%lld", (long long)tdm_tensor_get_i64(x, i)); break;
        }
        char *copy = tdm_strdup(y->alloc, s);
        if (!copy) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory casting to strings");
        tdm_free(y->alloc, out[i]);
        out[i] = copy;
    }
    return NULL;
}

static bool only_space(const char *s) {
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    return *s == 0;
}

/* Parses one string for a target of type t into *d (real and bool targets) or *iv. */
static bool parse_one(const char *s, tdm_dtype t, double *d, int64_t *iv) {
    char *end;
    if (!s) return false;
    if (t == TDM_BOOL) {
        const char *p = s;
        while (*p == ' ' || *p == '\t') p++;
        if (strncasecmp(p, "true", 4) == 0 && only_space(p + 4)) {
            *d = 1;
            return true;
        }
        if (strncasecmp(p, "false", 5) == 0 && only_space(p + 5)) {
            *d = 0;
            return true;
        }
    }
    if (is_real(t) || t == TDM_BOOL) {
        *d = t == TDM_FLOAT ? (double)strtof(s, &end) : strtod(s, &end);
        return end != s && only_space(end);
    }
    if (t == TDM_UINT64 && strchr(s, '-') == NULL) {
        unsigned long long u = strtoull(s, &end, 10);
        if (end != s && only_space(end)) {
            *iv = (int64_t)u;
            return true;
        }
    } else {
        long long v = strtoll(s, &end, 10);
        if (end != s && only_space(end)) {
            *iv = v;
            return true;
        }
    }
    double r = strtod(s, &end); /* "100.5" -> 100 */
    if (end == s || !only_space(end)) return false;
    *iv = t == TDM_UINT64 ? (int64_t)real_to_u64(r) : real_to_i64(r);
    return true;
}

static tdm_status *from_string(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    char *const *src = x->data;
    bool real = is_real(y->dtype) || y->dtype == TDM_BOOL;
    union {
        double d[CAST_BLOCK];
        int64_t i[CAST_BLOCK];
    } buf;
    for (int64_t i0 = 0; i0 < x->count; i0 += CAST_BLOCK) {
        int64_t n = x->count - i0 < CAST_BLOCK ? x->count - i0 : CAST_BLOCK;
        for (int64_t i = 0; i < n; i++) {
            double d = 0;
            int64_t iv = 0;
            const char *s = src[i0 + i];
            if (!parse_one(s, y->dtype, &d, &iv))
                return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                      "cannot convert string \"%.40s\" to %s", s ? s : "",
                                      tdm_dtype_name(y->dtype));
            if (real)
                buf.d[i] = d;
            else
                buf.i[i] = iv;
        }
        if (real)
            store_real(y, i0, n, buf.d);
        else
            store_int(y, i0, n, buf.i, y->dtype == TDM_UINT64);
    }
    return NULL;
}

tdm_status *tdm_unary_cast(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    if (y->count != x->count)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "output does not match the input");
    if (x->dtype == TDM_COMPLEX64 || x->dtype == TDM_COMPLEX128 || y->dtype == TDM_COMPLEX64 ||
        y->dtype == TDM_COMPLEX128)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "complex types are not supported");
    if (x->count == 0) return NULL;
    if (y->dtype == TDM_STRING) return to_string(ctx);
    if (x->dtype == TDM_STRING) return from_string(ctx);
    if (x->dtype == y->dtype) {
        memcpy(y->data, x->data, x->nbytes);
        return NULL;
    }
    cjob j = {x, y};
    tdm_parallel_for(ctx->pool, x->count, 1 << 15, numeric_range, &j);
    return NULL;
}

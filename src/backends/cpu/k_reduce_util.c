/* Reduce family helpers: compute-type loads and stores, broadcasting, axis views. */
#include <string.h>

#include "backends/cpu/k_reduce.h"
#include "core/alloc.h"
#include "core/checked.h"

tdm_rd_ctype tdm_rd_ctype_of(tdm_dtype dt) {
    switch (dt) {
    case TDM_DOUBLE: return TDM_RD_F64;
    case TDM_FLOAT:
    case TDM_FLOAT16:
    case TDM_BFLOAT16: return TDM_RD_F32;
    case TDM_UINT64: return TDM_RD_U64;
    default: return TDM_RD_I64;
    }
}

size_t tdm_rd_csize(tdm_rd_ctype ct) { return ct == TDM_RD_F32 ? 4 : 8; }

bool tdm_rd_native(tdm_dtype dt, tdm_rd_ctype ct) {
    switch (ct) {
    case TDM_RD_F32: return dt == TDM_FLOAT;
    case TDM_RD_F64: return dt == TDM_DOUBLE;
    case TDM_RD_I64: return dt == TDM_INT64;
    case TDM_RD_U64: return dt == TDM_UINT64;
    }
    return false;
}

/* ---- conversions of single values ---- */

static inline int64_t sat_i64(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}
static inline uint64_t sat_u64(double v) {
    if (v != v || v <= 0) return 0;
    if (v >= 18446744073709551615.0) return UINT64_MAX;
    return (uint64_t)v;
}
static inline int64_t i64_of_f(float v) { return sat_i64(v); }
static inline int64_t i64_of_d(double v) { return sat_i64(v); }
static inline int64_t i64_of_i(int64_t v) { return v; }
static inline uint64_t u64_of_f(float v) { return sat_u64(v); }
static inline uint64_t u64_of_d(double v) { return sat_u64(v); }
static inline uint64_t u64_of_i(uint64_t v) { return v; }

#define TO_I64(x) _Generic((x), float: i64_of_f, double: i64_of_d, default: i64_of_i)(x)
#define TO_U64(x) _Generic((x), float: u64_of_f, double: u64_of_d, default: u64_of_i)(x)
#define TO_F32(x) ((float)(x))
#define TO_F64(x) ((double)(x))

/* Plain storage types (no conversion function needed to read them). */
#define RD_PLAIN(X)                                                                      \
    X(TDM_FLOAT, float)                                                                  \
    X(TDM_DOUBLE, double)                                                                \
    X(TDM_INT8, int8_t)                                                                  \
    X(TDM_UINT8, uint8_t)                                                                \
    X(TDM_INT16, int16_t)                                                                \
    X(TDM_UINT16, uint16_t)                                                              \
    X(TDM_INT32, int32_t)                                                                \
    X(TDM_UINT32, uint32_t)                                                              \
    X(TDM_INT64, int64_t)                                                                \
    X(TDM_UINT64, uint64_t)

/* CONV is #defined to the conversion before each use. */
#define DEF_LOAD(NAME, CT)                                                               \
    static void NAME(const void *s, tdm_dtype dt, CT *d, int64_t n) {                    \
        switch (dt) {                                                                    \
            RD_PLAIN(LOAD_CASE_)                                                         \
        case TDM_BOOL: {                                                                 \
            const uint8_t *p = s;                                                        \
            for (int64_t i = 0; i < n; i++) d[i] = (CT)(p[i] != 0);                      \
        } break;                                                                         \
        case TDM_FLOAT16: {                                                              \
            const uint16_t *p = s;                                                       \
            for (int64_t i = 0; i < n; i++) d[i] = CONV(tdm_f16_to_f32(p[i]));           \
        } break;                                                                         \
        case TDM_BFLOAT16: {                                                             \
            const uint16_t *p = s;                                                       \
            for (int64_t i = 0; i < n; i++) d[i] = CONV(tdm_bf16_to_f32(p[i]));          \
        } break;                                                                         \
        default: memset(d, 0, (size_t)n * sizeof *d); break;                             \
        }                                                                                \
    }
#define LOAD_CASE_(E, ST)                                                                \
    case E: {                                                                            \
        const ST *p = s;                                                                 \
        for (int64_t i = 0; i < n; i++) d[i] = CONV(p[i]);                               \
    } break;

#define CONV TO_F32
DEF_LOAD(load_f32, float)
#undef CONV
#define CONV TO_F64
DEF_LOAD(load_f64, double)
#undef CONV
#define CONV TO_I64
DEF_LOAD(load_i64, int64_t)
#undef CONV
#define CONV TO_U64
DEF_LOAD(load_u64, uint64_t)
#undef CONV

tdm_status *tdm_rd_load(tdm_kernel_ctx *ctx, const tdm_tensor *t, tdm_rd_ctype ct,
                        const void **data, void **owned) {
    *owned = NULL;
    if (tdm_rd_native(t->dtype, ct)) {
        *data = t->data;
        return NULL;
    }
    size_t bytes;
    if (!tdm_mul_size((size_t)t->count, tdm_rd_csize(ct), &bytes))
        return TDM_ERR(TDM_ERR_LIMIT, "tensor too large");
    void *buf = tdm_kscratch(ctx, bytes ? bytes : 1);
    if (!buf) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory converting a tensor");
    switch (ct) {
    case TDM_RD_F32: load_f32(t->data, t->dtype, buf, t->count); break;
    case TDM_RD_F64: load_f64(t->data, t->dtype, buf, t->count); break;
    case TDM_RD_I64: load_i64(t->data, t->dtype, buf, t->count); break;
    case TDM_RD_U64: load_u64(t->data, t->dtype, buf, t->count); break;
    }
    *data = buf;
    *owned = buf;
    return NULL;
}

/* ---- stores ---- */

/* Float to a bounded integer: saturates, NaN -> 0. */
static inline int64_t sat_range(double v, double lo, double hi) {
    if (v != v) return 0;
    if (v <= lo) return (int64_t)lo;
    if (v >= hi) return (int64_t)hi;
    return (int64_t)v;
}

#define DEF_STORE(NAME, CT)                                                              \
    static void NAME(const CT *s, void *dst, tdm_dtype dt, int64_t n) {                  \
        switch (dt) {                                                                    \
        case TDM_FLOAT: {                                                                \
            float *d = dst;                                                              \
            for (int64_t i = 0; i < n; i++) d[i] = (float)s[i];                          \
        } break;                                                                         \
        case TDM_DOUBLE: {                                                               \
            double *d = dst;                                                             \
            for (int64_t i = 0; i < n; i++) d[i] = (double)s[i];                         \
        } break;                                                                         \
        case TDM_FLOAT16: {                                                              \
            uint16_t *d = dst;                                                           \
            for (int64_t i = 0; i < n; i++) d[i] = tdm_f32_to_f16((float)s[i]);          \
        } break;                                                                         \
        case TDM_BFLOAT16: {                                                             \
            uint16_t *d = dst;                                                           \
            for (int64_t i = 0; i < n; i++) d[i] = tdm_f32_to_bf16((float)s[i]);         \
        } break;                                                                         \
        case TDM_BOOL: {                                                                 \
            uint8_t *d = dst;                                                            \
            for (int64_t i = 0; i < n; i++) d[i] = s[i] != 0;                            \
        } break;                                                                         \
            STORE_INT_(TDM_INT8, int8_t, -128.0, 127.0)                                  \
            STORE_INT_(TDM_UINT8, uint8_t, 0.0, 255.0)                                   \
            STORE_INT_(TDM_INT16, int16_t, -32768.0, 32767.0)                            \
            STORE_INT_(TDM_UINT16, uint16_t, 0.0, 65535.0)                               \
            STORE_INT_(TDM_INT32, int32_t, -2147483648.0, 2147483647.0)                  \
            STORE_INT_(TDM_UINT32, uint32_t, 0.0, 4294967295.0)                          \
        case TDM_INT64: {                                                                \
            int64_t *d = dst;                                                            \
            for (int64_t i = 0; i < n; i++) d[i] = TO_I64(s[i]);                         \
        } break;                                                                         \
        case TDM_UINT64: {                                                               \
            uint64_t *d = dst;                                                           \
            for (int64_t i = 0; i < n; i++) d[i] = TO_U64(s[i]);                         \
        } break;                                                                         \
        default: break;                                                                  \
        }                                                                                \
    }
#define STORE_INT_(E, ST, LO, HI)                                                        \
    case E: {                                                                            \
        ST *d = dst;                                                                     \
        for (int64_t i = 0; i < n; i++)                                                  \
            d[i] = IS_FLOAT_ ? (ST)sat_range((double)s[i], LO, HI) : (ST)s[i];           \
    } break;

#define IS_FLOAT_ 1
DEF_STORE(store_f32, float)
DEF_STORE(store_f64, double)
#undef IS_FLOAT_
#define IS_FLOAT_ 0
DEF_STORE(store_i64, int64_t)
DEF_STORE(store_u64, uint64_t)
#undef IS_FLOAT_

void tdm_rd_store(const void *src, tdm_rd_ctype ct, void *dst, tdm_dtype dt, int64_t n) {
    if (tdm_rd_native(dt, ct)) {
        if (src != dst) memmove(dst, src, (size_t)n * tdm_rd_csize(ct));
        return;
    }
    switch (ct) {
    case TDM_RD_F32: store_f32(src, dst, dt, n); break;
    case TDM_RD_F64: store_f64(src, dst, dt, n); break;
    case TDM_RD_I64: store_i64(src, dst, dt, n); break;
    case TDM_RD_U64: store_u64(src, dst, dt, n); break;
    }
}

/* ---- broadcasting and views ---- */

tdm_status *tdm_rd_expand(tdm_kernel_ctx *ctx, const tdm_tensor *t, tdm_rd_ctype ct, int rank,
                          const int64_t *dims, void **out) {
    if (t->rank > rank) {
        for (int i = 0; i < t->rank - rank; i++)
            if (t->dims[i] != 1) goto bad;
    }
    int off = rank - t->rank;
    int64_t in_dims[TDM_MAX_RANK];
    for (int i = 0; i < rank; i++) {
        int j = i - off;
        in_dims[i] = j >= 0 ? t->dims[j] : 1;
        if (in_dims[i] != 1 && in_dims[i] != dims[i]) goto bad;
    }
    int64_t count = 1;
    for (int i = 0; i < rank; i++) count *= dims[i]; /* dims come from a valid tensor */
    const void *src;
    void *owned;
    TDM_TRY(tdm_rd_load(ctx, t, ct, &src, &owned));
    size_t es = tdm_rd_csize(ct);
    char *buf = tdm_kscratch(ctx, (size_t)(count ? count : 1) * es);
    if (!buf) {
        tdm_free(ctx->alloc, owned);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory broadcasting a tensor");
    }
    int64_t st[TDM_MAX_RANK], idx[TDM_MAX_RANK] = {0};
    tdm_broadcast_strides(rank, in_dims, rank, dims, st);
    int64_t pos = 0;
    for (int64_t i = 0; i < count; i++) {
        memcpy(buf + (size_t)i * es, (const char *)src + (size_t)pos * es, es);
        for (int d = rank - 1; d >= 0; d--) {
            pos += st[d];
            if (++idx[d] < dims[d]) break;
            pos -= st[d] * dims[d];
            idx[d] = 0;
        }
    }
    tdm_free(ctx->alloc, owned);
    *out = buf;
    return NULL;
bad:;
    char a[128], b[128];
    return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                          "shape %s cannot be broadcast to %s",
                          tdm_shape_str(t->rank, t->dims, a, sizeof a),
                          tdm_shape_str(rank, dims, b, sizeof b));
}

void tdm_rd_split(int rank, const int64_t *dims, int axis, int64_t *outer, int64_t *n,
                  int64_t *inner) {
    int64_t o = 1, m = 1;
    for (int i = 0; i < axis; i++) o *= dims[i];
    for (int i = axis + 1; i < rank; i++) m *= dims[i];
    *outer = o;
    *n = axis < rank ? dims[axis] : 1;
    *inner = m;
}

/* CPU kernels, binary family: comparison, logic, bitwise and shift inner loops, and Where.
 * Comparisons write bool (one byte, 0 or 1). */
#include <string.h>

#include "backends/cpu/k_binary_impl.h"

typedef char *kb_str;

/* Comparison over every numeric dtype plus bool; EXPR reads x and y. */
#define KB_CMP(op, EXPR)                                                                   \
    KB_LOOP(op##_f32, float, float, uint8_t, KB_ID, KB_ID, KB_ID, EXPR)                    \
    KB_LOOP(op##_f64, double, double, uint8_t, KB_ID, KB_ID, KB_ID, EXPR)                  \
    KB_LOOP(op##_f16, uint16_t, uint16_t, uint8_t, KB_F16, KB_F16, KB_ID, EXPR)            \
    KB_LOOP(op##_bf16, uint16_t, uint16_t, uint8_t, KB_BF16, KB_BF16, KB_ID, EXPR)         \
    KB_LOOP(op##_i8, int8_t, int8_t, uint8_t, KB_ID, KB_ID, KB_ID, EXPR)                   \
    KB_LOOP(op##_i16, int16_t, int16_t, uint8_t, KB_ID, KB_ID, KB_ID, EXPR)                \
    KB_LOOP(op##_i32, int32_t, int32_t, uint8_t, KB_ID, KB_ID, KB_ID, EXPR)                \
    KB_LOOP(op##_i64, int64_t, int64_t, uint8_t, KB_ID, KB_ID, KB_ID, EXPR)                \
    KB_LOOP(op##_u8, uint8_t, uint8_t, uint8_t, KB_ID, KB_ID, KB_ID, EXPR)                 \
    KB_LOOP(op##_u16, uint16_t, uint16_t, uint8_t, KB_ID, KB_ID, KB_ID, EXPR)              \
    KB_LOOP(op##_u32, uint32_t, uint32_t, uint8_t, KB_ID, KB_ID, KB_ID, EXPR)              \
    KB_LOOP(op##_u64, uint64_t, uint64_t, uint8_t, KB_ID, KB_ID, KB_ID, EXPR)              \
    KB_LOOP(op##_b, uint8_t, uint8_t, uint8_t, KB_BOOL, KB_BOOL, KB_ID, EXPR)

#define KB_BOOL(v) ((v) != 0)

#define KB_CMP_TABLE(op)                                                                   \
    {                                                                                      \
        [TDM_FLOAT] = op##_f32, [TDM_DOUBLE] = op##_f64, [TDM_FLOAT16] = op##_f16,         \
        [TDM_BFLOAT16] = op##_bf16, [TDM_INT8] = op##_i8, [TDM_INT16] = op##_i16,          \
        [TDM_INT32] = op##_i32, [TDM_INT64] = op##_i64, [TDM_UINT8] = op##_u8,             \
        [TDM_UINT16] = op##_u16, [TDM_UINT32] = op##_u32, [TDM_UINT64] = op##_u64,         \
        [TDM_BOOL] = op##_b,                                                               \
    }

KB_CMP(eq, (uint8_t)(x == y))
KB_CMP(lt, (uint8_t)(x < y))
KB_CMP(le, (uint8_t)(x <= y))
KB_CMP(gt, (uint8_t)(x > y))
KB_CMP(ge, (uint8_t)(x >= y))

static inline uint8_t kb_str_eq(const char *x, const char *y) {
    return strcmp(x ? x : "", y ? y : "") == 0;
}
KB_LOOP(eq_str, kb_str, kb_str, uint8_t, KB_ID, KB_ID, KB_ID, kb_str_eq(x, y))

/* Logic on bool. */
KB_LOOP(and_b, uint8_t, uint8_t, uint8_t, KB_BOOL, KB_BOOL, KB_ID, (uint8_t)(x & y))
KB_LOOP(or_b, uint8_t, uint8_t, uint8_t, KB_BOOL, KB_BOOL, KB_ID, (uint8_t)(x | y))
KB_LOOP(xor_b, uint8_t, uint8_t, uint8_t, KB_BOOL, KB_BOOL, KB_ID, (uint8_t)(x ^ y))

/* Bitwise and shifts on integers; W is an unsigned type at least as wide as int. */
#define KB_INTOP(op, EXPR)                                                                 \
    KB_LOOP(op##_i8, int8_t, int8_t, int8_t, KB_ID, KB_ID, KB_ID, EXPR(int8_t, uint32_t))  \
    KB_LOOP(op##_i16, int16_t, int16_t, int16_t, KB_ID, KB_ID, KB_ID,                      \
            EXPR(int16_t, uint32_t))                                                       \
    KB_LOOP(op##_i32, int32_t, int32_t, int32_t, KB_ID, KB_ID, KB_ID,                      \
            EXPR(int32_t, uint32_t))                                                       \
    KB_LOOP(op##_i64, int64_t, int64_t, int64_t, KB_ID, KB_ID, KB_ID,                      \
            EXPR(int64_t, uint64_t))                                                       \
    KB_INTOP_U(op, EXPR)
#define KB_INTOP_U(op, EXPR)                                                               \
    KB_LOOP(op##_u8, uint8_t, uint8_t, uint8_t, KB_ID, KB_ID, KB_ID, EXPR(uint8_t, uint32_t)) \
    KB_LOOP(op##_u16, uint16_t, uint16_t, uint16_t, KB_ID, KB_ID, KB_ID,                   \
            EXPR(uint16_t, uint32_t))                                                      \
    KB_LOOP(op##_u32, uint32_t, uint32_t, uint32_t, KB_ID, KB_ID, KB_ID,                   \
            EXPR(uint32_t, uint32_t))                                                      \
    KB_LOOP(op##_u64, uint64_t, uint64_t, uint64_t, KB_ID, KB_ID, KB_ID,                   \
            EXPR(uint64_t, uint64_t))

#define BAND(T, W) ((T)(x & y))
#define BOR(T, W) ((T)(x | y))
#define BXOR(T, W) ((T)(x ^ y))
#define SHL(T, W) ((T)(y >= 8 * sizeof(T) ? 0 : (W)x << y))
#define SHR(T, W) ((T)(y >= 8 * sizeof(T) ? 0 : x >> y))

KB_INTOP(band, BAND)
KB_INTOP(bor, BOR)
KB_INTOP(bxor, BXOR)
KB_INTOP_U(shl, SHL)
KB_INTOP_U(shr, SHR)

#define KB_UINT_TABLE(op)                                                                  \
    [TDM_UINT8] = op##_u8, [TDM_UINT16] = op##_u16, [TDM_UINT32] = op##_u32,               \
    [TDM_UINT64] = op##_u64
#define KB_INT_TABLE(op)                                                                   \
    {                                                                                      \
        [TDM_INT8] = op##_i8, [TDM_INT16] = op##_i16, [TDM_INT32] = op##_i32,              \
        [TDM_INT64] = op##_i64, KB_UINT_TABLE(op),                                         \
    }

static const tdm_kb_fn2 logic_tables[TDM_KB_LOGIC_COUNT][TDM_DTYPE_COUNT] = {
    [TDM_KB_EQUAL] = KB_CMP_TABLE(eq),
    [TDM_KB_LESS] = KB_CMP_TABLE(lt),
    [TDM_KB_LESS_EQUAL] = KB_CMP_TABLE(le),
    [TDM_KB_GREATER] = KB_CMP_TABLE(gt),
    [TDM_KB_GREATER_EQUAL] = KB_CMP_TABLE(ge),
    [TDM_KB_AND] = {[TDM_BOOL] = and_b},
    [TDM_KB_OR] = {[TDM_BOOL] = or_b},
    [TDM_KB_XOR] = {[TDM_BOOL] = xor_b},
    [TDM_KB_BIT_AND] = KB_INT_TABLE(band),
    [TDM_KB_BIT_OR] = KB_INT_TABLE(bor),
    [TDM_KB_BIT_XOR] = KB_INT_TABLE(bxor),
    [TDM_KB_SHL] = {KB_UINT_TABLE(shl)},
    [TDM_KB_SHR] = {KB_UINT_TABLE(shr)},
};

tdm_kb_fn2 tdm_kb_logic_fn(tdm_kb_logic op, tdm_dtype dt) {
    if ((unsigned)op >= TDM_KB_LOGIC_COUNT || (unsigned)dt >= TDM_DTYPE_COUNT) return NULL;
    if (op == TDM_KB_EQUAL && dt == TDM_STRING) return eq_str;
    return logic_tables[op][dt];
}

/* ---- Where: o = c ? x : y, by element size; strings copy pointers (the caller then
 * duplicates them). ---- */

#define KB_WHERE(name, T)                                                                  \
    static void name(const void *pc, const void *px, const void *py, void *po, int64_t n, \
                     unsigned mode) {                                                      \
        const uint8_t *restrict c = pc;                                                    \
        const T *restrict x = px;                                                          \
        const T *restrict y = py;                                                          \
        T *restrict o = po;                                                                \
        if (mode == 0) {                                                                   \
            for (int64_t i = 0; i < n; i++) o[i] = c[i] ? x[i] : y[i];                     \
        } else if (mode & 1) { /* one condition for the whole run: a copy or a fill */     \
            const T *s = c[0] ? x : y;                                                     \
            if (mode & (c[0] ? 2u : 4u)) {                                                 \
                T v = s[0];                                                                \
                for (int64_t i = 0; i < n; i++) o[i] = v;                                  \
            } else {                                                                       \
                memcpy(o, s, (size_t)n * sizeof(T));                                       \
            }                                                                              \
        } else if (mode == 2) {                                                            \
            T v = x[0];                                                                    \
            for (int64_t i = 0; i < n; i++) o[i] = c[i] ? v : y[i];                        \
        } else if (mode == 4) {                                                            \
            T v = y[0];                                                                    \
            for (int64_t i = 0; i < n; i++) o[i] = c[i] ? x[i] : v;                        \
        } else {                                                                           \
            T vx = x[0], vy = y[0];                                                        \
            for (int64_t i = 0; i < n; i++) o[i] = c[i] ? vx : vy;                         \
        }                                                                                  \
    }

KB_WHERE(where_1, uint8_t)
KB_WHERE(where_2, uint16_t)
KB_WHERE(where_4, uint32_t)
KB_WHERE(where_8, uint64_t)
KB_WHERE(where_str, kb_str)

tdm_kb_fn3 tdm_kb_where_fn(tdm_dtype dt) {
    if (dt == TDM_STRING) return where_str;
    switch (tdm_dtype_elem_size(dt)) {
    case 1: return where_1;
    case 2: return where_2;
    case 4: return where_4;
    case 8: return where_8;
    default: return NULL;
    }
}

/* CPU kernels, binary family internals: the broadcast engine (k_binary_bcast.c) and the
 * per-dtype inner loops (k_binary_arith.c, k_binary_logic.c) that k_binary.c dispatches to.
 *
 * An inner loop handles n consecutive output elements. Each input either advances by one
 * element per output element or repeats a single value: bit k of `mode` is set when input k
 * repeats (stride 0). The engine drops size-1 dims and merges dims that are contiguous for
 * every operand, so a same-shape op is one loop over the whole tensor, a scalar operand is one
 * loop with a repeated value, a bias over the last dim is a vector-vector loop per row and a
 * per-channel [C,1,1] operand over NCHW is a vector-scalar loop per H*W plane. */
#ifndef TDM_CPU_K_BINARY_IMPL_H
#define TDM_CPU_K_BINARY_IMPL_H

#include "backends/cpu/cpu_kernels.h"

typedef void (*tdm_kb_fn2)(const void *a, const void *b, void *o, int64_t n, unsigned mode);
typedef void (*tdm_kb_fn3)(const void *a, const void *b, const void *c, void *o, int64_t n,
                           unsigned mode);

#define KB_ID(v) (v)
#define KB_F16(v) tdm_f16_to_f32(v)
#define KB_TOF16(v) tdm_f32_to_f16(v)
#define KB_BF16(v) tdm_bf16_to_f32(v)
#define KB_TOBF16(v) tdm_f32_to_bf16(v)

/* One inner loop: x and y are the loaded (LA/LB-converted) elements, ST converts the result
 * for storing. The mode switch sits outside the loops so each loop is a plain contiguous one
 * that the compiler vectorizes. */
#define KB_LOOP(name, TA, TB, TO, LA, LB, ST, EXPR)                                        \
    static void name(const void *restrict pa, const void *restrict pb, void *restrict po,     \
                     int64_t n, unsigned mode) {                                           \
        const TA *restrict a = pa;                                                         \
        const TB *restrict b = pb;                                                         \
        TO *restrict o = po;                                                               \
        if (mode == 0) {                                                                   \
            for (int64_t i = 0; i < n; i++) {                                              \
                __auto_type x = LA(a[i]);                                                  \
                __auto_type y = LB(b[i]);                                                  \
                o[i] = ST(EXPR);                                                           \
            }                                                                              \
        } else if (mode == 2) {                                                            \
            __auto_type y = LB(b[0]);                                                      \
            for (int64_t i = 0; i < n; i++) {                                              \
                __auto_type x = LA(a[i]);                                                  \
                o[i] = ST(EXPR);                                                           \
            }                                                                              \
        } else if (mode == 1) {                                                            \
            __auto_type x = LA(a[0]);                                                      \
            for (int64_t i = 0; i < n; i++) {                                              \
                __auto_type y = LB(b[i]);                                                  \
                o[i] = ST(EXPR);                                                           \
            }                                                                              \
        } else {                                                                           \
            __auto_type x = LA(a[0]);                                                      \
            __auto_type y = LB(b[0]);                                                      \
            for (int64_t i = 0; i < n; i++) o[i] = ST(EXPR);                               \
        }                                                                                  \
    }

/* One input of an elementwise op: data and the shape it broadcasts from. */
typedef struct tdm_kb_operand {
    const void *data;
    size_t esize;
    int rank;
    const int64_t *dims;
} tdm_kb_operand;

/* Output buffer (contiguous row-major) and its shape. */
typedef struct tdm_kb_out {
    void *data;
    size_t esize;
    int rank;
    const int64_t *dims;
} tdm_kb_out;

/* Operand / output views of a tensor. */
tdm_kb_operand tdm_kb_operand_of(const tdm_tensor *t);
tdm_kb_out tdm_kb_out_of(tdm_tensor *t);

/* Runs fn2 (n_in == 2) or fn3 (n_in == 3) over the broadcast of the inputs into out, splitting
 * big outputs over the pool in chunks of at least `grain` elements. Errors (naming the node)
 * when an input does not broadcast to the output shape. */
tdm_status *tdm_kb_run(tdm_kernel_ctx *ctx, int n_in, const tdm_kb_operand *in, tdm_kb_fn2 fn2,
                       tdm_kb_fn3 fn3, const tdm_kb_out *out, int64_t grain);

/* Grains (output elements per chunk) for cheap and for costly element functions. */
#define TDM_KB_GRAIN_CHEAP 32768
#define TDM_KB_GRAIN_COSTLY 4096

/* Arithmetic ops (k_binary_arith.c). */
typedef enum tdm_kb_arith {
    TDM_KB_ADD,
    TDM_KB_SUB,
    TDM_KB_MUL,
    TDM_KB_DIV,
    TDM_KB_MOD,   /* integer: sign of the divisor (Python); float: fmod, then sign of divisor */
    TDM_KB_FMOD,  /* C semantics: sign of the dividend */
    TDM_KB_MAX,
    TDM_KB_MIN,
    TDM_KB_PRELU, /* a < 0 ? a * b : a */
    TDM_KB_ARITH_COUNT
} tdm_kb_arith;

/* Inner loop for op on dtype (both inputs and the output of that dtype); NULL if none. */
tdm_kb_fn2 tdm_kb_arith_fn(tdm_kb_arith op, tdm_dtype dt);

/* Pow inner loop for a base dtype and an exponent class: exponent stored as `exp_dt`, which is
 * the base dtype itself (float32 / float64 only), TDM_DOUBLE or TDM_INT64 (integer base
 * only). NULL if none. */
tdm_kb_fn2 tdm_kb_pow_fn(tdm_dtype base, tdm_dtype exp_dt);

/* o[i] = o[i] / n over a float-typed buffer (Mean). */
void tdm_kb_scale_div(tdm_dtype dt, void *data, int64_t count, int64_t n);

/* Logic and comparison ops (k_binary_logic.c). */
typedef enum tdm_kb_logic {
    TDM_KB_EQUAL,
    TDM_KB_LESS,
    TDM_KB_LESS_EQUAL,
    TDM_KB_GREATER,
    TDM_KB_GREATER_EQUAL,
    TDM_KB_AND,  /* bool */
    TDM_KB_OR,
    TDM_KB_XOR,
    TDM_KB_BIT_AND, /* integers */
    TDM_KB_BIT_OR,
    TDM_KB_BIT_XOR,
    TDM_KB_SHL,  /* unsigned integers; shifts of at least the width give 0 */
    TDM_KB_SHR,
    TDM_KB_LOGIC_COUNT
} tdm_kb_logic;

tdm_kb_fn2 tdm_kb_logic_fn(tdm_kb_logic op, tdm_dtype dt);

/* Where inner loop for the dtype of X and Y; NULL if none. The first input is the bool
 * condition. For strings it copies the pointers: the caller duplicates them afterwards. */
tdm_kb_fn3 tdm_kb_where_fn(tdm_dtype dt);

#endif

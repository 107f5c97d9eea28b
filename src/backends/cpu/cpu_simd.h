/* The CPU kernels' own SIMD code, chosen once at start-up (cpu_simd.c).
 *
 * tandem's own hot loops (GEMV panels, the GEMM micro-kernel and row dot products, attention's
 * softmax rows, the float32 element-wise ops, byte tables and maxima, QAdd / QMul rows) come in variants: portable C (any CPU, any compiler), AVX2 + FMA,
 * AVX-512 (F, BW, DQ, VL). A device that runs CPU kernels fills one tdm_cpu_simd with the
 * best variant of each at or below its level when it is created, and its execute hands it to
 * the kernels in tdm_kernel_ctx.cpu_simd. No kernel asks the CPU itself: a level below the
 * machine's (an ISA cap, a test) changes every kernel at once.
 *
 *   tdm_cpu_simd s;
 *   tdm_cpu_simd_init(&s, tdm_cpu_host_isa());   (the device, at creation)
 *   const tdm_cpu_simd *sd = tdm_cpu_simd_of(ctx);   (a kernel)
 *   sd->softmax_row(row, NULL, NULL, false, n);
 *
 * Every member is set (never NULL) and safe to call from any thread; the struct is read-only
 * after init and lives as long as the device. */
#ifndef TDM_CPU_SIMD_H
#define TDM_CPU_SIMD_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/cpu/cpu_isa.h"
#include "backends/kernel.h"

struct tdm_uparams; /* k_unary.h */

/* acc[0..32) = x[0..K) . panel (K rows of 32 floats, k_gemv.c's packed B). */
typedef void (*tdm_simd_gemv_panel)(const float *restrict p, const float *restrict x, int64_t K,
                                    float *restrict acc);
/* row[0..n) = softmax(src + mask): src NULL = row itself (in place), else n values apart
 * from row; mask NULL, n values (mvec) or one value (m[0]). n >= 1. */
typedef void (*tdm_simd_softmax_row)(float *row, const float *src, const float *m, bool mvec,
                                     int64_t n);
/* A softmax's numerators for a caller that divides later (the quantised KV cache's decode
 * attention runs p.V on them and scales its outputs by 1 / sum: one pass over the row fewer):
 * *mx = the largest of row[0..n) (n >= 1), row[t] = exp(row[t] - *mx), and their sum is
 * returned. The values may share a factor within |*mx| 6e-8 + 1e-6 of 1 (the SIMD variants
 * fold *mx log2(e), rounded, into one FMA, as softmax_row does), which the division takes
 * out; no value comes out subnormal. A maximum of -inf or +inf leaves the row as it was and
 * returns 0 (NaN values: NaN results, as softmax_row's). */
typedef float (*tdm_simd_exp_sum_row)(float *row, int64_t n, float *mx);
/* y[i] = op(x[i]) for i < n (k_unary.h); x and y do not overlap. */
typedef void (*tdm_simd_unary_f32)(const struct tdm_uparams *p, const float *restrict x,
                                   float *restrict y, int64_t n);
/* sum of a[k] * b[k] for k < n (n >= 0). */
typedef float (*tdm_simd_dot_f32)(const float *a, const float *b, int64_t n);
/* y[i] = t[x[i]] for i < n (a table of 256 bytes; x and y do not overlap). */
typedef void (*tdm_simd_lut_u8)(const uint8_t *restrict t, const uint8_t *restrict x,
                                uint8_t *restrict y, int64_t n);
/* the largest of x[0..n) (0 for n = 0). */
typedef uint8_t (*tdm_simd_max_u8)(const uint8_t *x, int64_t n);
/* QAdd / QMul rows (cpu_q8bin.c): each operand from bytes (x8 non-NULL, contiguous:
 * t = (x - z) * k) or from a row of floats already scaled (x8 NULL); y[q] the requantised sum
 * (mul false: (ta + tb) + c) or product ((ta * tb) / sy, then + zy), rounded half to even and
 * clamped to [lo, hi], as 8-bit bytes (y_s8: int8). */
typedef struct tdm_q8_bin {
    bool mul, a_s8, b_s8, y_s8;
    float za, ka, zb, kb;
    float c, sy, zy, lo, hi;
} tdm_q8_bin;
typedef void (*tdm_simd_q8_bin)(const tdm_q8_bin *p, const void *a8, const float *ta,
                                const void *b8, const float *tb, int64_t n, uint8_t *y);
/* GEMM micro-kernel (cpu_gemm.c): C[m x n] = alpha * Apanel . Bpanel + beta * C (beta 0: C is
 * not read), m <= mr, n <= nr; the panels hold kc steps of mr (A) and nr (B) floats. */
typedef void (*tdm_simd_gemm_ukernel)(int64_t kc, const float *restrict pa,
                                      const float *restrict pb, float *restrict c, int64_t ldc,
                                      int m, int n, float alpha, float beta);

/* X-macro of the dispatched kernels: name, in tdm_cpu_simd. One source for init, the names
 * (`tandem devices`) and the test that forces each variant. */
#define TDM_CPU_SIMD_KERNELS(X)                                                               \
    X(gemv_panel) X(softmax_row) X(exp_sum_row) X(unary_f32) X(gemm) X(dot_f32) X(lut_u8)     \
    X(max_u8) X(q8_bin)

typedef struct tdm_cpu_simd {
    tdm_cpu_isa level; /* asked for; each kernel's variant is the best at or below it */
    tdm_simd_gemv_panel gemv_panel;
    tdm_simd_softmax_row softmax_row;
    tdm_simd_exp_sum_row exp_sum_row;
    tdm_simd_unary_f32 unary_f32;
    tdm_simd_gemm_ukernel gemm;
    int gemm_mr, gemm_nr; /* the micro-kernel's tile; GEMM_MC (144) is a multiple of mr */
    tdm_simd_dot_f32 dot_f32;
    tdm_simd_lut_u8 lut_u8;
    tdm_simd_max_u8 max_u8;
    tdm_simd_q8_bin q8_bin;
    /* the level of the variant each kernel got (tests, `tandem devices`) */
#define TDM_SIMD_LEVEL_FIELD(k) tdm_cpu_isa k##_isa;
    TDM_CPU_SIMD_KERNELS(TDM_SIMD_LEVEL_FIELD)
#undef TDM_SIMD_LEVEL_FIELD
} tdm_cpu_simd;

/* Fills *s with the best variant of every kernel at or below `level` (portable C where no
 * SIMD variant applies). Never fails. */
void tdm_cpu_simd_init(tdm_cpu_simd *s, tdm_cpu_isa level);

/* The level the devices that run CPU kernels are created with: the machine's (cpuid and the
 * OS's XSAVE state). The one place where a cap applies. */
tdm_cpu_isa tdm_cpu_host_isa(void);

/* The variants for a kernel call: the running device's, or the portable ones when the
 * kernel runs outside a CPU-kernel device (ctx NULL or without them). */
const tdm_cpu_simd *tdm_cpu_simd_of(const tdm_kernel_ctx *ctx);
/* The portable variants (read-only, static). */
const tdm_cpu_simd *tdm_cpu_simd_portable(void);

/* Subnormal floats as zero (MXCSR's flush-to-zero and denormals-are-zero) on the calling
 * thread, until tdm_cpu_subnormals_restore(the returned state); a no-op off x86. For kernels
 * whose products of tiny values (attention weights far below the row's largest) would
 * otherwise come out subnormal: each such result costs an Intel core a microcode assist
 * (BERT's attention ran 3x slower on a Xeon for them), and none changes a sum by more than
 * FLT_MIN. The calling thread's MXCSR only: call both on the same thread. */
unsigned tdm_cpu_flush_subnormals(void);
void tdm_cpu_subnormals_restore(unsigned state);

/* ---- the variants (for cpu_simd.c's tables and the test; kernels call through the struct) */
void tdm_gemv_panel_portable(const float *restrict p, const float *restrict x, int64_t K,
                             float *restrict acc);
void tdm_softmax_row_portable(float *row, const float *src, const float *m, bool mvec,
                            int64_t n);
float tdm_exp_sum_row_portable(float *row, int64_t n, float *mx);
void tdm_unary_f32_portable(const struct tdm_uparams *p, const float *restrict x,
                            float *restrict y, int64_t n);
float tdm_dot_f32_portable(const float *a, const float *b, int64_t n);
void tdm_lut_u8_portable(const uint8_t *restrict t, const uint8_t *restrict x,
                         uint8_t *restrict y, int64_t n);
uint8_t tdm_max_u8_portable(const uint8_t *x, int64_t n);
void tdm_q8_bin_portable(const tdm_q8_bin *p, const void *a8, const float *ta, const void *b8,
                         const float *tb, int64_t n, uint8_t *y);
void tdm_gemm_uk_portable(int64_t kc, const float *restrict pa, const float *restrict pb,
                          float *restrict c, int64_t ldc, int m, int n, float alpha, float beta);
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define TDM_SIMD_X86 1
void tdm_gemv_panel_avx2(const float *restrict p, const float *restrict x, int64_t K,
                         float *restrict acc);
void tdm_gemv_panel_avx512(const float *restrict p, const float *restrict x, int64_t K,
                           float *restrict acc);
void tdm_softmax_row_avx2(float *row, const float *src, const float *m, bool mvec,
                            int64_t n);
void tdm_softmax_row_avx512(float *row, const float *src, const float *m, bool mvec,
                            int64_t n);
float tdm_exp_sum_row_avx2(float *row, int64_t n, float *mx);
float tdm_exp_sum_row_avx512(float *row, int64_t n, float *mx);
void tdm_unary_f32_avx2(const struct tdm_uparams *p, const float *restrict x, float *restrict y,
                        int64_t n);
void tdm_unary_f32_avx512(const struct tdm_uparams *p, const float *restrict x,
                          float *restrict y, int64_t n);
float tdm_dot_f32_avx2(const float *a, const float *b, int64_t n);
float tdm_dot_f32_avx512(const float *a, const float *b, int64_t n);
void tdm_lut_u8_avx2(const uint8_t *restrict t, const uint8_t *restrict x, uint8_t *restrict y,
                     int64_t n);
void tdm_lut_u8_avx512(const uint8_t *restrict t, const uint8_t *restrict x,
                       uint8_t *restrict y, int64_t n);
uint8_t tdm_max_u8_avx2(const uint8_t *x, int64_t n);
uint8_t tdm_max_u8_avx512(const uint8_t *x, int64_t n);
void tdm_q8_bin_avx2(const tdm_q8_bin *p, const void *a8, const float *ta, const void *b8,
                     const float *tb, int64_t n, uint8_t *y);
void tdm_q8_bin_avx512(const tdm_q8_bin *p, const void *a8, const float *ta, const void *b8,
                       const float *tb, int64_t n, uint8_t *y);
void tdm_gemm_uk_avx2(int64_t kc, const float *restrict pa, const float *restrict pb,
                      float *restrict c, int64_t ldc, int m, int n, float alpha, float beta);
void tdm_gemm_uk_avx512(int64_t kc, const float *restrict pa, const float *restrict pb,
                        float *restrict c, int64_t ldc, int m, int n, float alpha, float beta);
/* The target attributes of the variants. */
#define TDM_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define TDM_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))
#endif
/* GCC fuses an intrinsic multiply and a following add into an FMA (-ffp-contract=fast in
 * gnu11), one rounding where a scalar form rounds twice: a variant whose results must be a
 * scalar form's to the bit takes this. clang fuses only within one source expression, which
 * intrinsics are not. */
#if defined(__clang__)
#define TDM_NO_CONTRACT
#else
#define TDM_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#endif

#endif

/* CPU kernel families. Each family file (k_<family>.c) defines one table; the CPU
 * backend's kernel table is their concatenation (cpu_backend.c), which is the single
 * source for dispatch and for supports-op. */
#ifndef TDM_CPU_KERNELS_H
#define TDM_CPU_KERNELS_H

#include "backends/kernel.h"
#include "core/half.h"
#include "ops/op.h"

#define TDM_CPU_FAMILIES(X)                                                              \
    X(dnnl) /* first: oneDNN fast paths win the lookup; generic kernels remain the fallback */ \
    X(unary)                                                                             \
    X(binary)                                                                            \
    X(nn)                                                                                \
    X(shape)                                                                             \
    X(reduce)                                                                            \
    X(misc)                                                                              \
    X(rnn)                                                                               \
    X(text)                                                                              \
    X(ml)                                                                                \
    X(ml_tree)                                                                           \
    X(ml_svm)                                                                            \
    X(ml_encode)                                                                         \
    X(control)                                                                           \
    X(seq)                                                                               \
    X(fused)                                                                             \
    X(nbits)                                                                             \
    X(contrib)                                                                           \
    X(contrib_attn)                                                                      \
    X(llm)

#define TDM_X_(fam)                                                                      \
    extern const tdm_kernel_def tdm_cpu_kernels_##fam[];                                 \
    extern const int tdm_cpu_kernels_##fam##_count;
TDM_CPU_FAMILIES(TDM_X_)
#undef TDM_X_

/* The CPU kernel table lookup (also used by the test device, which runs CPU kernels on
 * memory of its own). */
/* What implements the dnnl family's kernel k with prepared `state` (oneDNN's implementation
 * name, "tandem" for the generic path; "" before the first run); false for other kernels. */
bool tdm_cpu_dnnl_impl(const tdm_kernel_def *k, void *state, char *buf, size_t size);
const tdm_kernel_def *tdm_cpu_find_kernel(const tdm_node *node, const tdm_dtype *in_types,
                                          int n_in);

/* ---- helpers shared by CPU kernels (cpu_util.c) ---- */

/* Strides (in elements) of a contiguous row-major shape. */
void tdm_strides(int rank, const int64_t *dims, int64_t *strides);
/* Broadcast strides of `in` (rank in_rank) against an output of rank out_rank: 0 where the
 * input dim is 1 (or missing). */
void tdm_broadcast_strides(int in_rank, const int64_t *in_dims, int out_rank,
                           const int64_t *out_dims, int64_t *strides);
/* Scratch memory from the kernel's allocator (64-byte aligned); free with tdm_free(ctx->alloc). */
void *tdm_kscratch(tdm_kernel_ctx *ctx, size_t bytes);

/* Single-precision GEMM: C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C.
 * lda/ldb/ldc are row strides in elements; transA/transB select op = transpose.
 * Uses the pool for large problems and simd's micro-kernel (cpu_simd.h; NULL = portable:
 * kernels pass tdm_cpu_simd_of(ctx)). */
struct tdm_cpu_simd;
void tdm_sgemm(const struct tdm_cpu_simd *simd, tdm_threadpool *pool, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
               float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
               float *C, int64_t ldc);

#endif

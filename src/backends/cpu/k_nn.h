/* CPU kernels of the nn family: what the k_nn*.c files share. Private to the family. */
#ifndef TDM_CPU_K_NN_H
#define TDM_CPU_K_NN_H

#include "backends/cpu/cpu_kernels.h"
#include "ops/nn_geom.h"

/* Runs `fn` with every input and output of dtype `from` converted to dtype `work` (float
 * or double): the f32/f64 kernels serve float16, bfloat16, small integers and doubles.
 * from = TDM_UNDEFINED converts every floating-point tensor whose dtype is not `work`. */
tdm_status *tdm_nn_run_as(tdm_kernel_ctx *ctx, tdm_dtype from, tdm_dtype work,
                          tdm_kernel_fn fn);

/* Element conversion between numeric dtypes (via float or double); n elements. */
void tdm_nn_convert(const void *src, tdm_dtype st, void *dst, tdm_dtype dt, int64_t n);

/* Double GEMM, same contract as tdm_sgemm (simple loops; used off the fast path). */
void tdm_nn_dgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, double alpha,
                  const double *A, int64_t lda, const double *B, int64_t ldb, double beta,
                  double *C, int64_t ldc);

/* Kernels in k_nn_conv.c, k_nn_pool.c, k_nn_norm.c, k_nn_einsum.c. Each handles every
 * dtype its table entry admits. */
tdm_status *tdm_nn_run_conv(tdm_kernel_ctx *ctx);
tdm_status *tdm_nn_run_conv_transpose(tdm_kernel_ctx *ctx);
tdm_status *tdm_nn_run_conv_integer(tdm_kernel_ctx *ctx);
tdm_status *tdm_nn_run_max_pool(tdm_kernel_ctx *ctx);
tdm_status *tdm_nn_run_avg_pool(tdm_kernel_ctx *ctx);
tdm_status *tdm_nn_run_lp_pool(tdm_kernel_ctx *ctx);
tdm_status *tdm_nn_run_global_avg_pool(tdm_kernel_ctx *ctx);
tdm_status *tdm_nn_run_global_max_pool(tdm_kernel_ctx *ctx);
tdm_status *tdm_nn_run_global_lp_pool(tdm_kernel_ctx *ctx);
tdm_status *tdm_nn_run_max_unpool(tdm_kernel_ctx *ctx);
tdm_status *tdm_nn_run_batchnorm(tdm_kernel_ctx *ctx);
tdm_status *tdm_nn_run_instancenorm(tdm_kernel_ctx *ctx);
tdm_status *tdm_nn_run_lrn(tdm_kernel_ctx *ctx);
tdm_status *tdm_nn_run_mvn(tdm_kernel_ctx *ctx);
tdm_status *tdm_nn_run_einsum(tdm_kernel_ctx *ctx);

#endif

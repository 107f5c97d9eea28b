/* One-row and few-row products with a constant, packed B (k_gemv.c). Private to the CPU
 * backend. */
#ifndef TDM_CPU_K_GEMV_H
#define TDM_CPU_K_GEMV_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/cpu/k_fused.h"
#include "core/threadpool.h"

typedef struct dn_gemv dn_gemv;

/* Packs B ([K, N] row-major, or [N, K] when nk) for dn_gemv_run. */
tdm_status *dn_gemv_pack(const tdm_allocator *a, const float *b, int64_t K, int64_t N, bool nk,
                         dn_gemv **out);
void dn_gemv_free(const tdm_allocator *a, dn_gemv *g);
int64_t dn_gemv_k(const dn_gemv *g);
int64_t dn_gemv_n(const dn_gemv *g);

/* Most rows worth this path (more go to oneDNN's matmul). */
#define DN_GEMV_MAX_ROWS 8
/* Bytes of B from which several rows take this path: weights this large are read from memory
 * on every run of a model with other work (classifier heads of 5-8 MB) */
#define DN_GEMV_COLD_BYTES (4.0 * 1024 * 1024)
/* y[r][N] = act(alpha * x[r][K] . B + bias[N]) for r < rows (x and y row-major, dense);
 * bias and act may be NULL. The ctx gives the thread pool and the SIMD variant (NULL: serial,
 * portable). */
void dn_gemv_run(const tdm_kernel_ctx *ctx, const dn_gemv *g, int64_t rows, const float *x,
                 const float *bias, float alpha, const tdm_fused_act *act, float *y);

#endif

/* 8-bit quantization kernels (launchers in cuda_ops.h): QuantizeLinear / DequantizeLinear
 * element-wise, and the pieces of the integer products QMatMul / QConv (k_ops_quant.c):
 * shifting u8 data to s8 (x - 128, so that cuBLASLt's s8 x s8 -> s32 product applies), the
 * weight transpose, im2col of one image, row sums, the fallback s8 product and the
 * requantisation that folds the zero points back in.
 *
 * Numerics follow the CPU kernels (src/backends/cpu/k_misc_quant.c) operation for operation
 * so that the two devices agree exactly: QuantizeLinear divides in float32 (IEEE division:
 * the plugin is not built with fast math), rounds half to even and saturates (NaN to the low
 * end); the requantisation's multiplier is x_scale * w_scale / y_scale in float32, applied in
 * float64 to the 32-bit (wrapping) integer sum. */
#include "backends/cuda/kernels/cuda_common.cuh"

/* ---- QuantizeLinear / DequantizeLinear ---- */

template <typename X, typename Y>
__global__ void k_quantize(const X *x, Y *y, const float *scale, const Y *zp, int64_t n,
                           int64_t L, int64_t post, float lo, float hi) {
    TCU_FOR(i, n) {
        int64_t a = L > 1 ? (i / post) % L : 0;
        float v = __fdiv_rn(tcu_to_f(x[i]), scale[a]);
        v = v > -4194304.0f ? v : -4194304.0f; /* also maps NaN to the low end */
        v = v < 4194304.0f ? v : 4194304.0f;
        v = rintf(v) + (zp ? (float)zp[a] : 0.0f);
        v = v > lo ? v : lo;
        v = v < hi ? v : hi;
        y[i] = (Y)(int)v;
    }
}

extern "C" int tcu_quantize(int xtype, const void *x, const float *scale, int ytype,
                            const void *zp, void *y, int64_t n, int64_t L, int64_t post,
                            void *stream) {
    if (n <= 0) return 0;
    if (L < 1 || post < 1) return TCU_E_ARG;
    unsigned b = tcu_blocks(n);
    cudaStream_t s = TCU_STREAM(stream);
#define Q_LAUNCH(XT)                                                                         \
    do {                                                                                     \
        if (ytype == TCU_U8)                                                                 \
            k_quantize<XT, uint8_t><<<b, TCU_THREADS, 0, s>>>(                              \
                (const XT *)x, (uint8_t *)y, scale, (const uint8_t *)zp, n, L, post, 0.0f,    \
                255.0f);                                                                     \
        else if (ytype == TCU_I8)                                                            \
            k_quantize<XT, int8_t><<<b, TCU_THREADS, 0, s>>>(                               \
                (const XT *)x, (int8_t *)y, scale, (const int8_t *)zp, n, L, post, -128.0f,   \
                127.0f);                                                                     \
        else                                                                                 \
            return TCU_E_DTYPE;                                                              \
    } while (0)
    switch (xtype) {
    case TCU_F32: Q_LAUNCH(float); break;
    case TCU_F16: Q_LAUNCH(tcu_half); break;
    default: return TCU_E_DTYPE;
    }
#undef Q_LAUNCH
    return tcu_launched();
}

template <typename X, typename Y>
__global__ void k_dequantize(const X *x, Y *y, const float *scale, const X *zp, int64_t n,
                             int64_t L, int64_t post) {
    TCU_FOR(i, n) {
        int64_t a = L > 1 ? (i / post) % L : 0;
        float z = zp ? (float)zp[a] : 0.0f;
        y[i] = tcu_from_f<Y>(((float)x[i] - z) * scale[a]);
    }
}

extern "C" int tcu_dequantize(int xtype, const void *x, const float *scale, const void *zp,
                              int ytype, void *y, int64_t n, int64_t L, int64_t post,
                              void *stream) {
    if (n <= 0) return 0;
    if (L < 1 || post < 1) return TCU_E_ARG;
    unsigned b = tcu_blocks(n);
    cudaStream_t s = TCU_STREAM(stream);
#define DQ_LAUNCH(XT)                                                                        \
    do {                                                                                     \
        if (ytype == TCU_F32)                                                                \
            k_dequantize<XT, float><<<b, TCU_THREADS, 0, s>>>(                              \
                (const XT *)x, (float *)y, scale, (const XT *)zp, n, L, post);               \
        else if (ytype == TCU_F16)                                                           \
            k_dequantize<XT, tcu_half><<<b, TCU_THREADS, 0, s>>>(                           \
                (const XT *)x, (tcu_half *)y, scale, (const XT *)zp, n, L, post);            \
        else                                                                                 \
            return TCU_E_DTYPE;                                                              \
    } while (0)
    switch (xtype) {
    case TCU_U8: DQ_LAUNCH(uint8_t); break;
    case TCU_I8: DQ_LAUNCH(int8_t); break;
    case TCU_I32: DQ_LAUNCH(int32_t); break;
    default: return TCU_E_DTYPE;
    }
#undef DQ_LAUNCH
    return tcu_launched();
}

/* ---- the integer products' pieces ---- */

/* an 8-bit value as s8 arithmetic takes it: u8 shifted by -128, s8 as it is */
__device__ __forceinline__ int q8_shifted(const void *p, int64_t i, int is_u8) {
    return is_u8 ? (int)((const uint8_t *)p)[i] - 128 : (int)((const int8_t *)p)[i];
}

__global__ void k_q8_shift(const uint8_t *x, int8_t *y, int64_t n) {
    TCU_FOR(i, n) y[i] = (int8_t)((int)x[i] - 128);
}

extern "C" int tcu_q8_shift(const void *x, void *y, int64_t n, void *stream) {
    if (n <= 0) return 0;
    k_q8_shift<<<tcu_blocks(n), TCU_THREADS, 0, TCU_STREAM(stream)>>>((const uint8_t *)x,
                                                                     (int8_t *)y, n);
    return tcu_launched();
}

/* wt[c][r] = shifted(w[r][c]) for w [rows, cols] */
__global__ void k_q8_transpose(const void *w, int is_u8, int8_t *wt, int64_t rows,
                               int64_t cols) {
    TCU_FOR(i, rows * cols) {
        int64_t c = i / rows, r = i % rows;
        wt[i] = (int8_t)q8_shifted(w, r * cols + c, is_u8);
    }
}

extern "C" int tcu_q8_transpose(const void *w, int wtype, void *wt, int64_t rows, int64_t cols,
                                void *stream) {
    if (wtype != TCU_U8 && wtype != TCU_I8) return TCU_E_DTYPE;
    if (rows <= 0 || cols <= 0) return 0;
    k_q8_transpose<<<tcu_blocks(rows * cols), TCU_THREADS, 0, TCU_STREAM(stream)>>>(
        w, wtype == TCU_U8, (int8_t *)wt, rows, cols);
    return tcu_launched();
}

/* col[g][p][kc] of one image: kc runs over (channel of group g, ky, kx); positions outside
 * the input hold the (shifted) zero point, so that they add nothing once the zero point's
 * sum is taken off. */
__global__ void k_q8_im2col(tcu_q8_conv_desc c, const void *x, int is_u8, const void *xzp,
                            int8_t *col) {
    const int64_t taps = c.kh * c.kw, kcg = (c.C / c.groups) * taps, P = c.OH * c.OW;
    const int zp = xzp ? q8_shifted(xzp, 0, is_u8) : (is_u8 ? -128 : 0);
    TCU_FOR(i, c.groups * P * kcg) {
        int64_t g = i / (P * kcg), rem = i % (P * kcg);
        int64_t p = rem / kcg, kc = rem % kcg;
        int64_t ch = g * (c.C / c.groups) + kc / taps, t = kc % taps;
        int64_t ky = t / c.kw, kx = t % c.kw, oy = p / c.OW, ox = p % c.OW;
        int64_t iy = oy * c.sh - c.pt + ky * c.dh, ix = ox * c.sw - c.pl + kx * c.dw;
        bool in = iy >= 0 && iy < c.H && ix >= 0 && ix < c.W;
        col[i] = (int8_t)(in ? q8_shifted(x, (ch * c.H + iy) * c.W + ix, is_u8) : zp);
    }
}

extern "C" int tcu_q8_im2col(const tcu_q8_conv_desc *c, int xtype, const void *x, const void *xzp,
                             void *col, void *stream) {
    if (xtype != TCU_U8 && xtype != TCU_I8) return TCU_E_DTYPE;
    if (c->groups < 1 || c->C % c->groups) return TCU_E_ARG;
    int64_t n = c->groups * c->OH * c->OW * (c->C / c->groups) * c->kh * c->kw;
    if (n <= 0) return 0;
    k_q8_im2col<<<tcu_blocks(n), TCU_THREADS, 0, TCU_STREAM(stream)>>>(*c, x, xtype == TCU_U8,
                                                                      xzp, (int8_t *)col);
    return tcu_launched();
}

/* out[r] = sum of row r (k values, stride ld), one warp a row; wrapping 32-bit sums */
__global__ void k_q8_rowsum(const int8_t *a, int64_t rows, int64_t k, int64_t ld,
                            int32_t *out) {
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    int64_t nwarps = (int64_t)gridDim.x * blockDim.x / 32;
    for (int64_t r = warp; r < rows; r += nwarps) {
        uint32_t s = 0;
        for (int64_t q = lane; q < k; q += 32) s += (uint32_t)(int32_t)a[r * ld + q];
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
        if (lane == 0) out[r] = (int32_t)s;
    }
}

extern "C" int tcu_q8_rowsum(const void *a, int64_t rows, int64_t k, int64_t ld, int32_t *out,
                             void *stream) {
    if (rows <= 0) return 0;
    k_q8_rowsum<<<tcu_blocks(rows * 32), TCU_THREADS, 0, TCU_STREAM(stream)>>>(
        (const int8_t *)a, rows, k, ld, out);
    return tcu_launched();
}

/* C[j * ldc + i] = sum_q A[i * lda + q] * B[j * ldb + q] (s8 rows, wrapping 32-bit sums):
 * 64 x 64 tiles, 256 threads of 4 x 4 results, k in steps of 32 through shared memory. */
#define Q8T 64
#define Q8K 32
__global__ void k_q8_gemm(int64_t m, int64_t n, int64_t k, const int8_t *A, int64_t lda,
                          const int8_t *B, int64_t ldb, int32_t *C, int64_t ldc) {
    __shared__ int as[Q8K][Q8T + 1], bs[Q8K][Q8T + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int64_t i0 = (int64_t)blockIdx.x * Q8T, j0 = (int64_t)blockIdx.y * Q8T;
    uint32_t acc[4][4] = {{0}};
    for (int64_t k0 = 0; k0 < k; k0 += Q8K) {
        for (int t = threadIdx.x; t < Q8T * Q8K; t += blockDim.x) {
            int r = t / Q8K, q = t % Q8K;
            int64_t kk = k0 + q, gi = i0 + r, gj = j0 + r;
            as[q][r] = gi < m && kk < k ? A[gi * lda + kk] : 0;
            bs[q][r] = gj < n && kk < k ? B[gj * ldb + kk] : 0;
        }
        __syncthreads();
        for (int q = 0; q < Q8K; q++) {
            int a[4], b[4];
            for (int u = 0; u < 4; u++) {
                a[u] = as[q][tx + 16 * u];
                b[u] = bs[q][ty + 16 * u];
            }
            for (int u = 0; u < 4; u++)
                for (int v = 0; v < 4; v++) acc[u][v] += (uint32_t)(a[u] * b[v]);
        }
        __syncthreads();
    }
    for (int v = 0; v < 4; v++)
        for (int u = 0; u < 4; u++) {
            int64_t gi = i0 + tx + 16 * u, gj = j0 + ty + 16 * v;
            if (gi < m && gj < n) C[gj * ldc + gi] = (int32_t)acc[u][v];
        }
}

extern "C" int tcu_q8_gemm(int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                           const void *b, int64_t ldb, int32_t *c, int64_t ldc, void *stream) {
    if (m <= 0 || n <= 0) return 0;
    int64_t gx = (m + Q8T - 1) / Q8T, gy = (n + Q8T - 1) / Q8T;
    if (gx > INT32_MAX || gy > 65535) return TCU_E_TOO_LARGE;
    dim3 grid((unsigned)gx, (unsigned)gy);
    k_q8_gemm<<<grid, 256, 0, TCU_STREAM(stream)>>>(m, n, k, (const int8_t *)a, lda,
                                                   (const int8_t *)b, ldb, c, ldc);
    return tcu_launched();
}

/* ---- requantisation ---- */

__device__ __forceinline__ double q8_zp(const void *p, int type, int64_t i) {
    return type == TCU_U8 ? (double)((const uint8_t *)p)[i] : (double)((const int8_t *)p)[i];
}

__global__ void k_q8_requant(tcu_q8_requant_desc r, void *y) {
    const int xz = r.xzp ? q8_shifted(r.xzp, 0, r.x_u8) : (r.x_u8 ? -128 : 0);
    TCU_FOR(e, r.m * r.n) {
        int64_t i = e % r.m, j = e / r.m;
        int64_t ch = r.chan_is_b ? j : i, pos = r.chan_is_b ? i : j;
        int wz = r.wzp ? q8_shifted(r.wzp, r.wzp_count == 1 ? 0 : ch, r.w_u8) : (r.w_u8 ? -128 : 0);
        int64_t grp = ch / r.chan_per_group;
        uint32_t a = (uint32_t)r.G[e] - (uint32_t)xz * (uint32_t)r.wsum[ch] -
                     (uint32_t)wz * (uint32_t)r.asum[grp * r.asum_group_stride + pos] +
                     (uint32_t)r.k * (uint32_t)xz * (uint32_t)wz;
        if (r.bias) a += (uint32_t)r.bias[ch];
        int64_t ri = r.row_mod > 0 ? pos % r.row_mod : 0;
        float xs = r.xs[r.xs_count == 1 ? 0 : ri], ys = r.ys[r.ys_count == 1 ? 0 : ri];
        float mult = __fdiv_rn(__fmul_rn(xs, r.ws[r.ws_count == 1 ? 0 : ch]), ys);
        double v = __dadd_rn(__dmul_rn((double)(int32_t)a, (double)mult),
                             r.yzp ? q8_zp(r.yzp, r.y_type, r.ys_count == 1 ? 0 : ri) : 0.0);
        v = rint(v);
        v = v < r.lo ? r.lo : v > r.hi ? r.hi : v;
        /* G is laid out as the output is (k_ops_quant.c orders the product so) */
        if (r.y_type == TCU_U8) ((uint8_t *)y)[e] = (uint8_t)(int)v;
        else ((int8_t *)y)[e] = (int8_t)(int)v;
    }
}

extern "C" int tcu_q8_requant(const tcu_q8_requant_desc *r, void *y, void *stream) {
    if (r->y_type != TCU_U8 && r->y_type != TCU_I8) return TCU_E_DTYPE;
    if (r->m <= 0 || r->n <= 0) return 0;
    if (r->chan_per_group < 1) return TCU_E_ARG;
    k_q8_requant<<<tcu_blocks(r->m * r->n), TCU_THREADS, 0, TCU_STREAM(stream)>>>(*r, y);
    return tcu_launched();
}

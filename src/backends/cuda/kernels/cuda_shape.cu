/* CUDA kernels: data movement. Tiled batched 2-D transpose, pitched row copies (Concat,
 * Split), Gather with checked indices, Pad (constant / reflect / edge / wrap) and Resize
 * (nearest over any axes, bilinear over the last two). Data-movement kernels are
 * instantiated per element size, not per dtype. */
#include <string.h>

#include "backends/cuda/kernels/cuda_common.cuh"

#define TILE 32
#define TILE_ROWS 8

/* ---- transpose ---- */

template <typename E>
__global__ void k_transpose2d(const E *x, E *y, int64_t batch, int64_t R, int64_t C,
                              int64_t tiles_c, int64_t tiles) {
    __shared__ E t[TILE][TILE + 1];
    /* blockIdx.x walks the (tile row, tile col) pairs, blockIdx.y the batch */
    for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        const E *xb = x + b * R * C;
        E *yb = y + b * R * C;
        for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            int64_t r0 = tile / tiles_c * TILE, c0 = tile % tiles_c * TILE;
            for (int k = threadIdx.y; k < TILE; k += TILE_ROWS) {
                int64_t r = r0 + k, c = c0 + threadIdx.x;
                if (r < R && c < C) t[k][threadIdx.x] = xb[r * C + c];
            }
            __syncthreads();
            for (int k = threadIdx.y; k < TILE; k += TILE_ROWS) {
                int64_t orow = c0 + k, ocol = r0 + threadIdx.x; /* output is C x R */
                if (orow < C && ocol < R) yb[orow * R + ocol] = t[threadIdx.x][k];
            }
            __syncthreads();
        }
    }
}

extern "C" int tcu_transpose2d(int elem_size, const void *x, void *y, int64_t batch, int64_t R,
                               int64_t C, void *stream) {
    if (batch < 0 || R < 0 || C < 0) return TCU_E_ARG;
    if (!batch || !R || !C) return 0;
    int64_t tiles_c = (C + TILE - 1) / TILE, tiles = (R + TILE - 1) / TILE * tiles_c;
    int64_t gx = tiles < 65536 ? tiles : 65536, gy = batch < 65535 ? batch : 65535;
    dim3 grid((unsigned)gx, (unsigned)gy), block(TILE, TILE_ROWS);
    cudaStream_t st = TCU_STREAM(stream);
    switch (elem_size) {
#define L_(E)                                                                              \
    k_transpose2d<E><<<grid, block, 0, st>>>((const E *)x, (E *)y, batch, R, C, tiles_c, tiles); \
    break
    case 1: L_(uint8_t);
    case 2: L_(uint16_t);
    case 4: L_(uint32_t);
    case 8: L_(uint64_t);
#undef L_
    default: return TCU_E_DTYPE;
    }
    return tcu_launched();
}

/* ---- pitched row copies ---- */

template <typename E>
__global__ void k_copy_rows(const E *src, int64_t sp, E *dst, int64_t dp, int64_t rows,
                            int64_t cols) {
    TCU_FOR(i, rows * cols) {
        int64_t r = i / cols, j = i % cols;
        dst[r * dp + j] = src[r * sp + j];
    }
}

extern "C" int tcu_copy_rows(int elem_size, const void *src, int64_t src_pitch, int64_t src_off,
                             void *dst, int64_t dst_pitch, int64_t dst_off, int64_t rows,
                             int64_t cols, void *stream) {
    if (rows < 0 || cols < 0 || src_off < 0 || dst_off < 0) return TCU_E_ARG;
    if (!rows || !cols) return 0;
    if (rows > 1 && (src_pitch < cols || dst_pitch < cols)) return TCU_E_ARG;
    cudaStream_t st = TCU_STREAM(stream);
    unsigned g = tcu_blocks(rows * cols);
    switch (elem_size) {
#define L_(E)                                                                              \
    k_copy_rows<E><<<g, TCU_THREADS, 0, st>>>((const E *)src + src_off, src_pitch,         \
                                              (E *)dst + dst_off, dst_pitch, rows, cols);  \
    break
    case 1: L_(uint8_t);
    case 2: L_(uint16_t);
    case 4: L_(uint32_t);
    case 8: L_(uint64_t);
#undef L_
    default: return TCU_E_DTYPE;
    }
    return tcu_launched();
}

/* ---- Gather ---- */

template <typename E, typename I>
__global__ void k_gather(const E *x, const I *idx, E *y, int64_t outer, int64_t A, int64_t nidx,
                         int64_t inner, int *err) {
    int64_t n = outer * nidx * inner;
    TCU_FOR(i, n) {
        int64_t e = i % inner, r = i / inner;
        int64_t j = r % nidx, o = r / nidx;
        int64_t k = (int64_t)idx[j];
        if (k < 0) k += A;
        if (k < 0 || k >= A) {
            y[i] = E(0);
            if (err) atomicExch(err, 1);
            continue;
        }
        y[i] = x[(o * A + k) * inner + e];
    }
}

extern "C" int tcu_gather(int elem_size, const void *x, const void *idx, int idx_is_64, void *y,
                          int64_t outer, int64_t A, int64_t nidx, int64_t inner, int *err_flag,
                          void *stream) {
    if (outer < 0 || A < 0 || nidx < 0 || inner < 0) return TCU_E_ARG;
    int64_t n = outer * nidx * inner;
    if (!n) return 0;
    cudaStream_t st = TCU_STREAM(stream);
    unsigned g = tcu_blocks(n);
#define G_(E)                                                                              \
    if (idx_is_64)                                                                         \
        k_gather<E, int64_t><<<g, TCU_THREADS, 0, st>>>((const E *)x, (const int64_t *)idx, \
                                                        (E *)y, outer, A, nidx, inner,     \
                                                        err_flag);                         \
    else                                                                                   \
        k_gather<E, int32_t><<<g, TCU_THREADS, 0, st>>>((const E *)x, (const int32_t *)idx, \
                                                        (E *)y, outer, A, nidx, inner,     \
                                                        err_flag);                         \
    break
    switch (elem_size) {
    case 1: G_(uint8_t);
    case 2: G_(uint16_t);
    case 4: G_(uint32_t);
    case 8: G_(uint64_t);
    default: return TCU_E_DTYPE;
    }
#undef G_
    return tcu_launched();
}

/* ---- Pad ---- */

template <typename E> __global__ void k_pad(const E *x, E *y, tcu_pad_desc d, int64_t n, E value) {
    int64_t xs[TCU_MAX_RANK];
    int64_t acc = 1;
    for (int k = d.rank - 1; k >= 0; k--) {
        xs[k] = acc;
        acc *= d.in_dims[k];
    }
    TCU_FOR(i, n) {
        int64_t t = i, off = 0;
        bool constant = false;
        for (int k = d.rank - 1; k >= 0; k--) {
            int64_t o = t % d.out_dims[k];
            t /= d.out_dims[k];
            int64_t s = tcu_pad_src(d.mode, o, d.before[k], d.in_dims[k]);
            if (s < 0) {
                constant = true;
                break;
            }
            off += s * xs[k];
        }
        y[i] = constant ? value : x[off];
    }
}

extern "C" int tcu_pad(int elem_size, const void *x, void *y, const tcu_pad_desc *d, void *stream) {
    if (!d || d->rank < 0 || d->rank > TCU_MAX_RANK) return TCU_E_ARG;
    int64_t n = 1, nin = 1;
    for (int k = 0; k < d->rank; k++) {
        if (d->out_dims[k] < 0 || d->in_dims[k] < 0) return TCU_E_ARG;
        n *= d->out_dims[k];
        nin *= d->in_dims[k];
    }
    if (!n) return 0;
    if (!nin && d->mode != TCU_PAD_CONSTANT) return TCU_E_ARG;
    cudaStream_t st = TCU_STREAM(stream);
    unsigned g = tcu_blocks(n);
    switch (elem_size) {
#define L_(E)                                                                              \
    {                                                                                      \
        E v;                                                                               \
        memcpy(&v, &d->value, sizeof v);                                                   \
        k_pad<E><<<g, TCU_THREADS, 0, st>>>((const E *)x, (E *)y, *d, n, v);               \
    }                                                                                      \
    break
    case 1: L_(uint8_t);
    case 2: L_(uint16_t);
    case 4: L_(uint32_t);
    case 8: L_(uint64_t);
#undef L_
    default: return TCU_E_DTYPE;
    }
    return tcu_launched();
}

/* ---- Resize ---- */

template <typename T>
__global__ void k_resize_nearest(const T *x, T *y, tcu_resize_desc d, int64_t n) {
    int64_t xs[TCU_MAX_RANK];
    int64_t acc = 1;
    for (int k = d.rank - 1; k >= 0; k--) {
        xs[k] = acc;
        acc *= d.in_dims[k];
    }
    TCU_FOR(i, n) {
        int64_t t = i, off = 0;
        for (int k = d.rank - 1; k >= 0; k--) {
            int64_t o = t % d.out_dims[k];
            t /= d.out_dims[k];
            double c = tcu_resize_coord(d.coord_mode, (double)o, d.scales[k], d.in_dims[k],
                                        d.out_lens[k], d.out_dims[k], d.roi_lo[k], d.roi_hi[k]);
            off += tcu_resize_nearest(d.nearest_mode, c, d.in_dims[k]) * xs[k];
        }
        y[i] = x[off];
    }
}

/* bilinear over the last two axes; the leading axes are a batch of planes */
template <typename T>
__global__ void k_resize_linear(const T *x, T *y, tcu_resize_desc d, int64_t n) {
    int r = d.rank;
    int64_t H = r >= 2 ? d.in_dims[r - 2] : 1, W = d.in_dims[r - 1];
    int64_t OH = r >= 2 ? d.out_dims[r - 2] : 1, OW = d.out_dims[r - 1];
    TCU_FOR(i, n) {
        int64_t ox = i % OW, oy = (i / OW) % OH, plane = i / (OW * OH);
        const T *p = x + plane * H * W;
        int64_t y0 = 0, y1 = 0, x0, x1;
        float wy = 0.0f, wx;
        if (r >= 2)
            tcu_resize_linear(tcu_resize_coord(d.coord_mode, (double)oy, d.scales[r - 2], H,
                                               d.out_lens[r - 2], OH, d.roi_lo[r - 2],
                                               d.roi_hi[r - 2]),
                              H, &y0, &y1, &wy);
        tcu_resize_linear(tcu_resize_coord(d.coord_mode, (double)ox, d.scales[r - 1], W,
                                           d.out_lens[r - 1], OW, d.roi_lo[r - 1],
                                           d.roi_hi[r - 1]),
                          W, &x0, &x1, &wx);
        float a = tcu_to_f(p[y0 * W + x0]), b = tcu_to_f(p[y0 * W + x1]);
        float c = tcu_to_f(p[y1 * W + x0]), e = tcu_to_f(p[y1 * W + x1]);
        float top = a + (b - a) * wx, bot = c + (e - c) * wx;
        y[i] = tcu_from_f<T>(top + (bot - top) * wy);
    }
}

extern "C" int tcu_resize(int dtype, const void *x, void *y, const tcu_resize_desc *d,
                          void *stream) {
    if (!d || d->rank < 1 || d->rank > TCU_MAX_RANK) return TCU_E_ARG;
    int64_t n = 1;
    for (int k = 0; k < d->rank; k++) {
        if (d->out_dims[k] < 0 || d->in_dims[k] < 0) return TCU_E_ARG;
        if (d->out_dims[k] > 0 && d->in_dims[k] == 0) return TCU_E_ARG;
        if (d->linear && k < d->rank - 2 && d->in_dims[k] != d->out_dims[k]) return TCU_E_ARG;
        n *= d->out_dims[k];
    }
    if (!n) return 0;
    cudaStream_t st = TCU_STREAM(stream);
    unsigned g = tcu_blocks(n);
    switch (dtype) {
#define L_(T)                                                                              \
    if (d->linear)                                                                         \
        k_resize_linear<T><<<g, TCU_THREADS, 0, st>>>((const T *)x, (T *)y, *d, n);        \
    else                                                                                   \
        k_resize_nearest<T><<<g, TCU_THREADS, 0, st>>>((const T *)x, (T *)y, *d, n)
        TCU_FLOAT_CASES(L_)
#undef L_
    default:
        return TCU_E_DTYPE;
    }
    return tcu_launched();
}

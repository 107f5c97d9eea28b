/* CUDA kernels: reductions and normalisations. Softmax / LogSoftmax (a block per row when
 * the axis is innermost, else a thread per column), LayerNormalization (a block per row,
 * two-pass mean and variance), the general reduction (a warp per output element over
 * strided walks of the kept and reduced axes) and ArgMax / ArgMin. Float accumulation for
 * the float types, int64 for the integer ones. */
#include <float.h>

#include "backends/cuda/kernels/cuda_common.cuh"

#define FULL_MASK 0xffffffffu

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

/* Block-wide sum / max (every thread gets the result). blockDim.x is a multiple of 32;
 * `sh` holds 32 floats; the block must call it uniformly. */
__device__ float block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* sh may still be read from a previous call */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(v);
}
__device__ float block_max(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return warp_max(v);
}

static int row_threads(int64_t cols) {
    return cols <= 32 ? 32 : cols <= 64 ? 64 : cols <= 128 ? 128 : 256;
}

/* ---- Softmax ---- */

template <typename T>
__global__ void k_softmax_rows(const T *x, T *y, int64_t rows, int64_t C, int lg) {
    __shared__ float sh[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * C;
        T *yr = y + r * C;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) m = fmaxf(m, tcu_to_f(xr[j]));
        m = block_max(m, sh);
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) s += expf(tcu_to_f(xr[j]) - m);
        s = block_sum(s, sh);
        float ls = logf(s), inv = 1.0f / s;
        /* x may be y: every thread reads the elements it writes only */
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            float v = tcu_to_f(xr[j]) - m;
            yr[j] = tcu_from_f<T>(lg ? v - ls : expf(v) * inv);
        }
    }
}

template <typename T>
__global__ void k_softmax_cols(const T *x, T *y, int64_t outer, int64_t C, int64_t inner, int lg) {
    TCU_FOR(i, outer * inner) {
        int64_t o = i / inner, in = i % inner;
        const T *xc = x + o * C * inner + in;
        T *yc = y + o * C * inner + in;
        float m = -INFINITY, s = 0.0f;
        for (int64_t c = 0; c < C; c++) m = fmaxf(m, tcu_to_f(xc[c * inner]));
        for (int64_t c = 0; c < C; c++) s += expf(tcu_to_f(xc[c * inner]) - m);
        float ls = logf(s), inv = 1.0f / s;
        for (int64_t c = 0; c < C; c++) {
            float v = tcu_to_f(xc[c * inner]) - m;
            yc[c * inner] = tcu_from_f<T>(lg ? v - ls : expf(v) * inv);
        }
    }
}

extern "C" int tcu_softmax(int dtype, const void *x, void *y, int64_t outer, int64_t C,
                           int64_t inner, int log_softmax, void *stream) {
    if (outer < 0 || C < 0 || inner < 0) return TCU_E_ARG;
    if (!outer || !C || !inner) return 0;
    cudaStream_t st = TCU_STREAM(stream);
    int threads = row_threads(C);
    unsigned grows = (unsigned)(outer < 65536 ? outer : 65536);
    unsigned gcols = tcu_blocks(outer * inner);
    switch (dtype) {
#define L_(T)                                                                              \
    if (inner == 1)                                                                        \
        k_softmax_rows<T><<<grows, threads, 0, st>>>((const T *)x, (T *)y, outer, C, log_softmax); \
    else                                                                                   \
        k_softmax_cols<T><<<gcols, TCU_THREADS, 0, st>>>((const T *)x, (T *)y, outer, C,    \
                                                         inner, log_softmax)
        TCU_FLOAT_CASES(L_)
#undef L_
    default:
        return TCU_E_DTYPE;
    }
    return tcu_launched();
}

/* ---- LayerNormalization ---- */

template <typename T>
__global__ void k_layernorm(const T *x, const T *scale, const T *bias, T *y, float *mean,
                            float *invstd, int64_t rows, int64_t C, float eps) {
    __shared__ float sh[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * C;
        T *yr = y + r * C;
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) s += tcu_to_f(xr[j]);
        float mu = block_sum(s, sh) / (float)C;
        float q = 0.0f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            float d = tcu_to_f(xr[j]) - mu;
            q += d * d;
        }
        float inv = rsqrtf(block_sum(q, sh) / (float)C + eps);
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            float v = (tcu_to_f(xr[j]) - mu) * inv * tcu_to_f(scale[j]);
            if (bias) v += tcu_to_f(bias[j]);
            yr[j] = tcu_from_f<T>(v);
        }
        if (threadIdx.x == 0) {
            if (mean) mean[r] = mu;
            if (invstd) invstd[r] = inv;
        }
    }
}

extern "C" int tcu_layernorm(int dtype, const void *x, const void *scale, const void *bias,
                             void *y, float *mean, float *invstd, int64_t rows, int64_t cols,
                             float eps, void *stream) {
    if (rows < 0 || cols < 0 || !scale) return TCU_E_ARG;
    if (!rows || !cols) return 0;
    cudaStream_t st = TCU_STREAM(stream);
    int threads = row_threads(cols);
    unsigned g = (unsigned)(rows < 65536 ? rows : 65536);
    switch (dtype) {
#define L_(T)                                                                              \
    k_layernorm<T><<<g, threads, 0, st>>>((const T *)x, (const T *)scale, (const T *)bias,  \
                                          (T *)y, mean, invstd, rows, cols, eps)
        TCU_FLOAT_CASES(L_)
#undef L_
    default:
        return TCU_E_DTYPE;
    }
    return tcu_launched();
}

/* ---- general reductions: a warp per output element ---- */

/* the accumulator of one op over values v */
template <typename A> struct racc {
    int op;
    A v;
    __device__ void init(int o) {
        op = o;
        switch (op) {
        case TCU_R_PROD: v = (A)1; break;
        case TCU_R_MAX: v = lowest(); break;
        case TCU_R_MIN: v = highest(); break;
        default: v = (A)0; break;
        }
    }
    __device__ static A lowest();
    __device__ static A highest();
    __device__ void add(A x) {
        switch (op) {
        case TCU_R_PROD: v *= x; break;
        case TCU_R_MAX: v = x > v ? x : v; break;
        case TCU_R_MIN: v = x < v ? x : v; break;
        case TCU_R_L1: v += x < (A)0 ? (A)-x : x; break;
        case TCU_R_L2:
        case TCU_R_SUMSQ: v += x * x; break;
        default: v += x; break; /* SUM, MEAN, LOGSUM; LOGSUMEXP adds exp terms itself */
        }
    }
};
template <> __device__ float racc<float>::lowest() { return -INFINITY; }
template <> __device__ float racc<float>::highest() { return INFINITY; }
template <> __device__ int64_t racc<int64_t>::lowest() { return INT64_MIN; }
template <> __device__ int64_t racc<int64_t>::highest() { return INT64_MAX; }

template <typename A> __device__ A shfl_xor(A v, int o) { return __shfl_xor_sync(FULL_MASK, v, o); }

template <typename A> __device__ void warp_combine(racc<A> &a) {
    for (int o = 16; o > 0; o >>= 1) {
        A w = shfl_xor<A>(a.v, o);
        switch (a.op) {
        case TCU_R_PROD: a.v *= w; break;
        case TCU_R_MAX: a.v = w > a.v ? w : a.v; break;
        case TCU_R_MIN: a.v = w < a.v ? w : a.v; break;
        default: a.v += w; break;
        }
    }
}

__device__ __forceinline__ float racc_in(float v) { return v; }

template <typename T, typename A>
__global__ void k_reduce(int op, const T *x, T *y, tcu_shape keep, tcu_shape red) {
    int lane = threadIdx.x & 31;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    int64_t R = red.count;
    for (int64_t o = warp; o < keep.count; o += nwarps) {
        int64_t base = tcu_offset(&keep, 0, o);
        racc<A> acc;
        if (op == TCU_R_LOGSUMEXP) {
            racc<A> m;
            m.init(TCU_R_MAX);
            for (int64_t r = lane; r < R; r += 32)
                m.add((A)tcu_to_f(x[base + tcu_offset(&red, 0, r)]));
            warp_combine(m);
            acc.init(TCU_R_SUM);
            float mx = (float)m.v;
            if (!(mx > -INFINITY && mx < INFINITY)) mx = 0.0f; /* empty, or all -inf / +inf */
            for (int64_t r = lane; r < R; r += 32)
                acc.add((A)expf(tcu_to_f(x[base + tcu_offset(&red, 0, r)]) - mx));
            warp_combine(acc);
            if (lane == 0) y[o] = tcu_from_f<T>(mx + logf((float)acc.v));
            continue;
        }
        acc.init(op);
        for (int64_t r = lane; r < R; r += 32)
            acc.add((A)tcu_to_f(x[base + tcu_offset(&red, 0, r)]));
        warp_combine(acc);
        if (lane == 0) {
            float v = (float)acc.v;
            if (op == TCU_R_MEAN) v = v / (float)R;
            if (op == TCU_R_L2) v = sqrtf(v);
            if (op == TCU_R_LOGSUM) v = logf(v);
            y[o] = tcu_from_f<T>(v);
        }
    }
}

template <typename T>
__global__ void k_reduce_int(int op, const T *x, T *y, tcu_shape keep, tcu_shape red) {
    int lane = threadIdx.x & 31;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    int64_t R = red.count;
    for (int64_t o = warp; o < keep.count; o += nwarps) {
        int64_t base = tcu_offset(&keep, 0, o);
        racc<int64_t> acc;
        acc.init(op);
        for (int64_t r = lane; r < R; r += 32) acc.add((int64_t)x[base + tcu_offset(&red, 0, r)]);
        warp_combine(acc);
        if (lane == 0) {
            int64_t v = acc.v;
            if (op == TCU_R_MEAN) v = R ? v / R : 0;
            y[o] = (T)v;
        }
    }
}

extern "C" int tcu_reduce(int op, int dtype, const void *x, void *y, const tcu_shape *keep,
                          const tcu_shape *red, void *stream) {
    if (op < 0 || op >= TCU_R_COUNT || !keep || !red || keep->rank < 0 ||
        keep->rank > TCU_MAX_RANK || red->rank < 0 || red->rank > TCU_MAX_RANK ||
        keep->count < 0 || red->count < 0)
        return TCU_E_ARG;
    if (!keep->count) return 0;
    cudaStream_t st = TCU_STREAM(stream);
    int64_t warps_per_block = TCU_THREADS / 32;
    int64_t blocks = (keep->count + warps_per_block - 1) / warps_per_block;
    unsigned g = (unsigned)(blocks < 65536 ? blocks : 65536);
    bool int_ok = op == TCU_R_SUM || op == TCU_R_MEAN || op == TCU_R_MAX || op == TCU_R_MIN ||
                  op == TCU_R_PROD || op == TCU_R_L1 || op == TCU_R_SUMSQ;
    switch (dtype) {
#define L_(T) k_reduce<T, float><<<g, TCU_THREADS, 0, st>>>(op, (const T *)x, (T *)y, *keep, *red)
        TCU_FLOAT_CASES(L_)
#undef L_
    case TCU_I32:
        if (!int_ok) return TCU_E_DTYPE;
        k_reduce_int<int32_t><<<g, TCU_THREADS, 0, st>>>(op, (const int32_t *)x, (int32_t *)y,
                                                         *keep, *red);
        break;
    case TCU_I64:
        if (!int_ok) return TCU_E_DTYPE;
        k_reduce_int<int64_t><<<g, TCU_THREADS, 0, st>>>(op, (const int64_t *)x, (int64_t *)y,
                                                         *keep, *red);
        break;
    default:
        return TCU_E_DTYPE;
    }
    return tcu_launched();
}

/* ---- ArgMax / ArgMin: a thread per (outer, inner) column ---- */

template <typename T, typename V>
__global__ void k_argminmax(const T *x, int64_t *y, int64_t outer, int64_t C, int64_t inner,
                            int is_max, int last) {
    TCU_FOR(i, outer * inner) {
        int64_t o = i / inner, in = i % inner;
        const T *xc = x + o * C * inner + in;
        V best = (V)xc[0];
        int64_t bi = 0;
        for (int64_t c = 1; c < C; c++) {
            V v = (V)xc[c * inner];
            bool better = is_max ? (last ? v >= best : v > best) : (last ? v <= best : v < best);
            if (better) {
                best = v;
                bi = c;
            }
        }
        y[i] = bi;
    }
}

template <typename T>
__global__ void k_argminmax_f(const T *x, int64_t *y, int64_t outer, int64_t C, int64_t inner,
                              int is_max, int last) {
    TCU_FOR(i, outer * inner) {
        int64_t o = i / inner, in = i % inner;
        const T *xc = x + o * C * inner + in;
        float best = tcu_to_f(xc[0]);
        int64_t bi = 0;
        for (int64_t c = 1; c < C; c++) {
            float v = tcu_to_f(xc[c * inner]);
            bool better = is_max ? (last ? v >= best : v > best) : (last ? v <= best : v < best);
            if (better) {
                best = v;
                bi = c;
            }
        }
        y[i] = bi;
    }
}

extern "C" int tcu_argminmax(int dtype, const void *x, int64_t *y, int64_t outer, int64_t C,
                             int64_t inner, int is_max, int select_last, void *stream) {
    if (outer < 0 || C < 0 || inner < 0) return TCU_E_ARG;
    if (!outer || !inner) return 0;
    if (!C) return TCU_E_ARG; /* no element to pick */
    cudaStream_t st = TCU_STREAM(stream);
    unsigned g = tcu_blocks(outer * inner);
    switch (dtype) {
#define L_(T)                                                                              \
    k_argminmax_f<T><<<g, TCU_THREADS, 0, st>>>((const T *)x, y, outer, C, inner, is_max,  \
                                                select_last)
        TCU_FLOAT_CASES(L_)
#undef L_
    case TCU_I32:
        k_argminmax<int32_t, int32_t><<<g, TCU_THREADS, 0, st>>>(
            (const int32_t *)x, y, outer, C, inner, is_max, select_last);
        break;
    case TCU_I64:
        k_argminmax<int64_t, int64_t><<<g, TCU_THREADS, 0, st>>>(
            (const int64_t *)x, y, outer, C, inner, is_max, select_last);
        break;
    default:
        return TCU_E_DTYPE;
    }
    return tcu_launched();
}

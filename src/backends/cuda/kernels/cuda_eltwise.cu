/* CUDA kernels: element-wise family. Unary math and activations, Clip with tensor bounds,
 * Cast, binary arithmetic / comparison / logic with numpy broadcast, Where, and the strided
 * copy behind Expand / Transpose / Slice. The op is a uniform run-time switch inside one
 * kernel per dtype (memory-bound kernels; keeps the number of instantiations small). */
#include "backends/cuda/kernels/cuda_common.cuh"

/* ---- offsets of element i in up to three operands of a broadcast walk ---- */

template <int N>
__device__ __forceinline__ void tcu_offsets(const tcu_shape &s, int64_t i, int64_t *off) {
    for (int k = 0; k < N; k++) off[k] = s.base[k];
    if (s.rank == 1) {
        for (int k = 0; k < N; k++) off[k] += i * s.strides[k][0];
        return;
    }
    for (int d = s.rank - 1; d >= 0; d--) {
        int64_t c = i % s.dims[d];
        i /= s.dims[d];
        for (int k = 0; k < N; k++) off[k] += c * s.strides[k][d];
    }
}

/* ---- unary ---- */

__device__ __forceinline__ float unary_f(int op, float v, float p, float q) {
    switch (op) {
    case TCU_RELU: return v > 0.0f ? v : 0.0f;
    case TCU_SIGMOID: return 1.0f / (1.0f + expf(-v));
    case TCU_TANH: return tanhf(v);
    case TCU_EXP: return expf(v);
    case TCU_LOG: return logf(v);
    case TCU_SQRT: return sqrtf(v);
    case TCU_ABS: return fabsf(v);
    case TCU_NEG: return -v;
    case TCU_ERF: return erff(v);
    case TCU_GELU: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case TCU_GELU_TANH:
        return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    case TCU_HARD_SWISH: return v * fmaxf(0.0f, fminf(1.0f, v / 6.0f + 0.5f));
    case TCU_HARD_SIGMOID: return fmaxf(0.0f, fminf(1.0f, p * v + q));
    case TCU_CLIP: return v < p ? p : v > q ? q : v;
    case TCU_LEAKY_RELU: return v < 0.0f ? v * p : v;
    case TCU_ELU: return v < 0.0f ? p * (expf(v) - 1.0f) : v;
    case TCU_SELU: return v <= 0.0f ? q * p * (expf(v) - 1.0f) : q * v;
    case TCU_SOFTPLUS: return v > 0.0f ? v + log1pf(expf(-v)) : log1pf(expf(v));
    case TCU_SOFTSIGN: return v / (1.0f + fabsf(v));
    case TCU_RECIPROCAL: return 1.0f / v;
    case TCU_FLOOR: return floorf(v);
    case TCU_CEIL: return ceilf(v);
    case TCU_ROUND: return rintf(v);
    case TCU_SIGN: return v > 0.0f ? 1.0f : v < 0.0f ? -1.0f : v;
    case TCU_SIN: return sinf(v);
    case TCU_COS: return cosf(v);
    default: return v; /* IDENTITY */
    }
}

template <typename T>
__global__ void k_unary_float(int op, const T *x, T *y, int64_t n, float p, float q) {
    TCU_FOR(i, n) y[i] = tcu_from_f<T>(unary_f(op, tcu_to_f(x[i]), p, q));
}

template <typename T>
__global__ void k_unary_int(int op, const T *x, T *y, int64_t n, T lo, T hi) {
    TCU_FOR(i, n) {
        T v = x[i];
        switch (op) {
        case TCU_ABS: v = v < 0 ? (T)-v : v; break;
        case TCU_NEG: v = (T)-v; break;
        case TCU_RELU: v = v > 0 ? v : (T)0; break;
        case TCU_SIGN: v = v > 0 ? (T)1 : v < 0 ? (T)-1 : (T)0; break;
        case TCU_CLIP: v = v < lo ? lo : v > hi ? hi : v; break;
        default: break;
        }
        y[i] = v;
    }
}

__global__ void k_unary_bool(int op, const uint8_t *x, uint8_t *y, int64_t n) {
    TCU_FOR(i, n) y[i] = op == TCU_NOT ? (uint8_t)!x[i] : (uint8_t)(x[i] != 0);
}

static bool int_unary_ok(int op) {
    return op == TCU_ABS || op == TCU_NEG || op == TCU_RELU || op == TCU_SIGN ||
           op == TCU_CLIP || op == TCU_IDENTITY;
}

/* float bound -> integer bound, saturating (Clip attributes are floats) */
template <typename T> static T sat_bound(float v, T lo, T hi) {
    if (!(v == v)) return lo;
    if (v <= (float)lo) return lo;
    if (v >= (float)hi) return hi;
    return (T)v;
}

extern "C" int tcu_unary(int op, int dtype, const void *x, void *y, int64_t n, float p, float q,
                         void *stream) {
    if (op < 0 || op >= TCU_UNARY_COUNT || n < 0) return TCU_E_ARG;
    if (n == 0) return 0;
    unsigned g = tcu_blocks(n);
    cudaStream_t st = TCU_STREAM(stream);
    switch (dtype) {
#define L_(T) k_unary_float<T><<<g, TCU_THREADS, 0, st>>>(op, (const T *)x, (T *)y, n, p, q)
        TCU_FLOAT_CASES(L_)
#undef L_
    case TCU_I32:
        if (!int_unary_ok(op)) return TCU_E_DTYPE;
        k_unary_int<int32_t><<<g, TCU_THREADS, 0, st>>>(
            op, (const int32_t *)x, (int32_t *)y, n, sat_bound<int32_t>(p, INT32_MIN, INT32_MAX),
            sat_bound<int32_t>(q, INT32_MIN, INT32_MAX));
        break;
    case TCU_I64:
        if (!int_unary_ok(op)) return TCU_E_DTYPE;
        k_unary_int<int64_t><<<g, TCU_THREADS, 0, st>>>(
            op, (const int64_t *)x, (int64_t *)y, n, sat_bound<int64_t>(p, INT64_MIN, INT64_MAX),
            sat_bound<int64_t>(q, INT64_MIN, INT64_MAX));
        break;
    case TCU_BOOL:
        if (op != TCU_NOT && op != TCU_IDENTITY) return TCU_E_DTYPE;
        k_unary_bool<<<g, TCU_THREADS, 0, st>>>(op, (const uint8_t *)x, (uint8_t *)y, n);
        break;
    default:
        return TCU_E_DTYPE;
    }
    return tcu_launched();
}

/* ---- Clip with tensor bounds ---- */

template <typename T>
__global__ void k_clip_float(const T *x, T *y, int64_t n, const T *lo, const T *hi) {
    float l = lo ? tcu_to_f(lo[0]) : -INFINITY, h = hi ? tcu_to_f(hi[0]) : INFINITY;
    TCU_FOR(i, n) {
        float v = tcu_to_f(x[i]);
        y[i] = tcu_from_f<T>(v < l ? l : v > h ? h : v);
    }
}

template <typename T>
__global__ void k_clip_int(const T *x, T *y, int64_t n, const T *lo, const T *hi) {
    TCU_FOR(i, n) {
        T v = x[i];
        if (lo && v < lo[0]) v = lo[0];
        if (hi && v > hi[0]) v = hi[0];
        y[i] = v;
    }
}

extern "C" int tcu_clip(int dtype, const void *x, void *y, int64_t n, const void *lo,
                        const void *hi, void *stream) {
    if (n < 0) return TCU_E_ARG;
    if (n == 0) return 0;
    unsigned g = tcu_blocks(n);
    cudaStream_t st = TCU_STREAM(stream);
    switch (dtype) {
#define L_(T) k_clip_float<T><<<g, TCU_THREADS, 0, st>>>((const T *)x, (T *)y, n, (const T *)lo, \
                                                         (const T *)hi)
        TCU_FLOAT_CASES(L_)
#undef L_
    case TCU_I32:
        k_clip_int<int32_t><<<g, TCU_THREADS, 0, st>>>((const int32_t *)x, (int32_t *)y, n,
                                                       (const int32_t *)lo, (const int32_t *)hi);
        break;
    case TCU_I64:
        k_clip_int<int64_t><<<g, TCU_THREADS, 0, st>>>((const int64_t *)x, (int64_t *)y, n,
                                                       (const int64_t *)lo, (const int64_t *)hi);
        break;
    default:
        return TCU_E_DTYPE;
    }
    return tcu_launched();
}

/* ---- Cast: load into a wide value (double or int64), store as the target type ---- */

struct wide {
    bool is_f;
    double d;
    int64_t i;
};

template <typename T> __device__ __forceinline__ wide load_wide(const T *x, int64_t i) {
    wide w;
    w.is_f = false;
    w.d = 0.0;
    w.i = (int64_t)x[i];
    return w;
}
template <> __device__ __forceinline__ wide load_wide<float>(const float *x, int64_t i) {
    return wide{true, (double)x[i], 0};
}
template <> __device__ __forceinline__ wide load_wide<double>(const double *x, int64_t i) {
    return wide{true, x[i], 0};
}
template <> __device__ __forceinline__ wide load_wide<tcu_half>(const tcu_half *x, int64_t i) {
    return wide{true, (double)__half2float(x[i]), 0};
}
template <> __device__ __forceinline__ wide load_wide<tcu_bf16>(const tcu_bf16 *x, int64_t i) {
    return wide{true, (double)__bfloat162float(x[i]), 0};
}

template <typename I> __device__ __forceinline__ I wide_int(const wide &w) {
    return w.is_f ? (I)(int64_t)w.d : (I)w.i;
}

__device__ __forceinline__ void store_wide(int to, void *y, int64_t i, const wide &w) {
    double d = w.is_f ? w.d : (double)w.i;
    switch (to) {
    case TCU_F32: ((float *)y)[i] = (float)d; break;
    case TCU_F64: ((double *)y)[i] = d; break;
    case TCU_F16: ((tcu_half *)y)[i] = __float2half_rn((float)d); break;
    case TCU_BF16: ((tcu_bf16 *)y)[i] = __float2bfloat16_rn((float)d); break;
    case TCU_I32: ((int32_t *)y)[i] = wide_int<int32_t>(w); break;
    case TCU_I64: ((int64_t *)y)[i] = wide_int<int64_t>(w); break;
    case TCU_I8: ((int8_t *)y)[i] = wide_int<int8_t>(w); break;
    case TCU_U8: ((uint8_t *)y)[i] = wide_int<uint8_t>(w); break;
    case TCU_BOOL: ((uint8_t *)y)[i] = w.is_f ? (uint8_t)(w.d != 0.0) : (uint8_t)(w.i != 0); break;
    default: break;
    }
}

template <typename T> __global__ void k_cast(const T *x, int to, void *y, int64_t n) {
    TCU_FOR(i, n) store_wide(to, y, i, load_wide<T>(x, i));
}

static bool cast_type_ok(int t) {
    return t == TCU_F32 || t == TCU_F64 || t == TCU_F16 || t == TCU_BF16 || t == TCU_I32 ||
           t == TCU_I64 || t == TCU_I8 || t == TCU_U8 || t == TCU_BOOL;
}

extern "C" int tcu_cast(int from, int to, const void *x, void *y, int64_t n, void *stream) {
    if (n < 0) return TCU_E_ARG;
    if (!cast_type_ok(from) || !cast_type_ok(to)) return TCU_E_DTYPE;
    if (n == 0) return 0;
    unsigned g = tcu_blocks(n);
    cudaStream_t st = TCU_STREAM(stream);
    switch (from) {
    case TCU_F32: k_cast<float><<<g, TCU_THREADS, 0, st>>>((const float *)x, to, y, n); break;
    case TCU_F64: k_cast<double><<<g, TCU_THREADS, 0, st>>>((const double *)x, to, y, n); break;
    case TCU_F16: k_cast<tcu_half><<<g, TCU_THREADS, 0, st>>>((const tcu_half *)x, to, y, n); break;
    case TCU_BF16:
        k_cast<tcu_bf16><<<g, TCU_THREADS, 0, st>>>((const tcu_bf16 *)x, to, y, n);
        break;
    case TCU_I32: k_cast<int32_t><<<g, TCU_THREADS, 0, st>>>((const int32_t *)x, to, y, n); break;
    case TCU_I64: k_cast<int64_t><<<g, TCU_THREADS, 0, st>>>((const int64_t *)x, to, y, n); break;
    case TCU_I8: k_cast<int8_t><<<g, TCU_THREADS, 0, st>>>((const int8_t *)x, to, y, n); break;
    case TCU_U8:
    case TCU_BOOL: k_cast<uint8_t><<<g, TCU_THREADS, 0, st>>>((const uint8_t *)x, to, y, n); break;
    default: return TCU_E_DTYPE;
    }
    return tcu_launched();
}

/* ---- binary ---- */

static bool is_compare(int op) { return op >= TCU_EQUAL && op <= TCU_GREATER_EQ; }
static bool is_logic(int op) { return op >= TCU_AND && op <= TCU_XOR; }

__device__ __forceinline__ float binary_f(int op, float a, float b) {
    switch (op) {
    case TCU_ADD: return a + b;
    case TCU_SUB: return a - b;
    case TCU_MUL: return a * b;
    case TCU_DIV: return a / b;
    case TCU_POW: return powf(a, b);
    case TCU_MAX: return (a != a || b != b) ? a + b : fmaxf(a, b);
    case TCU_MIN: return (a != a || b != b) ? a + b : fminf(a, b);
    default: return a < 0.0f ? a * b : a; /* PRELU */
    }
}

template <typename T> __device__ __forceinline__ T binary_i(int op, T a, T b) {
    switch (op) {
    case TCU_ADD: return (T)(a + b);
    case TCU_SUB: return (T)(a - b);
    case TCU_MUL: return (T)(a * b);
    case TCU_DIV: return b == 0 ? (T)0 : (T)(a / b);
    case TCU_MAX: return a > b ? a : b;
    default: return a < b ? a : b; /* MIN */
    }
}

template <typename V> __device__ __forceinline__ uint8_t compare(int op, V a, V b) {
    switch (op) {
    case TCU_EQUAL: return a == b;
    case TCU_LESS: return a < b;
    case TCU_GREATER: return a > b;
    case TCU_LESS_EQ: return a <= b;
    default: return a >= b; /* GREATER_EQ */
    }
}

template <typename T>
__global__ void k_binary_float(int op, const T *A, const T *B, void *Y, tcu_shape s) {
    bool cmp = op >= TCU_EQUAL;
    TCU_FOR(i, s.count) {
        int64_t off[2];
        tcu_offsets<2>(s, i, off);
        float a = tcu_to_f(A[off[0]]), b = tcu_to_f(B[off[1]]);
        if (cmp)
            ((uint8_t *)Y)[i] = compare<float>(op, a, b);
        else
            ((T *)Y)[i] = tcu_from_f<T>(binary_f(op, a, b));
    }
}

template <typename T>
__global__ void k_binary_int(int op, const T *A, const T *B, void *Y, tcu_shape s) {
    bool cmp = op >= TCU_EQUAL;
    TCU_FOR(i, s.count) {
        int64_t off[2];
        tcu_offsets<2>(s, i, off);
        T a = A[off[0]], b = B[off[1]];
        if (cmp)
            ((uint8_t *)Y)[i] = compare<T>(op, a, b);
        else
            ((T *)Y)[i] = binary_i<T>(op, a, b);
    }
}

__global__ void k_binary_bool(int op, const uint8_t *A, const uint8_t *B, uint8_t *Y, tcu_shape s) {
    TCU_FOR(i, s.count) {
        int64_t off[2];
        tcu_offsets<2>(s, i, off);
        bool a = A[off[0]] != 0, b = B[off[1]] != 0;
        bool v = op == TCU_AND ? (a && b) : op == TCU_OR ? (a || b) : op == TCU_XOR ? (a != b)
                                                                                : (a == b);
        Y[i] = v;
    }
}

extern "C" int tcu_binary(int op, int dtype, const void *a, const void *b, void *y,
                          const tcu_shape *s, void *stream) {
    if (op < 0 || op >= TCU_BINARY_COUNT || !s || s->n_ops < 2 || s->rank < 0 ||
        s->rank > TCU_MAX_RANK || s->count < 0)
        return TCU_E_ARG;
    if (s->count == 0) return 0;
    unsigned g = tcu_blocks(s->count);
    cudaStream_t st = TCU_STREAM(stream);
    bool logic = is_logic(op);
    switch (dtype) {
#define L_(T)                                                                              \
    if (logic) return TCU_E_DTYPE;                                                         \
    k_binary_float<T><<<g, TCU_THREADS, 0, st>>>(op, (const T *)a, (const T *)b, y, *s)
        TCU_FLOAT_CASES(L_)
#undef L_
    case TCU_I32:
        if (logic || op == TCU_POW || op == TCU_PRELU) return TCU_E_DTYPE;
        k_binary_int<int32_t><<<g, TCU_THREADS, 0, st>>>(op, (const int32_t *)a,
                                                         (const int32_t *)b, y, *s);
        break;
    case TCU_I64:
        if (logic || op == TCU_POW || op == TCU_PRELU) return TCU_E_DTYPE;
        k_binary_int<int64_t><<<g, TCU_THREADS, 0, st>>>(op, (const int64_t *)a,
                                                         (const int64_t *)b, y, *s);
        break;
    case TCU_BOOL:
        if (!logic && op != TCU_EQUAL) return TCU_E_DTYPE;
        k_binary_bool<<<g, TCU_THREADS, 0, st>>>(op, (const uint8_t *)a, (const uint8_t *)b,
                                                 (uint8_t *)y, *s);
        break;
    default:
        return TCU_E_DTYPE;
    }
    (void)is_compare;
    return tcu_launched();
}

/* ---- Where and strided copies (by element size) ---- */

template <typename E>
__global__ void k_where(const uint8_t *C, const E *A, const E *B, E *Y, tcu_shape s) {
    TCU_FOR(i, s.count) {
        int64_t off[3];
        tcu_offsets<3>(s, i, off);
        Y[i] = C[off[0]] ? A[off[1]] : B[off[2]];
    }
}

extern "C" int tcu_where(int elem_size, const void *c, const void *a, const void *b, void *y,
                         const tcu_shape *s, void *stream) {
    if (!s || s->n_ops < 3 || s->rank < 0 || s->rank > TCU_MAX_RANK || s->count < 0)
        return TCU_E_ARG;
    if (s->count == 0) return 0;
    unsigned g = tcu_blocks(s->count);
    cudaStream_t st = TCU_STREAM(stream);
    const uint8_t *cc = (const uint8_t *)c;
    switch (elem_size) {
#define L_(E)                                                                              \
    k_where<E><<<g, TCU_THREADS, 0, st>>>(cc, (const E *)a, (const E *)b, (E *)y, *s);     \
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

template <typename E> __global__ void k_strided_copy(const E *X, E *Y, tcu_shape s) {
    TCU_FOR(i, s.count) {
        int64_t off[1];
        tcu_offsets<1>(s, i, off);
        Y[i] = X[off[0]];
    }
}

extern "C" int tcu_strided_copy(int elem_size, const void *x, void *y, const tcu_shape *s,
                                void *stream) {
    if (!s || s->n_ops < 1 || s->rank < 0 || s->rank > TCU_MAX_RANK || s->count < 0)
        return TCU_E_ARG;
    if (s->count == 0) return 0;
    unsigned g = tcu_blocks(s->count);
    cudaStream_t st = TCU_STREAM(stream);
    switch (elem_size) {
#define L_(E) k_strided_copy<E><<<g, TCU_THREADS, 0, st>>>((const E *)x, (E *)y, *s); break
    case 1: L_(uint8_t);
    case 2: L_(uint16_t);
    case 4: L_(uint32_t);
    case 8: L_(uint64_t);
#undef L_
    default: return TCU_E_DTYPE;
    }
    return tcu_launched();
}

extern "C" const char *tcu_error_string(int err) {
    switch (err) {
    case 0: return "no error";
    case TCU_E_ARG: return "inconsistent kernel arguments";
    case TCU_E_DTYPE: return "no kernel for this data type";
    case TCU_E_TOO_LARGE: return "size beyond what the kernel handles";
    default: return err > 0 ? cudaGetErrorString((cudaError_t)err) : "unknown error";
    }
}

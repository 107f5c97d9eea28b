/* Index math shared by the CUDA kernels (device side) and the kernel table entries (host
 * side): broadcast planning, offsets of an element in a strided view, Slice normalisation,
 * Pad source indices, Resize coordinate transforms and rounding. Plain C (C11 and CUDA
 * C++); every function is static inline and marked __host__ __device__ under nvcc, so the
 * same code runs on the GPU and in tests/unit/test_cuda_math.c on the CPU.
 *
 * Conventions: shapes are row-major, rank <= TCU_MAX_RANK, int64 dims; a stride of 0
 * broadcasts. Nothing here allocates or fails loudly: functions that can reject their
 * input return 0 on success and a nonzero code otherwise. */
#ifndef TDM_BACKENDS_CUDA_KERNELS_CUDA_MATH_H
#define TDM_BACKENDS_CUDA_KERNELS_CUDA_MATH_H

#include <stdint.h>

#ifdef __CUDACC__
#define TCU_HD static inline __host__ __device__
#else
#define TCU_HD static inline
#endif

#define TCU_MAX_RANK 8
/* Operands of one broadcast plan (Where has three inputs plus the output). */
#define TCU_MAX_OPERANDS 4

/* A strided walk over an output shape: element i of the output (row-major over dims) reads
 * operand k at offset base[k] + sum_d idx_d * strides[k][d]. rank 0 means one element. */
typedef struct tcu_shape {
    int rank;
    int n_ops;
    int64_t dims[TCU_MAX_RANK];
    int64_t strides[TCU_MAX_OPERANDS][TCU_MAX_RANK];
    int64_t base[TCU_MAX_OPERANDS];
    int64_t count; /* product of dims */
} tcu_shape;

/* Offset of element i in operand k. */
TCU_HD int64_t tcu_offset(const tcu_shape *s, int k, int64_t i) {
    int64_t off = s->base[k];
    for (int d = s->rank - 1; d >= 0; d--) {
        int64_t c = i % s->dims[d];
        i /= s->dims[d];
        off += c * s->strides[k][d];
    }
    return off;
}

/* Numpy broadcast of n_in inputs (ranks in_rank[k], dims in_dims[k]) onto the output
 * shape (out_rank, out_dims): operand k < n_in is input k, the output is not an operand
 * (it is written contiguously). Size-1 output dims are dropped and neighbouring dims merge
 * when every input is contiguous or broadcast over both. Returns nonzero when an input
 * does not broadcast to the output or a rank is out of range. */
TCU_HD int tcu_bcast_plan(int n_in, const int *in_rank, const int64_t *const *in_dims,
                          int out_rank, const int64_t *out_dims, tcu_shape *s) {
    int64_t st[TCU_MAX_OPERANDS][TCU_MAX_RANK];
    s->rank = 0; /* defined even when the plan is refused */
    s->n_ops = 0;
    s->count = 0;
    if (n_in < 1 || n_in > TCU_MAX_OPERANDS || out_rank < 0 || out_rank > TCU_MAX_RANK) return 1;
    for (int k = 0; k < n_in; k++) {
        if (in_rank[k] < 0 || in_rank[k] > out_rank) return 1;
        int64_t acc = 1;
        for (int i = out_rank - 1; i >= 0; i--) {
            int j = i - (out_rank - in_rank[k]);
            int64_t dim = j >= 0 ? in_dims[k][j] : 1;
            if (dim != 1 && dim != out_dims[i]) return 1;
            st[k][i] = dim == 1 ? 0 : acc;
            acc *= dim;
        }
    }
    int n = 0;
    int64_t count = 1;
    for (int i = 0; i < out_rank; i++) {
        count *= out_dims[i];
        if (out_dims[i] == 1) continue;
        if (n > 0) {
            int merge = 1;
            for (int k = 0; k < n_in; k++)
                if (s->strides[k][n - 1] != st[k][i] * out_dims[i]) merge = 0;
            if (merge) {
                s->dims[n - 1] *= out_dims[i];
                for (int k = 0; k < n_in; k++) s->strides[k][n - 1] = st[k][i];
                continue;
            }
        }
        s->dims[n] = out_dims[i];
        for (int k = 0; k < n_in; k++) s->strides[k][n] = st[k][i];
        n++;
    }
    s->rank = n;
    s->n_ops = n_in;
    s->count = count;
    for (int k = 0; k < TCU_MAX_OPERANDS; k++) s->base[k] = 0;
    return 0;
}

/* Transpose as a strided read: output dim i is input axis perm[i]; operand 0 is the input.
 * Size-1 dims are dropped and output dims that are consecutive input axes merge. Returns
 * nonzero for a bad perm (out of range or repeated). */
TCU_HD int tcu_transpose_plan(int rank, const int64_t *dims, const int64_t *perm, tcu_shape *s) {
    int64_t xs[TCU_MAX_RANK];
    int seen[TCU_MAX_RANK];
    s->rank = 0;
    s->n_ops = 0;
    s->count = 0;
    if (rank < 0 || rank > TCU_MAX_RANK) return 1;
    int64_t acc = 1, count = 1;
    for (int i = rank - 1; i >= 0; i--) {
        xs[i] = acc;
        acc *= dims[i];
        seen[i] = 0;
    }
    int n = 0;
    for (int i = 0; i < rank; i++) {
        int64_t ax = perm[i];
        if (ax < 0 || ax >= rank || seen[ax]) return 1;
        seen[ax] = 1;
        count *= dims[ax];
        if (dims[ax] == 1) continue;
        if (n > 0 && s->strides[0][n - 1] == xs[ax] * dims[ax]) {
            s->dims[n - 1] *= dims[ax];
            s->strides[0][n - 1] = xs[ax];
        } else {
            s->dims[n] = dims[ax];
            s->strides[0][n] = xs[ax];
            n++;
        }
    }
    s->rank = n;
    s->n_ops = 1;
    s->count = count;
    for (int k = 0; k < TCU_MAX_OPERANDS; k++) s->base[k] = 0;
    return 0;
}

/* Reductions: strided walks over the kept axes (keep) and the reduced axes (red, where
 * reduced[d] is nonzero) of a contiguous tensor; operand 0 of each is the input. Element o
 * of the output (the kept axes in order) reduces x[tcu_offset(keep, 0, o) +
 * tcu_offset(red, 0, r)] over r < red->count. Size-1 axes are dropped. */
TCU_HD int tcu_reduce_plan(int rank, const int64_t *dims, const int *reduced, tcu_shape *keep,
                           tcu_shape *red) {
    if (rank < 0 || rank > TCU_MAX_RANK) return 1;
    tcu_shape *both[2] = {keep, red};
    for (int b = 0; b < 2; b++) {
        both[b]->rank = 0;
        both[b]->n_ops = 1;
        both[b]->count = 1;
        for (int k = 0; k < TCU_MAX_OPERANDS; k++) both[b]->base[k] = 0;
    }
    int64_t xs[TCU_MAX_RANK], acc = 1;
    for (int i = rank - 1; i >= 0; i--) {
        xs[i] = acc;
        acc *= dims[i];
    }
    for (int i = 0; i < rank; i++) {
        tcu_shape *s = reduced[i] ? red : keep;
        s->count *= dims[i];
        if (dims[i] == 1) continue;
        s->dims[s->rank] = dims[i];
        s->strides[0][s->rank] = xs[i];
        s->rank++;
    }
    return 0;
}

/* ONNX Slice (opset 10+) on one axis of size dim: normalises start/end for the step
 * (clamping as the spec says) and gives the first index and the number of elements.
 * Returns nonzero for step 0. */
TCU_HD int tcu_slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *first,
                          int64_t *len) {
    if (step == 0) return 1;
    if (dim <= 0) {
        *first = 0;
        *len = 0;
        return 0;
    }
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    int64_t n;
    if (step > 0) {
        start = start < 0 ? 0 : start > dim ? dim : start;
        end = end < 0 ? 0 : end > dim ? dim : end;
        n = end > start ? (end - start - 1) / step + 1 : 0;
    } else {
        start = start < 0 ? 0 : start > dim - 1 ? dim - 1 : start; /* spec: [0, dim-1] */
        end = end < -1 ? -1 : end > dim - 1 ? dim - 1 : end;
        int64_t back = step < -dim ? dim : -step; /* no overflow for INT64_MIN */
        n = start > end ? (start - end - 1) / back + 1 : 0;
    }
    *first = n > 0 ? start : 0;
    *len = n;
    return 0;
}

/* Pad modes. */
enum { TCU_PAD_CONSTANT = 0, TCU_PAD_REFLECT = 1, TCU_PAD_EDGE = 2, TCU_PAD_WRAP = 3 };

/* The source index along an axis of size dim for output index o with `before` elements of
 * padding in front (negative: cropping), or -1 when the element is the constant. Reflect
 * needs dim >= 2 unless no reflected element is read (the caller checks pads < dim). */
TCU_HD int64_t tcu_pad_src(int mode, int64_t o, int64_t before, int64_t dim) {
    int64_t i = o - before;
    if (i >= 0 && i < dim) return i;
    if (dim <= 0) return -1;
    switch (mode) {
    case TCU_PAD_EDGE:
        return i < 0 ? 0 : dim - 1;
    case TCU_PAD_REFLECT: {
        if (dim == 1) return 0;
        int64_t period = 2 * (dim - 1);
        int64_t m = i % period;
        if (m < 0) m += period;
        return m < dim ? m : period - m;
    }
    case TCU_PAD_WRAP: {
        int64_t m = i % dim;
        return m < 0 ? m + dim : m;
    }
    default:
        return -1;
    }
}

/* Resize coordinate transformation modes (ONNX opsets 11-19). */
enum {
    TCU_CT_HALF_PIXEL = 0,
    TCU_CT_ASYMMETRIC = 1,
    TCU_CT_ALIGN_CORNERS = 2,
    TCU_CT_PYTORCH_HALF_PIXEL = 3,
    TCU_CT_TF_HALF_PIXEL_FOR_NN = 4,
    TCU_CT_TF_CROP_AND_RESIZE = 5,
    TCU_CT_HALF_PIXEL_SYMMETRIC = 6
};
/* Nearest rounding modes. */
enum {
    TCU_NN_ROUND_PREFER_FLOOR = 0,
    TCU_NN_ROUND_PREFER_CEIL = 1,
    TCU_NN_FLOOR = 2,
    TCU_NN_CEIL = 3
};

TCU_HD double tcu_floor(double x) {
    double t = (double)(int64_t)x; /* callers keep |x| well inside int64 */
    return t > x ? t - 1.0 : t;
}

/* Input coordinate of output coordinate xo along an axis (double precision, like the CPU
 * kernel): in_len / out_int are the integer sizes, out_len the resized length the
 * transforms use (scale * in_len when scales are given, the size otherwise), scale the
 * axis's scale, roi_lo / roi_hi the ROI of tf_crop_and_resize (normalised). */
TCU_HD double tcu_resize_coord(int mode, double xo, double scale, int64_t in_len, double out_len,
                               int64_t out_int, double roi_lo, double roi_hi) {
    double in = (double)in_len;
    switch (mode) {
    case TCU_CT_ASYMMETRIC:
        return xo / scale;
    case TCU_CT_ALIGN_CORNERS:
        return out_len == 1.0 ? 0.0 : xo * (in - 1.0) / (out_len - 1.0);
    case TCU_CT_PYTORCH_HALF_PIXEL:
        return out_len > 1.0 ? (xo + 0.5) / scale - 0.5 : 0.0;
    case TCU_CT_TF_HALF_PIXEL_FOR_NN:
        return (xo + 0.5) / scale;
    case TCU_CT_TF_CROP_AND_RESIZE:
        if (out_len == 1.0) return (roi_hi - roi_lo) * (in - 1.0) / 2.0 + roi_lo * (in - 1.0);
        return xo * (roi_hi - roi_lo) * (in - 1.0) / (out_len - 1.0) + roi_lo * (in - 1.0);
    case TCU_CT_HALF_PIXEL_SYMMETRIC: {
        double adj = (double)out_int / out_len;
        return in / 2.0 * (1.0 - adj) + (xo + 0.5) / scale - 0.5;
    }
    default: /* half_pixel */
        return (xo + 0.5) / scale - 0.5;
    }
}

/* Nearest input index for coordinate x (clamped to [0, in_len); NaN gives 0). */
TCU_HD int64_t tcu_resize_nearest(int mode, double x, int64_t in_len) {
    if (!(x > -1.0)) return 0;
    if (x > (double)in_len) return in_len - 1;
    double f = tcu_floor(x), r = x - f;
    int64_t i = (int64_t)f;
    switch (mode) {
    case TCU_NN_FLOOR: break;
    case TCU_NN_CEIL: i += r > 0.0; break;
    case TCU_NN_ROUND_PREFER_CEIL: i += r >= 0.5; break;
    default: i += r > 0.5; break; /* round_prefer_floor */
    }
    return i < 0 ? 0 : i >= in_len ? in_len - 1 : i;
}

/* Linear interpolation along an axis: the two input indices and the weight of the upper
 * one for coordinate x; coordinates outside the input take the edge value (ONNX pads by
 * the edge). */
TCU_HD void tcu_resize_linear(double x, int64_t in_len, int64_t *i0, int64_t *i1, float *w1) {
    double hi = (double)(in_len - 1);
    if (!(x > 0.0)) x = 0.0; /* also NaN */
    if (x > hi) x = hi;
    double f = tcu_floor(x);
    int64_t a = (int64_t)f;
    int64_t b = a + 1 < in_len ? a + 1 : a;
    *i0 = a;
    *i1 = b;
    *w1 = (float)(x - f);
}

#endif

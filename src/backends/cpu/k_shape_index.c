/* CPU kernels, shape family: indexing (Gather, GatherElements, GatherND, ScatterND,
 * ScatterElements/Scatter, OneHot, Compress, NonZero, Trilu, ReverseSequence). Every index
 * read from tensor data is checked before it is used. */
#include <string.h>

#include "backends/cpu/k_shape.h"
#include "core/alloc.h"

static tdm_status *shape_mismatch(const tdm_kernel_ctx *ctx) {
    return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "output shape does not match the inputs");
}

static int64_t prod(const int64_t *d, int from, int to) {
    int64_t n = 1;
    for (int i = from; i < to; i++) n *= d[i];
    return n;
}

static tdm_status *need_index_type(const tdm_kernel_ctx *ctx, const tdm_tensor *t) {
    if (t->dtype != TDM_INT32 && t->dtype != TDM_INT64)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "indices must be int32 or int64, got %s", tdm_dtype_name(t->dtype));
    return NULL;
}

/* Copies n elements of es bytes (small counts without a memcpy call). */
static inline void copy_elems(char *dst, const char *src, int64_t n, size_t es) {
    if (n == 1) {
        switch (es) {
        case 1: *dst = *src; return;
        case 2: memcpy(dst, src, 2); return;
        case 4: memcpy(dst, src, 4); return;
        case 8: memcpy(dst, src, 8); return;
        default: break;
        }
    }
    memcpy(dst, src, (size_t)n * es);
}

#define SMALL_INDICES 256 /* index counts copied into the caller's stack buffer */

/* Validated, normalised copies of all indices of `t` against an axis of size n: in `small`
 * (SMALL_INDICES values) when they fit, else scratch; free with free_indices. */
static tdm_status *load_indices(tdm_kernel_ctx *ctx, const tdm_tensor *t, int64_t n,
                                int64_t *small, int64_t **out) {
    TDM_TRY(need_index_type(ctx, t));
    int64_t *v = t->count <= SMALL_INDICES
                     ? small
                     : tdm_kscratch(ctx, (size_t)(t->count ? t->count : 1) * sizeof *v);
    if (!v) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory for indices");
    for (int64_t i = 0; i < t->count; i++) {
        tdm_status *st = tdm_kshape_norm_index(ctx->node, tdm_kshape_index_at(t, i), n, &v[i]);
        if (st) {
            if (v != small) tdm_free(ctx->alloc, v);
            return st;
        }
    }
    *out = v;
    return NULL;
}

/* ---- Gather --------------------------------------------------------------------------- */

typedef struct gather_job {
    const char *src;
    char *dst;
    const int64_t *idx; /* Gather: per index; GatherND: element offsets */
    int64_t n, axis_len, inner;
    size_t es;
} gather_job;

static void gather_items(void *arg, int64_t b, int64_t e) {
    const gather_job *j = arg;
    size_t blk = (size_t)j->inner * j->es;
    for (int64_t t = b; t < e; t++) {
        int64_t o = t / j->n, k = t % j->n;
        copy_elems(j->dst + (size_t)t * blk, j->src + (size_t)(o * j->axis_len + j->idx[k]) * blk,
                   j->inner, j->es);
    }
}

tdm_status *tdm_kshape_gather(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *ind = ctx->in[1];
    tdm_tensor *y = ctx->out[0];
    int axis;
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", 0), x->rank, &axis));
    if (y->rank != x->rank - 1 + ind->rank) return shape_mismatch(ctx);
    int64_t outer = prod(x->dims, 0, axis), inner = prod(x->dims, axis + 1, x->rank);
    if (y->count != outer * ind->count * inner) return shape_mismatch(ctx);
    int64_t *idx = NULL, small[SMALL_INDICES];
    TDM_TRY(load_indices(ctx, ind, x->dims[axis], small, &idx));
    gather_job j = {x->data, y->data, idx, ind->count, x->dims[axis], inner,
                    tdm_dtype_elem_size(x->dtype)};
    int64_t items = outer * ind->count;
    if (items && inner)
        tdm_parallel_for(ctx->pool, items, inner >= 8192 ? 1 : 8192 / inner, gather_items, &j);
    if (idx != small) tdm_free(ctx->alloc, idx);
    return tdm_kshape_own_strings(y);
}

/* ---- GatherElements ------------------------------------------------------------------- */

typedef struct gel_job {
    const tdm_tensor *x, *ind;
    tdm_tensor *y;
    int axis;
    int64_t xs[TDM_MAX_RANK];
} gel_job;

static void gel_rows(void *arg, int64_t b, int64_t e) {
    const gel_job *j = arg;
    int r = j->ind->rank, ax = j->axis;
    int64_t L = j->ind->dims[r - 1], A = j->x->dims[ax];
    size_t es = tdm_dtype_elem_size(j->x->dtype);
    const char *src = j->x->data;
    for (int64_t row = b; row < e; row++) {
        int64_t rem = row, base = 0;
        for (int k = r - 2; k >= 0; k--) {
            if (k != ax) base += (rem % j->ind->dims[k]) * j->xs[k];
            rem /= j->ind->dims[k];
        }
        char *dst = (char *)j->y->data + (size_t)(row * L) * es;
        for (int64_t c = 0; c < L; c++) {
            int64_t v = tdm_kshape_index_at(j->ind, row * L + c);
            if (v < 0) v += A; /* validated before */
            int64_t off = base + v * j->xs[ax] + (ax == r - 1 ? 0 : c);
            copy_elems(dst + (size_t)c * es, src + (size_t)off * es, 1, es);
        }
    }
}

tdm_status *tdm_kshape_gather_elements(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *ind = ctx->in[1];
    tdm_tensor *y = ctx->out[0];
    int axis;
    TDM_TRY(need_index_type(ctx, ind));
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", 0), x->rank, &axis));
    if (ind->rank != x->rank || y->rank != x->rank || y->count != ind->count)
        return shape_mismatch(ctx);
    for (int d = 0; d < x->rank; d++)
        if (d != axis && ind->dims[d] > x->dims[d])
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "indices dim %d exceeds the data's", d);
    int64_t w;
    for (int64_t i = 0; i < ind->count; i++)
        TDM_TRY(tdm_kshape_norm_index(ctx->node, tdm_kshape_index_at(ind, i), x->dims[axis], &w));
    if (y->count == 0) return NULL;
    gel_job j = {x, ind, y, axis, {0}};
    tdm_strides(x->rank, x->dims, j.xs);
    int64_t L = ind->dims[x->rank - 1];
    tdm_parallel_for(ctx->pool, y->count / L, L >= 8192 ? 1 : 8192 / L, gel_rows, &j);
    return tdm_kshape_own_strings(y);
}

/* ---- GatherND ------------------------------------------------------------------------- */

static void gnd_items(void *arg, int64_t b, int64_t e) {
    const gather_job *j = arg;
    size_t blk = (size_t)j->inner * j->es;
    for (int64_t t = b; t < e; t++)
        copy_elems(j->dst + (size_t)t * blk, j->src + (size_t)j->idx[t] * j->es, j->inner, j->es);
}

/* Offset (in elements of a block of `slice`) of the index tuple ind[t*m .. t*m+m) into dims. */
static tdm_status *tuple_offset(tdm_kernel_ctx *ctx, const tdm_tensor *ind, int64_t t, int64_t m,
                                const int64_t *dims, int64_t *off) {
    int64_t o = 0;
    for (int64_t k = 0; k < m; k++) {
        int64_t v;
        TDM_TRY(tdm_kshape_norm_index(ctx->node, tdm_kshape_index_at(ind, t * m + k), dims[k], &v));
        o = o * dims[k] + v;
    }
    *off = o;
    return NULL;
}

tdm_status *tdm_kshape_gather_nd(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *ind = ctx->in[1];
    tdm_tensor *y = ctx->out[0];
    TDM_TRY(need_index_type(ctx, ind));
    int64_t b = ctx->opset >= 12 ? tdm_attr_int(ctx->node, "batch_dims", 0) : 0;
    int q = ind->rank;
    if (q < 1 || b < 0 || b >= q || b >= x->rank) return shape_mismatch(ctx);
    int64_t m = ind->dims[q - 1];
    if (m < 1 || m > x->rank - b) return shape_mismatch(ctx);
    for (int d = 0; d < b; d++)
        if (x->dims[d] != ind->dims[d]) return shape_mismatch(ctx);
    int64_t B = prod(x->dims, 0, (int)b), N = prod(ind->dims, (int)b, q - 1);
    int64_t slice = prod(x->dims, (int)(b + m), x->rank), xblock = prod(x->dims, (int)b, x->rank);
    if (y->count != B * N * slice) return shape_mismatch(ctx);
    int64_t *off = tdm_kscratch(ctx, (size_t)(B * N > 0 ? B * N : 1) * sizeof *off);
    if (!off) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory for indices");
    for (int64_t t = 0; t < B * N; t++) {
        int64_t o;
        tdm_status *st = tuple_offset(ctx, ind, t, m, x->dims + b, &o);
        if (st) {
            tdm_free(ctx->alloc, off);
            return st;
        }
        off[t] = (t / (N ? N : 1)) * xblock + o * slice;
    }
    gather_job j = {x->data, y->data, off, 0, 0, slice, tdm_dtype_elem_size(x->dtype)};
    if (B * N > 0 && slice > 0)
        tdm_parallel_for(ctx->pool, B * N, slice >= 8192 ? 1 : 8192 / slice, gnd_items, &j);
    tdm_free(ctx->alloc, off);
    return tdm_kshape_own_strings(y);
}

/* ---- ScatterND / ScatterElements ------------------------------------------------------ */

enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN };

static tdm_status *reduction(tdm_kernel_ctx *ctx, tdm_dtype dt, int *red) {
    const char *s = ctx->opset >= 16 && strcmp(ctx->node->op_type, "Scatter")
                        ? tdm_attr_string(ctx->node, "reduction", "none")
                        : "none";
    *red = !strcmp(s, "none") ? RED_NONE
           : !strcmp(s, "add") ? RED_ADD
           : !strcmp(s, "mul") ? RED_MUL
           : !strcmp(s, "max") ? RED_MAX
           : !strcmp(s, "min") ? RED_MIN
                               : -1;
    if (*red < 0) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "unknown reduction '%s'", s);
    if (*red != RED_NONE && (dt == TDM_STRING || dt == TDM_BOOL || dt == TDM_COMPLEX64 ||
                             dt == TDM_COMPLEX128))
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "reduction '%s' on %s is not supported",
                              s, tdm_dtype_name(dt));
    return NULL;
}

#define RED_OP_(a, b, red)                                                               \
    ((red) == RED_ADD ? (a) + (b) : (red) == RED_MUL ? (a) * (b) : (red) == RED_MAX ? ((a) > (b) ? (a) : (b)) : ((a) < (b) ? (a) : (b)))

/* dst[i] = op(dst[i], src[i]) for n elements of dtype dt. */
static void apply(tdm_dtype dt, int red, void *dst, const void *src, int64_t n) {
    if (red == RED_NONE) {
        copy_elems(dst, src, n, tdm_dtype_elem_size(dt));
        return;
    }
#define LOOP_(T)                                                                         \
    do {                                                                                 \
        T *d_ = dst;                                                                     \
        const T *s_ = src;                                                               \
        for (int64_t i_ = 0; i_ < n; i_++) d_[i_] = (T)RED_OP_(d_[i_], s_[i_], red);     \
    } while (0)
#define HALF_(TO, FROM)                                                                  \
    do {                                                                                 \
        uint16_t *d_ = dst;                                                              \
        const uint16_t *s_ = src;                                                        \
        for (int64_t i_ = 0; i_ < n; i_++) {                                             \
            float a_ = TO(d_[i_]), b_ = TO(s_[i_]);                                      \
            d_[i_] = FROM(RED_OP_(a_, b_, red));                                         \
        }                                                                                \
    } while (0)
    switch (dt) {
    case TDM_FLOAT: LOOP_(float); break;
    case TDM_DOUBLE: LOOP_(double); break;
    case TDM_FLOAT16: HALF_(tdm_f16_to_f32, tdm_f32_to_f16); break;
    case TDM_BFLOAT16: HALF_(tdm_bf16_to_f32, tdm_f32_to_bf16); break;
    case TDM_INT8: LOOP_(int8_t); break;
    case TDM_UINT8: LOOP_(uint8_t); break;
    case TDM_INT16: LOOP_(int16_t); break;
    case TDM_UINT16: LOOP_(uint16_t); break;
    case TDM_INT32: LOOP_(int32_t); break;
    case TDM_UINT32: LOOP_(uint32_t); break;
    case TDM_INT64: LOOP_(int64_t); break;
    case TDM_UINT64: LOOP_(uint64_t); break;
    default: break;
    }
#undef LOOP_
#undef HALF_
}

tdm_status *tdm_kshape_scatter_nd(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *ind = ctx->in[1], *u = ctx->in[2];
    tdm_tensor *y = ctx->out[0];
    int red;
    TDM_TRY(need_index_type(ctx, ind));
    TDM_TRY(reduction(ctx, x->dtype, &red));
    if (ind->rank < 1 || u->dtype != x->dtype || y->count != x->count) return shape_mismatch(ctx);
    int64_t k = ind->dims[ind->rank - 1];
    if (k > x->rank) return shape_mismatch(ctx);
    int64_t N = prod(ind->dims, 0, ind->rank - 1), slice = prod(x->dims, (int)k, x->rank);
    if (u->count != N * slice) return shape_mismatch(ctx);
    size_t es = tdm_dtype_elem_size(x->dtype);
    tdm_kshape_copy_data(y, x);
    for (int64_t n = 0; n < N; n++) {
        int64_t off;
        tdm_status *st = tuple_offset(ctx, ind, n, k, x->dims, &off);
        if (st) {
            if (x->dtype == TDM_STRING) memset(y->data, 0, y->nbytes);
            return st;
        }
        apply(x->dtype, red, (char *)y->data + (size_t)(off * slice) * es,
              (const char *)u->data + (size_t)(n * slice) * es, slice);
    }
    return tdm_kshape_own_strings(y);
}

/* ScatterElements and Scatter (opset 9-10). */
tdm_status *tdm_kshape_scatter_elements(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *ind = ctx->in[1], *u = ctx->in[2];
    tdm_tensor *y = ctx->out[0];
    int red, axis, r = x->rank;
    TDM_TRY(need_index_type(ctx, ind));
    TDM_TRY(reduction(ctx, x->dtype, &red));
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", 0), r, &axis));
    if (ind->rank != r || u->rank != r || u->dtype != x->dtype || y->count != x->count)
        return shape_mismatch(ctx);
    for (int d = 0; d < r; d++)
        if (ind->dims[d] != u->dims[d] || (d != axis && ind->dims[d] > x->dims[d]))
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "indices and updates do not fit data on axis %d", d);
    int64_t w;
    for (int64_t i = 0; i < ind->count; i++)
        TDM_TRY(tdm_kshape_norm_index(ctx->node, tdm_kshape_index_at(ind, i), x->dims[axis], &w));
    size_t es = tdm_dtype_elem_size(x->dtype);
    int64_t xs[TDM_MAX_RANK], pos[TDM_MAX_RANK] = {0};
    tdm_strides(r, x->dims, xs);
    tdm_kshape_copy_data(y, x);
    for (int64_t i = 0; i < ind->count; i++) {
        int64_t off = 0;
        for (int d = 0; d < r; d++) {
            int64_t v = pos[d];
            if (d == axis) {
                v = tdm_kshape_index_at(ind, i);
                if (v < 0) v += x->dims[axis];
            }
            off += v * xs[d];
        }
        apply(x->dtype, red, (char *)y->data + (size_t)off * es, (const char *)u->data + (size_t)i * es, 1);
        for (int d = r - 1; d >= 0; d--) {
            if (++pos[d] < ind->dims[d]) break;
            pos[d] = 0;
        }
    }
    return tdm_kshape_own_strings(y);
}

/* ---- OneHot --------------------------------------------------------------------------- */

tdm_status *tdm_kshape_onehot(tdm_kernel_ctx *ctx) {
    const tdm_tensor *ind = ctx->in[0], *dep = ctx->in[1], *vals = ctx->in[2];
    tdm_tensor *y = ctx->out[0];
    if (vals->count != 2 || dep->count != 1 || dep->dtype == TDM_STRING || ind->dtype == TDM_STRING)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "depth must be a number and values must have 2 elements");
    double dd = tdm_tensor_get_f64(dep, 0);
    if (!(dd >= 1 && dd < 9e15))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "depth %g is invalid", dd);
    int64_t depth = (int64_t)dd;
    int axis;
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", -1), ind->rank + 1, &axis));
    if (y->rank != ind->rank + 1 || y->dims[axis] != depth || y->dtype != vals->dtype)
        return shape_mismatch(ctx);
    int64_t outer = prod(ind->dims, 0, axis), inner = prod(ind->dims, axis, ind->rank);
    size_t es = tdm_dtype_elem_size(vals->dtype);
    const char *off_v = vals->data, *on_v = (const char *)vals->data + es;
    tdm_kshape_fill(y->data, y->count, off_v, es);
    char *dst = y->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t v;
            if (tdm_dtype_is_float(ind->dtype)) {
                double f = tdm_tensor_get_f64(ind, o * inner + i);
                if (!(f > -9e15 && f < 9e15) || f != (double)(int64_t)f) continue; /* not an index */
                v = (int64_t)f;
            } else {
                v = tdm_tensor_get_i64(ind, o * inner + i);
            }
            if (v < 0) v += depth;
            if (v < 0 || v >= depth) continue;
            memcpy(dst + (size_t)((o * depth + v) * inner + i) * es, on_v, es);
        }
    return tdm_kshape_own_strings(y);
}

/* ---- Compress / NonZero --------------------------------------------------------------- */

tdm_status *tdm_kshape_compress(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *cond = ctx->in[1];
    if (cond->dtype != TDM_BOOL || cond->rank != 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "condition must be 1-D bool");
    const tdm_attr *aa = tdm_node_attr(ctx->node, "axis");
    int axis = 0, rank = 1;
    int64_t dims[TDM_MAX_RANK], outer = 1, inner = 1, A = x->count;
    if (aa) {
        TDM_TRY(tdm_norm_axis(ctx->node, aa->i, x->rank, &axis));
        rank = x->rank;
        memcpy(dims, x->dims, sizeof(int64_t) * (size_t)rank);
        outer = prod(x->dims, 0, axis);
        inner = prod(x->dims, axis + 1, x->rank);
        A = x->dims[axis];
    }
    const uint8_t *c = cond->data;
    int64_t sel = 0;
    for (int64_t i = 0; i < cond->count; i++) {
        if (!c[i]) continue;
        if (i >= A)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "condition selects index %lld of an axis of size %lld",
                                  (long long)i, (long long)A);
        sel++;
    }
    dims[axis] = sel;
    TDM_TRY(ctx->alloc_output(ctx, 0, x->dtype, rank, dims));
    tdm_tensor *y = ctx->out[0];
    size_t es = tdm_dtype_elem_size(x->dtype), blk = (size_t)inner * es;
    char *dst = y->data;
    const char *src = x->data;
    if (blk)
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < cond->count; i++)
                if (c[i]) {
                    memcpy(dst, src + (size_t)(o * A + i) * blk, blk);
                    dst += blk;
                }
    return tdm_kshape_own_strings(y);
}

typedef char *str_ptr;

/* m[i] = (x[i] != 0) for every element. */
static void nonzero_mask(const tdm_tensor *x, uint8_t *m) {
    const void *d = x->data;
    int64_t n = x->count;
#define NZ_(T, TEST)                                                                     \
    do {                                                                                 \
        const T *p_ = d;                                                                 \
        for (int64_t i_ = 0; i_ < n; i_++) m[i_] = (TEST);                               \
    } while (0)
    switch (x->dtype) {
    case TDM_FLOAT: NZ_(float, p_[i_] != 0); break;
    case TDM_DOUBLE: NZ_(double, p_[i_] != 0); break;
    case TDM_FLOAT16:
    case TDM_BFLOAT16: NZ_(uint16_t, (p_[i_] & 0x7fff) != 0); break;
    case TDM_COMPLEX64: NZ_(float, p_[2 * i_] != 0 || p_[2 * i_ + 1] != 0); break;
    case TDM_COMPLEX128: NZ_(double, p_[2 * i_] != 0 || p_[2 * i_ + 1] != 0); break;
    case TDM_STRING: NZ_(str_ptr, p_[i_] && p_[i_][0]); break;
    case TDM_INT8:
    case TDM_UINT8:
    case TDM_BOOL: NZ_(uint8_t, p_[i_] != 0); break;
    case TDM_INT16:
    case TDM_UINT16: NZ_(uint16_t, p_[i_] != 0); break;
    case TDM_INT32:
    case TDM_UINT32: NZ_(uint32_t, p_[i_] != 0); break;
    default: NZ_(uint64_t, p_[i_] != 0); break;
    }
#undef NZ_
}

tdm_status *tdm_kshape_nonzero(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    int r = x->rank ? x->rank : 1;
    uint8_t *m = tdm_kscratch(ctx, (size_t)(x->count ? x->count : 1));
    if (!m) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    nonzero_mask(x, m);
    int64_t nnz = 0;
    for (int64_t i = 0; i < x->count; i++) nnz += m[i];
    int64_t dims[2] = {r, nnz};
    tdm_status *st = ctx->alloc_output(ctx, 0, TDM_INT64, 2, dims);
    if (st) {
        tdm_free(ctx->alloc, m);
        return st;
    }
    int64_t *out = ctx->out[0]->data, k = 0;
    int64_t idx[TDM_MAX_RANK] = {0};
    for (int64_t i = 0; i < x->count; i++) {
        if (m[i]) {
            for (int d = 0; d < r; d++) out[d * nnz + k] = idx[d];
            k++;
        }
        for (int d = x->rank - 1; d >= 0; d--) {
            if (++idx[d] < x->dims[d]) break;
            idx[d] = 0;
        }
    }
    tdm_free(ctx->alloc, m);
    return NULL;
}

/* ---- Trilu ---------------------------------------------------------------------------- */

tdm_status *tdm_kshape_trilu(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *kt = ctx->n_in > 1 ? ctx->in[1] : NULL;
    tdm_tensor *y = ctx->out[0];
    if (x->rank < 2 || y->count != x->count) return shape_mismatch(ctx);
    int64_t k = 0;
    if (kt) {
        if (kt->count != 1 || (kt->dtype != TDM_INT64 && kt->dtype != TDM_INT32))
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "k must be an int64 scalar");
        k = tdm_kshape_index_at(kt, 0);
    }
    bool upper = tdm_attr_int(ctx->node, "upper", 1) != 0;
    int64_t R = x->dims[x->rank - 2], C = x->dims[x->rank - 1];
    if (R * C == 0) return NULL;
    if (k > C + 1) k = C + 1;
    if (k < -R - 1) k = -R - 1;
    size_t es = tdm_dtype_elem_size(x->dtype);
    int64_t rows = x->count / C;
    for (int64_t row = 0; row < rows; row++) {
        int64_t i = row % R, lim = i + k;
        int64_t j0 = upper ? lim : 0, j1 = upper ? C : lim + 1;
        j0 = j0 < 0 ? 0 : j0 > C ? C : j0;
        j1 = j1 < 0 ? 0 : j1 > C ? C : j1;
        char *dst = (char *)y->data + (size_t)(row * C) * es;
        const char *src = (const char *)x->data + (size_t)(row * C) * es;
        memset(dst, 0, (size_t)C * es);
        if (j1 > j0) memcpy(dst + (size_t)j0 * es, src + (size_t)j0 * es, (size_t)(j1 - j0) * es);
    }
    return tdm_kshape_own_strings(y);
}

/* ---- ReverseSequence ------------------------------------------------------------------ */

tdm_status *tdm_kshape_reverse_sequence(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *lens = ctx->in[1];
    tdm_tensor *y = ctx->out[0];
    int64_t ba = tdm_attr_int(ctx->node, "batch_axis", 1), ta = tdm_attr_int(ctx->node, "time_axis", 0);
    if (x->rank < 2 || !((ba == 0 && ta == 1) || (ba == 1 && ta == 0)) || y->count != x->count)
        return shape_mismatch(ctx);
    TDM_TRY(need_index_type(ctx, lens));
    int64_t B = x->dims[ba], T = x->dims[ta];
    if (lens->count != B)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "sequence_lens has %lld entries for a batch of %lld",
                              (long long)lens->count, (long long)B);
    if (B * T == 0) return NULL;
    int64_t inner = x->count / (B * T);
    size_t es = tdm_dtype_elem_size(x->dtype), blk = (size_t)inner * es;
    for (int64_t b = 0; b < B; b++) {
        int64_t len = tdm_kshape_index_at(lens, b);
        if (len < 0 || len > T)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "sequence_lens[%lld] = %lld is outside 0..%lld", (long long)b,
                                  (long long)len, (long long)T);
    }
    for (int64_t b = 0; b < B; b++) {
        int64_t len = tdm_kshape_index_at(lens, b);
        for (int64_t t = 0; t < T; t++) {
            int64_t s = t < len ? len - 1 - t : t;
            int64_t di = ta == 0 ? t * B + b : b * T + t, si = ta == 0 ? s * B + b : b * T + s;
            if (blk) memcpy((char *)y->data + (size_t)di * blk, (const char *)x->data + (size_t)si * blk, blk);
        }
    }
    return tdm_kshape_own_strings(y);
}

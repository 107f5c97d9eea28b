/* CPU kernels: shape family. This file holds the family's kernel table and the simple
 * kernels (copies, Dropout, Shape, Size, Constant, ConstantOfShape, EyeLike, Range);
 * k_shape_move.c and k_shape_index.c hold the others, k_shape_util.c the helpers. */
#include <string.h>

#include "backends/cpu/k_shape.h"
#include "core/alloc.h"

static tdm_status *shape_mismatch(const tdm_kernel_ctx *ctx) {
    return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "output shape does not match the inputs");
}

/* Reshape, Flatten, Squeeze, Unsqueeze, Identity: same elements, new shape. */
static tdm_status *k_copy(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    if (x->count != y->count || x->dtype != y->dtype) return shape_mismatch(ctx);
    tdm_kshape_copy_data(y, x);
    return tdm_kshape_own_strings(y);
}

/* ---- Dropout -------------------------------------------------------------------------- */

/* MT19937 with numpy's legacy double draw (two outputs -> 53 bits), so that a given `seed`
 * drops the same elements as the ONNX reference (np.random.seed(seed); uniform(0, 1)).
 * The state lives on the stack of each run: no global state. */
typedef struct mt_state {
    uint32_t mt[624];
    int i;
} mt_state;

static void mt_seed(mt_state *s, uint32_t seed) {
    s->mt[0] = seed;
    for (int i = 1; i < 624; i++)
        s->mt[i] = 1812433253u * (s->mt[i - 1] ^ (s->mt[i - 1] >> 30)) + (uint32_t)i;
    s->i = 624;
}

static uint32_t mt_next(mt_state *s) {
    if (s->i >= 624) {
        for (int k = 0; k < 624; k++) {
            uint32_t y = (s->mt[k] & 0x80000000u) | (s->mt[(k + 1) % 624] & 0x7fffffffu);
            s->mt[k] = s->mt[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        s->i = 0;
    }
    uint32_t y = s->mt[s->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

static double mt_double(mt_state *s) {
    uint32_t a = mt_next(s) >> 5, b = mt_next(s) >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
}

static tdm_status *k_dropout(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0], *mask = ctx->n_out > 1 ? ctx->out[1] : NULL;
    if (x->count != y->count || (mask && mask->count != x->count)) return shape_mismatch(ctx);
    double ratio = 0.5;
    bool training = false;
    if (ctx->opset >= 12) {
        const tdm_tensor *r = ctx->n_in > 1 ? ctx->in[1] : NULL;
        const tdm_tensor *t = ctx->n_in > 2 ? ctx->in[2] : NULL;
        if (r && r->count >= 1) ratio = tdm_tensor_get_f64(r, 0);
        training = t && t->count >= 1 && tdm_tensor_get_i64(t, 0) != 0;
    }
    if (!(ratio >= 0 && ratio <= 1))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "ratio %g is outside [0, 1]", ratio);
    if (!training || ratio == 0) {
        tdm_kshape_copy_data(y, x);
        if (mask) {
            unsigned char one[16] = {0};
            tdm_kshape_store(mask->dtype, one, 1.0);
            tdm_kshape_fill(mask->data, mask->count, one, tdm_dtype_elem_size(mask->dtype));
        }
        return NULL;
    }
    /* Training mode: drop with probability `ratio`, scale the rest by 1 / (1 - ratio). */
    mt_state rng;
    mt_seed(&rng, (uint32_t)tdm_attr_int(ctx->node, "seed", 0));
    double scale = ratio < 1 ? 1.0 / (1.0 - ratio) : 0;
    size_t es = tdm_dtype_elem_size(x->dtype);
    for (int64_t i = 0; i < x->count; i++) {
        double u = mt_double(&rng);
        bool keep = u >= ratio;
        double v = keep ? tdm_tensor_get_f64(x, i) * scale : 0;
        tdm_kshape_store(x->dtype, (char *)y->data + (size_t)i * es, v);
        if (mask)
            tdm_kshape_store(mask->dtype,
                             (char *)mask->data + (size_t)i * tdm_dtype_elem_size(mask->dtype),
                             keep ? 1.0 : 0.0);
    }
    return NULL;
}

/* ---- Shape / Size --------------------------------------------------------------------- */

static tdm_status *k_shape(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    int s, e;
    tdm_shape_shape_range(ctx->node, ctx->opset, x->rank, &s, &e);
    if (y->dtype != TDM_INT64 || y->count != e - s) return shape_mismatch(ctx);
    int64_t *o = y->data;
    for (int i = s; i < e; i++) o[i - s] = x->dims[i];
    return NULL;
}

static tdm_status *k_size(tdm_kernel_ctx *ctx) {
    tdm_tensor *y = ctx->out[0];
    if (y->dtype != TDM_INT64 || y->count != 1) return shape_mismatch(ctx);
    *(int64_t *)y->data = ctx->in[0]->count;
    return NULL;
}

/* ---- Constant / ConstantOfShape / EyeLike / Range ------------------------------------- */

static tdm_status *k_constant(tdm_kernel_ctx *ctx) {
    tdm_tensor *y = ctx->out[0];
    const tdm_node *nd = ctx->node;
    for (int i = 0; i < nd->n_attrs; i++) {
        const tdm_attr *a = &nd->attrs[i];
        const char *nm = a->name;
        if (!strcmp(nm, "value") && a->t) {
            if (a->t->count != y->count || a->t->dtype != y->dtype) return shape_mismatch(ctx);
            tdm_kshape_copy_data(y, a->t);
        } else if (!strcmp(nm, "value_float") || !strcmp(nm, "value_int")) {
            if (y->count != 1) return shape_mismatch(ctx);
            if (nm[6] == 'f') tdm_kshape_store(y->dtype, y->data, a->f);
            else *(int64_t *)y->data = a->i;
        } else if (!strcmp(nm, "value_floats")) {
            if (y->dtype != TDM_FLOAT || (size_t)y->count != a->n) return shape_mismatch(ctx);
            if (a->n) memcpy(y->data, a->floats, a->n * sizeof(float));
        } else if (!strcmp(nm, "value_ints")) {
            if (y->dtype != TDM_INT64 || (size_t)y->count != a->n) return shape_mismatch(ctx);
            if (a->n) memcpy(y->data, a->ints, a->n * sizeof(int64_t));
        } else if (!strcmp(nm, "value_string")) {
            if (y->dtype != TDM_STRING || y->count != 1) return shape_mismatch(ctx);
            ((const char **)y->data)[0] = a->s;
        } else if (!strcmp(nm, "value_strings")) {
            if (y->dtype != TDM_STRING || (size_t)y->count != a->n) return shape_mismatch(ctx);
            for (size_t k = 0; k < a->n; k++) ((char **)y->data)[k] = a->strings[k];
        } else {
            continue;
        }
        return tdm_kshape_own_strings(y);
    }
    return tdm_node_error(nd, TDM_ERR_INVALID_MODEL, "no value attribute");
}

static tdm_status *k_constant_of_shape(tdm_kernel_ctx *ctx) {
    tdm_tensor *y = ctx->out[0];
    const tdm_tensor *v = tdm_attr_tensor(ctx->node, "value");
    unsigned char zero[16] = {0};
    if (v && (v->count != 1 || v->dtype != y->dtype)) return shape_mismatch(ctx);
    if (!v && y->dtype != TDM_FLOAT) return shape_mismatch(ctx);
    tdm_kshape_fill(y->data, y->count, v ? v->data : zero, tdm_dtype_elem_size(y->dtype));
    return tdm_kshape_own_strings(y);
}

static tdm_status *k_eyelike(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    if (x->rank != 2 || y->rank != 2 || y->dims[0] != x->dims[0] || y->dims[1] != x->dims[1])
        return shape_mismatch(ctx);
    int64_t R = y->dims[0], C = y->dims[1], k = tdm_attr_int(ctx->node, "k", 0);
    size_t es = tdm_dtype_elem_size(y->dtype);
    unsigned char one[16] = {0};
    tdm_kshape_store(y->dtype, one, 1.0);
    memset(y->data, 0, y->nbytes);
    if (k > C) k = C;
    if (k < -R) k = -R;
    int64_t i0 = k < 0 ? -k : 0;
    for (int64_t i = i0; i < R && i + k < C; i++)
        memcpy((char *)y->data + (size_t)(i * C + i + k) * es, one, es);
    return NULL;
}

static tdm_status *k_range(tdm_kernel_ctx *ctx) {
    const tdm_tensor *s = ctx->in[0], *l = ctx->in[1], *d = ctx->in[2];
    tdm_tensor *y = ctx->out[0];
    int64_t n;
    if (l->dtype != s->dtype || d->dtype != s->dtype)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "inputs differ in type");
    TDM_TRY(tdm_shape_range_count(ctx->node, s, l, d, &n));
    if (y->count != n || y->dtype != s->dtype) return shape_mismatch(ctx);
    if (tdm_dtype_is_float(s->dtype)) {
        double a = tdm_tensor_get_f64(s, 0), b = tdm_tensor_get_f64(d, 0);
        if (s->dtype == TDM_FLOAT) {
            float *o = y->data;
            for (int64_t i = 0; i < n; i++) o[i] = (float)(a + (double)i * b);
        } else if (s->dtype == TDM_DOUBLE) {
            double *o = y->data;
            for (int64_t i = 0; i < n; i++) o[i] = a + (double)i * b;
        } else {
            size_t es = tdm_dtype_elem_size(s->dtype);
            for (int64_t i = 0; i < n; i++)
                tdm_kshape_store(s->dtype, (char *)y->data + (size_t)i * es, a + (double)i * b);
        }
        return NULL;
    }
    int64_t a = tdm_tensor_get_i64(s, 0), b = tdm_tensor_get_i64(d, 0);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = (int64_t)((uint64_t)a + (uint64_t)i * (uint64_t)b);
        switch (s->dtype) {
        case TDM_INT64: ((int64_t *)y->data)[i] = v; break;
        case TDM_INT32: ((int32_t *)y->data)[i] = (int32_t)v; break;
        case TDM_INT16: ((int16_t *)y->data)[i] = (int16_t)v; break;
        default: tdm_kshape_store(s->dtype, (char *)y->data + (size_t)i * tdm_dtype_elem_size(s->dtype), (double)v);
        }
    }
    return NULL;
}

/* ---- the family table ------------------------------------------------------------------ */

/* Pure data movement works on every element type, complex included. */
#define ANY (TDM_T_ALL | TDM_T(TDM_COMPLEX64) | TDM_T(TDM_COMPLEX128))
#define IDX (TDM_T(TDM_INT32) | TDM_T(TDM_INT64))
/* A copy writes all of Y and may become nothing: Y takes X's memory (in place). */
#define COPY (TDM_KF_WRITES_ALL | TDM_KF_INPLACE(0))

const tdm_kernel_def tdm_cpu_kernels_shape[] = {
    /* domain, op, since, until, type_input, types, run, prepare, release, flags */
    {"", "Reshape", 1, 0, 0, ANY, k_copy, NULL, NULL, COPY},
    {"", "Flatten", 1, 0, 0, ANY, k_copy, NULL, NULL, COPY},
    {"", "Squeeze", 1, 0, 0, ANY, k_copy, NULL, NULL, COPY},
    {"", "Unsqueeze", 1, 0, 0, ANY, k_copy, NULL, NULL, COPY},
    {"", "Identity", 1, 0, 0, ANY, k_copy, NULL, NULL, COPY},
    {"", "Dropout", 1, 0, 0, TDM_T_FLOATS, k_dropout},
    {"", "Shape", 1, 0, 0, ANY, k_shape},
    {"", "Size", 1, 0, 0, ANY, k_size},
    {"", "Constant", 1, 0, -1, 0, k_constant},
    {"", "ConstantOfShape", 9, 0, 0, IDX, k_constant_of_shape},
    {"", "EyeLike", 9, 0, 0, TDM_T_NUMERIC | TDM_T(TDM_BOOL), k_eyelike},
    {"", "Range", 11, 0, 0,
     TDM_T(TDM_FLOAT) | TDM_T(TDM_DOUBLE) | TDM_T(TDM_INT16) | TDM_T(TDM_INT32) | TDM_T(TDM_INT64),
     k_range},
    {"", "Transpose", 1, 0, 0, ANY, tdm_kshape_transpose, NULL, NULL, TDM_KF_WRITES_ALL},
    {"", "Concat", 1, 0, 0, ANY, tdm_kshape_concat, NULL, NULL, TDM_KF_WRITES_ALL},
    {"", "Split", 1, 0, 0, ANY, tdm_kshape_split, NULL, NULL, TDM_KF_WRITES_ALL},
    {"", "Slice", 1, 0, 0, ANY, tdm_kshape_slice},
    {"", "Pad", 1, 0, 0, ANY, tdm_kshape_pad},
    {"", "DepthToSpace", 1, 0, 0, ANY, tdm_kshape_depthtospace},
    {"", "SpaceToDepth", 1, 0, 0, ANY, tdm_kshape_spacetodepth},
    {"", "Expand", 8, 0, 0, ANY, tdm_kshape_expand},
    {"", "Tile", 6, 0, 0, ANY, tdm_kshape_tile},
    {"", "Gather", 1, 0, 0, ANY, tdm_kshape_gather, NULL, NULL, TDM_KF_WRITES_ALL},
    {"", "GatherElements", 11, 0, 0, ANY, tdm_kshape_gather_elements},
    {"", "GatherND", 11, 0, 0, ANY, tdm_kshape_gather_nd},
    {"", "ScatterND", 11, 0, 0, ANY, tdm_kshape_scatter_nd},
    {"", "ScatterElements", 11, 0, 0, ANY, tdm_kshape_scatter_elements},
    {"", "Scatter", 9, 10, 0, ANY, tdm_kshape_scatter_elements},
    {"", "OneHot", 9, 0, 2, ANY, tdm_kshape_onehot},
    {"", "Compress", 9, 0, 0, ANY, tdm_kshape_compress},
    {"", "NonZero", 9, 0, 0, ANY, tdm_kshape_nonzero},
    {"", "Trilu", 14, 0, 0, ANY, tdm_kshape_trilu},
    {"", "ReverseSequence", 10, 0, 0, ANY, tdm_kshape_reverse_sequence},
};
const int tdm_cpu_kernels_shape_count =
    (int)(sizeof tdm_cpu_kernels_shape / sizeof tdm_cpu_kernels_shape[0]);

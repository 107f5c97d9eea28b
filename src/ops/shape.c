/* Operator schemas: shape family (data movement, indexing and shape-making ops).
 *
 * This file holds the family table and the shape functions of the simple ops (Reshape,
 * Flatten, Squeeze, Unsqueeze, Shape, Size, Identity, Dropout, Constant, ConstantOfShape,
 * EyeLike, Range). shape_layout.c and shape_index.c hold the others. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "core/checked.h"
#include "ops/shape_impl.h"

static const tdm_value_info *in_opt(const tdm_infer_ctx *c, int i) {
    return i < c->n_in && c->in[i].present ? &c->in[i] : NULL;
}

static void set_unknown_dims(tdm_value_info *v, int rank) {
    v->rank = rank;
    for (int i = 0; i < TDM_MAX_RANK; i++) v->dims[i] = TDM_DIM_UNKNOWN;
}

/* Product of known dims; false when a dim is unknown (rank must be known). */
static tdm_status *known_count(const tdm_infer_ctx *c, const tdm_value_info *v, int from, int to,
                               int64_t *out, bool *known) {
    int64_t n = 1;
    *known = true;
    for (int i = from; i < to; i++) {
        if (v->dims[i] < 0) {
            *known = false;
            continue;
        }
        if (!tdm_mul_i64(n, v->dims[i], &n))
            return tdm_node_error(c->node, TDM_ERR_LIMIT, "element count overflows");
    }
    *out = n;
    return NULL;
}

/* ---- Reshape ------------------------------------------------------------------------ */

static tdm_status *infer_reshape(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0];
    tdm_value_info *y = &c->out[0];
    int64_t shp[TDM_MAX_RANK];
    int n = 0;
    y->dtype = x->dtype;
    if (c->opset < 5) {
        size_t cnt;
        const int64_t *s = tdm_attr_ints(c->node, "shape", &cnt);
        if (!s) return tdm_node_error(c->node, TDM_ERR_INVALID_MODEL, "attribute 'shape' is missing");
        if (cnt > TDM_MAX_RANK)
            return tdm_node_error(c->node, TDM_ERR_LIMIT, "target rank %zu exceeds %d", cnt,
                                  TDM_MAX_RANK);
        n = (int)cnt;
        memcpy(shp, s, cnt * sizeof *s);
    } else {
        const tdm_value_info *s = in_opt(c, 1);
        if (!s) return tdm_node_error(c->node, TDM_ERR_INVALID_MODEL, "input 'shape' is missing");
        if (!s->data) {
            if (s->rank == 1 && s->dims[0] >= 0 && s->dims[0] <= TDM_MAX_RANK)
                set_unknown_dims(y, (int)s->dims[0]);
            return NULL;
        }
        TDM_TRY(tdm_read_ints(c->node, "shape", s->data, shp, TDM_MAX_RANK, &n));
    }
    bool allowzero = c->opset >= 14 && tdm_attr_int(c->node, "allowzero", 0) != 0;
    int neg = -1;
    bool has_zero = false;
    for (int i = 0; i < n; i++) {
        int64_t v = shp[i];
        if (v == -1) {
            if (neg >= 0)
                return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                      "shape has more than one -1");
            neg = i;
            y->dims[i] = TDM_DIM_UNKNOWN;
        } else if (v < -1) {
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "shape[%d] = %lld is invalid",
                                  i, (long long)v);
        } else if (v == 0 && !allowzero) {
            if (x->rank >= 0 && i >= x->rank)
                return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                      "shape[%d] = 0 copies a dimension the rank-%d input lacks", i,
                                      x->rank);
            y->dims[i] = x->rank >= 0 ? x->dims[i] : TDM_DIM_UNKNOWN;
        } else {
            if (v == 0) has_zero = true;
            y->dims[i] = v;
        }
    }
    if (has_zero && neg >= 0)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "shape has both 0 and -1 while allowzero is set");
    y->rank = n;
    if (x->rank < 0) return NULL;
    /* A dim copied by 0 appears on both sides: when unknown it cancels out, so
     * [N,3,4] -> [0,-1] still gives [N,12]. */
    int64_t total = 1, rest = 1;
    bool known = true, cancelled = false;
    for (int i = 0; i < x->rank; i++) {
        bool copied = i < n && shp[i] == 0 && !allowzero;
        if (copied && x->dims[i] < 0) {
            cancelled = true; /* (a zero-sized copied dim would make any shape valid) */
            continue;
        }
        if (x->dims[i] < 0) known = false;
        else if (!tdm_mul_i64(total, x->dims[i], &total))
            return tdm_node_error(c->node, TDM_ERR_LIMIT, "element count overflows");
    }
    for (int i = 0; i < n; i++) {
        bool copied = shp[i] == 0 && !allowzero;
        if (i == neg || (copied && y->dims[i] < 0)) continue;
        if (y->dims[i] < 0) {
            known = false;
            continue;
        }
        if (!tdm_mul_i64(rest, y->dims[i], &rest))
            return tdm_node_error(c->node, TDM_ERR_LIMIT, "target shape overflows");
    }
    if (!known) return NULL;
    char a[128], b[128];
    if (cancelled && (neg >= 0 ? rest == 0 || total % rest != 0 : rest != total)) return NULL;
    if (neg >= 0) {
        if (rest == 0 || total % rest != 0)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "cannot reshape %s into %s",
                                  tdm_shape_str(x->rank, x->dims, a, sizeof a),
                                  tdm_shape_str(n, shp, b, sizeof b));
        y->dims[neg] = total / rest;
    } else if (rest != total) {
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "cannot reshape %s into %s",
                              tdm_shape_str(x->rank, x->dims, a, sizeof a),
                              tdm_shape_str(n, y->dims, b, sizeof b));
    }
    return NULL;
}

/* ---- Flatten ------------------------------------------------------------------------ */

static tdm_status *infer_flatten(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0];
    tdm_value_info *y = &c->out[0];
    y->dtype = x->dtype;
    y->rank = 2;
    y->dims[0] = y->dims[1] = TDM_DIM_UNKNOWN;
    if (x->rank < 0) return NULL;
    int64_t axis = tdm_attr_int(c->node, "axis", 1);
    if (axis < -(int64_t)x->rank || axis > x->rank)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "axis %lld is out of range for rank %d", (long long)axis, x->rank);
    if (axis < 0) axis += x->rank;
    int64_t n = 0;
    bool known;
    TDM_TRY(known_count(c, x, 0, (int)axis, &n, &known));
    if (known) y->dims[0] = n;
    TDM_TRY(known_count(c, x, (int)axis, x->rank, &n, &known));
    if (known) y->dims[1] = n;
    return NULL;
}

/* ---- Squeeze / Unsqueeze -------------------------------------------------------------- */

/* Reads the axes (attribute before opset 13, input 1 after). *have = false when the axes are
 * absent; *unknown_len = length when present but not known yet (-1 if not even that). */
static tdm_status *read_axes(const tdm_infer_ctx *c, int64_t *axes, int *n, bool *have,
                             bool *known, int *len_hint) {
    *have = false;
    *known = true;
    *n = 0;
    *len_hint = -1;
    if (c->opset < 13) {
        size_t cnt;
        const int64_t *a = tdm_attr_ints(c->node, "axes", &cnt);
        if (!a) return NULL;
        if (cnt > TDM_MAX_RANK)
            return tdm_node_error(c->node, TDM_ERR_LIMIT, "too many axes (%zu)", cnt);
        memcpy(axes, a, cnt * sizeof *a);
        *n = (int)cnt;
        *have = true;
        return NULL;
    }
    const tdm_value_info *a = in_opt(c, 1);
    if (!a) return NULL;
    *have = true;
    if (!a->data) {
        *known = false;
        if (a->rank == 1 && a->dims[0] >= 0 && a->dims[0] <= TDM_MAX_RANK) *len_hint = (int)a->dims[0];
        return NULL;
    }
    return tdm_read_ints(c->node, "axes", a->data, axes, TDM_MAX_RANK, n);
}

static tdm_status *infer_squeeze(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0];
    tdm_value_info *y = &c->out[0];
    int64_t axes[TDM_MAX_RANK];
    int n, hint;
    bool have, known;
    y->dtype = x->dtype;
    TDM_TRY(read_axes(c, axes, &n, &have, &known, &hint));
    if (x->rank < 0) return NULL;
    if (have && !known) {
        if (hint >= 0 && hint <= x->rank) set_unknown_dims(y, x->rank - hint);
        return NULL;
    }
    bool drop[TDM_MAX_RANK] = {false};
    if (have) {
        for (int i = 0; i < n; i++) {
            int ax;
            TDM_TRY(tdm_norm_axis(c->node, axes[i], x->rank, &ax));
            if (drop[ax])
                return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "axis %d repeated", ax);
            if (x->dims[ax] >= 0 && x->dims[ax] != 1)
                return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                      "cannot squeeze axis %d of size %lld", ax,
                                      (long long)x->dims[ax]);
            drop[ax] = true;
        }
    } else {
        for (int i = 0; i < x->rank; i++) {
            if (x->dims[i] < 0) return NULL; /* might be 1: rank unknown */
            drop[i] = x->dims[i] == 1;
        }
    }
    int r = 0;
    for (int i = 0; i < x->rank; i++)
        if (!drop[i]) y->dims[r++] = x->dims[i];
    y->rank = r;
    return NULL;
}

static tdm_status *infer_unsqueeze(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0];
    tdm_value_info *y = &c->out[0];
    int64_t axes[TDM_MAX_RANK];
    int n, hint;
    bool have, known;
    y->dtype = x->dtype;
    TDM_TRY(read_axes(c, axes, &n, &have, &known, &hint));
    if (!have) return tdm_node_error(c->node, TDM_ERR_INVALID_MODEL, "axes are missing");
    if (x->rank < 0) return NULL;
    if (!known) {
        if (hint >= 0 && x->rank + hint <= TDM_MAX_RANK) set_unknown_dims(y, x->rank + hint);
        return NULL;
    }
    int r = x->rank + n;
    if (r > TDM_MAX_RANK)
        return tdm_node_error(c->node, TDM_ERR_LIMIT, "output rank %d exceeds %d", r, TDM_MAX_RANK);
    bool ins[TDM_MAX_RANK] = {false};
    for (int i = 0; i < n; i++) {
        int ax;
        TDM_TRY(tdm_norm_axis(c->node, axes[i], r, &ax));
        if (ins[ax]) return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "axis %d repeated", ax);
        ins[ax] = true;
    }
    for (int i = 0, j = 0; i < r; i++) y->dims[i] = ins[i] ? 1 : x->dims[j++];
    y->rank = r;
    return NULL;
}

/* ---- Shape / Size / Identity / Dropout ------------------------------------------------- */

/* Range [start, end) of dims that Shape returns (opset 15 attributes). */
void tdm_shape_shape_range(const tdm_node *node, int opset, int rank, int *start, int *end) {
    int64_t s = opset >= 15 ? tdm_attr_int(node, "start", 0) : 0;
    int64_t e = opset >= 15 ? tdm_attr_int(node, "end", rank) : rank;
    if (s < 0) s += rank;
    if (e < 0) e += rank;
    s = s < 0 ? 0 : s > rank ? rank : s;
    e = e < 0 ? 0 : e > rank ? rank : e;
    *start = (int)s;
    *end = (int)(e < s ? s : e);
}

static tdm_status *infer_shape(tdm_infer_ctx *c) {
    tdm_value_info *y = &c->out[0];
    y->dtype = TDM_INT64;
    y->rank = 1;
    y->dims[0] = TDM_DIM_UNKNOWN;
    if (c->in[0].rank >= 0) {
        int s, e;
        tdm_shape_shape_range(c->node, c->opset, c->in[0].rank, &s, &e);
        y->dims[0] = e - s;
    }
    return NULL;
}

static tdm_status *infer_size(tdm_infer_ctx *c) {
    c->out[0].dtype = TDM_INT64;
    c->out[0].rank = 0;
    return NULL;
}

static tdm_status *infer_identity(tdm_infer_ctx *c) {
    tdm_infer_copy(&c->out[0], &c->in[0]);
    return NULL;
}

static tdm_status *infer_dropout(tdm_infer_ctx *c) {
    tdm_infer_copy(&c->out[0], &c->in[0]);
    if (c->n_out > 1 && c->out[1].present) {
        tdm_infer_copy(&c->out[1], &c->in[0]);
        c->out[1].dtype = c->opset >= 10 ? TDM_BOOL : c->in[0].dtype;
    }
    const tdm_value_info *r = in_opt(c, 1);
    if (c->opset >= 12 && r && r->data && r->data->count >= 1) {
        double ratio = tdm_tensor_get_f64(r->data, 0);
        if (!(ratio >= 0 && ratio <= 1))
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "ratio %g is outside [0, 1]",
                                  ratio);
    }
    return NULL;
}

/* ---- Constant / ConstantOfShape / EyeLike / Range ------------------------------------ */

static tdm_status *infer_constant(tdm_infer_ctx *c) {
    tdm_value_info *y = &c->out[0];
    const tdm_node *nd = c->node;
    int found = 0;
    for (int i = 0; i < nd->n_attrs; i++) {
        const tdm_attr *a = &nd->attrs[i];
        const char *nm = a->name;
        if (!strcmp(nm, "value") && a->type == TDM_ATTR_TENSOR && a->t) {
            y->dtype = a->t->dtype;
            y->rank = a->t->rank;
            memcpy(y->dims, a->t->dims, sizeof(int64_t) * (size_t)a->t->rank);
        } else if (!strcmp(nm, "value_float") || !strcmp(nm, "value_int") ||
                   !strcmp(nm, "value_string")) {
            y->dtype = nm[6] == 'f' ? TDM_FLOAT : nm[6] == 'i' ? TDM_INT64 : TDM_STRING;
            y->rank = 0;
        } else if (!strcmp(nm, "value_floats") || !strcmp(nm, "value_ints") ||
                   !strcmp(nm, "value_strings")) {
            y->dtype = nm[6] == 'f' ? TDM_FLOAT : nm[6] == 'i' ? TDM_INT64 : TDM_STRING;
            y->rank = 1;
            y->dims[0] = (int64_t)a->n;
        } else if (!strcmp(nm, "sparse_value")) {
            return tdm_node_error(nd, TDM_ERR_UNSUPPORTED, "sparse_value is not supported");
        } else {
            continue;
        }
        found++;
    }
    if (found != 1)
        return tdm_node_error(nd, TDM_ERR_INVALID_MODEL,
                              "exactly one value attribute is required (found %d)", found);
    return NULL;
}

static tdm_status *infer_constant_of_shape(tdm_infer_ctx *c) {
    const tdm_value_info *s = &c->in[0];
    tdm_value_info *y = &c->out[0];
    const tdm_tensor *v = tdm_attr_tensor(c->node, "value");
    if (v && v->count != 1)
        return tdm_node_error(c->node, TDM_ERR_INVALID_MODEL, "'value' must have one element");
    y->dtype = v ? v->dtype : TDM_FLOAT;
    if (!s->data) {
        if (s->rank == 1 && s->dims[0] >= 0 && s->dims[0] <= TDM_MAX_RANK)
            set_unknown_dims(y, (int)s->dims[0]);
        return NULL;
    }
    int64_t d[TDM_MAX_RANK];
    int n;
    TDM_TRY(tdm_read_ints(c->node, "shape", s->data, d, TDM_MAX_RANK, &n));
    for (int i = 0; i < n; i++) {
        if (d[i] < 0)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "shape[%d] = %lld is negative",
                                  i, (long long)d[i]);
        y->dims[i] = d[i];
    }
    y->rank = n;
    return NULL;
}

static tdm_status *infer_eyelike(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0];
    tdm_value_info *y = &c->out[0];
    tdm_infer_copy(y, x);
    int64_t dt = tdm_attr_int(c->node, "dtype", (int64_t)x->dtype);
    if (dt == TDM_UNDEFINED && !tdm_node_attr(c->node, "dtype")) return NULL; /* not known yet */
    if (dt <= 0 || dt >= TDM_DTYPE_COUNT || dt == TDM_STRING || dt == TDM_COMPLEX64 ||
        dt == TDM_COMPLEX128)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "unsupported dtype %lld",
                              (long long)dt);
    y->dtype = (tdm_dtype)dt;
    if (x->rank >= 0 && x->rank != 2)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "input must be 2-D, got rank %d",
                              x->rank);
    return NULL;
}

/* Number of elements Range produces; error when delta is 0 or the count is too large. */
tdm_status *tdm_shape_range_count(const tdm_node *node, const tdm_tensor *start,
                                  const tdm_tensor *limit, const tdm_tensor *delta, int64_t *n) {
    if (start->count != 1 || limit->count != 1 || delta->count != 1)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "start, limit and delta must be scalars");
    if (tdm_dtype_is_float(start->dtype)) {
        double s = tdm_tensor_get_f64(start, 0), l = tdm_tensor_get_f64(limit, 0);
        double d = tdm_tensor_get_f64(delta, 0);
        if (d == 0 || d != d || s != s || l != l)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "delta is zero or a value is NaN");
        double k = ceil((l - s) / d);
        if (!(k < 1e12))
            return tdm_node_error(node, TDM_ERR_LIMIT, "range of %g elements is too large", k);
        *n = k > 0 ? (int64_t)k : 0;
        return NULL;
    }
    int64_t s = tdm_tensor_get_i64(start, 0), l = tdm_tensor_get_i64(limit, 0);
    int64_t d = tdm_tensor_get_i64(delta, 0);
    if (d == 0) return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "delta is zero");
    __int128 diff = (__int128)l - s, dd = d, k = 0;
    if ((diff > 0 && dd > 0) || (diff < 0 && dd < 0)) {
        if (diff < 0) {
            diff = -diff;
            dd = -dd;
        }
        k = (diff + dd - 1) / dd;
    }
    if (k > ((int64_t)1 << 40))
        return tdm_node_error(node, TDM_ERR_LIMIT, "range is too large");
    *n = (int64_t)k;
    return NULL;
}

static tdm_status *infer_range(tdm_infer_ctx *c) {
    tdm_value_info *y = &c->out[0];
    y->dtype = c->in[0].dtype;
    y->rank = 1;
    y->dims[0] = TDM_DIM_UNKNOWN;
    for (int i = 0; i < 3; i++) {
        if (c->in[i].rank > 0 && c->in[i].dims[0] >= 0 &&
            (c->in[i].rank > 1 || c->in[i].dims[0] != 1))
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "input %d must be a scalar", i);
        if (!c->in[i].data) return NULL;
    }
    int64_t n = 0;
    TDM_TRY(tdm_shape_range_count(c->node, c->in[0].data, c->in[1].data, c->in[2].data, &n));
    y->dims[0] = n;
    return NULL;
}

/* ---- the family table ------------------------------------------------------------------ */

#define V INT_MAX
#define B(i) (1u << (i))

const tdm_op_schema tdm_ops_shape[] = {
    /* domain, name, since, min_in, max_in, min_out, max_out, infer, flags, shape_inputs */
    {"", "Reshape", 1, 1, 2, 1, 1, infer_reshape, 0, B(1)},
    {"", "Flatten", 1, 1, 1, 1, 1, infer_flatten, 0, 0},
    {"", "Squeeze", 1, 1, 2, 1, 1, infer_squeeze, 0, B(1)},
    {"", "Unsqueeze", 1, 1, 2, 1, 1, infer_unsqueeze, 0, B(1)},
    {"", "Shape", 1, 1, 1, 1, 1, infer_shape, 0, 0},
    {"", "Size", 1, 1, 1, 1, 1, infer_size, 0, 0},
    {"", "Identity", 1, 1, 1, 1, 1, infer_identity, 0, 0},
    {"", "Dropout", 1, 1, 3, 1, 2, infer_dropout, 0, 0},
    {"", "Constant", 1, 0, 0, 1, 1, infer_constant, 0, 0},
    {"", "ConstantOfShape", 9, 1, 1, 1, 1, infer_constant_of_shape, 0, B(0)},
    {"", "EyeLike", 9, 1, 1, 1, 1, infer_eyelike, 0, 0},
    {"", "Range", 11, 3, 3, 1, 1, infer_range, 0, B(0) | B(1) | B(2)},
    {"", "Transpose", 1, 1, 1, 1, 1, tdm_shape_infer_transpose, 0, 0},
    {"", "Concat", 1, 1, V, 1, 1, tdm_shape_infer_concat, 0, 0},
    {"", "Split", 1, 1, 2, 1, V, tdm_shape_infer_split, 0, B(1)},
    {"", "Slice", 1, 1, 5, 1, 1, tdm_shape_infer_slice, 0, B(1) | B(2) | B(3) | B(4)},
    {"", "Pad", 1, 1, 4, 1, 1, tdm_shape_infer_pad, 0, B(1) | B(3)},
    {"", "DepthToSpace", 1, 1, 1, 1, 1, tdm_shape_infer_depthtospace, 0, 0},
    {"", "SpaceToDepth", 1, 1, 1, 1, 1, tdm_shape_infer_spacetodepth, 0, 0},
    {"", "Expand", 8, 2, 2, 1, 1, tdm_shape_infer_expand, 0, B(1)},
    {"", "Tile", 6, 2, 2, 1, 1, tdm_shape_infer_tile, 0, B(1)},
    {"", "Gather", 1, 2, 2, 1, 1, tdm_shape_infer_gather, 0, 0},
    {"", "GatherElements", 11, 2, 2, 1, 1, tdm_shape_infer_gather_elements, 0, 0},
    {"", "GatherND", 11, 2, 2, 1, 1, tdm_shape_infer_gather_nd, 0, 0},
    {"", "ScatterND", 11, 3, 3, 1, 1, tdm_shape_infer_scatter, 0, 0},
    {"", "ScatterElements", 11, 3, 3, 1, 1, tdm_shape_infer_scatter, 0, 0},
    {"", "Scatter", 9, 3, 3, 1, 1, tdm_shape_infer_scatter, 0, 0},
    {"", "OneHot", 9, 3, 3, 1, 1, tdm_shape_infer_onehot, 0, B(1)},
    {"", "Compress", 9, 2, 2, 1, 1, tdm_shape_infer_compress, TDM_OP_DATA_DEPENDENT, 0},
    {"", "NonZero", 9, 1, 1, 1, 1, tdm_shape_infer_nonzero, TDM_OP_DATA_DEPENDENT, 0},
    {"", "Trilu", 14, 1, 2, 1, 1, tdm_shape_infer_trilu, 0, 0},
    {"", "ReverseSequence", 10, 2, 2, 1, 1, tdm_shape_infer_reverse_sequence, 0, 0},
};
const int tdm_ops_shape_count = (int)(sizeof tdm_ops_shape / sizeof tdm_ops_shape[0]);

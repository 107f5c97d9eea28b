/* Operator schemas: shape family, layout ops (Transpose, Concat, Split, Slice, Pad,
 * DepthToSpace, SpaceToDepth, Expand, Tile) and the plans their kernels share. */
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

/* ---- Transpose ------------------------------------------------------------------------ */

tdm_status *tdm_shape_transpose_perm(const tdm_node *node, int rank, int *perm) {
    size_t n;
    const int64_t *p = tdm_attr_ints(node, "perm", &n);
    if (!p) {
        for (int i = 0; i < rank; i++) perm[i] = rank - 1 - i;
        return NULL;
    }
    if ((int64_t)n != rank)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "perm has %zu entries for rank %d", n,
                              rank);
    bool seen[TDM_MAX_RANK] = {false};
    for (int i = 0; i < rank; i++) {
        int a;
        TDM_TRY(tdm_norm_axis(node, p[i], rank, &a));
        if (seen[a])
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "perm repeats axis %d", a);
        seen[a] = true;
        perm[i] = a;
    }
    return NULL;
}

tdm_status *tdm_shape_infer_transpose(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0];
    tdm_value_info *y = &c->out[0];
    y->dtype = x->dtype;
    if (x->rank < 0) {
        size_t n;
        if (tdm_attr_ints(c->node, "perm", &n) && n <= TDM_MAX_RANK) set_unknown_dims(y, (int)n);
        return NULL;
    }
    int perm[TDM_MAX_RANK];
    TDM_TRY(tdm_shape_transpose_perm(c->node, x->rank, perm));
    y->rank = x->rank;
    for (int i = 0; i < x->rank; i++) y->dims[i] = x->dims[perm[i]];
    return NULL;
}

/* ---- Concat --------------------------------------------------------------------------- */

tdm_status *tdm_shape_infer_concat(tdm_infer_ctx *c) {
    tdm_value_info *y = &c->out[0];
    const tdm_attr *aa = tdm_node_attr(c->node, "axis");
    if (!aa && c->opset >= 4)
        return tdm_node_error(c->node, TDM_ERR_INVALID_MODEL, "attribute 'axis' is missing");
    int64_t axis64 = aa ? aa->i : 1;
    int rank = -1;
    for (int k = 0; k < c->n_in; k++) {
        const tdm_value_info *v = &c->in[k];
        if (!v->present)
            return tdm_node_error(c->node, TDM_ERR_INVALID_MODEL, "input %d is missing", k);
        if (y->dtype == TDM_UNDEFINED) y->dtype = v->dtype;
        if (v->dtype != TDM_UNDEFINED && v->dtype != y->dtype)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "inputs have different types");
        if (v->rank < 0) continue;
        if (rank >= 0 && v->rank != rank)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                  "inputs have different ranks (%d and %d)", rank, v->rank);
        rank = v->rank;
    }
    if (rank < 0) return NULL;
    if (rank == 0) return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "cannot concat scalars");
    int axis;
    TDM_TRY(tdm_norm_axis(c->node, axis64, rank, &axis));
    set_unknown_dims(y, rank);
    int64_t sum = 0;
    bool sum_known = true;
    for (int k = 0; k < c->n_in; k++) {
        const tdm_value_info *v = &c->in[k];
        if (v->rank < 0) {
            sum_known = false;
            continue;
        }
        for (int d = 0; d < rank; d++) {
            int64_t x = v->dims[d];
            if (d == axis) {
                if (x < 0) sum_known = false;
                else if (!tdm_add_i64(sum, x, &sum))
                    return tdm_node_error(c->node, TDM_ERR_LIMIT, "concat size overflows");
                continue;
            }
            if (x < 0) continue;
            if (y->dims[d] >= 0 && y->dims[d] != x) {
                char a[128], b[128];
                return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                      "input %d shape %s differs from %s outside axis %d", k,
                                      tdm_shape_str(v->rank, v->dims, a, sizeof a),
                                      tdm_shape_str(c->in[0].rank, c->in[0].dims, b, sizeof b),
                                      axis);
            }
            y->dims[d] = x;
        }
    }
    y->dims[axis] = sum_known ? sum : TDM_DIM_UNKNOWN;
    return NULL;
}

/* ---- Split ---------------------------------------------------------------------------- */

tdm_status *tdm_shape_infer_split(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0];
    int n = c->n_out;
    for (int i = 0; i < n; i++) c->out[i].dtype = x->dtype;
    if (x->rank < 0) return NULL;
    int axis;
    TDM_TRY(tdm_norm_axis(c->node, tdm_attr_int(c->node, "axis", 0), x->rank, &axis));
    int64_t dim = x->dims[axis];
    /* Sources of sizes, in order: the split input, the split attribute (before 13),
     * num_outputs (18), else equal parts. */
    const tdm_value_info *sv = in_opt(c, 1);
    const tdm_tensor *st = NULL;
    const int64_t *sa = NULL;
    size_t sn = 0;
    bool unknown = false;
    if (sv) {
        if (!sv->data) unknown = true;
        else {
            st = sv->data;
            if (st->dtype != TDM_INT64 && st->dtype != TDM_INT32)
                return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "split must be int64");
            sn = (size_t)st->count;
        }
    } else if (c->opset < 13) {
        sa = tdm_attr_ints(c->node, "split", &sn);
    }
    int64_t num = c->opset >= 18 ? tdm_attr_int(c->node, "num_outputs", 0) : 0;
    int64_t chunk = 0;
    if (st || sa) {
        if ((int64_t)sn != n)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                  "split has %zu sizes for %d outputs", sn, n);
        int64_t sum = 0;
        for (int i = 0; i < n; i++) {
            int64_t v = st ? tdm_tensor_get_i64(st, i) : sa[i];
            if (v < 0 || !tdm_add_i64(sum, v, &sum))
                return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "split[%d] = %lld is invalid",
                                      i, (long long)v);
        }
        if (dim >= 0 && sum != dim)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                  "split sizes sum to %lld, axis %d has %lld", (long long)sum, axis,
                                  (long long)dim);
    } else if (num > 0) {
        if (num != n)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                  "num_outputs = %lld but the node has %d outputs", (long long)num, n);
        if (dim >= 0) chunk = (dim + n - 1) / n;
    } else if (!unknown && dim >= 0 && dim % n != 0) {
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "axis %d of size %lld cannot be split into %d equal parts", axis,
                              (long long)dim, n);
    }
    int64_t used = 0;
    for (int i = 0; i < n; i++) {
        tdm_value_info *y = &c->out[i];
        int64_t s;
        if (unknown) {
            s = TDM_DIM_UNKNOWN;
        } else if (st || sa) {
            s = st ? tdm_tensor_get_i64(st, i) : sa[i];
        } else if (dim < 0) {
            s = TDM_DIM_UNKNOWN;
        } else if (num > 0) {
            s = dim - used < chunk ? dim - used : chunk;
            if (s < 0) s = 0;
            used += s;
        } else {
            s = dim / n;
        }
        tdm_infer_copy(y, x);
        y->dims[axis] = s;
    }
    return NULL;
}

/* ---- Slice ---------------------------------------------------------------------------- */

static tdm_status *slice_arg(const tdm_node *node, int opset, const tdm_tensor *t,
                             const char *name, int64_t *vals, int *n, bool *have) {
    *have = false;
    if (opset < 10) {
        size_t cnt;
        const int64_t *a = tdm_attr_ints(node, name, &cnt);
        if (!a) return NULL;
        if (cnt > TDM_MAX_RANK)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "%s has too many values", name);
        memcpy(vals, a, cnt * sizeof *a);
        *n = (int)cnt;
        *have = true;
        return NULL;
    }
    if (!t) return NULL;
    *have = true;
    return tdm_read_ints(node, name, t, vals, TDM_MAX_RANK, n);
}

tdm_status *tdm_shape_slice_plan(const tdm_node *node, int opset, const tdm_tensor *const *args,
                                 int rank, const int64_t *dims, int64_t *start, int64_t *step,
                                 int64_t *out_dims) {
    int64_t st[TDM_MAX_RANK], en[TDM_MAX_RANK], ax[TDM_MAX_RANK], sp[TDM_MAX_RANK];
    int ns = 0, ne = 0, na = 0, np = 0;
    bool hs, he, ha, hp;
    TDM_TRY(slice_arg(node, opset, args[0], "starts", st, &ns, &hs));
    TDM_TRY(slice_arg(node, opset, args[1], "ends", en, &ne, &he));
    TDM_TRY(slice_arg(node, opset, args[2], "axes", ax, &na, &ha));
    TDM_TRY(slice_arg(node, opset, opset < 10 ? NULL : args[3], "steps", sp, &np, &hp));
    if (!hs || !he) return tdm_node_error(node, TDM_ERR_INVALID_MODEL, "starts and ends are required");
    if (ns != ne || (ha && na != ns) || (hp && np != ns))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "starts, ends, axes and steps differ in length");
    if (ns > rank)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "%d slices for rank %d", ns, rank);
    bool used[TDM_MAX_RANK] = {false};
    for (int d = 0; d < rank; d++) {
        start[d] = 0;
        step[d] = 1;
        out_dims[d] = dims[d];
    }
    for (int i = 0; i < ns; i++) {
        int a;
        TDM_TRY(tdm_norm_axis(node, ha ? ax[i] : i, rank, &a));
        if (used[a]) return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "axis %d repeated", a);
        used[a] = true;
        int64_t s = st[i], e = en[i], k = hp ? sp[i] : 1, d = dims[a];
        if (k == 0) return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "step on axis %d is 0", a);
        step[a] = k;
        if (d < 0) {
            out_dims[a] = TDM_DIM_UNKNOWN;
            continue;
        }
        if (s < 0) s += d;
        if (e < 0) e += d;
        uint64_t n = 0;
        if (k > 0) {
            s = s < 0 ? 0 : s > d ? d : s;
            e = e < 0 ? 0 : e > d ? d : e;
            if (e > s) n = 1 + (uint64_t)(e - s - 1) / (uint64_t)k;
        } else {
            s = s < 0 ? 0 : s > d - 1 ? d - 1 : s;
            e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
            if (s > e) n = 1 + (uint64_t)(s - e - 1) / (0 - (uint64_t)k);
        }
        start[a] = s;
        out_dims[a] = (int64_t)n;
    }
    return NULL;
}

tdm_status *tdm_shape_infer_slice(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0];
    tdm_value_info *y = &c->out[0];
    y->dtype = x->dtype;
    if (x->rank < 0) return NULL;
    const tdm_tensor *args[4] = {NULL, NULL, NULL, NULL};
    if (c->opset >= 10) {
        if (!in_opt(c, 1) || !in_opt(c, 2))
            return tdm_node_error(c->node, TDM_ERR_INVALID_MODEL, "starts and ends are required");
        for (int i = 1; i <= 4; i++) {
            const tdm_value_info *v = in_opt(c, i);
            if (v && !v->data) {
                set_unknown_dims(y, x->rank);
                return NULL;
            }
            args[i - 1] = v ? v->data : NULL;
        }
    }
    int64_t start[TDM_MAX_RANK], step[TDM_MAX_RANK];
    TDM_TRY(tdm_shape_slice_plan(c->node, c->opset, args, x->rank, x->dims, start, step, y->dims));
    y->rank = x->rank;
    return NULL;
}

/* ---- Pad ------------------------------------------------------------------------------ */

tdm_status *tdm_shape_pad_mode(const tdm_node *node, int *mode) {
    const char *m = tdm_attr_string(node, "mode", "constant");
    if (!strcmp(m, "constant")) *mode = TDM_PAD_CONSTANT;
    else if (!strcmp(m, "reflect")) *mode = TDM_PAD_REFLECT;
    else if (!strcmp(m, "edge")) *mode = TDM_PAD_EDGE;
    else if (!strcmp(m, "wrap")) *mode = TDM_PAD_WRAP;
    else return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "unknown mode '%s'", m);
    return NULL;
}

tdm_status *tdm_shape_pad_plan(const tdm_node *node, int opset, const tdm_tensor *pads,
                               const tdm_tensor *axes, int rank, int64_t *begin, int64_t *end) {
    for (int d = 0; d < rank; d++) begin[d] = end[d] = 0;
    int64_t p[2 * TDM_MAX_RANK], ax[TDM_MAX_RANK];
    int np = 0, na = rank;
    if (opset < 11) {
        size_t cnt;
        const int64_t *a = tdm_attr_ints(node, "pads", &cnt);
        if (!a && opset < 2) a = tdm_attr_ints(node, "paddings", &cnt);
        if (!a) return tdm_node_error(node, TDM_ERR_INVALID_MODEL, "attribute 'pads' is missing");
        if (cnt > 2 * TDM_MAX_RANK)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "too many pads (%zu)", cnt);
        memcpy(p, a, cnt * sizeof *a);
        np = (int)cnt;
    } else {
        if (!pads) return tdm_node_error(node, TDM_ERR_INVALID_MODEL, "input 'pads' is missing");
        TDM_TRY(tdm_read_ints(node, "pads", pads, p, 2 * TDM_MAX_RANK, &np));
    }
    if (axes && opset >= 18) {
        TDM_TRY(tdm_read_ints(node, "axes", axes, ax, TDM_MAX_RANK, &na));
    } else {
        for (int i = 0; i < rank; i++) ax[i] = i;
    }
    if (np != 2 * na)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "%d pads for %d axes (need %d)", np,
                              na, 2 * na);
    bool used[TDM_MAX_RANK] = {false};
    for (int i = 0; i < na; i++) {
        int a;
        TDM_TRY(tdm_norm_axis(node, ax[i], rank, &a));
        if (used[a]) return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "axis %d repeated", a);
        used[a] = true;
        begin[a] = p[i];
        end[a] = p[i + na];
    }
    return NULL;
}

tdm_status *tdm_shape_infer_pad(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0];
    tdm_value_info *y = &c->out[0];
    int mode;
    y->dtype = x->dtype;
    TDM_TRY(tdm_shape_pad_mode(c->node, &mode));
    if (x->rank < 0) return NULL;
    const tdm_value_info *pv = in_opt(c, 1), *av = c->opset >= 18 ? in_opt(c, 3) : NULL;
    if (c->opset >= 11) {
        if (!pv) return tdm_node_error(c->node, TDM_ERR_INVALID_MODEL, "input 'pads' is missing");
        if (!pv->data || (av && !av->data)) {
            set_unknown_dims(y, x->rank);
            return NULL;
        }
    }
    const tdm_value_info *cv = c->opset >= 11 ? in_opt(c, 2) : NULL;
    if (cv && cv->data && cv->data->count > 1)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "constant_value must be a scalar");
    int64_t b[TDM_MAX_RANK], e[TDM_MAX_RANK];
    TDM_TRY(tdm_shape_pad_plan(c->node, c->opset, pv ? pv->data : NULL, av ? av->data : NULL,
                               x->rank, b, e));
    y->rank = x->rank;
    for (int d = 0; d < x->rank; d++) {
        int64_t v = x->dims[d];
        if (v < 0) {
            y->dims[d] = TDM_DIM_UNKNOWN;
            continue;
        }
        if (!tdm_add_i64(v, b[d], &v) || !tdm_add_i64(v, e[d], &v) || v < 0)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                  "pads %lld,%lld make axis %d of size %lld invalid", (long long)b[d],
                                  (long long)e[d], d, (long long)x->dims[d]);
        if (mode != TDM_PAD_CONSTANT && x->dims[d] == 0 && v > 0)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                  "cannot pad the empty axis %d in this mode", d);
        y->dims[d] = v;
    }
    return NULL;
}

/* ---- DepthToSpace / SpaceToDepth ------------------------------------------------------ */

static tdm_status *block_size(const tdm_infer_ctx *c, int64_t *b) {
    *b = tdm_attr_int(c->node, "blocksize", 0);
    if (*b <= 0 || *b > (1 << 20))
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "blocksize %lld is invalid",
                              (long long)*b);
    const tdm_value_info *x = &c->in[0];
    if (x->rank >= 0 && x->rank != 4)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "input must be 4-D, got rank %d",
                              x->rank);
    return NULL;
}

tdm_status *tdm_shape_infer_depthtospace(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0];
    tdm_value_info *y = &c->out[0];
    int64_t b;
    y->dtype = x->dtype;
    TDM_TRY(block_size(c, &b));
    const char *mode = c->opset >= 11 ? tdm_attr_string(c->node, "mode", "DCR") : "DCR";
    if (strcmp(mode, "DCR") && strcmp(mode, "CRD"))
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "unknown mode '%s'", mode);
    set_unknown_dims(y, 4);
    if (x->rank < 0) return NULL;
    y->dims[0] = x->dims[0];
    if (x->dims[1] >= 0) {
        if (x->dims[1] % (b * b))
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                  "channels %lld are not divisible by blocksize^2 = %lld",
                                  (long long)x->dims[1], (long long)(b * b));
        y->dims[1] = x->dims[1] / (b * b);
    }
    for (int d = 2; d < 4; d++)
        if (x->dims[d] >= 0 && !tdm_mul_i64(x->dims[d], b, &y->dims[d]))
            return tdm_node_error(c->node, TDM_ERR_LIMIT, "output size overflows");
    return NULL;
}

tdm_status *tdm_shape_infer_spacetodepth(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0];
    tdm_value_info *y = &c->out[0];
    int64_t b;
    y->dtype = x->dtype;
    TDM_TRY(block_size(c, &b));
    set_unknown_dims(y, 4);
    if (x->rank < 0) return NULL;
    y->dims[0] = x->dims[0];
    if (x->dims[1] >= 0 && !tdm_mul_i64(x->dims[1], b * b, &y->dims[1]))
        return tdm_node_error(c->node, TDM_ERR_LIMIT, "output size overflows");
    for (int d = 2; d < 4; d++) {
        if (x->dims[d] < 0) continue;
        if (x->dims[d] % b)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                  "axis %d of size %lld is not divisible by blocksize %lld", d,
                                  (long long)x->dims[d], (long long)b);
        y->dims[d] = x->dims[d] / b;
    }
    return NULL;
}

/* ---- Expand / Tile -------------------------------------------------------------------- */

tdm_status *tdm_shape_infer_expand(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0], *s = &c->in[1];
    tdm_value_info *y = &c->out[0];
    y->dtype = x->dtype;
    if (!s->data) {
        if (x->rank >= 0 && s->rank == 1 && s->dims[0] >= 0 && s->dims[0] <= TDM_MAX_RANK)
            set_unknown_dims(y, x->rank > s->dims[0] ? x->rank : (int)s->dims[0]);
        return NULL;
    }
    tdm_value_info sv = {.present = true, .dtype = TDM_INT64};
    TDM_TRY(tdm_read_ints(c->node, "shape", s->data, sv.dims, TDM_MAX_RANK, &sv.rank));
    for (int i = 0; i < sv.rank; i++)
        if (sv.dims[i] < 0)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "shape[%d] = %lld is negative",
                                  i, (long long)sv.dims[i]);
    const tdm_value_info *ins[2] = {x, &sv};
    return tdm_infer_broadcast(c, 2, ins, y);
}

tdm_status *tdm_shape_infer_tile(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0], *r = &c->in[1];
    tdm_value_info *y = &c->out[0];
    y->dtype = x->dtype;
    if (!r->data) {
        if (x->rank >= 0) set_unknown_dims(y, x->rank);
        return NULL;
    }
    int64_t rep[TDM_MAX_RANK];
    int n;
    TDM_TRY(tdm_read_ints(c->node, "repeats", r->data, rep, TDM_MAX_RANK, &n));
    if (x->rank < 0) {
        set_unknown_dims(y, n);
        for (int d = 0; d < n; d++)
            if (rep[d] == 0) y->dims[d] = 0;
        return NULL;
    }
    if (n != x->rank)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "%d repeats for rank %d", n,
                              x->rank);
    y->rank = n;
    for (int d = 0; d < n; d++) {
        if (rep[d] < 0)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "repeats[%d] = %lld is negative",
                                  d, (long long)rep[d]);
        if (x->dims[d] < 0) y->dims[d] = rep[d] == 0 ? 0 : TDM_DIM_UNKNOWN;
        else if (!tdm_mul_i64(x->dims[d], rep[d], &y->dims[d]))
            return tdm_node_error(c->node, TDM_ERR_LIMIT, "output size overflows");
    }
    return NULL;
}

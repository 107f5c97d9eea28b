/* Operator schemas: shape family, indexing ops (Gather, GatherElements, GatherND, ScatterND,
 * ScatterElements, Scatter, OneHot, Compress, NonZero, Trilu, ReverseSequence). */
#include <string.h>

#include "core/checked.h"
#include "ops/shape_impl.h"

static void set_unknown_dims(tdm_value_info *v, int rank) {
    v->rank = rank;
    for (int i = 0; i < TDM_MAX_RANK; i++) v->dims[i] = TDM_DIM_UNKNOWN;
}

static tdm_status *check_index_type(const tdm_infer_ctx *c, int i, const char *what) {
    tdm_dtype t = c->in[i].dtype;
    if (t != TDM_UNDEFINED && t != TDM_INT32 && t != TDM_INT64)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "%s must be int32 or int64, got %s",
                              what, tdm_dtype_name(t));
    return NULL;
}

tdm_status *tdm_shape_infer_gather(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0], *idx = &c->in[1];
    tdm_value_info *y = &c->out[0];
    y->dtype = x->dtype;
    TDM_TRY(check_index_type(c, 1, "indices"));
    if (x->rank < 0) return NULL;
    if (x->rank == 0) return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "data is a scalar");
    int axis;
    TDM_TRY(tdm_norm_axis(c->node, tdm_attr_int(c->node, "axis", 0), x->rank, &axis));
    if (idx->rank < 0) return NULL;
    int r = x->rank - 1 + idx->rank;
    if (r > TDM_MAX_RANK)
        return tdm_node_error(c->node, TDM_ERR_LIMIT, "output rank %d exceeds %d", r, TDM_MAX_RANK);
    int k = 0;
    for (int d = 0; d < axis; d++) y->dims[k++] = x->dims[d];
    for (int d = 0; d < idx->rank; d++) y->dims[k++] = idx->dims[d];
    for (int d = axis + 1; d < x->rank; d++) y->dims[k++] = x->dims[d];
    y->rank = r;
    return NULL;
}

tdm_status *tdm_shape_infer_gather_elements(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0], *idx = &c->in[1];
    tdm_value_info *y = &c->out[0];
    TDM_TRY(check_index_type(c, 1, "indices"));
    tdm_infer_copy(y, idx);
    y->dtype = x->dtype;
    if (x->rank < 0) return NULL;
    if (x->rank == 0) return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "data is a scalar");
    int axis;
    TDM_TRY(tdm_norm_axis(c->node, tdm_attr_int(c->node, "axis", 0), x->rank, &axis));
    if (idx->rank < 0) return NULL;
    if (idx->rank != x->rank)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "indices rank %d differs from data rank %d", idx->rank, x->rank);
    for (int d = 0; d < x->rank; d++)
        if (d != axis && x->dims[d] >= 0 && idx->dims[d] > x->dims[d])
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                  "indices dim %d (%lld) exceeds data dim (%lld)", d,
                                  (long long)idx->dims[d], (long long)x->dims[d]);
    return NULL;
}

tdm_status *tdm_shape_infer_gather_nd(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0], *idx = &c->in[1];
    tdm_value_info *y = &c->out[0];
    y->dtype = x->dtype;
    if (c->in[1].dtype != TDM_UNDEFINED && c->in[1].dtype != TDM_INT64)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "indices must be int64");
    int64_t b = c->opset >= 12 ? tdm_attr_int(c->node, "batch_dims", 0) : 0;
    if (b < 0) return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "batch_dims is negative");
    if (x->rank < 0 || idx->rank < 0) return NULL;
    if (x->rank < 1 || idx->rank < 1 || b >= x->rank || b >= idx->rank)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "ranks %d (data), %d (indices) and batch_dims %lld do not fit",
                              x->rank, idx->rank, (long long)b);
    int64_t m = idx->dims[idx->rank - 1];
    if (m < 0) return NULL;
    if (m < 1 || m > x->rank - b)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "indices last dim %lld must be in 1..%lld", (long long)m,
                              (long long)(x->rank - b));
    for (int d = 0; d < b; d++)
        if (x->dims[d] >= 0 && idx->dims[d] >= 0 && x->dims[d] != idx->dims[d])
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                  "batch dim %d differs between data and indices", d);
    int r = idx->rank - 1 + x->rank - (int)b - (int)m;
    if (r > TDM_MAX_RANK)
        return tdm_node_error(c->node, TDM_ERR_LIMIT, "output rank %d exceeds %d", r, TDM_MAX_RANK);
    int k = 0;
    for (int d = 0; d < idx->rank - 1; d++) y->dims[k++] = idx->dims[d];
    for (int d = (int)(b + m); d < x->rank; d++) y->dims[k++] = x->dims[d];
    y->rank = r;
    return NULL;
}

/* ScatterND, ScatterElements and Scatter: output = data. */
tdm_status *tdm_shape_infer_scatter(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0], *idx = &c->in[1], *u = &c->in[2];
    tdm_infer_copy(&c->out[0], x);
    bool nd = !strcmp(c->node->op_type, "ScatterND");
    if (nd ? (idx->dtype != TDM_UNDEFINED && idx->dtype != TDM_INT64) : false)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "indices must be int64");
    if (!nd) TDM_TRY(check_index_type(c, 1, "indices"));
    const char *red = c->opset >= 16 ? tdm_attr_string(c->node, "reduction", "none") : "none";
    if (strcmp(red, "none") && strcmp(red, "add") && strcmp(red, "mul") && strcmp(red, "max") &&
        strcmp(red, "min"))
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "unknown reduction '%s'", red);
    if (u->dtype != TDM_UNDEFINED && x->dtype != TDM_UNDEFINED && u->dtype != x->dtype)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "updates type differs from data");
    if (x->rank < 0 || idx->rank < 0 || u->rank < 0) return NULL;
    char a[128], b2[128];
    if (nd) {
        if (idx->rank < 1) return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "indices is a scalar");
        int64_t k = idx->dims[idx->rank - 1];
        if (k < 0) return NULL;
        if (k > x->rank)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                  "indices last dim %lld exceeds data rank %d", (long long)k, x->rank);
        int ur = idx->rank - 1 + x->rank - (int)k;
        bool ok = u->rank == ur;
        for (int d = 0; ok && d < ur; d++) {
            int64_t want = d < idx->rank - 1 ? idx->dims[d] : x->dims[k + d - (idx->rank - 1)];
            if (want >= 0 && u->dims[d] >= 0 && want != u->dims[d]) ok = false;
        }
        if (!ok)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                  "updates shape %s does not fit indices %s",
                                  tdm_shape_str(u->rank, u->dims, a, sizeof a),
                                  tdm_shape_str(idx->rank, idx->dims, b2, sizeof b2));
        return NULL;
    }
    if (x->rank < 1) return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "data is a scalar");
    int axis;
    TDM_TRY(tdm_norm_axis(c->node, tdm_attr_int(c->node, "axis", 0), x->rank, &axis));
    bool ok = idx->rank == x->rank && u->rank == x->rank;
    for (int d = 0; ok && d < x->rank; d++) {
        if (idx->dims[d] >= 0 && u->dims[d] >= 0 && idx->dims[d] != u->dims[d]) ok = false;
        if (d != axis && idx->dims[d] >= 0 && x->dims[d] >= 0 && idx->dims[d] > x->dims[d])
            ok = false;
    }
    if (!ok)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "indices %s and updates %s do not fit data",
                              tdm_shape_str(idx->rank, idx->dims, a, sizeof a),
                              tdm_shape_str(u->rank, u->dims, b2, sizeof b2));
    return NULL;
}

tdm_status *tdm_shape_infer_onehot(tdm_infer_ctx *c) {
    const tdm_value_info *idx = &c->in[0], *depth = &c->in[1], *vals = &c->in[2];
    tdm_value_info *y = &c->out[0];
    y->dtype = vals->dtype;
    if (vals->rank >= 0 && (vals->rank != 1 || (vals->dims[0] >= 0 && vals->dims[0] != 2)))
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "values must have 2 elements");
    int64_t dv = TDM_DIM_UNKNOWN;
    if (depth->data) {
        if (depth->data->count != 1 || depth->data->dtype == TDM_STRING)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "depth must be a scalar number");
        double d = tdm_tensor_get_f64(depth->data, 0);
        if (!(d >= 1 && d < 9e15))
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "depth %g is invalid", d);
        dv = (int64_t)d;
    }
    if (idx->rank < 0) return NULL;
    int r = idx->rank + 1;
    if (r > TDM_MAX_RANK)
        return tdm_node_error(c->node, TDM_ERR_LIMIT, "output rank %d exceeds %d", r, TDM_MAX_RANK);
    int axis;
    TDM_TRY(tdm_norm_axis(c->node, tdm_attr_int(c->node, "axis", -1), r, &axis));
    for (int d = 0, k = 0; d < r; d++) y->dims[d] = d == axis ? dv : idx->dims[k++];
    y->rank = r;
    return NULL;
}

tdm_status *tdm_shape_infer_compress(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0], *cond = &c->in[1];
    tdm_value_info *y = &c->out[0];
    y->dtype = x->dtype;
    if (cond->dtype != TDM_UNDEFINED && cond->dtype != TDM_BOOL)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "condition must be bool");
    if (cond->rank >= 0 && cond->rank != 1)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "condition must be 1-D");
    const tdm_attr *aa = tdm_node_attr(c->node, "axis");
    if (!aa) {
        set_unknown_dims(y, 1);
        return NULL;
    }
    if (x->rank < 0) return NULL;
    int axis;
    TDM_TRY(tdm_norm_axis(c->node, aa->i, x->rank, &axis));
    tdm_infer_copy(y, x);
    y->dims[axis] = TDM_DIM_UNKNOWN;
    return NULL;
}

tdm_status *tdm_shape_infer_nonzero(tdm_infer_ctx *c) {
    tdm_value_info *y = &c->out[0];
    y->dtype = TDM_INT64;
    set_unknown_dims(y, 2);
    if (c->in[0].rank >= 0) y->dims[0] = c->in[0].rank ? c->in[0].rank : 1;
    return NULL;
}

tdm_status *tdm_shape_infer_trilu(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0];
    tdm_infer_copy(&c->out[0], x);
    if (x->rank >= 0 && x->rank < 2)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "input rank %d is below 2", x->rank);
    if (c->n_in > 1 && c->in[1].present && c->in[1].data && c->in[1].data->count != 1)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "k must be a scalar");
    return NULL;
}

tdm_status *tdm_shape_infer_reverse_sequence(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0], *lens = &c->in[1];
    tdm_infer_copy(&c->out[0], x);
    int64_t ba = tdm_attr_int(c->node, "batch_axis", 1), ta = tdm_attr_int(c->node, "time_axis", 0);
    if (!((ba == 0 && ta == 1) || (ba == 1 && ta == 0)))
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "batch_axis and time_axis must be 0 and 1 in some order");
    if (x->rank >= 0 && x->rank < 2)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "input rank %d is below 2", x->rank);
    if (lens->rank >= 0 && lens->rank != 1)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "sequence_lens must be 1-D");
    if (x->rank >= 2 && lens->rank == 1 && x->dims[ba] >= 0 && lens->dims[0] >= 0 &&
        x->dims[ba] != lens->dims[0])
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "sequence_lens has %lld entries for a batch of %lld",
                              (long long)lens->dims[0], (long long)x->dims[ba]);
    return NULL;
}

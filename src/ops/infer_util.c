#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ops/op.h"

tdm_status *tdm_node_error(const tdm_node *node, tdm_code code, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tdm_status_new(code, "%s node '%s': %s", node ? node->op_type : "?",
                          node && node->name ? node->name : "", msg);
}

void tdm_infer_copy(tdm_value_info *out, const tdm_value_info *in) {
    out->dtype = in->dtype;
    out->rank = in->rank;
    for (int i = 0; i < TDM_MAX_RANK; i++) out->dims[i] = i < in->rank ? in->dims[i] : 0;
}

bool tdm_info_known(const tdm_value_info *v) {
    if (v->rank < 0) return false;
    for (int i = 0; i < v->rank; i++)
        if (v->dims[i] < 0) return false;
    return true;
}

tdm_status *tdm_infer_broadcast(const tdm_infer_ctx *ctx, int n, const tdm_value_info *const *ins,
                                tdm_value_info *out) {
    int rank = 0;
    for (int k = 0; k < n; k++) {
        if (!ins[k]->present) continue;
        if (ins[k]->rank < 0) {
            out->rank = -1;
            return NULL;
        }
        if (ins[k]->rank > rank) rank = ins[k]->rank;
    }
    out->rank = rank;
    for (int d = 0; d < rank; d++) {
        int64_t dim = 1;
        bool unknown = false;
        for (int k = 0; k < n; k++) {
            const tdm_value_info *v = ins[k];
            if (!v->present) continue;
            int off = rank - v->rank;
            if (d < off) continue;
            int64_t x = v->dims[d - off];
            if (x < 0) {
                unknown = true;
                continue;
            }
            if (x == 1) continue;
            if (dim == 1) {
                dim = x;
            } else if (dim != x) {
                char a[128], b[128];
                return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                      "shapes cannot be broadcast (%s vs %s)",
                                      tdm_shape_str(ins[0]->rank, ins[0]->dims, a, sizeof a),
                                      tdm_shape_str(v->rank, v->dims, b, sizeof b));
            }
        }
        out->dims[d] = (unknown && dim == 1) ? TDM_DIM_UNKNOWN : dim;
    }
    return NULL;
}

tdm_status *tdm_norm_axis(const tdm_node *node, int64_t axis, int rank, int *out) {
    if (axis < -(int64_t)rank || axis >= rank)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "axis %lld is out of range for rank %d",
                              (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return NULL;
}

tdm_status *tdm_read_ints(const tdm_node *node, const char *what, const tdm_tensor *t,
                          int64_t *vals, int max, int *count) {
    if (t->dtype != TDM_INT64 && t->dtype != TDM_INT32)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "%s must be int32 or int64, got %s",
                              what, tdm_dtype_name(t->dtype));
    if (t->rank > 1)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "%s must be 1-D", what);
    if (t->count > max)
        return tdm_node_error(node, TDM_ERR_LIMIT, "%s has %lld values, at most %d allowed", what,
                              (long long)t->count, max);
    for (int64_t i = 0; i < t->count; i++) vals[i] = tdm_tensor_get_i64(t, i);
    *count = (int)t->count;
    return NULL;
}

/* Operator schemas, misc family: Resize and Upsample (shape functions), and the output-size
 * rule they share with the CPU kernels (k_misc_resize.c). */
#include <math.h>
#include <string.h>

#include "ops/op.h"

/* Also declared in backends/cpu/k_misc_resize.c. */
tdm_status *tdm_misc_resize_sizes(const tdm_node *node, int opset, int rank,
                                  const int64_t *in_dims, const tdm_tensor *scales,
                                  const tdm_tensor *sizes, int64_t *out_dims, double *scale,
                                  double *out_len);

/* Reads the "axes" attribute (Resize-18+) into axes[]; all axes when absent. */
static tdm_status *resize_axes(const tdm_node *node, int opset, int rank, int *axes, int *n_axes) {
    size_t n = 0;
    const int64_t *a = opset >= 18 ? tdm_attr_ints(node, "axes", &n) : NULL;
    if (!a) {
        for (int i = 0; i < rank; i++) axes[i] = i;
        *n_axes = rank;
        return NULL;
    }
    if (n > (size_t)rank)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "axes has %zu entries for rank %d", n,
                              rank);
    bool seen[TDM_MAX_RANK] = {0};
    for (size_t i = 0; i < n; i++) {
        int ax;
        TDM_TRY(tdm_norm_axis(node, a[i], rank, &ax));
        if (seen[ax])
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "axes repeats axis %d", ax);
        seen[ax] = true;
        axes[i] = ax;
    }
    *n_axes = (int)n;
    return NULL;
}

/* Output dims, per-axis scale and the (fractional) resized length used by the coordinate
 * transforms, from whichever of scales / sizes is given (NULL = absent or empty). */
tdm_status *tdm_misc_resize_sizes(const tdm_node *node, int opset, int rank,
                                  const int64_t *in_dims, const tdm_tensor *scales,
                                  const tdm_tensor *sizes, int64_t *out_dims, double *scale,
                                  double *out_len) {
    int axes[TDM_MAX_RANK], n_axes = 0;
    TDM_TRY(resize_axes(node, opset, rank, axes, &n_axes));
    for (int i = 0; i < rank; i++) {
        out_dims[i] = in_dims[i];
        scale[i] = 1.0;
        out_len[i] = (double)in_dims[i];
    }
    if (scales && sizes)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "only one of 'scales' and 'sizes' may be given");
    if (!scales && !sizes)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "one of 'scales' and 'sizes' must be given");
    const tdm_tensor *t = scales ? scales : sizes;
    if (t->rank > 1 || t->count != n_axes)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "%s has %lld values, expected %d",
                              scales ? "scales" : "sizes", (long long)t->count, n_axes);
    if (scales) {
        if (!tdm_dtype_is_float(scales->dtype))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "scales must be a float tensor");
        for (int i = 0; i < n_axes; i++) {
            double s = tdm_tensor_get_f64(scales, i);
            int ax = axes[i];
            if (!(s > 0) || !isfinite(s))
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                      "scale %g for axis %d must be positive", s, ax);
            double o = s * (double)in_dims[ax];
            if (o > 9.0e15)
                return tdm_node_error(node, TDM_ERR_LIMIT, "scale %g makes axis %d too large", s,
                                      ax);
            scale[ax] = s;
            out_len[ax] = o;
            out_dims[ax] = (int64_t)floor(o);
        }
        return NULL;
    }
    if (sizes->dtype != TDM_INT64 && sizes->dtype != TDM_INT32)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "sizes must be an int64 tensor");
    const char *policy = opset >= 18 ? tdm_attr_string(node, "keep_aspect_ratio_policy", "stretch")
                                     : "stretch";
    int pol = 0;
    if (strcmp(policy, "stretch") == 0) pol = 0;
    else if (strcmp(policy, "not_larger") == 0) pol = 1;
    else if (strcmp(policy, "not_smaller") == 0) pol = 2;
    else
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "unknown keep_aspect_ratio_policy '%s'", policy);
    double common = 0;
    for (int i = 0; i < n_axes; i++) {
        int64_t v = tdm_tensor_get_i64(sizes, i);
        int ax = axes[i];
        if (v < 0 || v > ((int64_t)1 << 40))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "size %lld for axis %d is invalid",
                                  (long long)v, ax);
        if (in_dims[ax] == 0)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "cannot resize axis %d of length 0 to %lld", ax, (long long)v);
        double s = (double)v / (double)in_dims[ax];
        if (i == 0 || (pol == 1 && s < common) || (pol == 2 && s > common)) common = s;
        out_dims[ax] = v;
        scale[ax] = s;
        out_len[ax] = (double)v;
    }
    if (pol != 0) {
        for (int i = 0; i < n_axes; i++) {
            int ax = axes[i];
            scale[ax] = common;
            out_len[ax] = common * (double)in_dims[ax];
            out_dims[ax] = (int64_t)(out_len[ax] + 0.5);
        }
    }
    return NULL;
}

/* An optional 1-D input that counts as given: present and not known to be empty.
 * *known says whether its values are available. */
static bool resize_input_given(const tdm_infer_ctx *c, int i, bool *known) {
    *known = true;
    if (i >= c->n_in || !c->in[i].present) return false;
    const tdm_value_info *v = &c->in[i];
    if (v->data) return v->data->count > 0;
    if (v->rank == 1 && v->dims[0] == 0) return false;
    *known = false;
    return true;
}

static tdm_status *resize_common(tdm_infer_ctx *c, const tdm_tensor *scales_attr, int i_scales,
                                 int i_sizes) {
    const tdm_value_info *x = &c->in[0];
    tdm_value_info *y = &c->out[0];
    y->dtype = x->dtype;
    y->rank = x->rank;
    if (x->rank < 0) return NULL;
    if (x->rank == 0)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "input must not be a scalar");
    for (int i = 0; i < x->rank; i++) y->dims[i] = TDM_DIM_UNKNOWN;
    bool k_sc = true, k_sz = true;
    bool has_sc = scales_attr ? true : resize_input_given(c, i_scales, &k_sc);
    bool has_sz = i_sizes >= 0 && resize_input_given(c, i_sizes, &k_sz);
    if (!k_sc || !k_sz) return NULL;
    if (!has_sc && !has_sz)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "one of 'scales' and 'sizes' must be given");
    /* Unknown input dims are computed as 1 and then reported unknown, except those
     * fixed by 'sizes' (stretch policy). */
    int64_t din[TDM_MAX_RANK], od[TDM_MAX_RANK];
    double sc[TDM_MAX_RANK], ol[TDM_MAX_RANK];
    for (int i = 0; i < x->rank; i++) din[i] = x->dims[i] >= 0 ? x->dims[i] : 1;
    const tdm_tensor *st = scales_attr ? scales_attr : has_sc ? c->in[i_scales].data : NULL;
    TDM_TRY(tdm_misc_resize_sizes(c->node, c->opset, x->rank, din, st,
                                  has_sz ? c->in[i_sizes].data : NULL, od, sc, ol));
    int axes[TDM_MAX_RANK], n_axes = 0;
    TDM_TRY(resize_axes(c->node, c->opset, x->rank, axes, &n_axes));
    bool fixed[TDM_MAX_RANK] = {0};
    bool stretch = c->opset < 18 ||
                   !strcmp(tdm_attr_string(c->node, "keep_aspect_ratio_policy", "stretch"), "stretch");
    for (int i = 0; i < n_axes && has_sz && stretch; i++) fixed[axes[i]] = true;
    for (int i = 0; i < x->rank; i++)
        y->dims[i] = (x->dims[i] >= 0 || fixed[i]) ? od[i] : TDM_DIM_UNKNOWN;
    return NULL;
}

static bool resize_mode_ok(const char *m) {
    return !strcmp(m, "nearest") || !strcmp(m, "linear") || !strcmp(m, "cubic") ||
           !strcmp(m, "bilinear") || !strcmp(m, "trilinear");
}

tdm_status *tdm_misc_infer_resize(tdm_infer_ctx *c) {
    const char *mode = tdm_attr_string(c->node, "mode", "nearest");
    if (!resize_mode_ok(mode))
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "unknown mode '%s'", mode);
    if (c->opset < 11) return resize_common(c, NULL, 1, -1);
    return resize_common(c, NULL, 2, 3);
}

tdm_status *tdm_misc_infer_upsample(tdm_infer_ctx *c) {
    const char *mode = tdm_attr_string(c->node, "mode", "nearest");
    if (!resize_mode_ok(mode))
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "unknown mode '%s'", mode);
    if (c->opset >= 9) return resize_common(c, NULL, 1, -1);
    /* Upsample-7: scales is an attribute. */
    size_t n = 0;
    const float *s = tdm_attr_floats(c->node, "scales", &n);
    if (!s) return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "missing attribute 'scales'");
    if (n > TDM_MAX_RANK)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "too many scales");
    int64_t d = (int64_t)n;
    tdm_tensor t = {.dtype = TDM_FLOAT, .rank = 1, .dims = {d}, .count = d,
                    .nbytes = n * sizeof(float), .data = (void *)s};
    return resize_common(c, &t, -1, -1);
}

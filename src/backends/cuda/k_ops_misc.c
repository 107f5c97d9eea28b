/* CUDA kernel table "ops_misc": Resize (opset 11+) in nearest mode over any axes and in
 * linear mode over the last two axes (kernels/cuda_shape.cu), with the coordinate modes
 * half_pixel, half_pixel_symmetric, asymmetric, align_corners, pytorch_half_pixel and
 * tf_half_pixel_for_nn. Refused at placement (accept): cubic, tf_crop_and_resize,
 * antialias, keep_aspect_ratio_policy other than stretch. Refused at run time
 * (TDM_ERR_UNSUPPORTED): linear resizing of an axis other than the last two. */
#include <string.h>

#include "backends/cuda/kernels/k_ops.h"

static int coord_mode(const char *s) {
    static const struct { const char *name; int code; } modes[] = {
        {"half_pixel", TCU_CT_HALF_PIXEL},
        {"half_pixel_symmetric", TCU_CT_HALF_PIXEL_SYMMETRIC},
        {"asymmetric", TCU_CT_ASYMMETRIC},
        {"align_corners", TCU_CT_ALIGN_CORNERS},
        {"pytorch_half_pixel", TCU_CT_PYTORCH_HALF_PIXEL},
        {"tf_half_pixel_for_nn", TCU_CT_TF_HALF_PIXEL_FOR_NN},
    };
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (strcmp(s, modes[i].name) == 0) return modes[i].code;
    return -1;
}

static int nearest_mode(const char *s) {
    if (strcmp(s, "round_prefer_floor") == 0) return TCU_NN_ROUND_PREFER_FLOOR;
    if (strcmp(s, "round_prefer_ceil") == 0) return TCU_NN_ROUND_PREFER_CEIL;
    if (strcmp(s, "floor") == 0) return TCU_NN_FLOOR;
    if (strcmp(s, "ceil") == 0) return TCU_NN_CEIL;
    return -1;
}

static bool resize_accept(const tdm_node *node, const tdm_dtype *in_types, int n_in) {
    (void)in_types;
    (void)n_in;
    const char *mode = tdm_attr_string(node, "mode", "nearest");
    bool linear = strcmp(mode, "linear") == 0;
    if (!linear && strcmp(mode, "nearest") != 0) return false;
    int ct = coord_mode(tdm_attr_string(node, "coordinate_transformation_mode", "half_pixel"));
    if (ct < 0 || (linear && ct == TCU_CT_TF_HALF_PIXEL_FOR_NN)) return false;
    if (!linear && nearest_mode(tdm_attr_string(node, "nearest_mode", "round_prefer_floor")) < 0)
        return false;
    if (tdm_attr_int(node, "antialias", 0) != 0) return false;
    return strcmp(tdm_attr_string(node, "keep_aspect_ratio_policy", "stretch"), "stretch") == 0;
}

static tdm_status *run_resize(tdm_kernel_ctx *ctx) {
    const tdm_tensor *X = ctx->in[0], *Y = ctx->out[0];
    int r = X->rank;
    if (r < 1 || Y->rank != r)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input and output ranks differ");
    tcu_resize_desc rd;
    memset(&rd, 0, sizeof rd);
    rd.rank = r;
    rd.linear = strcmp(tdm_attr_string(ctx->node, "mode", "nearest"), "linear") == 0;
    rd.coord_mode =
        coord_mode(tdm_attr_string(ctx->node, "coordinate_transformation_mode", "half_pixel"));
    rd.nearest_mode =
        nearest_mode(tdm_attr_string(ctx->node, "nearest_mode", "round_prefer_floor"));
    if (rd.coord_mode < 0 || rd.nearest_mode < 0)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "cuda: unsupported Resize mode");
    /* the axes scales / sizes refer to (opset 18), else all */
    int axes[TDM_MAX_RANK], na = r;
    size_t nattr = 0;
    const int64_t *aa = tdm_attr_ints(ctx->node, "axes", &nattr);
    if (aa && nattr) {
        if (nattr > (size_t)r)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "too many axes");
        na = (int)nattr;
        for (int k = 0; k < na; k++) TDM_TRY(tdm_norm_axis(ctx->node, aa[k], r, &axes[k]));
    } else {
        for (int k = 0; k < r; k++) axes[k] = k;
    }
    for (int i = 0; i < r; i++) {
        rd.in_dims[i] = X->dims[i];
        rd.out_dims[i] = Y->dims[i];
        rd.scales[i] = 1.0;
        rd.out_lens[i] = (double)X->dims[i];
        rd.roi_hi[i] = 1.0;
    }
    float sc[TDM_MAX_RANK];
    int ns = 0;
    const tdm_tensor *S = ctx->n_in > 2 ? ctx->in[2] : NULL;
    if (S && S->count > 0) {
        TDM_TRY(kops_read_floats(ctx, 2, "scales", sc, TDM_MAX_RANK, &ns));
        if (ns != na)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "scales must have %d values",
                                  na);
        for (int k = 0; k < na; k++) {
            if (!(sc[k] > 0.0f))
                return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                      "scales must be positive");
            rd.scales[axes[k]] = sc[k];
            rd.out_lens[axes[k]] = (double)sc[k] * (double)X->dims[axes[k]];
        }
    } else {
        /* sizes given: the scale of an axis is out / in */
        for (int k = 0; k < na; k++) {
            int ax = axes[k];
            rd.scales[ax] = X->dims[ax] ? (double)Y->dims[ax] / (double)X->dims[ax] : 1.0;
            rd.out_lens[ax] = (double)Y->dims[ax];
        }
    }
    for (int i = 0; i < r; i++) {
        if (Y->dims[i] > 0 && X->dims[i] == 0)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "cannot resize an empty axis");
        if (rd.linear && i < r - 2 && X->dims[i] != Y->dims[i])
            return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED,
                                  "cuda: linear Resize of an axis other than the last two");
        if (rd.linear && i < r - 2 && rd.scales[i] != 1.0 && X->dims[i] != 1)
            return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED,
                                  "cuda: linear Resize with a scale other than 1 on axis %d", i);
    }
    const void *x;
    void *y;
    TDM_TRY(kops_in(ctx, 0, &x));
    TDM_TRY(kops_out(ctx, 0, &y));
    return kops_status(ctx, tcu_resize((int)X->dtype, x, y, &rd, kops_stream(ctx)), "Resize");
}

const cuda_kernel_entry cuda_kernels_ops_misc[] = {
    /* roi (1) and scales (2) are float tensors of their own type, sizes (3) int64 */
    {{"", "Resize", 11, 0, 0, KOPS_F, run_resize, NULL, NULL}, 1u << 3, 0, (1u << 1) | (1u << 2),
     resize_accept},
};
const int cuda_kernels_ops_misc_count =
    (int)(sizeof cuda_kernels_ops_misc / sizeof cuda_kernels_ops_misc[0]);

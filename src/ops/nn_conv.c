/* nn family: window geometry and the shape functions of Conv, ConvInteger, ConvTranspose,
 * the pooling ops and MaxUnpool. The schema table is in nn.c. */
#include <string.h>

#include "core/checked.h"
#include "ops/nn_geom.h"

tdm_status *tdm_nn_infer_conv(tdm_infer_ctx *ctx);
tdm_status *tdm_nn_infer_conv_integer(tdm_infer_ctx *ctx);
tdm_status *tdm_nn_infer_conv_transpose(tdm_infer_ctx *ctx);
tdm_status *tdm_nn_infer_pool(tdm_infer_ctx *ctx);
tdm_status *tdm_nn_infer_global_pool(tdm_infer_ctx *ctx);
tdm_status *tdm_nn_infer_max_unpool(tdm_infer_ctx *ctx);

/* Reads an INTS attribute of exactly `n` values (or absent: `def` everywhere). */
static tdm_status *geom_ints(const tdm_node *node, const char *name, int n, int64_t def,
                             int64_t min, int64_t *out, bool *present) {
    size_t cnt = 0;
    const int64_t *v = tdm_attr_ints(node, name, &cnt);
    if (present) *present = v != NULL;
    if (!v) {
        for (int i = 0; i < n; i++) out[i] = def;
        return NULL;
    }
    if ((int)cnt != n)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "attribute '%s' has %zu values, expected %d", name, cnt, n);
    for (int i = 0; i < n; i++) {
        if (v[i] < min || v[i] > ((int64_t)1 << 40))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "attribute '%s' has an invalid value %lld", name,
                                  (long long)v[i]);
        out[i] = v[i];
    }
    return NULL;
}

static int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

tdm_status *tdm_nn_geom_init(const tdm_node *node, int opset, tdm_nn_kind kind, int x_rank,
                             const int64_t *x_dims, const int64_t *w_dims, tdm_nn_geom *g) {
    memset(g, 0, sizeof *g);
    if (x_rank < 3)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "input must have rank 3 or more (N, C, spatial...), got %d",
                              x_rank);
    int n = x_rank - 2;
    g->nsp = n;
    for (int i = 0; i < n; i++) g->in[i] = x_dims ? x_dims[2 + i] : TDM_DIM_UNKNOWN;

    bool has_kernel;
    TDM_TRY(geom_ints(node, "kernel_shape", n, 0, 1, g->kernel, &has_kernel));
    g->kernel_known = true;
    if (!has_kernel) {
        if (kind == TDM_NN_POOL || kind == TDM_NN_UNPOOL)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "attribute 'kernel_shape' is required");
        for (int i = 0; i < n; i++) {
            g->kernel[i] = w_dims ? w_dims[2 + i] : TDM_DIM_UNKNOWN;
            if (g->kernel[i] == 0) /* as the attribute's values, a kernel is at least 1 wide */
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                      "the weight's spatial dimension %d is 0", i);
            if (g->kernel[i] < 0) g->kernel_known = false;
        }
    } else if (w_dims) {
        for (int i = 0; i < n; i++)
            if (w_dims[2 + i] >= 0 && w_dims[2 + i] != g->kernel[i])
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                      "kernel_shape does not match the weight shape");
    }
    TDM_TRY(geom_ints(node, "strides", n, 1, 1, g->stride, NULL));
    TDM_TRY(geom_ints(node, "dilations", n, 1, 1, g->dil, NULL));
    int64_t pads[2 * TDM_MAX_RANK];
    TDM_TRY(geom_ints(node, "pads", 2 * n, 0, 0, pads, NULL));
    for (int i = 0; i < n; i++) {
        g->pad_b[i] = pads[i];
        g->pad_e[i] = pads[n + i];
    }
    if (kind == TDM_NN_CONVT) TDM_TRY(geom_ints(node, "output_padding", n, 0, 0, g->out_pad, NULL));
    g->ceil_mode = kind == TDM_NN_POOL && tdm_attr_int(node, "ceil_mode", 0) != 0;

    const char *ap = tdm_attr_string(node, "auto_pad", "NOTSET");
    int mode; /* 0 NOTSET, 1 SAME_UPPER, 2 SAME_LOWER, 3 VALID */
    if (strcmp(ap, "NOTSET") == 0 || ap[0] == 0) mode = 0;
    else if (strcmp(ap, "SAME_UPPER") == 0) mode = 1;
    else if (strcmp(ap, "SAME_LOWER") == 0) mode = 2;
    else if (strcmp(ap, "VALID") == 0) mode = 3;
    else return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "unknown auto_pad '%s'", ap);
    if (kind == TDM_NN_UNPOOL) mode = 0;

    size_t os_n = 0;
    const int64_t *os = kind == TDM_NN_CONVT ? tdm_attr_ints(node, "output_shape", &os_n) : NULL;
    if (os && (int)os_n != n && (int)os_n != n + 2)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "attribute 'output_shape' has %zu values, expected %d", os_n, n);
    if (os) os += os_n - (size_t)n;

    for (int i = 0; i < n; i++) {
        int64_t in = g->in[i], k = g->kernel[i], s = g->stride[i], d = g->dil[i];
        g->out[i] = TDM_DIM_UNKNOWN;
        if (kind == TDM_NN_CONVT) {
            if (g->out_pad[i] >= s && g->out_pad[i] >= d)
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                      "output_padding must be smaller than stride or dilation");
            if (os && os[i] < 0)
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                      "output_shape has a negative value");
            if (mode == 3) g->pad_b[i] = g->pad_e[i] = 0;
            if (in < 0 || k < 0) {
                if (os) g->out[i] = os[i];
                else if (mode == 1 || mode == 2) g->out[i] = in < 0 ? in : in * s;
                continue;
            }
            int64_t ek = (k - 1) * d + 1;
            int64_t full = s * (in - 1) + g->out_pad[i] + ek;
            if (os || mode == 1 || mode == 2) {
                int64_t out = os ? os[i] : in * s;
                int64_t total = full - out; /* a larger output is filled at the end */
                if (total < 0) total = 0;
                if (mode == 1) {
                    g->pad_b[i] = total / 2;
                    g->pad_e[i] = total - total / 2;
                } else {
                    g->pad_b[i] = total - total / 2;
                    g->pad_e[i] = total / 2;
                }
                g->out[i] = out;
            } else {
                g->out[i] = full - g->pad_b[i] - g->pad_e[i];
            }
            if (g->out[i] < 0)
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                      "pads exceed the output size");
            continue;
        }
        if (kind == TDM_NN_UNPOOL) {
            if (in >= 0) {
                g->out[i] = (in - 1) * s + k - g->pad_b[i] - g->pad_e[i];
                if (g->out[i] < 0)
                    return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                          "pads exceed the output size");
            }
            continue;
        }
        /* Conv and pooling */
        if (mode == 1 || mode == 2) {
            if (in < 0) continue;
            int64_t out = ceil_div(in, s);
            g->out[i] = out;
            if (k < 0) continue;
            int64_t total = (out - 1) * s + (k - 1) * d + 1 - in;
            if (total < 0) total = 0;
            if (mode == 1) {
                g->pad_b[i] = total / 2;
                g->pad_e[i] = total - total / 2;
            } else {
                g->pad_e[i] = total / 2;
                g->pad_b[i] = total - total / 2;
            }
            continue;
        }
        if (mode == 3) g->pad_b[i] = g->pad_e[i] = 0;
        if (in < 0 || k < 0) continue;
        int64_t num = in + g->pad_b[i] + g->pad_e[i] - ((k - 1) * d + 1);
        if (num < 0)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "the window (%lld) is larger than the padded input (%lld)",
                                  (long long)((k - 1) * d + 1),
                                  (long long)(in + g->pad_b[i] + g->pad_e[i]));
        int64_t out = (g->ceil_mode ? ceil_div(num, s) : num / s) + 1;
        if (g->ceil_mode && (out - 1) * s >= in + g->pad_b[i]) out--;
        g->out[i] = out;
    }
    (void)opset;
    return NULL;
}

/* Shared Conv / ConvInteger / ConvTranspose shape function. */
static tdm_status *infer_conv_like(tdm_infer_ctx *ctx, tdm_nn_kind kind, tdm_dtype out_type) {
    const tdm_value_info *x = &ctx->in[0], *w = &ctx->in[1];
    tdm_value_info *y = &ctx->out[0];
    y->dtype = out_type;
    int rank = x->rank >= 0 ? x->rank : w->rank;
    if (rank < 0) return NULL;
    if (x->rank >= 0 && w->rank >= 0 && x->rank != w->rank)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "input rank %d and weight rank %d differ", x->rank, w->rank);
    int64_t xd[TDM_MAX_RANK], wd[TDM_MAX_RANK];
    for (int i = 0; i < TDM_MAX_RANK; i++) {
        xd[i] = x->rank >= 0 && i < x->rank ? x->dims[i] : TDM_DIM_UNKNOWN;
        wd[i] = w->rank >= 0 && i < w->rank ? w->dims[i] : TDM_DIM_UNKNOWN;
    }
    int64_t group = tdm_attr_int(ctx->node, "group", 1);
    if (group < 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "group must be positive");
    tdm_nn_geom g;
    TDM_TRY(tdm_nn_geom_init(ctx->node, ctx->opset, kind, rank, xd, wd, &g));
    y->rank = rank;
    y->dims[0] = xd[0];
    if (kind == TDM_NN_CONVT) {
        if (xd[1] >= 0 && wd[0] >= 0 && xd[1] != wd[0])
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "input has %lld channels but the weight expects %lld",
                                  (long long)xd[1], (long long)wd[0]);
        if (xd[1] >= 0 && xd[1] % group)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "input channels are not divisible by group");
        int64_t cout = TDM_DIM_UNKNOWN;
        if (wd[1] >= 0 && !tdm_mul_i64(wd[1], group, &cout))
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "weight channels x group overflows");
        y->dims[1] = cout;
    } else {
        int64_t cin = TDM_DIM_UNKNOWN;
        if (wd[1] >= 0 && !tdm_mul_i64(wd[1], group, &cin))
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "weight channels x group overflows");
        if (xd[1] >= 0 && wd[1] >= 0 && xd[1] != cin)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "input has %lld channels but weight x group gives %lld",
                                  (long long)xd[1], (long long)cin);
        if (wd[0] >= 0 && wd[0] % group)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "output channels are not divisible by group");
        y->dims[1] = wd[0];
    }
    for (int i = 0; i < g.nsp; i++) y->dims[2 + i] = g.out[i];
    if (ctx->n_in > 2 && ctx->in[2].present && ctx->in[2].rank >= 0 && kind != TDM_NN_CONV) {
        /* ConvTranspose bias: 1-D of size M */
        const tdm_value_info *b = &ctx->in[2];
        if (b->rank != 1 || (b->dims[0] >= 0 && y->dims[1] >= 0 && b->dims[0] != y->dims[1]))
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "bias must be 1-D with one value per output channel");
    }
    return NULL;
}

tdm_status *tdm_nn_infer_conv(tdm_infer_ctx *ctx) {
    TDM_TRY(infer_conv_like(ctx, TDM_NN_CONV, ctx->in[0].dtype));
    if (ctx->n_in > 2 && ctx->in[2].present && ctx->in[2].rank >= 0) {
        const tdm_value_info *b = &ctx->in[2];
        int64_t m = ctx->out[0].rank > 1 ? ctx->out[0].dims[1] : TDM_DIM_UNKNOWN;
        if (b->rank != 1 || (b->dims[0] >= 0 && m >= 0 && b->dims[0] != m))
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "bias must be 1-D with one value per output channel");
    }
    return NULL;
}

tdm_status *tdm_nn_infer_conv_integer(tdm_infer_ctx *ctx) {
    return infer_conv_like(ctx, TDM_NN_CONV, TDM_INT32);
}

tdm_status *tdm_nn_infer_conv_transpose(tdm_infer_ctx *ctx) {
    return infer_conv_like(ctx, TDM_NN_CONVT, ctx->in[0].dtype);
}

tdm_status *tdm_nn_infer_pool(tdm_infer_ctx *ctx) {
    const tdm_value_info *x = &ctx->in[0];
    for (int o = 0; o < ctx->n_out; o++) ctx->out[o].dtype = o == 0 ? x->dtype : TDM_INT64;
    if (x->rank < 0) return NULL;
    tdm_nn_geom g;
    TDM_TRY(tdm_nn_geom_init(ctx->node, ctx->opset, TDM_NN_POOL, x->rank, x->dims, NULL, &g));
    if (strcmp(ctx->node->op_type, "MaxPool") == 0) {
        int64_t so = tdm_attr_int(ctx->node, "storage_order", 0);
        if (so != 0 && so != 1)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "storage_order must be 0 or 1");
    }
    for (int o = 0; o < ctx->n_out; o++) {
        tdm_value_info *y = &ctx->out[o];
        y->rank = x->rank;
        y->dims[0] = x->dims[0];
        y->dims[1] = x->dims[1];
        for (int i = 0; i < g.nsp; i++) y->dims[2 + i] = g.out[i];
    }
    return NULL;
}

tdm_status *tdm_nn_infer_global_pool(tdm_infer_ctx *ctx) {
    const tdm_value_info *x = &ctx->in[0];
    tdm_value_info *y = &ctx->out[0];
    y->dtype = x->dtype;
    if (x->rank < 0) return NULL;
    if (x->rank < 2)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "input must have rank 2 or more, got %d", x->rank);
    y->rank = x->rank;
    for (int i = 0; i < x->rank; i++) y->dims[i] = i < 2 ? x->dims[i] : 1;
    return NULL;
}

tdm_status *tdm_nn_infer_max_unpool(tdm_infer_ctx *ctx) {
    const tdm_value_info *x = &ctx->in[0];
    tdm_value_info *y = &ctx->out[0];
    y->dtype = x->dtype;
    if (ctx->in[1].dtype != TDM_UNDEFINED && ctx->in[1].dtype != TDM_INT64)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "indices must be int64");
    if (x->rank < 0) return NULL;
    tdm_nn_geom g;
    TDM_TRY(tdm_nn_geom_init(ctx->node, ctx->opset, TDM_NN_UNPOOL, x->rank, x->dims, NULL, &g));
    y->rank = x->rank;
    if (ctx->n_in > 2 && ctx->in[2].present) {
        const tdm_tensor *os = ctx->in[2].data;
        if (!os) {
            for (int i = 0; i < x->rank; i++) y->dims[i] = TDM_DIM_UNKNOWN;
            return NULL;
        }
        int64_t v[TDM_MAX_RANK];
        int cnt = 0;
        TDM_TRY(tdm_read_ints(ctx->node, "output_shape", os, v, TDM_MAX_RANK, &cnt));
        if (cnt != x->rank)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "output_shape has %d values, expected %d", cnt, x->rank);
        for (int i = 0; i < cnt; i++) {
            if (v[i] < 0)
                return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                      "output_shape has a negative value");
            if (i < 2 && x->dims[i] >= 0 && v[i] != x->dims[i])
                return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                      "output_shape must keep the batch and channel dims");
            y->dims[i] = v[i];
        }
        return NULL;
    }
    y->dims[0] = x->dims[0];
    y->dims[1] = x->dims[1];
    for (int i = 0; i < g.nsp; i++) y->dims[2 + i] = g.out[i];
    return NULL;
}

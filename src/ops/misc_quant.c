/* Operator schemas, misc family: quantization ops (QuantizeLinear, DequantizeLinear,
 * DynamicQuantizeLinear, QLinearMatMul, MatMulInteger, ConvInteger, QLinearConv). */
#include <string.h>

#include "ops/op.h"

tdm_status *tdm_misc_infer_quantize(tdm_infer_ctx *c);
tdm_status *tdm_misc_infer_dequantize(tdm_infer_ctx *c);
tdm_status *tdm_misc_infer_dynquant(tdm_infer_ctx *c);
tdm_status *tdm_misc_infer_qlinear_matmul(tdm_infer_ctx *c);
tdm_status *tdm_misc_infer_matmul_integer(tdm_infer_ctx *c);
tdm_status *tdm_misc_infer_conv_integer(tdm_infer_ctx *c);
tdm_status *tdm_misc_infer_qlinear_conv(tdm_infer_ctx *c);

static bool quant_type_ok(tdm_dtype t) {
    return t == TDM_UINT8 || t == TDM_INT8 || t == TDM_UINT16 || t == TDM_INT16;
}

tdm_status *tdm_misc_infer_quantize(tdm_infer_ctx *c) {
    tdm_dtype t = TDM_UINT8;
    if (c->n_in > 2 && c->in[2].present) {
        t = c->in[2].dtype;
    } else if (c->opset >= 21) {
        int64_t od = tdm_attr_int(c->node, "output_dtype", 0);
        if (od != 0) t = (tdm_dtype)od;
    }
    if (t != TDM_UNDEFINED && !quant_type_ok(t))
        return tdm_node_error(c->node, TDM_ERR_UNSUPPORTED, "quantized type %s is not supported",
                              tdm_dtype_name(t));
    tdm_infer_copy(&c->out[0], &c->in[0]);
    c->out[0].dtype = t;
    return NULL;
}

tdm_status *tdm_misc_infer_dequantize(tdm_infer_ctx *c) {
    tdm_infer_copy(&c->out[0], &c->in[0]);
    tdm_dtype t = c->in[1].dtype;
    c->out[0].dtype = (c->opset >= 19 && tdm_dtype_is_float(t)) ? t : TDM_FLOAT;
    return NULL;
}

tdm_status *tdm_misc_infer_dynquant(tdm_infer_ctx *c) {
    tdm_infer_copy(&c->out[0], &c->in[0]);
    c->out[0].dtype = TDM_UINT8;
    if (c->n_out > 1) {
        c->out[1].dtype = TDM_FLOAT;
        c->out[1].rank = 0;
    }
    if (c->n_out > 2) {
        c->out[2].dtype = TDM_UINT8;
        c->out[2].rank = 0;
    }
    return NULL;
}

/* numpy matmul shape of a and b into y (dtype left to the caller). */
static tdm_status *matmul_shape(const tdm_infer_ctx *c, const tdm_value_info *a,
                                const tdm_value_info *b, tdm_value_info *y) {
    y->rank = -1;
    if (a->rank < 0 || b->rank < 0) return NULL;
    if (a->rank == 0 || b->rank == 0)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "matmul inputs must not be scalars");
    int64_t ad[TDM_MAX_RANK], bd[TDM_MAX_RANK];
    int ar = a->rank, br = b->rank;
    memcpy(ad, a->dims, sizeof ad);
    memcpy(bd, b->dims, sizeof bd);
    bool a1 = ar == 1, b1 = br == 1;
    if (a1) {
        ad[1] = ad[0];
        ad[0] = 1;
        ar = 2;
    }
    if (b1) {
        bd[1] = 1;
        br = 2;
    }
    int64_t k1 = ad[ar - 1], k2 = bd[br - 2];
    if (k1 >= 0 && k2 >= 0 && k1 != k2)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "matmul inner dimensions differ (%lld vs %lld)", (long long)k1,
                              (long long)k2);
    tdm_value_info ba = {.present = true, .rank = ar - 2}, bb = {.present = true, .rank = br - 2};
    memcpy(ba.dims, ad, sizeof(int64_t) * (size_t)(ar - 2));
    memcpy(bb.dims, bd, sizeof(int64_t) * (size_t)(br - 2));
    const tdm_value_info *ins[2] = {&ba, &bb};
    tdm_value_info batch = {0};
    TDM_TRY(tdm_infer_broadcast(c, 2, ins, &batch));
    int r = batch.rank; /* at most TDM_MAX_RANK - 2 */
    memcpy(y->dims, batch.dims, sizeof(int64_t) * (size_t)r);
    if (!a1) y->dims[r++] = ad[ar - 2];
    if (!b1) y->dims[r++] = bd[br - 1];
    y->rank = r;
    return NULL;
}

tdm_status *tdm_misc_infer_matmul_integer(tdm_infer_ctx *c) {
    c->out[0].dtype = TDM_INT32;
    return matmul_shape(c, &c->in[0], &c->in[1], &c->out[0]);
}

tdm_status *tdm_misc_infer_qlinear_matmul(tdm_infer_ctx *c) {
    c->out[0].dtype = c->in[7].dtype;
    return matmul_shape(c, &c->in[0], &c->in[3], &c->out[0]);
}

/* Conv output shape of x [N, C, spatial...] with weights w [M, C/group, kernel...]. */
static tdm_status *conv_shape(const tdm_infer_ctx *c, const tdm_value_info *x,
                              const tdm_value_info *w, tdm_value_info *y) {
    const tdm_node *n = c->node;
    y->rank = x->rank >= 0 ? x->rank : w->rank;
    if (y->rank < 0) return NULL;
    if (y->rank < 3)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "conv input must have rank >= 3");
    int sp = y->rank - 2;
    for (int i = 0; i < y->rank; i++) y->dims[i] = TDM_DIM_UNKNOWN;
    if (x->rank >= 0) y->dims[0] = x->dims[0];
    if (w->rank >= 0) {
        if (w->rank != y->rank)
            return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "weights rank %d differs from input rank %d",
                                  w->rank, y->rank);
        y->dims[1] = w->dims[0];
    }
    if (x->rank < 0) return NULL;
    size_t nk = 0, ns = 0, nd = 0, np = 0;
    const int64_t *ks = tdm_attr_ints(n, "kernel_shape", &nk);
    const int64_t *st = tdm_attr_ints(n, "strides", &ns);
    const int64_t *dl = tdm_attr_ints(n, "dilations", &nd);
    const int64_t *pd = tdm_attr_ints(n, "pads", &np);
    if ((ks && nk != (size_t)sp) || (st && ns != (size_t)sp) || (dl && nd != (size_t)sp) ||
        (pd && np != 2 * (size_t)sp))
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "kernel_shape/strides/dilations/pads do not match %d spatial dims", sp);
    const char *ap = tdm_attr_string(n, "auto_pad", "NOTSET");
    for (int i = 0; i < sp; i++) {
        int64_t in = x->dims[2 + i];
        int64_t k = ks ? ks[i] : (w->rank >= 0 ? w->dims[2 + i] : TDM_DIM_UNKNOWN);
        int64_t s = st ? st[i] : 1, d = dl ? dl[i] : 1;
        if (s < 1 || d < 1)
            return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "strides and dilations must be >= 1");
        if (in < 0) continue;
        if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
            y->dims[2 + i] = (in + s - 1) / s;
            continue;
        }
        if (k < 0) continue;
        int64_t ek = (k - 1) * d + 1;
        int64_t tot = in - ek;
        if (strcmp(ap, "VALID") != 0 && pd) tot += pd[i] + pd[i + sp];
        if (tot < 0)
            return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                                  "kernel is larger than the padded input on spatial axis %d", i);
        y->dims[2 + i] = tot / s + 1;
    }
    return NULL;
}

tdm_status *tdm_misc_infer_conv_integer(tdm_infer_ctx *c) {
    c->out[0].dtype = TDM_INT32;
    return conv_shape(c, &c->in[0], &c->in[1], &c->out[0]);
}

/* QConv's x_nhwc / y_nhwc (ops/fused.h): X / Y channels-last [N, H, W, C] (rank 4). */
tdm_status *tdm_misc_infer_qlinear_conv(tdm_infer_ctx *c) {
    c->out[0].dtype = c->in[7].dtype;
    bool xl = tdm_attr_int(c->node, "x_nhwc", 0) != 0, yl = tdm_attr_int(c->node, "y_nhwc", 0) != 0;
    if (!xl && !yl) return conv_shape(c, &c->in[0], &c->in[3], &c->out[0]);
    tdm_value_info x = c->in[0];
    if (xl && x.rank >= 0) {
        if (x.rank != 4)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "x_nhwc needs a rank-4 input");
        int64_t ch = x.dims[3];
        x.dims[3] = x.dims[2];
        x.dims[2] = x.dims[1];
        x.dims[1] = ch;
    }
    TDM_TRY(conv_shape(c, &x, &c->in[3], &c->out[0]));
    tdm_value_info *y = &c->out[0];
    if (yl && y->rank >= 0) {
        if (y->rank != 4)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "y_nhwc needs a rank-4 output");
        int64_t ch = y->dims[1];
        y->dims[1] = y->dims[2];
        y->dims[2] = y->dims[3];
        y->dims[3] = ch;
    }
    return NULL;
}

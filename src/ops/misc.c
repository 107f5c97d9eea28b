/* Operator schemas: misc family (resampling, detection, signal, linear algebra and
 * quantization ops). Resize/Upsample shape functions live in misc_resize.c, quantization
 * ones in misc_quant.c. */
#include <string.h>

#include "ops/op.h"

/* misc_resize.c */
tdm_status *tdm_misc_infer_resize(tdm_infer_ctx *c);
tdm_status *tdm_misc_infer_upsample(tdm_infer_ctx *c);
/* misc_quant.c */
tdm_status *tdm_misc_infer_quantize(tdm_infer_ctx *c);
tdm_status *tdm_misc_infer_dequantize(tdm_infer_ctx *c);
tdm_status *tdm_misc_infer_dynquant(tdm_infer_ctx *c);
tdm_status *tdm_misc_infer_qlinear_matmul(tdm_infer_ctx *c);
tdm_status *tdm_misc_infer_matmul_integer(tdm_infer_ctx *c);
tdm_status *tdm_misc_infer_conv_integer(tdm_infer_ctx *c);
tdm_status *tdm_misc_infer_qlinear_conv(tdm_infer_ctx *c);

static void set_unknown(tdm_value_info *v, tdm_dtype dt, int rank) {
    v->dtype = dt;
    v->rank = rank;
    for (int i = 0; i < rank && i < TDM_MAX_RANK; i++) v->dims[i] = TDM_DIM_UNKNOWN;
}

/* Integer scalar (or 1-element) input value, if known. */
static tdm_status *scalar_int(const tdm_infer_ctx *c, int i, const char *what, bool *known,
                              int64_t *v) {
    *known = false;
    if (i >= c->n_in || !c->in[i].present || !c->in[i].data) return NULL;
    const tdm_tensor *t = c->in[i].data;
    if (t->dtype != TDM_INT64 && t->dtype != TDM_INT32)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "%s must be int32 or int64", what);
    if (t->count != 1)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "%s must be a scalar", what);
    *v = tdm_tensor_get_i64(t, 0);
    *known = true;
    return NULL;
}

static tdm_status *infer_nms(tdm_infer_ctx *c) {
    const tdm_value_info *b = &c->in[0], *s = &c->in[1];
    if (b->rank >= 0 && (b->rank != 3 || (b->dims[2] >= 0 && b->dims[2] != 4)))
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "boxes must have shape [N, B, 4]");
    if (s->rank >= 0 && s->rank != 3)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "scores must have shape [N, C, B]");
    set_unknown(&c->out[0], TDM_INT64, 2);
    c->out[0].dims[1] = 3;
    return NULL;
}

static tdm_status *infer_roialign(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0], *r = &c->in[1], *bi = &c->in[2];
    set_unknown(&c->out[0], x->dtype, 4);
    if (x->rank >= 0 && x->rank != 4)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "X must have rank 4");
    if (r->rank >= 0 && (r->rank != 2 || (r->dims[1] >= 0 && r->dims[1] != 4)))
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "rois must have shape [R, 4]");
    if (bi->rank >= 0 && bi->rank != 1)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "batch_indices must be 1-D");
    int64_t oh = tdm_attr_int(c->node, "output_height", 1);
    int64_t ow = tdm_attr_int(c->node, "output_width", 1);
    if (oh < 1 || ow < 1)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "output size must be positive");
    if (r->rank == 2) c->out[0].dims[0] = r->dims[0];
    if (c->out[0].dims[0] < 0 && bi->rank == 1) c->out[0].dims[0] = bi->dims[0];
    if (r->rank == 2 && bi->rank == 1 && r->dims[0] >= 0 && bi->dims[0] >= 0 &&
        r->dims[0] != bi->dims[0])
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "rois and batch_indices have different lengths");
    if (x->rank == 4) c->out[0].dims[1] = x->dims[1];
    c->out[0].dims[2] = oh;
    c->out[0].dims[3] = ow;
    return NULL;
}

static tdm_status *infer_gridsample(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0], *g = &c->in[1];
    const char *m = tdm_attr_string(c->node, "mode", "linear");
    const char *pm = tdm_attr_string(c->node, "padding_mode", "zeros");
    static const char *const modes[] = {"nearest", "linear", "cubic", "bilinear", "bicubic"};
    bool ok = false;
    for (int i = 0; i < 5; i++) ok = ok || !strcmp(m, modes[i]);
    if (!ok) return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "unknown mode '%s'", m);
    if (strcmp(pm, "zeros") && strcmp(pm, "border") && strcmp(pm, "reflection"))
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "unknown padding_mode '%s'", pm);
    int rank = x->rank >= 0 ? x->rank : g->rank;
    set_unknown(&c->out[0], x->dtype, rank);
    if (rank < 0) return NULL;
    if (rank < 3)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "X must have rank >= 3");
    if (x->rank >= 0 && g->rank >= 0 && x->rank != g->rank)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "X and grid ranks differ");
    if (g->rank >= 0 && g->dims[g->rank - 1] >= 0 && g->dims[g->rank - 1] != rank - 2)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "grid's last dimension must be %d", rank - 2);
    if (x->rank >= 0) {
        c->out[0].dims[0] = x->dims[0];
        c->out[0].dims[1] = x->dims[1];
    }
    if (g->rank >= 0) {
        if (c->out[0].dims[0] < 0) c->out[0].dims[0] = g->dims[0];
        for (int i = 1; i < rank - 1; i++) c->out[0].dims[i + 1] = g->dims[i];
    }
    return NULL;
}

static tdm_status *infer_unique(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0];
    const tdm_attr *ax = tdm_node_attr(c->node, "axis");
    int axis = -1;
    if (ax && x->rank >= 0) TDM_TRY(tdm_norm_axis(c->node, ax->i, x->rank, &axis));
    set_unknown(&c->out[0], x->dtype, ax ? x->rank : 1);
    for (int i = 1; i < c->n_out; i++) set_unknown(&c->out[i], TDM_INT64, 1);
    if (c->n_out > 2 && x->rank >= 0) {
        if (ax) {
            c->out[2].dims[0] = x->dims[axis];
        } else if (tdm_info_known(x)) {
            int64_t n = 1;
            for (int i = 0; i < x->rank; i++) n *= x->dims[i];
            c->out[2].dims[0] = n;
        }
    }
    return NULL;
}

static tdm_status *infer_det(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0];
    if (x->rank < 0) {
        set_unknown(&c->out[0], x->dtype, -1);
        return NULL;
    }
    if (x->rank < 2)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "input must have rank >= 2");
    int64_t m = x->dims[x->rank - 1], n = x->dims[x->rank - 2];
    if (m >= 0 && n >= 0 && m != n)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "matrices must be square");
    c->out[0].dtype = x->dtype;
    c->out[0].rank = x->rank - 2;
    for (int i = 0; i < x->rank - 2; i++) c->out[0].dims[i] = x->dims[i];
    return NULL;
}

static tdm_status *infer_window(tdm_infer_ctx *c) {
    int64_t od = tdm_attr_int(c->node, "output_datatype", TDM_FLOAT);
    if (od <= 0 || od >= TDM_DTYPE_COUNT || od == TDM_STRING || od == TDM_BOOL ||
        od == TDM_COMPLEX64 || od == TDM_COMPLEX128)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "unsupported output_datatype %lld",
                              (long long)od);
    set_unknown(&c->out[0], (tdm_dtype)od, 1);
    bool known;
    int64_t n;
    TDM_TRY(scalar_int(c, 0, "size", &known, &n));
    if (known) {
        if (n < 0)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "size %lld is negative",
                                  (long long)n);
        c->out[0].dims[0] = n;
    }
    return NULL;
}

/* DFT: axis (normalized, never the last dim), length and output length along it. */
static tdm_status *infer_dft(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0];
    set_unknown(&c->out[0], x->dtype, x->rank);
    if (x->rank < 0) return NULL;
    int r = x->rank;
    if (r < 2)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "input must have rank >= 2");
    if (x->dims[r - 1] >= 0 && x->dims[r - 1] != 1 && x->dims[r - 1] != 2)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "the last dimension must be 1 (real) or 2 (complex)");
    int64_t axis = 1;
    bool known = true;
    if (c->opset >= 20) {
        axis = -2;
        bool k;
        int64_t v;
        if (c->n_in > 2 && c->in[2].present) {
            TDM_TRY(scalar_int(c, 2, "axis", &k, &v));
            if (k) axis = v;
            else known = false;
        }
    } else {
        axis = tdm_attr_int(c->node, "axis", 1);
    }
    for (int i = 0; i < r; i++) c->out[0].dims[i] = x->dims[i];
    int64_t inv = tdm_attr_int(c->node, "inverse", 0), one = tdm_attr_int(c->node, "onesided", 0);
    c->out[0].dims[r - 1] = (inv && one) ? 1 : 2;
    if (!known) {
        for (int i = 0; i < r - 1; i++) c->out[0].dims[i] = TDM_DIM_UNKNOWN;
        return NULL;
    }
    int a;
    TDM_TRY(tdm_norm_axis(c->node, axis, r, &a));
    if (a == r - 1)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "axis must not be the last (complex) dimension");
    int64_t n = x->dims[a];
    bool k;
    int64_t v;
    if (c->n_in > 1 && c->in[1].present) {
        TDM_TRY(scalar_int(c, 1, "dft_length", &k, &v));
        if (!k) {
            c->out[0].dims[a] = TDM_DIM_UNKNOWN;
            return NULL;
        }
        if (v < 1)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "dft_length must be positive");
        n = v;
    } else if (n >= 0 && inv && one) {
        n = 2 * (n - 1);
    }
    if (n < 0) return NULL;
    c->out[0].dims[a] = (one && !inv) ? n / 2 + 1 : n;
    return NULL;
}

static tdm_status *infer_stft(tdm_infer_ctx *c) {
    const tdm_value_info *x = &c->in[0];
    set_unknown(&c->out[0], x->dtype, 4);
    if (x->rank >= 0 && x->rank != 3)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "signal must have shape [batch, length, 1 or 2]");
    if (x->rank == 3) c->out[0].dims[0] = x->dims[0];
    c->out[0].dims[3] = 2;
    bool k_step, k_len = false;
    int64_t step = 0, fl = -1;
    TDM_TRY(scalar_int(c, 1, "frame_step", &k_step, &step));
    if (c->n_in > 3 && c->in[3].present) {
        TDM_TRY(scalar_int(c, 3, "frame_length", &k_len, &fl));
        if (!k_len) fl = -1;
    } else if (c->n_in > 2 && c->in[2].present) {
        if (c->in[2].rank >= 0 && c->in[2].rank != 1)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "window must be 1-D");
        if (c->in[2].rank == 1) fl = c->in[2].dims[0];
    } else if (x->rank == 3) {
        fl = x->dims[1];
    }
    if (k_step && step < 1)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "frame_step must be positive");
    if (fl == 0 || fl < -1)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "frame_length must be positive");
    if (fl < 0) return NULL;
    int64_t one = tdm_attr_int(c->node, "onesided", 1);
    c->out[0].dims[2] = one ? fl / 2 + 1 : fl;
    if (k_step && x->rank == 3 && x->dims[1] >= 0) {
        if (x->dims[1] < fl)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                  "frame_length %lld is longer than the signal", (long long)fl);
        c->out[0].dims[1] = 1 + (x->dims[1] - fl) / step;
    }
    return NULL;
}

#define SHAPE_IN(i) (1u << (i))

const tdm_op_schema tdm_ops_misc[] = {
    {"", "Resize", 10, 1, 4, 1, 1, tdm_misc_infer_resize, 0, SHAPE_IN(1) | SHAPE_IN(2) | SHAPE_IN(3)},
    {"", "Upsample", 7, 1, 2, 1, 1, tdm_misc_infer_upsample, 0, SHAPE_IN(1)},
    {"", "NonMaxSuppression", 10, 2, 5, 1, 1, infer_nms, TDM_OP_DATA_DEPENDENT, 0},
    {"", "RoiAlign", 10, 3, 3, 1, 1, infer_roialign, 0, 0},
    {"", "GridSample", 16, 2, 2, 1, 1, infer_gridsample, 0, 0},
    {"", "Unique", 11, 1, 1, 1, 4, infer_unique, TDM_OP_DATA_DEPENDENT, 0},
    {"", "Det", 11, 1, 1, 1, 1, infer_det, 0, 0},
    {"", "HannWindow", 17, 1, 1, 1, 1, infer_window, 0, SHAPE_IN(0)},
    {"", "HammingWindow", 17, 1, 1, 1, 1, infer_window, 0, SHAPE_IN(0)},
    {"", "BlackmanWindow", 17, 1, 1, 1, 1, infer_window, 0, SHAPE_IN(0)},
    {"", "DFT", 17, 1, 3, 1, 1, infer_dft, 0, SHAPE_IN(1) | SHAPE_IN(2)},
    {"", "STFT", 17, 2, 4, 1, 1, infer_stft, 0, SHAPE_IN(1) | SHAPE_IN(3)},
    {"", "QuantizeLinear", 10, 2, 3, 1, 1, tdm_misc_infer_quantize, 0, 0},
    {"", "DequantizeLinear", 10, 2, 3, 1, 1, tdm_misc_infer_dequantize, 0, 0},
    {"", "DynamicQuantizeLinear", 11, 1, 1, 3, 3, tdm_misc_infer_dynquant, 0, 0},
    {"", "QLinearMatMul", 10, 8, 8, 1, 1, tdm_misc_infer_qlinear_matmul, 0, 0},
    {"", "MatMulInteger", 10, 2, 4, 1, 1, tdm_misc_infer_matmul_integer, 0, 0},
    {"", "ConvInteger", 10, 2, 4, 1, 1, tdm_misc_infer_conv_integer, 0, 0},
    {"", "QLinearConv", 10, 8, 9, 1, 1, tdm_misc_infer_qlinear_conv, 0, 0},
};
const int tdm_ops_misc_count = (int)(sizeof tdm_ops_misc / sizeof tdm_ops_misc[0]);

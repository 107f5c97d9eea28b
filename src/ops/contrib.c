/* Operator schemas: contrib family — the com.microsoft operators that ONNX Runtime's tools
 * write into models (the transformer optimizer's fusions, the quantizer's QLinear* and
 * dynamic-quantization ops):
 *   BiasGelu, FastGelu, QuickGelu, BiasAdd, SkipLayerNormalization, FusedMatMul, FusedConv,
 *   QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool,
 *   QLinearConcat, QLinearAveragePool, NhwcMaxPool, QGemm (here); Attention, MultiHeadAttention, QAttention,
 *   EmbedLayerNormalization, MatMulIntegerToFloat, DynamicQuantizeMatMul and
 *   DynamicQuantizeLSTM (ops/contrib_attn.c).
 * Semantics follow ONNX Runtime's contrib operator schemas (ORT 1.32); the CPU kernels are
 * src/backends/cpu/k_contrib*.c. What the kernels do not implement is refused here, at load
 * time, with the attribute or input named. */
#include <string.h>

#include "ops/contrib.h"
#include "ops/fused.h"

bool tdm_contrib_has_in(const tdm_infer_ctx *c, int i) { return i < c->n_in && c->in[i].present; }

tdm_status *tdm_contrib_need_type(const tdm_infer_ctx *c, int i, const char *what, uint32_t mask) {
    if (!tdm_contrib_has_in(c, i) || c->in[i].dtype == TDM_UNDEFINED) return NULL;
    unsigned t = (unsigned)c->in[i].dtype; /* a sequence, map or optional is 100 and up */
    if (t < 32 && (mask & (1u << t))) return NULL;
    return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "%s has type %s, which the operator does not take",
                          what, tdm_dtype_name(c->in[i].dtype));
}

tdm_status *tdm_contrib_need_rank(const tdm_infer_ctx *c, int i, const char *what, int lo, int hi) {
    if (!tdm_contrib_has_in(c, i) || c->in[i].rank < 0) return NULL;
    if (c->in[i].rank >= lo && c->in[i].rank <= hi) return NULL;
    if (lo == hi)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "%s must have rank %d, has %d",
                              what, lo, c->in[i].rank);
    return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "%s must have rank %d to %d, has %d",
                          what, lo, hi, c->in[i].rank);
}

tdm_status *tdm_contrib_need_scalar(const tdm_infer_ctx *c, int i, const char *what) {
    if (!tdm_contrib_has_in(c, i) || c->in[i].rank < 0) return NULL;
    int64_t n = 1;
    for (int d = 0; d < c->in[i].rank; d++) n = c->in[i].dims[d] < 0 ? -1 : n * c->in[i].dims[d];
    if (n == 1 || (n < 0 && c->in[i].rank <= 1)) return NULL;
    return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                          "%s must be a scalar (per-tensor quantization)", what);
}

/* Input i is 1-D with n values (n unknown: any length). */
tdm_status *tdm_contrib_need_vec(const tdm_infer_ctx *c, int i, const char *what, int64_t n) {
    if (!tdm_contrib_has_in(c, i) || c->in[i].rank < 0) return NULL;
    if (c->in[i].rank != 1)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "%s must be 1-D, has rank %d", what,
                              c->in[i].rank);
    if (n >= 0 && c->in[i].dims[0] >= 0 && c->in[i].dims[0] != n)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "%s has %lld values, expected %lld",
                              what, (long long)c->in[i].dims[0], (long long)n);
    return NULL;
}

void tdm_contrib_set(tdm_value_info *v, tdm_dtype dt, int rank) {
    v->dtype = dt;
    v->rank = rank;
    for (int i = 0; i < rank && i < TDM_MAX_RANK; i++) v->dims[i] = TDM_DIM_UNKNOWN;
}

static int64_t last_dim(const tdm_value_info *v) {
    return v->rank > 0 ? v->dims[v->rank - 1] : TDM_DIM_UNKNOWN;
}

#define F32 (1u << TDM_FLOAT)
#define Q8 ((1u << TDM_INT8) | (1u << TDM_UINT8))

/* ---- the Gelu family and BiasAdd ---- */

/* BiasGelu (A, B), FastGelu (X, bias?): the bias is 1-D over the last axis. */
static tdm_status *infer_bias_act(tdm_infer_ctx *c) {
    for (int i = 0; i < c->n_in; i++) TDM_TRY(tdm_contrib_need_type(c, i, i ? "bias" : "input", F32));
    if (tdm_contrib_has_in(c, 1)) TDM_TRY(tdm_contrib_need_vec(c, 1, "bias", last_dim(&c->in[0])));
    if (c->in[0].rank == 0)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "input must have rank 1 or more");
    tdm_infer_copy(&c->out[0], &c->in[0]);
    return NULL;
}

static tdm_status *infer_quick_gelu(tdm_infer_ctx *c) {
    TDM_TRY(tdm_contrib_need_type(c, 0, "X", F32));
    tdm_infer_copy(&c->out[0], &c->in[0]);
    return NULL;
}

/* BiasAdd: X [N, S, C] + bias [C] + skip [N, S, C]. */
static tdm_status *infer_bias_add(tdm_infer_ctx *c) {
    for (int i = 0; i < 3; i++) TDM_TRY(tdm_contrib_need_type(c, i, "input", F32));
    TDM_TRY(tdm_contrib_need_rank(c, 0, "X", 3, 3));
    TDM_TRY(tdm_contrib_need_rank(c, 2, "skip", 3, 3));
    TDM_TRY(tdm_contrib_need_vec(c, 1, "bias", last_dim(&c->in[0])));
    const tdm_value_info *x = &c->in[0], *s = &c->in[2];
    if (x->rank == 3 && s->rank == 3)
        for (int d = 0; d < 3; d++)
            if (x->dims[d] >= 0 && s->dims[d] >= 0 && x->dims[d] != s->dims[d])
                return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "skip must have X's shape");
    tdm_infer_copy(&c->out[0], x);
    return NULL;
}

/* ---- SkipLayerNormalization: output, mean, inv_std_var ([.., 1]), input_skip_bias_sum ---- */

static tdm_status *infer_skip_ln(tdm_infer_ctx *c) {
    for (int i = 0; i < c->n_in; i++) TDM_TRY(tdm_contrib_need_type(c, i, "input", F32));
    const tdm_value_info *x = &c->in[0], *s = &c->in[1];
    TDM_TRY(tdm_contrib_need_rank(c, 0, "input", 2, 3));
    TDM_TRY(tdm_contrib_need_rank(c, 1, "skip", 2, 3));
    int64_t hidden = last_dim(x);
    static const char *const names[] = {"", "", "gamma", "beta", "bias"};
    for (int i = 2; i < 5; i++) TDM_TRY(tdm_contrib_need_vec(c, i, names[i], hidden));
    if (x->rank >= 0 && s->rank >= 0) {
        /* skip: the input's shape, [1, S, H] or [S, H] */
        bool ok = s->rank <= x->rank;
        for (int d = 1; ok && d <= s->rank; d++) {
            int64_t a = x->dims[x->rank - d], b = s->dims[s->rank - d];
            bool lead1 = d == 3 && b == 1;
            ok = a < 0 || b < 0 || a == b || lead1;
        }
        if (!ok)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                  "skip must have the input's shape, [1, S, H] or [S, H]");
    }
    tdm_infer_copy(&c->out[0], x);
    for (int o = 1; o < 3 && o < c->n_out; o++) {
        if (!c->out[o].present) continue;
        tdm_infer_copy(&c->out[o], x);
        c->out[o].dtype = TDM_FLOAT;
        if (x->rank > 0) c->out[o].dims[x->rank - 1] = 1;
    }
    if (c->n_out > 3 && c->out[3].present) tdm_infer_copy(&c->out[3], x);
    return NULL;
}

/* ---- FusedMatMul: alpha * op(A) . op(B) with MatMul's batching ---- */

static tdm_status *infer_fused_matmul(tdm_infer_ctx *c) {
    const tdm_node *n = c->node;
    TDM_TRY(tdm_contrib_need_type(c, 0, "A", F32));
    TDM_TRY(tdm_contrib_need_type(c, 1, "B", F32));
    if (tdm_attr_int(n, "transBatchA", 0) || tdm_attr_int(n, "transBatchB", 0))
        return tdm_node_error(n, TDM_ERR_UNSUPPORTED, "transBatchA / transBatchB are not implemented");
    const tdm_op_schema *mm = tdm_op_find("", "MatMul", 13);
    if (!mm || !mm->infer) return tdm_node_error(n, TDM_ERR_INTERNAL, "no MatMul schema to infer with");
    tdm_value_info in[2] = {c->in[0], c->in[1]};
    const char *tr[2] = {"transA", "transB"};
    for (int i = 0; i < 2; i++) {
        if (!tdm_attr_int(n, tr[i], 0) || in[i].rank < 0) continue;
        if (in[i].rank < 2)
            return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "%s needs %s of rank 2 or more", tr[i],
                                  i ? "B" : "A");
        int64_t t = in[i].dims[in[i].rank - 1];
        in[i].dims[in[i].rank - 1] = in[i].dims[in[i].rank - 2];
        in[i].dims[in[i].rank - 2] = t;
    }
    tdm_infer_ctx sub = *c;
    sub.opset = 13;
    sub.n_in = 2;
    sub.in = in;
    return mm->infer(&sub);
}

/* ---- FusedConv (com.microsoft): tandem's own FusedConv (ops/fused.h) takes its form ---- */

static tdm_status *infer_fused_conv(tdm_infer_ctx *c) {
    const tdm_op_schema *fc = tdm_op_find(TDM_FUSED_DOMAIN, "FusedConv", 1);
    if (!fc || !fc->infer) return tdm_node_error(c->node, TDM_ERR_INTERNAL, "no FusedConv schema");
    TDM_TRY(tdm_contrib_need_type(c, 0, "X", F32));
    if (tdm_node_attr(c->node, "activation_affine"))
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "activation_affine is not an attribute of com.microsoft FusedConv");
    const char *act = tdm_attr_string(c->node, "activation", "");
    if (!strcmp(act, "GeluTanh") || !strcmp(act, "Swish"))
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                              "unknown activation '%s' for com.microsoft FusedConv", act);
    return fc->infer(c);
}

/* ---- QLinear element-wise ops ---- */

/* The quantized tensors of a QLinear op share input 0's type; zero points are scalars of it,
 * scales float scalars. `q` lists the quantized inputs, `zp` the zero points, `sc` the scales. */
static tdm_status *check_qparams(tdm_infer_ctx *c, const int *q, int nq, const int *sc, int nsc,
                                 const int *zp, int nzp) {
    for (int i = 0; i < nq + nsc; i++) { /* the zero points alone may be omitted */
        int k = i < nq ? q[i] : sc[i - nq];
        if (!tdm_contrib_has_in(c, k))
            return tdm_node_error(c->node, TDM_ERR_INVALID_MODEL, "required input %d is missing", k);
    }
    tdm_dtype t = c->in[0].dtype;
    if (t != TDM_UNDEFINED && t != TDM_INT8 && t != TDM_UINT8)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "the quantized type must be int8 or uint8, got %s",
                              tdm_dtype_name(t));
    for (int i = 0; i < nq + nzp; i++) {
        int k = i < nq ? q[i] : zp[i - nq];
        if (!tdm_contrib_has_in(c, k) || c->in[k].dtype == TDM_UNDEFINED || t == TDM_UNDEFINED) continue;
        if (c->in[k].dtype != t)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "input %d has type %s, input 0 %s", k,
                                  tdm_dtype_name(c->in[k].dtype), tdm_dtype_name(t));
    }
    for (int i = 0; i < nzp; i++) TDM_TRY(tdm_contrib_need_scalar(c, zp[i], "a zero point"));
    for (int i = 0; i < nsc; i++) {
        TDM_TRY(tdm_contrib_need_type(c, sc[i], "a scale", F32));
        TDM_TRY(tdm_contrib_need_scalar(c, sc[i], "a scale"));
    }
    return NULL;
}

/* QLinearAdd / QLinearMul: A, A_scale, A_zp?, B, B_scale, B_zp?, C_scale, C_zp? (the schemas
 * take optional slots: a zero point in the middle may be empty) */
static tdm_status *infer_qlinear_binary(tdm_infer_ctx *c) {
    static const int q[] = {0, 3}, sc[] = {1, 4, 6}, zp[] = {2, 5, 7};
    TDM_TRY(check_qparams(c, q, 2, sc, 3, zp, 3));
    const tdm_value_info *ins[2] = {&c->in[0], &c->in[3]};
    TDM_TRY(tdm_infer_broadcast(c, 2, ins, &c->out[0]));
    c->out[0].dtype = c->in[0].dtype;
    return NULL;
}

/* QLinearSigmoid / QLinearLeakyRelu: X, X_scale, X_zp?, Y_scale, Y_zp? */
static tdm_status *infer_qlinear_unary(tdm_infer_ctx *c) {
    static const int q[] = {0}, sc[] = {1, 3}, zp[] = {2, 4};
    TDM_TRY(check_qparams(c, q, 1, sc, 2, zp, 2));
    tdm_infer_copy(&c->out[0], &c->in[0]);
    return NULL;
}

/* QLinearGlobalAveragePool: X, x_scale, x_zp, y_scale, y_zp; [N, C, 1..] or [N, 1.., C]. */
static tdm_status *infer_qlinear_gap(tdm_infer_ctx *c) {
    static const int q[] = {0}, sc[] = {1, 3}, zp[] = {2, 4};
    TDM_TRY(check_qparams(c, q, 1, sc, 2, zp, 2));
    int64_t cl = tdm_attr_int(c->node, "channels_last", 0);
    if (cl != 0 && cl != 1)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "channels_last must be 0 or 1");
    const tdm_value_info *x = &c->in[0];
    tdm_value_info *y = &c->out[0];
    y->dtype = x->dtype;
    if (x->rank < 0) return NULL;
    if (x->rank < 3)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "X must have rank 3 or more, has %d",
                              x->rank);
    y->rank = x->rank;
    for (int d = 0; d < x->rank; d++) {
        bool keep = d == 0 || (cl ? d == x->rank - 1 : d == 1);
        y->dims[d] = keep ? x->dims[d] : 1;
    }
    return NULL;
}

/* QLinearConcat: Y_scale, Y_zp, then (X, X_scale, X_zp) per input. */
static tdm_status *infer_qlinear_concat(tdm_infer_ctx *c) {
    const tdm_node *n = c->node;
    if ((c->n_in - 2) % 3 != 0 || c->n_in < 5)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "inputs must be Y_scale, Y_zero_point and one or more (X, X_scale, "
                              "X_zero_point) triples; got %d inputs",
                              c->n_in);
    tdm_dtype t = c->in[1].dtype;
    if (t != TDM_UNDEFINED && t != TDM_INT8 && t != TDM_UINT8)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "Y_zero_point must be int8 or uint8");
    TDM_TRY(tdm_contrib_need_type(c, 0, "Y_scale", F32));
    TDM_TRY(tdm_contrib_need_scalar(c, 0, "Y_scale"));
    TDM_TRY(tdm_contrib_need_scalar(c, 1, "Y_zero_point"));
    int k = (c->n_in - 2) / 3, rank = -1;
    for (int i = 0; i < k; i++) {
        int b = 2 + 3 * i;
        for (int j = 0; j < 3; j++)
            if (!tdm_contrib_has_in(c, b + j))
                return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "input %d is missing", b + j);
        for (int j = 0; j < 3; j += 2)
            if (c->in[b + j].dtype != TDM_UNDEFINED && t != TDM_UNDEFINED && c->in[b + j].dtype != t)
                return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "input %d has type %s, Y %s", b + j,
                                      tdm_dtype_name(c->in[b + j].dtype), tdm_dtype_name(t));
        TDM_TRY(tdm_contrib_need_type(c, b + 1, "X_scale", F32));
        TDM_TRY(tdm_contrib_need_scalar(c, b + 1, "X_scale"));
        TDM_TRY(tdm_contrib_need_scalar(c, b + 2, "X_zero_point"));
        if (c->in[b].rank >= 0) {
            if (rank >= 0 && c->in[b].rank != rank)
                return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "inputs differ in rank");
            rank = c->in[b].rank;
        }
    }
    tdm_value_info *y = &c->out[0];
    y->dtype = t;
    if (rank < 0) return NULL;
    int axis;
    TDM_TRY(tdm_norm_axis(n, tdm_attr_int(n, "axis", 0), rank, &axis));
    tdm_contrib_set(y, t, rank);
    int64_t sum = 0;
    for (int i = 0; i < k; i++) {
        const tdm_value_info *x = &c->in[2 + 3 * i];
        if (x->rank < 0) {
            sum = -1;
            continue;
        }
        for (int d = 0; d < rank; d++) {
            if (d == axis) continue;
            if (x->dims[d] >= 0 && y->dims[d] >= 0 && x->dims[d] != y->dims[d])
                return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                                      "inputs differ in dim %d (%lld vs %lld) off the axis", d,
                                      (long long)x->dims[d], (long long)y->dims[d]);
            if (x->dims[d] >= 0) y->dims[d] = x->dims[d];
        }
        sum = sum < 0 || x->dims[axis] < 0 ? -1 : sum + x->dims[axis];
    }
    y->dims[axis] = sum < 0 ? TDM_DIM_UNKNOWN : sum;
    return NULL;
}

/* A pool's shape rule (MaxPool / AveragePool of opset `opset`) on a channels-last input when
 * `last`: the input is seen as [N, C, d1..] for the rule and the output turned back. */
static tdm_status *pool_infer(tdm_infer_ctx *c, const char *op, int opset, bool last) {
    const tdm_value_info *x = &c->in[0];
    c->out[0].dtype = x->dtype;
    if (x->rank < 0) return NULL;
    if (x->rank < 3)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "X must have rank 3 or more, has %d", x->rank);
    const tdm_op_schema *sc = tdm_op_find("", op, opset);
    if (!sc || !sc->infer) return tdm_node_error(c->node, TDM_ERR_INTERNAL, "no %s schema", op);
    tdm_value_info in = *x, out[1];
    int r = x->rank;
    if (last) {
        in.dims[1] = x->dims[r - 1];
        for (int d = 2; d < r; d++) in.dims[d] = x->dims[d - 1];
    }
    out[0] = c->out[0];
    tdm_infer_ctx sub = *c;
    sub.opset = opset;
    sub.n_in = 1;
    sub.in = &in;
    sub.n_out = 1;
    sub.out = out;
    TDM_TRY(sc->infer(&sub));
    tdm_value_info *y = &c->out[0];
    *y = out[0];
    y->present = true;
    y->dtype = x->dtype;
    if (last) {
        y->dims[r - 1] = out[0].dims[1];
        for (int d = 2; d < r; d++) y->dims[d - 1] = out[0].dims[d];
    }
    return NULL;
}

/* NhwcMaxPool: MaxPool's rule on the channels-last input. */
static tdm_status *infer_nhwc_max_pool(tdm_infer_ctx *c) {
    TDM_TRY(tdm_contrib_need_type(c, 0, "x", Q8));
    if (tdm_attr_int(c->node, "storage_order", 0) != 0)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "storage_order is not an attribute of NhwcMaxPool");
    return pool_infer(c, "MaxPool", 12, true);
}

/* QLinearAveragePool: X, x_scale, x_zp?, y_scale, y_zp?; AveragePool's rule (channels_last). */
static tdm_status *infer_qlinear_avg_pool(tdm_infer_ctx *c) {
    static const int q[] = {0}, sc[] = {1, 3}, zp[] = {2, 4};
    TDM_TRY(check_qparams(c, q, 1, sc, 2, zp, 2));
    int64_t cl = tdm_attr_int(c->node, "channels_last", 0);
    if (cl != 0 && cl != 1)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "channels_last must be 0 or 1");
    return pool_infer(c, "AveragePool", 19, cl != 0);
}

/* QGemm: A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp? -> Y [M, N]: float without
 * y_zero_point, else quantized like A. */
static tdm_status *infer_qgemm(tdm_infer_ctx *c) {
    const tdm_node *n = c->node;
    TDM_TRY(tdm_contrib_need_type(c, 0, "A", Q8));
    TDM_TRY(tdm_contrib_need_type(c, 3, "B", Q8));
    TDM_TRY(tdm_contrib_need_type(c, 6, "C", 1u << TDM_INT32));
    static const int sc[] = {1, 4, 7};
    for (int i = 0; i < 3; i++) TDM_TRY(tdm_contrib_need_type(c, sc[i], "a scale", F32));
    TDM_TRY(tdm_contrib_need_scalar(c, 1, "a_scale"));
    TDM_TRY(tdm_contrib_need_scalar(c, 2, "a_zero_point"));
    TDM_TRY(tdm_contrib_need_scalar(c, 7, "y_scale"));
    TDM_TRY(tdm_contrib_need_scalar(c, 8, "y_zero_point"));
    for (int i = 0; i < 2; i++) {
        int zi = i ? 5 : 2, qi = i ? 3 : 0;
        if (c->in[zi].dtype != TDM_UNDEFINED && c->in[qi].dtype != TDM_UNDEFINED && c->in[zi].dtype != c->in[qi].dtype)
            return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "%s_zero_point has type %s, %s %s", i ? "b" : "a",
                                  tdm_dtype_name(c->in[zi].dtype), i ? "B" : "A", tdm_dtype_name(c->in[qi].dtype));
    }
    bool quant = tdm_contrib_has_in(c, 8);
    if (quant && !tdm_contrib_has_in(c, 7))
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "y_zero_point needs y_scale");
    TDM_TRY(tdm_contrib_need_rank(c, 0, "A", 2, 2));
    TDM_TRY(tdm_contrib_need_rank(c, 3, "B", 2, 2));
    bool ta = tdm_attr_int(n, "transA", 0) != 0, tb = tdm_attr_int(n, "transB", 0) != 0;
    const tdm_value_info *a = &c->in[0], *b = &c->in[3];
    int64_t M = a->rank == 2 ? a->dims[ta ? 1 : 0] : TDM_DIM_UNKNOWN, K = a->rank == 2 ? a->dims[ta ? 0 : 1] : -1;
    int64_t KB = b->rank == 2 ? b->dims[tb ? 1 : 0] : -1, N = b->rank == 2 ? b->dims[tb ? 0 : 1] : TDM_DIM_UNKNOWN;
    if (K >= 0 && KB >= 0 && K != KB)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "op(A) has %lld columns, op(B) %lld rows", (long long)K,
                              (long long)KB);
    tdm_dtype yt = quant ? (c->in[8].dtype != TDM_UNDEFINED ? c->in[8].dtype : a->dtype) : TDM_FLOAT;
    tdm_contrib_set(&c->out[0], yt, 2);
    c->out[0].dims[0] = M;
    c->out[0].dims[1] = N;
    return NULL;
}

#define MS "com.microsoft"
const tdm_op_schema tdm_ops_contrib[] = {
    {MS, "BiasGelu", 1, 2, 2, 1, 1, infer_bias_act, 0, 0},
    {MS, "FastGelu", 1, 1, 2, 1, 1, infer_bias_act, 0, 0},
    {MS, "QuickGelu", 1, 1, 1, 1, 1, infer_quick_gelu, 0, 0},
    {MS, "BiasAdd", 1, 3, 3, 1, 1, infer_bias_add, 0, 0},
    {MS, "SkipLayerNormalization", 1, 3, 5, 1, 4, infer_skip_ln, 0, 0},
    {MS, "FusedMatMul", 1, 2, 2, 1, 1, infer_fused_matmul, 0, 0},
    {MS, "FusedConv", 1, 2, 4, 1, 1, infer_fused_conv, 0, 0},
    {MS, "QLinearAdd", 1, 7, 8, 1, 1, infer_qlinear_binary, TDM_OP_OPTIONAL_SLOTS, 0},
    {MS, "QLinearMul", 1, 7, 8, 1, 1, infer_qlinear_binary, TDM_OP_OPTIONAL_SLOTS, 0},
    {MS, "QLinearSigmoid", 1, 4, 5, 1, 1, infer_qlinear_unary, TDM_OP_OPTIONAL_SLOTS, 0},
    {MS, "QLinearLeakyRelu", 1, 4, 5, 1, 1, infer_qlinear_unary, TDM_OP_OPTIONAL_SLOTS, 0},
    {MS, "QLinearGlobalAveragePool", 1, 5, 5, 1, 1, infer_qlinear_gap, 0, 0},
    {MS, "QLinearConcat", 1, 5, 2 + 3 * 256, 1, 1, infer_qlinear_concat, 0, 0},
    {MS, "NhwcMaxPool", 1, 1, 1, 1, 1, infer_nhwc_max_pool, 0, 0},
    {MS, "QGemm", 1, 6, 9, 1, 1, infer_qgemm, 0, 0},
    {MS, "QLinearAveragePool", 1, 4, 5, 1, 1, infer_qlinear_avg_pool, TDM_OP_OPTIONAL_SLOTS, 0},
};
const int tdm_ops_contrib_count = (int)(sizeof tdm_ops_contrib / sizeof tdm_ops_contrib[0]);

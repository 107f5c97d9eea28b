/* QDQ pass: the DequantizeLinear -> op -> QuantizeLinear patterns of quantized models (ONNX
 * Runtime's quantize_static, tandem quantize) become integer operators, so that tensors
 * stay 8-bit from one operator to the next and the products run on int8 kernels:
 *
 *   DQ(x_q) , DQ(w_q const) [, bias] -> Conv [-> Relu | Clip] -> Q       => QConv
 *   the same with ConvTranspose                                         => QConvTranspose
 *                                      (fuse_qdeconv.c)
 *   DQ(a_q) , DQ(b_q const 2-D)      -> MatMul [-> Add(bias)] [-> act] -> Q => QMatMul
 *   DQ(a_q) , DQ(b_q const)  [, C]   -> Gemm (alpha = beta = 1, A as is) [-> act] -> Q
 *                                                                          => QMatMul
 *   DQ(a_q) , DQ(b_q)                -> Add [-> Relu | Clip] -> Q           => QAdd
 *   DQ(a_q) , DQ(b_q)                -> Mul [-> Relu | Clip] -> Q           => QMul
 *                                      (not a table below: squeeze-excitation's x * s)
 *   DQ(x_q) -> GlobalAveragePool -> Q                                   => QGlobalAveragePool
 *   DQ(x_q) -> Sigmoid | HardSigmoid | Tanh | Relu | LeakyRelu | HardSwish | Clip -> Q,
 *   DQ(x_q) , scalar constant        -> Add | Sub | Mul | Div -> Q             => QLut
 *   (a QLut reading the only result of another QLut: one table, the two composed)
 *   DQ(a_q) , DQ(QLut(a_q))         -> Mul -> Q   (SiLU, hard-swish)       => QLut
 *   DQ(x_q) -> several of the above on x alone (scalars, x * f(x)) -> Q    => QLut
 *   DQ(x_q) [, DQ(...)]             -> MaxPool | Reshape | Flatten | Transpose | Squeeze |
 *                                      Unsqueeze | Concat | Split | Resize (nearest) -> Q
 *                                      (each output)                       => the op on x_q
 *   (an input quantized unlike the output first goes through a requantising QLut, Q(DQ(b))
 *   per byte; a Split output unlike the input after the op; then DequantizeLinear nodes
 *   left unread go, and a QLut of a QLut's only result takes the composed table)
 *
 * (QConv / QMatMul / QAdd / QMul / QLut / QGlobalAveragePool: ops/fused.h.) QLut: an 8-bit
 * result that depends on one 8-bit input alone is a table of 256 values, computed here with
 * the float formulas of the pattern (the intermediate Q / DQ included), so it rounds as the
 * pattern does up to the float function's last bit. Exactness:
 *  - the bias becomes int32 in units of x_scale * w_scale[m] (round to nearest), as ONNX
 *    Runtime's quantizer writes it: exact when the bias was DQ(int32) with that scale;
 *  - Relu / Clip before Q is a clamp of the quantized result (Q is monotonic): exact;
 *  - the data-movement ops commute with Q(DQ(.)) when the scales and zero points agree,
 *    and with the requantising table (an element-wise map; MaxPool: a nondecreasing one)
 *    when they do not: exact.
 * What the integer operators round differently from float (one unit of y_scale at most
 * where the float result lies on a rounding tie) is the same as in ONNX Runtime's own QDQ
 * fusion. Activations: per-tensor scales; weights: per-tensor or per output channel, int8
 * with zero points 0 (symmetric, what quantizers write; oneDNN takes no other).
 * The inner values (DQ outputs read by the pattern, the op's result) may have other readers:
 * DQ nodes stay for them (dead-node removal drops the others); the op's float result must
 * be read by the pattern only.
 *
 * Channels-last pass (fz_pass_q8_nhwc, run with the blocked-layout pass on a CPU): chains
 * of 2-D QConv / QConvTranspose, QAdd / QMul of rank-4 tensors, QLut, QGlobalAveragePool,
 * channel Concat / Split, MaxPool and nearest Resize keep their 8-bit tensors channels-last
 * ([N, H, W, C], oneDNN's int8 layout on x86) instead of converting NCHW <-> NHWC around
 * every convolution: QConv / QConvTranspose take attributes x_nhwc / y_nhwc (ops/fused.h),
 * QAdd, QMul and QLut
 * run as they are on the twins (broadcasting commutes with permuting the axes of all three
 * alike), QGlobalAveragePool takes nhwc, Concat / Split run on axis 3, a 2-D MaxPool
 * becomes MaxPoolNhwc, a Resize takes its constant scales / sizes permuted. The layout
 * changes at the region's edges only: a QConv reading plain X converts it itself, readers
 * of the plain value (and graph outputs) get a Transpose(0, 3, 1, 2) from the twin, and a
 * plain input of a converted QAdd or Concat a Transpose(0, 2, 3, 1). Pure data movement:
 * exact. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "graph/fuse_impl.h"
#include "graph/fuse_qdq.h"
#include "ops/fused.h"

static bool is_q8(tdm_dtype t) { return t == TDM_UINT8 || t == TDM_INT8; }

/* Constant data of v: an initializer / folded value, or a live Constant node's tensor
 * (exporters such as paddle2onnx write the weights as Constant nodes). */
static const tdm_tensor *const_any(const fz_ctx *fz, int v) {
    const tdm_tensor *t = fz_const(fz, v);
    if (t || v < 0) return t;
    int p = fz_producer(fz, v);
    if (!fz_is_op(fz, p, "Constant")) return NULL;
    const tdm_attr *a = tdm_node_attr(fz_node(fz, p), "value");
    return a && a->type == TDM_ATTR_TENSOR ? a->t : NULL;
}

/* v is made by a live DequantizeLinear (no blocked scales) of an 8-bit (or with `int32`,
 * int32) input with constant float32 scale and constant zero point. */
static bool match_dq(const fz_ctx *fz, int v, bool int32, dq_in *d) {
    int p = fz_producer(fz, v);
    if (!fz_is_op(fz, p, "DequantizeLinear")) return false;
    const tdm_node *n = fz_node(fz, p);
    if (n->n_inputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0 ||
        tdm_attr_int(n, "block_size", 0) != 0)
        return false;
    d->node = p;
    d->q = n->inputs[0];
    d->scale = n->inputs[1];
    d->zp = n->n_inputs > 2 ? n->inputs[2] : -1;
    d->s = fz_const(fz, d->scale);
    d->z = d->zp >= 0 ? fz_const(fz, d->zp) : NULL;
    tdm_dtype qt = fz->g->values[d->q].dtype;
    if (!(is_q8(qt) || (int32 && qt == TDM_INT32))) return false;
    if (!d->s || d->s->dtype != TDM_FLOAT || (d->zp >= 0 && (!d->z || d->z->dtype != qt)))
        return false;
    if (d->z && d->z->count != d->s->count) return false;
    d->axis = -1;
    if (d->s->count != 1) {
        int r = fz->g->values[d->q].rank;
        if (d->s->rank != 1 || r < 1) return false;
        int64_t ax = tdm_attr_int(n, "axis", 1);
        if (ax < 0) ax += r;
        if (ax < 0 || ax >= r) return false;
        d->axis = (int)ax;
    }
    for (int64_t i = 0; i < d->s->count; i++)
        if (!(((const float *)d->s->data)[i] > 0)) return false;
    return true;
}

static int32_t zp_at(const dq_in *d, int64_t i) {
    if (!d->z) return 0;
    int64_t k = d->z->count == 1 ? 0 : i;
    return d->z->dtype == TDM_INT8 ? ((const int8_t *)d->z->data)[k]
           : d->z->dtype == TDM_UINT8 ? ((const uint8_t *)d->z->data)[k]
                                      : ((const int32_t *)d->z->data)[k];
}

static float scale_at(const dq_in *d, int64_t i) {
    return ((const float *)d->s->data)[d->s->count == 1 ? 0 : i];
}

/* An activation: per-tensor. */
bool fq_match_act_dq(const fz_ctx *fz, int v, dq_in *d) {
    return match_dq(fz, v, false, d) && d->s->count == 1;
}

/* Weights: constant int8, zero points 0, per-tensor or per-axis along `axis`. */
bool fq_match_w_dq(const fz_ctx *fz, int v, int axis, dq_in *d) {
    if (!match_dq(fz, v, false, d) || fz->g->values[d->q].dtype != TDM_INT8) return false;
    const tdm_tensor *w = fz_const(fz, d->q);
    if (!w) return false;
    if (d->axis >= 0 && d->axis != axis) return false;
    for (int64_t i = 0; d->z && i < d->z->count; i++)
        if (zp_at(d, i) != 0) return false;
    return true;
}

/* A QuantizeLinear with constant per-tensor scale and zero point (8-bit). */
static bool match_q(const fz_ctx *fz, int node, q_out *q) {
    if (!fz_is_op(fz, node, "QuantizeLinear")) return false;
    const tdm_node *n = fz_node(fz, node);
    if (n->n_inputs < 3 || n->inputs[1] < 0 || n->inputs[2] < 0 || n->n_outputs != 1 ||
        n->outputs[0] < 0 || tdm_attr_int(n, "block_size", 0) != 0 ||
        tdm_attr_int(n, "saturate", 1) != 1)
        return false;
    const tdm_tensor *s = fz_const(fz, n->inputs[1]), *z = fz_const(fz, n->inputs[2]);
    if (!s || !z || s->dtype != TDM_FLOAT || s->count != 1 || z->count != 1 || !is_q8(z->dtype))
        return false;
    q->node = node;
    q->out = n->outputs[0];
    q->scale = n->inputs[1];
    q->zp = n->inputs[2];
    q->s = ((const float *)s->data)[0];
    q->z = z->dtype == TDM_INT8 ? ((const int8_t *)z->data)[0] : ((const uint8_t *)z->data)[0];
    q->t = z->dtype;
    return q->s > 0;
}

/* From value v (the op's float result): [Relu | Clip(constant bounds)] then Q, each the
 * sole reader. Fills the clamp [qmin, qmax] (the type's range when there is none). */
bool fq_match_tail(const fz_ctx *fz, int v, tail *t) {
    t->act = -1;
    int next = fz_sole_consumer(fz, v);
    float lo = -INFINITY, hi = INFINITY;
    if (fz_is_op(fz, next, "Relu") || fz_is_op(fz, next, "Clip")) {
        const tdm_node *a = fz_node(fz, next);
        if (a->n_outputs != 1 || a->outputs[0] < 0) return false;
        if (!strcmp(a->op_type, "Relu")) {
            lo = 0;
        } else if (a->opset < 11) {
            lo = tdm_attr_float(a, "min", -INFINITY);
            hi = tdm_attr_float(a, "max", INFINITY);
        } else {
            if (a->n_inputs > 1 && a->inputs[1] >= 0 && !fz_scalar(fz, a->inputs[1], 1, &lo))
                return false;
            if (a->n_inputs > 2 && a->inputs[2] >= 0 && !fz_scalar(fz, a->inputs[2], 1, &hi))
                return false;
        }
        t->act = next;
        next = fz_sole_consumer(fz, a->outputs[0]);
    }
    if (!match_q(fz, next, &t->q)) return false;
    int64_t tlo = t->q.t == TDM_INT8 ? -128 : 0, thi = t->q.t == TDM_INT8 ? 127 : 255;
    t->qmin = tlo;
    t->qmax = thi;
    /* Q(clamp(x, lo, hi)) = clamp(Q(x), Q(lo), Q(hi)) */
    if (lo > -INFINITY) {
        double ql = nearbyint((double)lo / t->q.s) + t->q.z;
        t->qmin = ql < tlo ? tlo : ql > thi ? thi : (int64_t)ql;
    }
    if (hi < INFINITY) {
        double qh = nearbyint((double)hi / t->q.s) + t->q.z;
        t->qmax = qh < tlo ? tlo : qh > thi ? thi : (int64_t)qh;
    }
    return t->qmin <= t->qmax;
}

/* The int32 bias [n] in units of xs * ws[m] from value b: a float32 constant (n values or
 * one) or DQ(int32 constant). -1 in *v when b does not fit. */
tdm_status *fq_make_bias(fz_ctx *fz, int b, int64_t n, const dq_in *x, const dq_in *w,
                             int *v) {
    *v = -1;
    const float *bf = NULL;
    dq_in bd;
    const tdm_tensor *bt = const_any(fz, b), *bq = NULL;
    if (bt) {
        if (bt->dtype != TDM_FLOAT || (bt->count != n && bt->count != 1)) return NULL;
        for (int d = 0; d + 1 < bt->rank; d++)
            if (bt->dims[d] != 1) return NULL;
        bf = bt->data;
    } else {
        if (!match_dq(fz, b, true, &bd) || !(bq = fz_const(fz, bd.q)) ||
            (bq->count != n && bq->count != 1) || (bd.s->count != 1 && bd.s->count != n))
            return NULL;
        for (int d = 0; d + 1 < bq->rank; d++)
            if (bq->dims[d] != 1) return NULL;
    }
    tdm_tensor *t;
    TDM_TRY(tdm_tensor_new(fz->g->alloc, TDM_INT32, 1, &n, &t));
    int32_t *o = t->data;
    float xs = scale_at(x, 0);
    for (int64_t m = 0; m < n; m++) {
        double f;
        if (bf) {
            f = bf[bt->count == 1 ? 0 : m];
        } else {
            int64_t k = bq->count == 1 ? 0 : m;
            double q = bq->dtype == TDM_INT32 ? ((const int32_t *)bq->data)[k]
                       : bq->dtype == TDM_INT8 ? ((const int8_t *)bq->data)[k]
                                               : ((const uint8_t *)bq->data)[k];
            f = (q - zp_at(&bd, k)) * (double)scale_at(&bd, bd.s->count == 1 ? 0 : m);
        }
        double r = nearbyint(f / ((double)xs * (double)scale_at(w, m)));
        if (!(r > -2147483648.0 && r < 2147483647.0)) {
            tdm_tensor_destroy(t);
            return NULL;
        }
        o[m] = (int32_t)r;
    }
    return fz_new_const(fz, fz->g->values[b].name, t, v);
}

/* A zero point value: d's, or a new 0 of the quantized type. */
static tdm_status *zp_value(fz_ctx *fz, const dq_in *d, int *v) {
    if (d->zp >= 0) {
        *v = d->zp;
        return NULL;
    }
    tdm_tensor *t;
    TDM_TRY(tdm_tensor_new(fz->g->alloc, fz->g->values[d->q].dtype, 0, NULL, &t));
    memset(t->data, 0, tdm_dtype_elem_size(t->dtype));
    return fz_new_const(fz, fz->g->values[d->q].name, t, v);
}

/* Appends the integer node: the 8 QLinear-style inputs (+ bias), output = Q's output; kills
 * the anchor, the activation and Q. */
tdm_status *fq_emit(fz_ctx *fz, const char *op, int anchor, const dq_in *a, int b_q,
                        int b_scale, int b_zp, const tail *t, int bias, bool copy_attrs) {
    int azp;
    TDM_TRY(zp_value(fz, a, &azp));
    const tdm_node *an = fz_node(fz, anchor);
    size_t len = strlen(an->name ? an->name : "") + 8;
    char *name = tdm_alloc(fz->g->alloc, len);
    if (!name) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
    snprintf(name, len, "%s_int8", an->name ? an->name : "");
    int fi;
    tdm_status *st = fz_new_node(fz, op, TDM_FUSED_DOMAIN, name, bias >= 0 ? 9 : 8, 1, &fi);
    tdm_free(fz->g->alloc, name);
    TDM_TRY(st);
    tdm_node *f = fz_node(fz, fi);
    int ins[9] = {a->q, a->scale, azp, b_q, b_scale, b_zp, t->q.scale, t->q.zp, bias};
    for (int k = 0; k < f->n_inputs; k++) f->inputs[k] = ins[k];
    f->outputs[0] = t->q.out;
    if (copy_attrs) {
        const tdm_node *src = fz_node(fz, anchor);
        for (int k = 0; k < src->n_attrs; k++) {
            TDM_TRY(fz_attr_copy(fz, fi, &fz_node(fz, anchor)->attrs[k]));
        }
    }
    int64_t tlo = t->q.t == TDM_INT8 ? -128 : 0, thi = t->q.t == TDM_INT8 ? 127 : 255;
    if (t->qmin > tlo) TDM_TRY(fz_attr_int(fz, fi, "qmin", t->qmin));
    if (t->qmax < thi) TDM_TRY(fz_attr_int(fz, fi, "qmax", t->qmax));
    fz_kill(fz, anchor);
    if (t->act >= 0) fz_kill(fz, t->act);
    fz_kill(fz, t->q.node);
    fz->count++;
    return NULL;
}

static int w_zp_value(const dq_in *w) {
    return w->zp; /* all zeros (match_w_dq), or absent */
}

static tdm_status *fuse_conv(fz_ctx *fz, int ci) {
    const tdm_node *c = fz_node(fz, ci);
    if (c->n_inputs < 2 || c->n_outputs != 1 || c->outputs[0] < 0 || !fz_attrs_copyable(c))
        return NULL;
    dq_in x, w;
    tail t;
    if (!fq_match_act_dq(fz, c->inputs[0], &x) || !fq_match_w_dq(fz, c->inputs[1], 0, &w) ||
        !fq_match_tail(fz, c->outputs[0], &t))
        return NULL;
    const tdm_tensor *wt = fz_const(fz, w.q);
    if (wt->rank < 3) return NULL;
    int64_t m = wt->dims[0];
    if (w.s->count != 1 && w.s->count != m) return NULL;
    int bias = -1;
    if (c->n_inputs > 2 && c->inputs[2] >= 0) {
        TDM_TRY(fq_make_bias(fz, c->inputs[2], m, &x, &w, &bias));
        if (bias < 0) return NULL;
    }
    return fq_emit(fz, "QConv", ci, &x, w.q, w.scale, w_zp_value(&w), &t, bias, true);
}

/* MatMul / Gemm with a constant 2-D weight: B [K, N] (Gemm transB: [N, K], transposed here
 * into a new constant; per-channel scales then run along axis 0). */
static tdm_status *fuse_matmul(fz_ctx *fz, int mi, bool gemm) {
    const tdm_node *mm = fz_node(fz, mi);
    if (mm->n_inputs < 2 || mm->n_outputs != 1 || mm->outputs[0] < 0) return NULL;
    bool tb = false;
    int c = -1;
    if (gemm) {
        tb = tdm_attr_int(mm, "transB", 0) != 0;
        c = mm->n_inputs > 2 ? mm->inputs[2] : -1;
        if (tdm_attr_int(mm, "transA", 0) || tdm_attr_float(mm, "alpha", 1.0f) != 1.0f ||
            (c >= 0 && tdm_attr_float(mm, "beta", 1.0f) != 1.0f))
            return NULL;
    }
    dq_in a, w;
    if (!fq_match_act_dq(fz, mm->inputs[0], &a) || !fq_match_w_dq(fz, mm->inputs[1], tb ? 0 : 1, &w))
        return NULL;
    const tdm_tensor *wt = fz_const(fz, w.q);
    if (wt->rank != 2) return NULL;
    int64_t n = wt->dims[tb ? 0 : 1], k = wt->dims[tb ? 1 : 0];
    if (w.s->count != 1 && w.s->count != n) return NULL;
    int out = mm->outputs[0], add = -1;
    if (!gemm) { /* MatMul -> Add(bias over the last axis) */
        int nx = fz_sole_consumer(fz, out);
        if (fz_is_op(fz, nx, "Add") && fz_node(fz, nx)->n_outputs == 1) {
            int o = fz_other_input(fz_node(fz, nx), out);
            if (o >= 0) {
                add = nx;
                c = o;
                out = fz_node(fz, nx)->outputs[0];
            }
        }
    }
    tail t;
    if (!fq_match_tail(fz, out, &t)) return NULL;
    int bias = -1;
    if (c >= 0) {
        TDM_TRY(fq_make_bias(fz, c, n, &a, &w, &bias));
        if (bias < 0) return NULL;
    }
    int bq = w.q;
    if (tb) {
        tdm_tensor *tt;
        int64_t dims[2] = {k, n};
        TDM_TRY(tdm_tensor_new(fz->g->alloc, TDM_INT8, 2, dims, &tt));
        const int8_t *src = wt->data;
        int8_t *dst = tt->data;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < k; j++) dst[j * n + i] = src[i * k + j];
        TDM_TRY(fz_new_const(fz, fz->g->values[w.q].name, tt, &bq));
    }
    if (add >= 0) fz_kill(fz, add);
    return fq_emit(fz, "QMatMul", mi, &a, bq, w.scale, w_zp_value(&w), &t, bias, false);
}

/* Add / Mul of two per-tensor quantized operands -> QAdd / QMul. */
static tdm_status *fuse_add(fz_ctx *fz, int ai) {
    const tdm_node *ad = fz_node(fz, ai);
    if (ad->n_inputs != 2 || ad->n_outputs != 1 || ad->outputs[0] < 0) return NULL;
    dq_in a, b;
    tail t;
    if (!fq_match_act_dq(fz, ad->inputs[0], &a) || !fq_match_act_dq(fz, ad->inputs[1], &b) ||
        !fq_match_tail(fz, ad->outputs[0], &t))
        return NULL;
    int bzp;
    TDM_TRY(zp_value(fz, &b, &bzp));
    return fq_emit(fz, strcmp(ad->op_type, "Mul") ? "QAdd" : "QMul", ai, &a, b.q, b.scale, bzp, &t,
                -1, false);
}

/* DQ(x_q) -> GlobalAveragePool -> Q (per-tensor) => QGlobalAveragePool. */
static tdm_status *fuse_gap(fz_ctx *fz, int gi) {
    const tdm_node *n = fz_node(fz, gi);
    if (n->n_inputs != 1 || n->n_outputs != 1 || n->outputs[0] < 0) return NULL;
    dq_in x;
    q_out q;
    if (!fq_match_act_dq(fz, n->inputs[0], &x) ||
        !match_q(fz, fz_sole_consumer(fz, n->outputs[0]), &q))
        return NULL;
    int xzp, fi;
    TDM_TRY(zp_value(fz, &x, &xzp));
    char name[128];
    snprintf(name, sizeof name, "%.100s_int8", fz_node(fz, gi)->name ? fz_node(fz, gi)->name : "");
    TDM_TRY(fz_new_node(fz, "QGlobalAveragePool", TDM_FUSED_DOMAIN, name, 5, 1, &fi));
    tdm_node *f = fz_node(fz, fi);
    int ins[5] = {x.q, x.scale, xzp, q.scale, q.zp};
    for (int k = 0; k < 5; k++) f->inputs[k] = ins[k];
    f->outputs[0] = q.out;
    f->device = fz_node(fz, gi)->device;
    fz_kill(fz, gi);
    fz_kill(fz, q.node);
    fz->count++;
    return NULL;
}

/* ---- 256-entry tables ---- */

/* The float unary op of node n at v (false: not one of the table ops). */
static bool lut_op(const tdm_node *n, float v, float *out) {
    const char *op = n->op_type;
    if (!strcmp(op, "Sigmoid")) *out = 1.0f / (1.0f + expf(-v));
    else if (!strcmp(op, "Tanh")) *out = tanhf(v);
    else if (!strcmp(op, "Relu")) *out = v > 0 ? v : 0;
    else if (!strcmp(op, "LeakyRelu")) *out = v >= 0 ? v : v * tdm_attr_float(n, "alpha", 0.01f);
    else if (!strcmp(op, "HardSigmoid")) {
        float h = tdm_attr_float(n, "alpha", 0.2f) * v + tdm_attr_float(n, "beta", 0.5f);
        *out = h < 0 ? 0 : h > 1 ? 1 : h;
    } else if (!strcmp(op, "HardSwish")) {
        float h = v / 6.0f + 0.5f;
        *out = v * (h < 0 ? 0 : h > 1 ? 1 : h);
    } else return false;
    return true;
}

/* The 8-bit value of byte b of type t, dequantized as DequantizeLinear does. */
static float lut_dq(const dq_in *d, tdm_dtype t, int b) {
    int v = t == TDM_INT8 ? (int)(int8_t)(uint8_t)b : b;
    return (float)(v - zp_at(d, 0)) * scale_at(d, 0);
}

/* QuantizeLinear of f (round half to even, saturate; NaN to the low end) as a byte. */
static uint8_t lut_q(const q_out *q, float f) {
    float lo = q->t == TDM_INT8 ? -128.0f : 0.0f, hi = q->t == TDM_INT8 ? 127.0f : 255.0f;
    float v = f / q->s;
    v = v > -4194304.0f ? v : -4194304.0f;
    v = v < 4194304.0f ? v : 4194304.0f;
    v = nearbyintf(v) + (float)q->z;
    v = v > lo ? v : lo;
    v = v < hi ? v : hi;
    return (uint8_t)(int8_t)(int32_t)v;
}

/* A QLut node x_q -> q.out with table t[256] (of q's type); kills `a` and `b` (-1: none) and Q. */
static tdm_status *emit_lut(fz_ctx *fz, int anchor, int xq, const q_out *q, const uint8_t *tab_in,
                            int kill2) {
    uint8_t tab[256];
    memcpy(tab, tab_in, sizeof tab);
    /* QLut(QLut(x, t1), t2) = QLut(x, t2[t1]) when the inner result has no other reader */
    int p = fz_producer(fz, xq);
    int inner = -1, inner_dq = -1;
    int dq = fz_sole_consumer(fz, xq);
    if (p >= 0 && fz_is_op(fz, dq, "DequantizeLinear") &&
        fz_sole_consumer(fz, fz_node(fz, dq)->outputs[0]) == anchor) {
        const tdm_node *pn = fz_node(fz, p);
        const tdm_tensor *t1 = !pn->dead && !strcmp(pn->domain, TDM_FUSED_DOMAIN) &&
                                       !strcmp(pn->op_type, "QLut")
                                   ? fz_const(fz, pn->inputs[1])
                                   : NULL;
        if (t1 && t1->count == 256) {
            for (int b = 0; b < 256; b++) tab[b] = tab_in[((const uint8_t *)t1->data)[b]];
            xq = pn->inputs[0];
            inner = p;
            inner_dq = dq;
        }
    }
    tdm_tensor *t;
    int64_t n = 256;
    TDM_TRY(tdm_tensor_new(fz->g->alloc, q->t, 1, &n, &t));
    memcpy(t->data, tab, 256);
    int tv, fi;
    TDM_TRY(fz_new_const(fz, fz->g->values[q->out].name, t, &tv));
    const tdm_node *an = fz_node(fz, anchor);
    size_t len = strlen(an->name ? an->name : "") + 8;
    char *name = tdm_alloc(fz->g->alloc, len);
    if (!name) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
    snprintf(name, len, "%s_lut", an->name ? an->name : "");
    tdm_status *st = fz_new_node(fz, "QLut", TDM_FUSED_DOMAIN, name, 2, 1, &fi);
    tdm_free(fz->g->alloc, name);
    TDM_TRY(st);
    tdm_node *f = fz_node(fz, fi);
    f->inputs[0] = xq;
    f->inputs[1] = tv;
    f->outputs[0] = q->out;
    f->device = fz_node(fz, anchor)->device;
    fz_kill(fz, anchor);
    if (kill2 >= 0) fz_kill(fz, kill2);
    if (inner >= 0) { /* (and the DequantizeLinear between the two) */
        fz_kill(fz, inner);
        fz_kill(fz, inner_dq);
    }
    fz_kill(fz, q->node);
    fz->count++;
    return NULL;
}

/* Clip's constant bounds (false when one is not a float32 constant scalar; paddle2onnx writes
 * them as Constant nodes). */
static bool clip_bounds(const fz_ctx *fz, const tdm_node *u, float *lo, float *hi) {
    *lo = -INFINITY, *hi = INFINITY;
    if (u->opset < 11) {
        *lo = tdm_attr_float(u, "min", -INFINITY);
        *hi = tdm_attr_float(u, "max", INFINITY);
        return true;
    }
    for (int k = 1; k < 3 && k < (int)u->n_inputs; k++) {
        const tdm_tensor *t = u->inputs[k] >= 0 ? const_any(fz, u->inputs[k]) : NULL;
        if (u->inputs[k] < 0) continue;
        if (!t || t->dtype != TDM_FLOAT || t->count != 1) return false;
        *(k == 1 ? lo : hi) = ((const float *)t->data)[0];
    }
    return true;
}

/* DQ(x_q) -> unary op (or Clip with constant bounds) -> Q */
static tdm_status *fuse_lut_unary(fz_ctx *fz, int ui) {
    const tdm_node *u = fz_node(fz, ui);
    float probe, lo, hi;
    bool clip = !strcmp(u->op_type, "Clip");
    if (clip && !clip_bounds(fz, u, &lo, &hi)) return NULL;
    if ((!clip && u->n_inputs != 1) || u->n_outputs != 1 || u->outputs[0] < 0 ||
        (!clip && !lut_op(u, 0.0f, &probe)))
        return NULL;
    dq_in x;
    q_out q;
    if (!fq_match_act_dq(fz, u->inputs[0], &x) || !match_q(fz, fz_sole_consumer(fz, u->outputs[0]), &q))
        return NULL;
    tdm_dtype xt = fz->g->values[x.q].dtype;
    uint8_t tab[256];
    for (int b = 0; b < 256; b++) {
        float f = lut_dq(&x, xt, b);
        if (clip) f = f < lo ? lo : f > hi ? hi : f;
        else lut_op(u, f, &f);
        tab[b] = lut_q(&q, f);
    }
    return emit_lut(fz, ui, x.q, &q, tab, -1);
}

/* The one float value of a scalar operand: a float constant, or DQ of a constant. */
static bool scalar_operand(const fz_ctx *fz, int v, float *out) {
    const tdm_tensor *t = const_any(fz, v);
    if (t) {
        if (t->dtype != TDM_FLOAT || t->count != 1) return false;
        *out = ((const float *)t->data)[0];
        return true;
    }
    dq_in d;
    if (!match_dq(fz, v, false, &d) || d.s->count != 1) return false;
    const tdm_tensor *q = const_any(fz, d.q);
    if (!q || q->count != 1) return false;
    *out = lut_dq(&d, q->dtype, q->dtype == TDM_INT8 ? (uint8_t)((const int8_t *)q->data)[0]
                                                    : ((const uint8_t *)q->data)[0]);
    return true;
}

/* Add / Sub / Mul / Div of DQ(x_q) and a scalar constant -> Q: a table of x_q. */
static tdm_status *fuse_lut_scalar(fz_ctx *fz, int bi, bool *done) {
    *done = false;
    const tdm_node *n = fz_node(fz, bi);
    if (n->n_inputs != 2 || n->n_outputs != 1 || n->outputs[0] < 0) return NULL;
    char op = n->op_type[0]; /* A, S, M, D */
    for (int side = 0; side < 2; side++) {
        dq_in x;
        q_out q;
        float c;
        if (!fq_match_act_dq(fz, n->inputs[side], &x) || !scalar_operand(fz, n->inputs[1 - side], &c) ||
            !match_q(fz, fz_sole_consumer(fz, n->outputs[0]), &q))
            continue;
        if (fz->g->values[n->inputs[side]].rank < 0 || fz->g->values[n->outputs[0]].rank !=
                                                           fz->g->values[n->inputs[side]].rank)
            continue; /* (the scalar must not broadcast x to a larger shape) */
        tdm_dtype xt = fz->g->values[x.q].dtype;
        uint8_t tab[256];
        for (int b = 0; b < 256; b++) {
            float xv = lut_dq(&x, xt, b), a = side ? c : xv, bb = side ? xv : c, r;
            r = op == 'A' ? a + bb : op == 'S' ? a - bb : op == 'M' ? a * bb : a / bb;
            tab[b] = lut_q(&q, r);
        }
        *done = true;
        return emit_lut(fz, bi, x.q, &q, tab, -1);
    }
    return NULL;
}

/* Mul(DQ(a_q), DQ(QLut(a_q))) -> Q: x * f(x) of one input (SiLU, hard-swish). */
static tdm_status *fuse_lut_mul(fz_ctx *fz, int mi) {
    const tdm_node *m = fz_node(fz, mi);
    if (m->n_inputs != 2 || m->n_outputs != 1 || m->outputs[0] < 0) return NULL;
    dq_in a, b;
    q_out q;
    if (!fq_match_act_dq(fz, m->inputs[0], &a) || !fq_match_act_dq(fz, m->inputs[1], &b) ||
        !match_q(fz, fz_sole_consumer(fz, m->outputs[0]), &q))
        return NULL;
    for (int side = 0; side < 2; side++) {
        const dq_in *x = side ? &b : &a, *l = side ? &a : &b;
        int p = fz_producer(fz, l->q);
        if (p < 0) continue;
        const tdm_node *lut = fz_node(fz, p);
        if (lut->dead || strcmp(lut->domain, TDM_FUSED_DOMAIN) || strcmp(lut->op_type, "QLut") ||
            lut->inputs[0] != x->q)
            continue;
        const tdm_tensor *lt = fz_const(fz, lut->inputs[1]);
        if (!lt || lt->count != 256) continue;
        tdm_dtype xt = fz->g->values[x->q].dtype, ltt = fz->g->values[l->q].dtype;
        uint8_t tab[256];
        for (int k = 0; k < 256; k++) {
            float xv = lut_dq(x, xt, k), fv = lut_dq(l, ltt, ((const uint8_t *)lt->data)[k]);
            tab[k] = lut_q(&q, side ? fv * xv : xv * fv);
        }
        return emit_lut(fz, mi, x->q, &q, tab, -1);
    }
    return NULL;
}

/* ---- DQ(x_q) -> a float subgraph of x alone -> Q: one table ---- */

/* A region: element-wise nodes computing one value from DQ(x_q) and scalar constants. */
#define LR_MAX 16
typedef struct lut_region {
    int nodes[LR_MAX]; /* in an order that computes each before its readers */
    int n;
    int xv;  /* the DequantizeLinear output value the region reads */
    dq_in x;
} lut_region;

static bool lr_unary(const tdm_node *n) {
    float probe;
    return n->n_inputs == 1 && lut_op(n, 0.0f, &probe);
}

static bool lr_in(const lut_region *r, int node) {
    for (int i = 0; i < r->n; i++)
        if (r->nodes[i] == node) return true;
    return false;
}

/* Adds what computes value v (depth-first, producers first); false when v is not a function of
 * one DQ(x_q) through the table ops. */
static bool lr_collect(const fz_ctx *fz, int v, lut_region *r) {
    if (v < 0) return false;
    if (v == r->xv) return true;
    dq_in d;
    if (fq_match_act_dq(fz, v, &d)) {
        if (r->xv >= 0) return false; /* a second 8-bit input */
        r->xv = v;
        r->x = d;
        return true;
    }
    int p = fz_producer(fz, v);
    if (p < 0 || lr_in(r, p)) return p >= 0;
    const tdm_node *n = fz_node(fz, p);
    if (n->dead || n->n_outputs != 1 || (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx")))
        return false;
    const char *op = n->op_type;
    bool bin = !strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") || !strcmp(op, "Div");
    float c;
    if (bin) {
        if (n->n_inputs != 2) return false;
        for (int k = 0; k < 2; k++)
            if (!scalar_operand(fz, n->inputs[k], &c) && !lr_collect(fz, n->inputs[k], r)) return false;
    } else if (!strcmp(op, "Clip")) {
        float lo, hi;
        if (!clip_bounds(fz, n, &lo, &hi) || !lr_collect(fz, n->inputs[0], r)) return false;
    } else if (!lr_unary(n) || !lr_collect(fz, n->inputs[0], r)) {
        return false;
    }
    if (r->n == LR_MAX) return false;
    r->nodes[r->n++] = p;
    return true;
}

/* The region's value of v (x: the input's value; vals: the region nodes' results so far). */
static float lr_value(const fz_ctx *fz, const lut_region *r, const float *vals, float x, int v) {
    if (v == r->xv) return x;
    for (int i = 0; i < r->n; i++)
        if (fz_node(fz, r->nodes[i])->outputs[0] == v) return vals[i];
    float c = 0;
    scalar_operand(fz, v, &c);
    return c;
}

static float lr_eval(const fz_ctx *fz, const lut_region *r, float x) {
    float vals[LR_MAX] = {0};
    for (int i = 0; i < r->n; i++) {
        const tdm_node *n = fz_node(fz, r->nodes[i]);
        float a = lr_value(fz, r, vals, x, n->inputs[0]), o;
        if (!strcmp(n->op_type, "Clip")) {
            float lo, hi;
            clip_bounds(fz, n, &lo, &hi);
            o = a < lo ? lo : a > hi ? hi : a;
        } else if (n->n_inputs == 2) {
            float b = lr_value(fz, r, vals, x, n->inputs[1]);
            char op = n->op_type[0];
            o = op == 'A' ? a + b : op == 'S' ? a - b : op == 'M' ? a * b : a / b;
        } else {
            lut_op(n, a, &o);
        }
        vals[i] = o;
    }
    return vals[r->n - 1];
}

/* Q(f(DQ(x_q))) with f several element-wise nodes of x alone (x + 3 -> Clip, the
 * x * Clip(x + 3, 0, 6) / 6 of a decomposed hard-swish, a * x + b ...) whose inner results
 * nothing else reads: one QLut. (Single nodes: the patterns above, tried first.) */
static tdm_status *fuse_lut_region(fz_ctx *fz, int qi) {
    const tdm_node *qn = fz_node(fz, qi);
    q_out q;
    if (qn->n_inputs < 1 || qn->inputs[0] < 0 || !match_q(fz, qi, &q)) return NULL;
    int v = qn->inputs[0];
    if (fz_sole_consumer(fz, v) != qi) return NULL;
    lut_region r = {.n = 0, .xv = -1};
    if (!lr_collect(fz, v, &r) || r.n < 2 || r.xv < 0) return NULL;
    if (!fz_same_shape(fz, v, r.xv)) return NULL; /* (no broadcast to a larger shape) */
    for (int i = 0; i < r.n; i++) { /* inner results: read by the region only */
        int o = fz_node(fz, r.nodes[i])->outputs[0];
        if (o == v) continue;
        const int *rd;
        int k = fz_consumers(fz, o, &rd), in = 0;
        for (int j = 0; j < k; j++) in += lr_in(&r, rd[j]);
        if (in != k || fz_uses(fz, o) != k || !fz_same_shape(fz, o, r.xv)) return NULL;
    }
    tdm_dtype xt = fz->g->values[r.x.q].dtype;
    uint8_t tab[256];
    for (int b = 0; b < 256; b++) tab[b] = lut_q(&q, lr_eval(fz, &r, lut_dq(&r.x, xt, b)));
    int last = r.nodes[r.n - 1];
    for (int i = 0; i < r.n - 1; i++) fz_kill(fz, r.nodes[i]);
    return emit_lut(fz, last, r.x.q, &q, tab, -1);
}

/* Same quantization: equal scale, zero point and type. */
static bool same_q(const fz_ctx *fz, const dq_in *d, const q_out *q) {
    return scale_at(d, 0) == q->s && zp_at(d, 0) == q->z && fz->g->values[d->q].dtype == q->t;
}

/* A QLut from x_q (quantized as d) to q's quantization: Q(DQ(x)) per byte, the pattern's own
 * float formulas (exact). Writes value `out` (-1: a new 8-bit value of q's type, in *res). */
static tdm_status *requant_lut(fz_ctx *fz, const dq_in *d, const q_out *q, int like, int out,
                               int *res) {
    tdm_dtype xt = fz->g->values[d->q].dtype;
    tdm_tensor *t;
    int64_t n = 256;
    TDM_TRY(tdm_tensor_new(fz->g->alloc, q->t, 1, &n, &t));
    for (int b = 0; b < 256; b++) ((uint8_t *)t->data)[b] = lut_q(q, lut_dq(d, xt, b));
    char base[112];
    const char *xn = fz->g->values[d->q].name;
    snprintf(base, sizeof base, "%.96s/requant", xn ? xn : "");
    int tv, fi;
    TDM_TRY(fz_new_const(fz, base, t, &tv));
    if (out < 0) TDM_TRY(fz_new_value(fz, base, q->t, -1, NULL, &out));
    TDM_TRY(fz_new_node(fz, "QLut", TDM_FUSED_DOMAIN, base, 2, 1, &fi));
    tdm_node *f = fz_node(fz, fi);
    f->inputs[0] = d->q;
    f->inputs[1] = tv;
    f->outputs[0] = out;
    f->device = fz_node(fz, like)->device;
    *res = out;
    return NULL;
}

/* Resize that only moves elements: nearest, no extrapolation (tf_crop_and_resize fills),
 * no axes subset; its other inputs (roi, scales, sizes) are not 8-bit. */
static bool resize_moves(const fz_ctx *fz, const tdm_node *n) {
    if (strcmp(tdm_attr_string(n, "mode", "nearest"), "nearest") ||
        !strcmp(tdm_attr_string(n, "coordinate_transformation_mode", "half_pixel"),
                "tf_crop_and_resize") ||
        tdm_node_attr(n, "axes"))
        return false;
    for (int k = 1; k < n->n_inputs; k++)
        if (n->inputs[k] >= 0 && is_q8(fz->g->values[n->inputs[k]].dtype)) return false;
    return true;
}

/* Data-movement ops: input 0 (every input of Concat) from DQ, each output to a Q: the op runs
 * on the 8-bit tensors. Where an input's quantization differs from the output's, a QLut
 * requantises that input first (Q(DQ(x)) per byte; MaxPool commutes with it too, the map
 * being nondecreasing); Split's outputs, each with its own Q, get the table after the op. */
static tdm_status *fuse_move(fz_ctx *fz, int oi) {
    tdm_node *n = fz_node(fz, oi);
    bool concat = !strcmp(n->op_type, "Concat"), split = !strcmp(n->op_type, "Split");
    if (n->n_outputs < 1 || n->n_inputs < 1 || (!split && n->n_outputs != 1)) return NULL;
    if (!strcmp(n->op_type, "MaxPool") && n->n_outputs > 1) return NULL;
    if (!strcmp(n->op_type, "Resize") && !resize_moves(fz, n)) return NULL;
    enum { MAXIO = 64 };
    q_out q[MAXIO];
    dq_in d[MAXIO];
    int nin = concat ? n->n_inputs : 1, nout = n->n_outputs;
    if (nin > MAXIO || nout > MAXIO) return NULL;
    for (int k = 0; k < nout; k++)
        if (n->outputs[k] < 0 || !match_q(fz, fz_sole_consumer(fz, n->outputs[k]), &q[k]))
            return NULL;
    for (int k = 0; k < nin; k++)
        if (n->inputs[k] < 0 || !fq_match_act_dq(fz, n->inputs[k], &d[k])) return NULL;
    int qs[MAXIO];
    for (int k = 0; k < nin; k++) { /* (Split: the table goes after it, per output) */
        qs[k] = d[k].q;
        if (!split && !same_q(fz, &d[k], &q[0]))
            TDM_TRY(requant_lut(fz, &d[k], &q[0], oi, -1, &qs[k]));
    }
    int outs[MAXIO];
    for (int k = 0; k < nout; k++) {
        outs[k] = q[k].out;
        if (split && !same_q(fz, &d[0], &q[k])) { /* Split -> an 8-bit value -> QLut -> Q's */
            char base[112];
            const char *on = fz->g->values[q[k].out].name;
            snprintf(base, sizeof base, "%.96s/q8", on ? on : "");
            TDM_TRY(fz_new_value(fz, base, fz->g->values[d[0].q].dtype, -1, NULL, &outs[k]));
            dq_in in8 = d[0];
            in8.q = outs[k];
            int r;
            TDM_TRY(requant_lut(fz, &in8, &q[k], oi, q[k].out, &r));
        }
    }
    n = fz_node(fz, oi);
    for (int k = 0; k < nin; k++) n->inputs[k] = qs[k];
    for (int k = 0; k < nout; k++) {
        fz->g->values[n->outputs[k]].producer = -1;
        n->outputs[k] = outs[k];
        fz_kill(fz, q[k].node);
    }
    fz->count++;
    fz->dirty = true;
    return NULL;
}

/* After the patterns: DequantizeLinear nodes nothing reads any more go, then a QLut reading
 * the only result of another QLut takes the composed table (fuse_move's requantising tables
 * behind an activation's). */
static tdm_status *compose_luts(fz_ctx *fz) {
    TDM_TRY(fz_refresh(fz));
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        const tdm_node *n = fz_node(fz, (int)i);
        if (fz_is_op(fz, (int)i, "DequantizeLinear") && n->n_outputs == 1 && n->outputs[0] >= 0 &&
            fz_uses(fz, n->outputs[0]) == 0) {
            fz_kill(fz, (int)i);
            fz->dirty = true;
        }
    }
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        TDM_TRY(fz_refresh(fz));
        const tdm_node *b = fz_node(fz, (int)i);
        if (b->dead || strcmp(b->domain, TDM_FUSED_DOMAIN) || strcmp(b->op_type, "QLut") ||
            b->n_inputs != 2 || b->inputs[0] < 0)
            continue;
        int p = fz_producer(fz, b->inputs[0]);
        if (p < 0 || fz_sole_consumer(fz, b->inputs[0]) != (int)i) continue;
        const tdm_node *a = fz_node(fz, p);
        if (strcmp(a->domain, TDM_FUSED_DOMAIN) || strcmp(a->op_type, "QLut") || a->n_inputs != 2)
            continue;
        const tdm_tensor *t1 = fz_const(fz, a->inputs[1]), *t2 = fz_const(fz, b->inputs[1]);
        if (!t1 || !t2 || t1->count != 256 || t2->count != 256) continue;
        tdm_tensor *t;
        int64_t n = 256;
        TDM_TRY(tdm_tensor_new(fz->g->alloc, t2->dtype, 1, &n, &t));
        for (int k = 0; k < 256; k++)
            ((uint8_t *)t->data)[k] = ((const uint8_t *)t2->data)[((const uint8_t *)t1->data)[k]];
        int tv;
        TDM_TRY(fz_new_const(fz, fz->g->values[b->inputs[1]].name, t, &tv));
        tdm_node *bn = fz_node(fz, (int)i);
        bn->inputs[0] = fz_node(fz, p)->inputs[0];
        bn->inputs[1] = tv;
        fz_kill(fz, p);
        fz->count++;
        fz->dirty = true;
    }
    return NULL;
}

tdm_status *fz_pass_qdq(fz_ctx *fz) {
    static const char *const moves[] = {"MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze",
                                        "Unsqueeze", "Concat", "Split", "Resize"};
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        TDM_TRY(fz_refresh(fz));
        int ni = (int)i;
        if (fz_is_op(fz, ni, "Conv")) TDM_TRY(fuse_conv(fz, ni));
        else if (fz_is_op(fz, ni, "ConvTranspose")) TDM_TRY(fq_fuse_deconv(fz, ni));
        else if (fz_is_op(fz, ni, "MatMul")) TDM_TRY(fuse_matmul(fz, ni, false));
        else if (fz_is_op(fz, ni, "Gemm")) TDM_TRY(fuse_matmul(fz, ni, true));
        else if (fz_is_op(fz, ni, "Add") || fz_is_op(fz, ni, "Sub") || fz_is_op(fz, ni, "Mul") ||
                 fz_is_op(fz, ni, "Div")) {
            bool done;
            TDM_TRY(fuse_lut_scalar(fz, ni, &done));
            if (!done && fz_is_op(fz, ni, "Add")) TDM_TRY(fuse_add(fz, ni));
            else if (!done && fz_is_op(fz, ni, "Mul")) {
                TDM_TRY(fuse_lut_mul(fz, ni));
                if (fz_is_op(fz, ni, "Mul")) TDM_TRY(fuse_add(fz, ni)); /* (not a table) */
            }
        }
        else if (fz_is_op(fz, ni, "Sigmoid") || fz_is_op(fz, ni, "Tanh") ||
                 fz_is_op(fz, ni, "Relu") || fz_is_op(fz, ni, "LeakyRelu") ||
                 fz_is_op(fz, ni, "HardSigmoid") || fz_is_op(fz, ni, "HardSwish") ||
                 fz_is_op(fz, ni, "Clip"))
            TDM_TRY(fuse_lut_unary(fz, ni));
        else if (fz_is_op(fz, ni, "QuantizeLinear"))
            TDM_TRY(fuse_lut_region(fz, ni));
        else if (fz_is_op(fz, ni, "GlobalAveragePool"))
            TDM_TRY(fuse_gap(fz, ni));
        else
            for (size_t k = 0; k < sizeof moves / sizeof moves[0]; k++)
                if (fz_is_op(fz, ni, moves[k])) TDM_TRY(fuse_move(fz, ni));
    }
    return compose_luts(fz);
}

/* ---- channels-last 8-bit regions ---- */

typedef struct nh_ctx {
    fz_ctx *fz;
    size_t nv;  /* values before the pass (twin[] covers them) */
    int *twin;  /* per original value: its channels-last twin, or -1 */
    bool *wants; /* per original value: a reader could take it channels-last */
    bool *moved; /* per original value: its producer writes the twin instead */
} nh_ctx;

static bool is_fused_op(const tdm_node *n, const char *op) {
    return !n->dead && !strcmp(n->domain, TDM_FUSED_DOMAIN) && !strcmp(n->op_type, op);
}

/* A rank-4 8-bit value of known channel count. */
static bool q8_4d(const nh_ctx *h, int v) {
    if (v < 0 || (size_t)v >= h->nv) return false;
    const tdm_value *val = &h->fz->g->values[v];
    return is_q8(val->dtype) && val->rank == 4 && val->dims[1] > 0;
}

static bool has_twin(const nh_ctx *h, int v) {
    return v >= 0 && (size_t)v < h->nv && h->twin[v] >= 0;
}

/* QConv / QConvTranspose of 2-D images (the fast kernels' channels-last case), on the CPU. */
static bool nh_conv(const nh_ctx *h, const tdm_node *n) {
    if (!(is_fused_op(n, "QConv") || is_fused_op(n, "QConvTranspose")) || n->device >= 0 || n->n_inputs < 8 || n->n_outputs != 1)
        return false;
    const tdm_value *w = n->inputs[3] >= 0 ? &h->fz->g->values[n->inputs[3]] : NULL;
    return w && w->rank == 4 && q8_4d(h, n->inputs[0]) && q8_4d(h, n->outputs[0]) &&
           tdm_attr_int(n, "x_nhwc", 0) == 0 && tdm_attr_int(n, "y_nhwc", 0) == 0;
}

/* The channel axis attribute of a Concat / Split (1 or -3; the default `def` when absent). */
static bool nh_channel_axis(const tdm_node *n, int64_t def) {
    int64_t axis = tdm_attr_int(n, "axis", def);
    return axis == 1 || axis == -3;
}

/* Resize's scales / sizes input of a rank-4 nearest move (fuse_move's resize_moves): a
 * constant of 4 values, the other one absent or empty; roi unused. Its index in *k. */
static bool nh_resize_arg(const nh_ctx *h, const tdm_node *n, int *k) {
    if (n->dead || n->domain[0] || strcmp(n->op_type, "Resize") || n->n_inputs < 2 ||
        !resize_moves(h->fz, n))
        return false;
    int found = -1;
    for (int i = n->opset < 11 ? 1 : 2; i < n->n_inputs && i < 4; i++) {
        int v = n->inputs[i];
        if (v < 0) continue;
        const tdm_tensor *t = const_any(h->fz, v);
        if (!t) return false;
        if (t->count == 0) continue;
        if (t->count != 4 || t->rank != 1 || found >= 0 ||
            (t->dtype != TDM_FLOAT && t->dtype != TDM_INT64))
            return false;
        found = i;
    }
    *k = found;
    return found >= 0;
}

/* QAdd / QMul of two rank-4 tensors, Concat / Split on the channel axis, QLut,
 * QGlobalAveragePool, a 2-D MaxPool, a nearest Resize with constant scales or sizes. */
static bool nh_other(const nh_ctx *h, const tdm_node *n) {
    if (!n->dead && !n->domain[0] && !strcmp(n->op_type, "Split")) {
        if (n->device >= 0 || n->n_implicit || !nh_channel_axis(n, 0) || !q8_4d(h, n->inputs[0]))
            return false;
        for (int k = 0; k < n->n_outputs; k++)
            if (!q8_4d(h, n->outputs[k])) return false;
        return n->n_outputs >= 1;
    }
    if (n->device >= 0 || n->n_outputs != 1 || n->n_implicit || !q8_4d(h, n->outputs[0]))
        return false;
    int rk;
    if (nh_resize_arg(h, n, &rk)) return q8_4d(h, n->inputs[0]);
    if (is_fused_op(n, "QAdd") || is_fused_op(n, "QMul")) /* (broadcasting commutes with the
                                                              same axis permutation) */
        return q8_4d(h, n->inputs[0]) && q8_4d(h, n->inputs[3]);
    if (is_fused_op(n, "QLut")) return q8_4d(h, n->inputs[0]);
    if (is_fused_op(n, "QGlobalAveragePool"))
        return q8_4d(h, n->inputs[0]) && tdm_attr_int(n, "nhwc", 0) == 0;
    if (!n->dead && !n->domain[0] && !strcmp(n->op_type, "MaxPool")) {
        size_t nk = 0;
        tdm_attr_ints(n, "kernel_shape", &nk);
        return n->n_inputs == 1 && (n->n_outputs == 1 || n->outputs[1] < 0) && nk == 2 &&
               fz_attrs_copyable(n) && q8_4d(h, n->inputs[0]);
    }
    if (!n->dead && !n->domain[0] && !strcmp(n->op_type, "Concat")) {
        if (!nh_channel_axis(n, 0)) return false;
        for (int k = 0; k < n->n_inputs; k++)
            if (!q8_4d(h, n->inputs[k])) return false;
        return true;
    }
    return false;
}

static tdm_status *nh_new_twin(nh_ctx *h, int v, int *out) {
    char base[96];
    const char *name = h->fz->g->values[v].name;
    snprintf(base, sizeof base, "%.80s/nhwc", name ? name : "");
    return fz_new_value(h->fz, base, h->fz->g->values[v].dtype, -1, NULL, out);
}

/* A Transpose node from -> to with permutation p (device mark of `like`). */
static tdm_status *nh_transpose(nh_ctx *h, int like, int from, int to, const int64_t *p) {
    char name[128];
    snprintf(name, sizeof name, "%.100s/%s", h->fz->g->values[to].name ? h->fz->g->values[to].name : "",
             p[1] == 2 ? "to_nhwc" : "to_nchw");
    int nn;
    TDM_TRY(fz_new_node(h->fz, "Transpose", "", name, 1, 1, &nn));
    tdm_node *t = fz_node(h->fz, nn);
    t->inputs[0] = from;
    t->outputs[0] = to;
    t->device = like >= 0 ? fz_node(h->fz, like)->device : -1;
    return fz_attr_ints(h->fz, nn, "perm", p, 4);
}

/* Channels-last twin of plain value v for a converted reader: a Transpose(0, 2, 3, 1). */
static tdm_status *nh_to_twin(nh_ctx *h, int v, int like, int *out) {
    if (has_twin(h, v)) {
        *out = h->twin[v];
        return NULL;
    }
    static const int64_t p[4] = {0, 2, 3, 1};
    TDM_TRY(nh_new_twin(h, v, out));
    TDM_TRY(nh_transpose(h, like, v, *out, p));
    h->twin[v] = *out; /* v stays plain for its other readers */
    return NULL;
}

static tdm_status *nh_convert_conv(nh_ctx *h, int i) {
    const tdm_node *n = fz_node(h->fz, i);
    int x = n->inputs[0], y = n->outputs[0];
    bool xin = has_twin(h, x), yout = h->wants[y];
    if (!xin && !yout) return NULL;
    int yt = -1;
    if (yout) TDM_TRY(nh_new_twin(h, y, &yt));
    tdm_node *c = fz_node(h->fz, i);
    if (xin) {
        c->inputs[0] = h->twin[x];
        TDM_TRY(fz_attr_int(h->fz, i, "x_nhwc", 1));
    }
    if (yout) {
        c = fz_node(h->fz, i);
        c->outputs[0] = yt;
        h->fz->g->values[y].producer = -1;
        h->twin[y] = yt;
        h->moved[y] = true;
        TDM_TRY(fz_attr_int(h->fz, i, "y_nhwc", 1));
    }
    h->fz->dirty = true;
    h->fz->count++;
    return NULL;
}

/* Input k of a converted node is a tensor (not a scale, zero point, table, split sizes,
 * roi, scales or sizes). */
static bool nh_data(const tdm_node *n, int k) {
    if (is_fused_op(n, "QAdd") || is_fused_op(n, "QMul")) return k == 0 || k == 3;
    if (is_fused_op(n, "QLut") || is_fused_op(n, "QGlobalAveragePool")) return k == 0;
    if (!n->domain[0] && (!strcmp(n->op_type, "Split") || !strcmp(n->op_type, "Resize")))
        return k == 0;
    return true;
}

/* Resize's scales / sizes for channels-last data: [a, b, c, d] -> [a, c, d, b]. */
static tdm_status *nh_resize_permute(nh_ctx *h, int i) {
    int k;
    if (!nh_resize_arg(h, fz_node(h->fz, i), &k)) return NULL; /* (checked by nh_other) */
    int v = fz_node(h->fz, i)->inputs[k];
    const tdm_tensor *t = const_any(h->fz, v);
    tdm_tensor *nt;
    int64_t four = 4;
    TDM_TRY(tdm_tensor_new(h->fz->g->alloc, t->dtype, 1, &four, &nt));
    size_t es = tdm_dtype_elem_size(t->dtype);
    static const int src[4] = {0, 2, 3, 1};
    for (int d = 0; d < 4; d++)
        memcpy((char *)nt->data + d * es, (const char *)t->data + src[d] * es, es);
    int nv;
    TDM_TRY(fz_new_const(h->fz, h->fz->g->values[v].name, nt, &nv));
    fz_node(h->fz, i)->inputs[k] = nv;
    return NULL;
}

/* MaxPool of a channels-last input: MaxPoolNhwc (ops/fused.h) with its attributes. */
static tdm_status *nh_convert_pool(nh_ctx *h, int i) {
    const tdm_node *n = fz_node(h->fz, i);
    int x = n->inputs[0], y = n->outputs[0], yt, nn;
    if (!has_twin(h, x)) return NULL;
    TDM_TRY(nh_new_twin(h, y, &yt));
    char name[128];
    snprintf(name, sizeof name, "%.100s/nhwc", fz_node(h->fz, i)->name ? fz_node(h->fz, i)->name : "");
    TDM_TRY(fz_new_node(h->fz, "MaxPoolNhwc", TDM_FUSED_DOMAIN, name, 1, 1, &nn));
    tdm_node *p = fz_node(h->fz, nn);
    p->inputs[0] = h->twin[x];
    p->outputs[0] = yt;
    p->device = fz_node(h->fz, i)->device;
    int na = fz_node(h->fz, i)->n_attrs;
    for (int k = 0; k < na; k++) TDM_TRY(fz_attr_copy(h->fz, nn, &fz_node(h->fz, i)->attrs[k]));
    TDM_TRY(fz_attr_int(h->fz, nn, "src_opset", fz_node(h->fz, i)->opset));
    fz_kill(h->fz, i);
    h->fz->g->values[y].producer = -1;
    h->twin[y] = yt;
    h->moved[y] = true;
    h->fz->dirty = true;
    h->fz->count++;
    return NULL;
}

/* QAdd / QMul / QLut / QGlobalAveragePool / Concat / Split / Resize with a channels-last
 * input: every input channels-last, and every output. */
static tdm_status *nh_convert_other(nh_ctx *h, int i) {
    const tdm_node *n = fz_node(h->fz, i);
    if (!n->domain[0] && !strcmp(n->op_type, "MaxPool")) return nh_convert_pool(h, i);
    bool axis3 = !n->domain[0] && strcmp(n->op_type, "Resize"); /* Concat, Split */
    bool resize = !n->domain[0] && !axis3;
    int nin = n->n_inputs, any = 0;
    for (int k = 0; k < nin; k++)
        if (nh_data(n, k) && has_twin(h, n->inputs[k])) any++;
    if (!any) return NULL;
    if (resize) TDM_TRY(nh_resize_permute(h, i));
    for (int k = 0; k < nin; k++) {
        if (!nh_data(fz_node(h->fz, i), k)) continue;
        int v = fz_node(h->fz, i)->inputs[k], t;
        TDM_TRY(nh_to_twin(h, v, i, &t));
        fz_node(h->fz, i)->inputs[k] = t;
    }
    if (axis3) {
        bool has_axis = false;
        tdm_node *c = fz_node(h->fz, i);
        for (int k = 0; k < c->n_attrs; k++)
            if (!strcmp(c->attrs[k].name, "axis")) {
                c->attrs[k].i = 3;
                has_axis = true;
            }
        if (!has_axis) return TDM_ERR(TDM_ERR_INTERNAL, "int8 layout pass: no channel axis");
    }
    if (is_fused_op(fz_node(h->fz, i), "QGlobalAveragePool"))
        TDM_TRY(fz_attr_int(h->fz, i, "nhwc", 1));
    int nout = fz_node(h->fz, i)->n_outputs;
    for (int k = 0; k < nout; k++) {
        int y = fz_node(h->fz, i)->outputs[k], yt;
        TDM_TRY(nh_new_twin(h, y, &yt));
        fz_node(h->fz, i)->outputs[k] = yt;
        h->fz->g->values[y].producer = -1;
        h->twin[y] = yt;
        h->moved[y] = true;
    }
    h->fz->dirty = true;
    h->fz->count++;
    return NULL;
}

/* Readers still reading a value that moved to its twin (and graph outputs, subgraph
 * reads) get it back through a Transpose(0, 3, 1, 2). */
static tdm_status *nh_materialise(nh_ctx *h) {
    tdm_graph *g = h->fz->g;
    bool *need = tdm_calloc(g->alloc, h->nv + 1, sizeof *need);
    if (!need) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in the int8 layout pass");
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (has_twin(h, n->inputs[k])) need[n->inputs[k]] = true;
        for (int k = 0; k < n->n_implicit; k++)
            if (has_twin(h, n->implicit[k])) need[n->implicit[k]] = true;
    }
    for (size_t o = 0; o < g->n_outputs; o++)
        if (has_twin(h, g->outputs[o])) need[g->outputs[o]] = true;
    static const int64_t p[4] = {0, 3, 1, 2};
    tdm_status *st = NULL;
    for (size_t v = 0; v < h->nv && !st; v++) {
        if (!need[v] || !h->moved[v]) continue; /* a to_nhwc source: still plain */
        st = nh_transpose(h, -1, h->twin[v], (int)v, p);
    }
    tdm_free(g->alloc, need);
    return st;
}

tdm_status *fz_pass_q8_nhwc(fz_ctx *fz) {
    TDM_TRY(fz_refresh(fz));
    tdm_graph *g = fz->g;
    nh_ctx h = {fz, g->n_values, NULL, NULL, NULL};
    bool any = false;
    for (size_t i = 0; i < g->n_nodes && !any; i++) any = nh_conv(&h, &g->nodes[i]);
    if (!any) return NULL;
    h.twin = tdm_alloc(g->alloc, (h.nv + 1) * sizeof *h.twin);
    h.wants = tdm_calloc(g->alloc, h.nv + 1, sizeof *h.wants);
    h.moved = tdm_calloc(g->alloc, h.nv + 1, sizeof *h.moved);
    tdm_status *st = NULL;
    if (!h.twin || !h.wants || !h.moved) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in the int8 layout pass");
        goto done;
    }
    for (size_t v = 0; v < h.nv; v++) {
        h.twin[v] = -1;
        const int *cons;
        int nc = fz_consumers(fz, (int)v, &cons);
        for (int c = 0; c < nc; c++) {
            const tdm_node *r = fz_node(fz, cons[c]);
            if ((nh_conv(&h, r) && r->inputs[0] == (int)v) || nh_other(&h, r)) h.wants[v] = true;
        }
    }
    int before = fz->count;
    size_t n_nodes = g->n_nodes; /* the original nodes, in topological order */
    for (size_t i = 0; i < n_nodes && !st; i++) {
        const tdm_node *n = &g->nodes[i];
        if (nh_conv(&h, n)) st = nh_convert_conv(&h, (int)i);
        else if (nh_other(&h, n)) st = nh_convert_other(&h, (int)i);
    }
    if (!st && fz->count > before) {
        fz->dirty = true;
        if (!(st = fz_refresh(fz))) st = nh_materialise(&h);
    }
done:
    tdm_free(g->alloc, h.twin);
    tdm_free(g->alloc, h.wants);
    tdm_free(g->alloc, h.moved);
    return st;
}

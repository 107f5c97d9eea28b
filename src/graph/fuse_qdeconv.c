/* QDQ pass, the ConvTranspose pattern (the pass itself and the other patterns: fuse_qdq.c):
 *
 *   DQ(x_q) , DQ(w_q const) [, bias] -> ConvTranspose [-> Relu | Clip] -> Q => QConvTranspose
 *
 * (ops/fused.h). W is [C, M / group, k...]: its output channel is axis 1, so per-channel
 * weight scales run along axis 1 (what tandem quantize and ONNX Runtime's quantizer write);
 * with groups, where axis 1 holds M / group channels, only per-tensor weights are taken. The
 * bias becomes int32 in units of x_scale * w_scale[m] as QConv's (fuse_qdq.c's
 * fq_make_bias: exact when it was DQ(int32) with that scale), and a Relu / Clip before Q a
 * clamp of the quantized result (exact). An 8-bit X stays 8-bit through the decoder heads
 * of segmentation and text-detection models (PP-OCR's DB head: two stride-2
 * ConvTransposes) instead of a float ConvTranspose between Q / DQ. */
#include "graph/fuse_qdq.h"

tdm_status *fq_fuse_deconv(fz_ctx *fz, int ci) {
    const tdm_node *c = fz_node(fz, ci);
    if (c->n_inputs < 2 || c->n_outputs != 1 || c->outputs[0] < 0 || !fz_attrs_copyable(c))
        return NULL;
    int64_t group = tdm_attr_int(c, "group", 1);
    dq_in x, w;
    tail t;
    if (group < 1 || !fq_match_act_dq(fz, c->inputs[0], &x) ||
        !fq_match_w_dq(fz, c->inputs[1], 1, &w) || !fq_match_tail(fz, c->outputs[0], &t))
        return NULL;
    const tdm_tensor *wt = fz_const(fz, w.q);
    if (wt->rank < 3 || wt->dims[0] % group || wt->dims[1] < 1) return NULL;
    int64_t m = wt->dims[1] * group;
    if (w.s->count != 1 && !(group == 1 && w.s->count == m)) return NULL;
    int bias = -1;
    if (c->n_inputs > 2 && c->inputs[2] >= 0) {
        TDM_TRY(fq_make_bias(fz, c->inputs[2], m, &x, &w, &bias));
        if (bias < 0) return NULL;
    }
    return fq_emit(fz, "QConvTranspose", ci, &x, w.q, w.scale, w.zp, &t, bias, true);
}

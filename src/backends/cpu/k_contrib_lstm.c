/* CPU kernels: contrib family — DynamicQuantizeLSTM: an ONNX LSTM (gates i, o, f, c; default
 * activations sigmoid, tanh, tanh; optional bias, initial state and peepholes) whose weights
 * are int8 / uint8 with scales (per direction or per gate column) and zero points, and whose
 * weights come transposed: W [D, input, 4 x hidden], R [D, hidden, 4 x hidden].
 *
 * As ONNX Runtime computes it, each product quantizes its float operand dynamically to uint8
 * (the range widened to include 0, scale = range / 255, zero point round(-min / scale)): the
 * input projection once over all of X, the recurrent one per step over the batch's hidden
 * state. The products of the zero-point-free integers run in float through tdm_sgemm (exact
 * sums up to 2^24), then scale by a_scale x w_scale[column]. Because h is requantized every
 * step, results agree with ONNX Runtime's to about one quantization step of h times R's
 * scale, not to float rounding (the test's tolerance says so). */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_contrib.h"
#include "core/alloc.h"

/* dst[i] = q(src[i]) - zp as float, for src quantized to uint8 dynamically; returns the scale. */
static float dyn_quant(const float *src, int64_t n, float *dst) {
    float lo = 0.0f, hi = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        lo = src[i] < lo ? src[i] : lo;
        hi = src[i] > hi ? src[i] : hi;
    }
    float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    float zf = 0.0f - lo / scale;
    zf = zf >= 0.0f ? (zf <= 255.0f ? zf : 255.0f) : 0.0f; /* NaN (infinite inputs) too */
    int zp = (int)nearbyintf(zf);
    for (int64_t i = 0; i < n; i++)
        dst[i] = (float)(tdm_contrib_sat(TDM_UINT8, nearbyintf(src[i] / scale) + (float)zp) - zp);
    return scale;
}

static float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }

/* The dequantized-integer copy of direction d's weight [rows, cols] minus its zero points
 * (zp [D] or [D, cols]), and its scales s [D] or [D, cols] (one per column in sc). */
static tdm_status *weights(tdm_kernel_ctx *ctx, const tdm_tensor *w, const tdm_tensor *s, const tdm_tensor *z,
                           int d, int D, int64_t rows, int64_t cols, float *wf, float *sc, const char *what) {
    if ((s->dtype != TDM_FLOAT || (s->count != D && s->count != D * cols)) ||
        z->dtype != w->dtype || (z->count != D && z->count != D * cols))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "%s's scale (float32) and zero point (%s) must be [%d] or [%d, %lld]", what,
                              tdm_dtype_name(w->dtype), D, D, (long long)cols);
    const float *sv = s->data;
    bool pcs = s->count != D, pcz = z->count != D;
    for (int64_t col = 0; col < cols; col++) sc[col] = sv[pcs ? d * cols + col : d];
    int64_t base = (int64_t)d * rows * cols;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t col = 0; col < cols; col++) {
            int zp = tdm_contrib_ld_q(z->dtype, z->data, pcz ? d * cols + col : d);
            wf[r * cols + col] = (float)(tdm_contrib_ld_q(w->dtype, w->data, base + r * cols + col) - zp);
        }
    return NULL;
}

tdm_status *tdm_contrib_run_dq_lstm(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *x = ctx->in[0], *w = ctx->in[1], *r = ctx->in[2], *bias = ctx->in[3];
    const tdm_tensor *lens = ctx->in[4], *h0 = ctx->in[5], *c0 = ctx->in[6], *peep = ctx->in[7];
    int64_t H = tdm_attr_int(node, "hidden_size", 0), G = 4 * H;
    int D = strcmp(tdm_attr_string(node, "direction", "forward"), "bidirectional") == 0 ? 2 : 1;
    bool reverse = strcmp(tdm_attr_string(node, "direction", "forward"), "reverse") == 0;
    if (x->rank != 3 || w->rank != 3 || r->rank != 3 || w->dims[0] != D || w->dims[1] != x->dims[2] ||
        w->dims[2] != G || r->dims[0] != D || r->dims[1] != H || r->dims[2] != G || r->dtype != w->dtype)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "X must be [seq, batch, input], W [%d, input, %lld] and R [%d, %lld, %lld] of one type",
                              D, (long long)G, D, (long long)H, (long long)G);
    int64_t S = x->dims[0], Bt = x->dims[1], I = x->dims[2];
    if ((bias && bias->count != D * 2 * G) || (h0 && h0->count != D * Bt * H) || (c0 && c0->count != D * Bt * H) ||
        (peep && peep->count != D * 3 * H))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "B, initial_h, initial_c or P has the wrong size");
    if (lens) {
        const int32_t *l = lens->data;
        for (int64_t b = 0; b < lens->count; b++)
            if (lens->count != Bt || l[b] != S)
                return tdm_node_error(node, TDM_ERR_UNSUPPORTED,
                                      "sequence_lens shorter than the sequence (%lld) is not implemented", (long long)S);
    }
    float *Y = ctx->n_out > 0 && ctx->out[0] ? ctx->out[0]->data : NULL;
    float *Yh = ctx->n_out > 1 && ctx->out[1] ? ctx->out[1]->data : NULL;
    float *Yc = ctx->n_out > 2 && ctx->out[2] ? ctx->out[2]->data : NULL;
    size_t need = (size_t)(S * Bt * I) + (size_t)(I * G) + (size_t)(H * G) + 2 * (size_t)G +
                  (size_t)(S * Bt * G) + (size_t)(Bt * G) + 3 * (size_t)(Bt * H) + 1;
    float *buf = tdm_kscratch(ctx, need * sizeof(float));
    if (!buf) return tdm_node_error(node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    float *xq = buf, *wf = xq + S * Bt * I, *rf = wf + I * G, *ws = rf + H * G, *rs = ws + G;
    float *xw = rs + G, *hr = xw + S * Bt * G, *h = hr + Bt * G, *c = h + Bt * H, *hq = c + Bt * H;
    float xs = dyn_quant(x->data, S * Bt * I, xq);
    tdm_status *st = NULL;
    for (int d = 0; d < D && !st; d++) {
        if ((st = weights(ctx, w, ctx->in[8], ctx->in[9], d, D, I, G, wf, ws, "W"))) break;
        if ((st = weights(ctx, r, ctx->in[10], ctx->in[11], d, D, H, G, rf, rs, "R"))) break;
        if (S * Bt > 0)
            tdm_contrib_gemm(ctx, false, false, S * Bt, G, I, 1.0f, xq, I, wf, G, 0.0f, xw, G);
        for (int64_t i = 0; i < S * Bt * G; i++) xw[i] *= xs * ws[i % G];
        const float *bv = bias ? (const float *)bias->data + d * 2 * G : NULL;
        const float *pv = peep ? (const float *)peep->data + d * 3 * H : NULL;
        for (int64_t i = 0; i < Bt * H; i++) {
            h[i] = h0 ? ((const float *)h0->data)[d * Bt * H + i] : 0.0f;
            c[i] = c0 ? ((const float *)c0->data)[d * Bt * H + i] : 0.0f;
        }
        bool back = reverse || d == 1;
        for (int64_t step = 0; step < S; step++) {
            int64_t t = back ? S - 1 - step : step;
            float hsc = dyn_quant(h, Bt * H, hq);
            if (Bt > 0 && H > 0)
                tdm_contrib_gemm(ctx, false, false, Bt, G, H, 1.0f, hq, H, rf, G, 0.0f, hr, G);
            for (int64_t b = 0; b < Bt; b++) {
                float *g = hr + b * G;
                const float *xg = xw + (t * Bt + b) * G;
                for (int64_t k = 0; k < G; k++) {
                    g[k] = xg[k] + g[k] * (hsc * rs[k]);
                    if (bv) g[k] += bv[k] + bv[G + k];
                }
                float *hb = h + b * H, *cb = c + b * H;
                for (int64_t k = 0; k < H; k++) {
                    float cp = cb[k];
                    float ig = sigm(g[k] + (pv ? pv[k] * cp : 0.0f));
                    float fg = sigm(g[2 * H + k] + (pv ? pv[2 * H + k] * cp : 0.0f));
                    float ct = tanhf(g[3 * H + k]);
                    float cn = fg * cp + ig * ct;
                    float og = sigm(g[H + k] + (pv ? pv[H + k] * cn : 0.0f));
                    cb[k] = cn;
                    hb[k] = og * tanhf(cn);
                }
                if (Y) memcpy(Y + ((t * D + d) * Bt + b) * H, hb, (size_t)H * sizeof(float));
            }
        }
        if (Yh) memcpy(Yh + d * Bt * H, h, (size_t)(Bt * H) * sizeof(float));
        if (Yc) memcpy(Yc + d * Bt * H, c, (size_t)(Bt * H) * sizeof(float));
    }
    tdm_free(ctx->alloc, buf);
    return st;
}

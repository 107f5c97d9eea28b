/* The QDQ pass's pattern pieces, shared by its files (fuse_qdq.c: the pass and most
 * patterns; fuse_qdeconv.c: ConvTranspose). Private to the QDQ pass. */
#ifndef TDM_GRAPH_FUSE_QDQ_H
#define TDM_GRAPH_FUSE_QDQ_H

#include "graph/fuse_impl.h"

/* A DequantizeLinear feeding a pattern. */
typedef struct dq_in {
    int node;
    int q;     /* quantized input value */
    int scale; /* scale value (float32 constant) */
    int zp;    /* zero point value (-1: absent) */
    const tdm_tensor *s, *z; /* their constants (z NULL when absent) */
    int axis;  /* normalized axis of a per-axis scale (-1 for per-tensor) */
} dq_in;

/* A QuantizeLinear with constant per-tensor scale and zero point (8-bit). */
typedef struct q_out {
    int node, out, scale, zp;
    float s;
    int32_t z;
    tdm_dtype t;
} q_out;

/* The pattern's tail from the op's float result: [Relu | Clip] then Q. */
typedef struct tail {
    int act; /* the Relu / Clip node or -1 */
    q_out q;
    int64_t qmin, qmax;
} tail;

/* v is DQ(8-bit activation) with a per-tensor constant scale and zero point. */
bool fq_match_act_dq(const fz_ctx *fz, int v, dq_in *d);
/* v is DQ(constant int8 weight), zero points 0, per-tensor or per-axis along `axis`. */
bool fq_match_w_dq(const fz_ctx *fz, int v, int axis, dq_in *d);
/* From value v: [Relu | Clip(constant bounds)] then Q, each the sole reader; the clamp in
 * [qmin, qmax]. */
bool fq_match_tail(const fz_ctx *fz, int v, tail *t);
/* The int32 bias [n] in units of x's scale * w's scale[m] from value b (float32 constant or
 * DQ(int32)); -1 in *v when it does not fit. */
tdm_status *fq_make_bias(fz_ctx *fz, int b, int64_t n, const dq_in *x, const dq_in *w, int *v);
/* Appends the integer node `op` (QLinear-style inputs: a's three, b_q / b_scale / b_zp, the
 * tail's scale and zero point, bias when >= 0; output Q's) and kills the anchor, the tail's
 * activation and Q; copy_attrs copies the anchor's attributes. */
tdm_status *fq_emit(fz_ctx *fz, const char *op, int anchor, const dq_in *a, int b_q, int b_scale,
                    int b_zp, const tail *t, int bias, bool copy_attrs);

/* fuse_qdeconv.c: DQ(x), DQ(w) [, bias] -> ConvTranspose [-> Relu | Clip] -> Q =>
 * QConvTranspose */
tdm_status *fq_fuse_deconv(fz_ctx *fz, int ci);

#endif

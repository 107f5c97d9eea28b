/* dnnl family: QLinearConv, tandem's QConv (ops/fused.h) and ConvInteger (int32 Y, no
 * scales: qc_setup_integer says which cases go where) on oneDNN's int8 convolution (u8s8s32
 * or s8s8s32 accumulation; oneDNN picks the kernel for the CPU: AMX, VNNI on AVX-512 /
 * AVX-VNNI, vpmaddubsw on plain AVX2).
 *
 * The requantisation is oneDNN's: output scales x_scale * w_scale[m] / y_scale (per output
 * channel when w_scale is), the int32 bias added to the accumulator before them, the qmin /
 * qmax clamp of QConv as an eltwise clip post-op (shifted by the output zero point), X's zero
 * point as oneDNN's source zero point (padding then reads as X's zero point, as ONNX wants)
 * and Y's as a last eltwise linear post-op (+ y_zero_point, dn_attr_q8_out): the same f32
 * sum before the rounding as a dst zero point, but oneDNN 2.6's brgemm 1x1 kernels (AMX)
 * take no dst zero point and it fell back to jit_1x1 AMX kernels 2-2.5x slower on
 * MobileNetV2's projection layers. Rounding is oneDNN's (to nearest even), so a result may differ by one unit
 * from the reference loops where x_scale * w_scale / y_scale * acc lies on a tie after float
 * rounding.
 *
 * What the fast path needs, else the node runs the reference kernel (k_misc_quant.c):
 * constant scales and zero points (per-tensor, w_scale per-tensor or per output channel),
 * constant int8 weights with zero points 0 (symmetric, as quantizers write them; oneDNN's
 * convolutions take no weight zero points), an 8-bit X and Y, a constant int32 bias, 1-D to
 * 3-D convolutions.
 *
 * Layouts: X and Y are plain NCHW (8-bit); the primitive's layouts come from format_tag_any
 * (channels-last for int8 on x86) and X / Y are transposed in and out by own tiled loops
 * (oneDNN's reorders of 8-bit NCHW images measured 30-40 ms for 1x32x112x112), other
 * layouts by oneDNN reorders; the weights are reordered once when the entry is built. Threads: images, and for ungrouped convolutions of small batches
 * chunks of output channels (a contiguous slice of the weights, scales and bias), each with
 * a primitive of its own: oneDNN 2.6's int8 convolutions take the output scales only as
 * constants of the primitive (runtime scales: unimplemented).
 *
 * Without VNNI, with uint8 X and weights whose same-sign pairs can pass int16 with large
 * bytes (k_dnnl.h, dn_q8_lim), a convolution (ungrouped, or 2+ input channels a group) also
 * keeps exact halves: each chunk gets a second primitive over X' = [X, X] (2C channels,
 * per group [Xg, Xg], channels-last, padded as X is) with weights [a | b], w = a + b, |a|,
 * |b| <= 64 (dn_q8_halves); a run whose X has a byte above the limit builds X' and takes
 * them (twice the work, the same requantisation, exact). One channel a group (depthwise):
 * oneDNN's AVX2 kernel widens the products to 32 bits, exact without halves. int8 X without
 * VNNI runs as uint8 (dn_q8_flip: X ^ 0x80 into the run's scratch first, zero point + 128),
 * so on the same exact path; int8 X without a zero point there: the reference loops. */
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "backends/cpu/k_dnnl.h"
#include "core/alloc.h"

/* k_misc_quant.c */
tdm_status *tdm_misc_qlinear_conv_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_conv_integer_run(tdm_kernel_ctx *ctx);

typedef struct qc_state {
    dn_state base;    /* first */
    int32_t xzp, yzp; /* zero points (X's type given by xzp's, when present) */
    dnnl_data_type_t yt;
    float *oscale;    /* [M] x_scale * w_scale[m] / y_scale */
    int32_t *bias;    /* [M] or NULL */
    int32_t *bias_zp; /* [M]: bias - x_zero_point * sum(w[m]) (padded mode; xzp != 0) */
    const tdm_tensor *w;
    int64_t M, group;
    bool clip;
    float clo, chi;   /* clip bounds relative to the output zero point */
    bool xl, yl;      /* QConv's x_nhwc / y_nhwc: X / Y channels-last (rank 4) */
    int lim;          /* without VNNI: X's bytes up to lim are exact with w (255: always) */
    int8_t *wh;       /* [M, 2 C, k...]: the halves [a | b] of each channel (NULL: none) */
    bool novnni;      /* the CPU has no VNNI (dn_has_vnni) */
    bool flip;        /* int8 X runs as uint8 (dn_q8_flip; xzp is then X's + 128) */
    /* ConvInteger (int32 Y = conv(X - x_zero_point, W - w_zero_point), no scales) */
    bool integer;
    bool xzp_rt;      /* x_zero_point is computed (DynamicQuantizeLinear): per run, padded
                         mode only; else xzp is the constant one as given (int8 X: + 128
                         when flipped, per entry) */
    int32_t *wsum;    /* [M] sum of W - w_zero_point per output channel (padded mode bias) */
    int8_t *wfold;    /* W - w_zero_point as int8 (s->w is wt, its header) */
    tdm_tensor wt;
    atomic_flag told; /* the loops' reason was logged (first run) */
} qc_state;

typedef struct qc_part {
    int64_t units; /* output channels per chunk; 0 = unused */
    dn_prim conv, r_dst;
    dn_prim conv2;  /* the halves' primitive over X' (p NULL: none) */
    bool dst_nhwc;  /* dst is channels-last: own transpose into Y instead of r_dst */
    dnnl_memory_desc_t wei, dst, usr_dst, bias;
    size_t wbytes, woff; /* its weights' bytes and offset in the entry's wbuf */
    dnnl_memory_desc_t wei2;
    size_t wbytes2, woff2; /* the same for the halves */
    dn_held held, held2;
} qc_part;

typedef struct qc_entry {
    dn_entry h; /* first */
    int nd;
    int64_t N, mb, chunk, n_chunks, osz;
    dnnl_data_type_t xt;
    dnnl_memory_desc_t usr_src, src;
    dn_prim r_src;
    bool src_nhwc;    /* src is channels-last: own transpose instead of r_src */
    bool src_conv;    /* X is converted (src_nhwc or r_src) */
    int32_t xzp;      /* X's zero point as the primitive sees it (int8 X flipped: + 128) */
    bool pad;         /* padded mode: X copied into a channels-last buffer padded with its
                         zero point, the primitive has no padding and no source zero point
                         (so oneDNN's brgemm kernels take it; with a zero point it falls to
                         a much slower kernel: 60 ms for ResNet-50's 7x7 stem against ~1),
                         and x_zero_point * sum(w) comes off the bias: exact */
    int64_t ph, pw, Hp, Wp, H, W; /* leading pads, padded and plain sizes (2-D only) */
    int64_t C, isz;   /* X's channels and spatial size */
    size_t src_bytes; /* mb images in the primitive's layout (at least src2's with halves) */
    dnnl_memory_desc_t src2; /* X' = [X, X] channels-last (the halves' primitives) */
    bool halves;      /* every part has conv2 */
    size_t tmp_bytes; /* per item: dst in the primitive's layout + scratchpad */
    qc_part *part;    /* [n_chunks]: the scales are constants of each primitive (oneDNN's
                         int8 convolutions take no runtime scales) */
    void *wbuf;
} qc_entry;

static void qc_clear(dn_state *s, dn_entry *he) {
    qc_entry *e = (qc_entry *)he;
    for (int64_t i = 0; e->part && i < e->n_chunks; i++) {
        dn_held_clear(&e->part[i].held);
        dn_held_clear(&e->part[i].held2);
        dn_prim_clear(&e->part[i].conv);
        dn_prim_clear(&e->part[i].conv2);
        dn_prim_clear(&e->part[i].r_dst);
    }
    tdm_free(s->alloc, e->part);
    e->part = NULL;
    dn_prim_clear(&e->r_src);
    tdm_free(s->alloc, e->wbuf);
    e->wbuf = NULL;
}

static void qc_release(void *state, const tdm_allocator *a) {
    qc_state *s = state;
    if (s) {
        tdm_free(s->base.alloc, s->oscale);
        tdm_free(s->base.alloc, s->bias);
        tdm_free(s->base.alloc, s->bias_zp);
        tdm_free(s->base.alloc, s->wh);
        tdm_free(s->base.alloc, s->wsum);
        tdm_free(s->base.alloc, s->wfold);
    }
    dn_release(state, a);
}




/* Without VNNI (uint8 X, or int8 X flipped to uint8), ungrouped or 2+ input channels (cg) a
 * group: the exact halves of the int8 weights w (n values) where large bytes can saturate
 * (per group X' = [Xg, Xg]; one channel a group: oneDNN's AVX2 depthwise kernel widens to 32
 * bits, exact). False when out of memory. */
static bool qc_halves(qc_state *s, const int8_t *w, int64_t n, int64_t cg) {
    s->lim = 255;
    if (!s->novnni || (s->group > 1 && cg < 2)) return true;
    int64_t per_m = n / s->M;
    int lim = dn_q8_lim(w, s->M, per_m, per_m, 1);
    if (lim == 255) return true;
    s->wh = tdm_alloc(s->base.alloc, 2 * (size_t)n + 1);
    if (!s->wh) return false;
    for (int64_t m = 0; m < s->M; m++)
        dn_q8_halves(w + m * per_m, s->wh + 2 * m * per_m, s->wh + (2 * m + 1) * per_m, per_m);
    s->lim = lim;
    return true;
}

/* The constants the fast path needs; false leaves the node to the reference kernel. */
static bool qc_setup(qc_state *s, const tdm_node *node, int n_in, const tdm_tensor *const *in) {
    if (n_in < 8) return false;
    const tdm_tensor *w = in[3], *ws = in[4], *b = n_in > 8 ? in[8] : NULL;
    float xs, ys;
    if (!w || w->dtype != TDM_INT8 || w->rank < 3 || w->rank > 5 || !dn_q8_zeros(in[5])) return false;
    if (node->inputs[5] >= 0 && !in[5]) return false;
    if ((node->inputs[2] >= 0 && !in[2]) || (node->inputs[7] >= 0 && !in[7])) return false;
    if (!dn_f32_scalar(in[1], &xs) || !dn_f32_scalar(in[6], &ys) || !dn_q8_scalar(in[2], &s->xzp) ||
        !dn_q8_scalar(in[7], &s->yzp))
        return false;
    s->flip = dn_q8_flip(in[2]);
    if (s->flip) s->xzp += 128;
    s->M = w->dims[0];
    s->group = tdm_attr_int(node, "group", 1);
    if (s->group < 1 || s->M % s->group || !ws || ws->dtype != TDM_FLOAT ||
        (ws->count != 1 && ws->count != s->M))
        return false;
    if (n_in > 8 && node->n_inputs > 8 && node->inputs[8] >= 0 && !b) return false;
    if (b && (b->dtype != TDM_INT32 || b->count != s->M)) return false;
    tdm_dtype yt = in[7] ? in[7]->dtype : TDM_UINT8;
    s->yt = yt == TDM_INT8 ? dnnl_s8 : dnnl_u8;
    s->w = w;
    if (!dn_q8_requant(s->base.alloc, xs, ws, ys, s->M, b, s->M, &s->oscale, &s->bias))
        return false;
    if (s->xzp) {
        s->bias_zp = tdm_alloc(s->base.alloc, (size_t)s->M * sizeof(int32_t) + 1);
        if (!s->bias_zp) return false;
        int64_t per_m = w->count / s->M;
        for (int64_t m = 0; m < s->M; m++) {
            int64_t sum = 0;
            for (int64_t k = 0; k < per_m; k++) sum += ((const int8_t *)w->data)[m * per_m + k];
            int64_t v = (s->bias ? s->bias[m] : 0) - (int64_t)s->xzp * sum;
            if (v < INT32_MIN || v > INT32_MAX) {
                tdm_free(s->base.alloc, s->bias_zp);
                s->bias_zp = NULL;
                break;
            }
            s->bias_zp[m] = (int32_t)v;
        }
    }
    s->clip = dn_q8_clip(node, yt, s->yzp, &s->clo, &s->chi);
    return qc_halves(s, w->data, w->count, w->dims[1]);
}

/* ConvInteger(X, W, x_zero_point?, w_zero_point?) on the same primitives, Y int32 (no output
 * scales, no post-ops). Where it goes (what `inspect --plan` names, else oneDNN's kernel):
 * - W constant, 8-bit, with w_zero_point constant (one value or one per output channel):
 *   W - w_zero_point is folded into int8 weights when every folded value fits int8 (int8 W
 *   with zero point 0, uint8 W with zero point 128 +- its spread, ...); else the loops;
 * - oneDNN's int8 kernels convert the int32 sum to f32 around the bias (and the scales):
 *   exact for integers up to 2^24 only (an all-255 X against 576 weights of 127 measured
 *   1-2 off in padded mode). With bytes in [0, 255] the sum, the bias -xzp * sum(w') and Y
 *   all lie within 255 * max(P, N) (P, N: the sums of a channel's positive and negative
 *   weights), so a channel with 255 * max(P, N) > 2^24 sends the node to the loops;
 * - 2-D: padded mode (X in channels-last padded with the run's zero point, -xzp * sum(w') as
 *   the run's bias), the zero point constant or computed (DynamicQuantizeLinear); int8 X
 *   runs as uint8 (dn_q8_flip_x, zero point + 128);
 * - 1-D / 3-D: a constant (or absent) zero point as oneDNN's source zero point; int8 X as
 *   int8 with VNNI, flipped to uint8 without; a computed zero point there: the loops.
 * Without VNNI, the exact halves of QLinearConv where large bytes can saturate. */
static bool qc_setup_integer(qc_state *s, const tdm_node *node, int n_in,
                             const tdm_tensor *const *in, const char **why) {
    const tdm_tensor *w = n_in > 1 ? in[1] : NULL;
    const tdm_tensor *wz = n_in > 3 && node->n_inputs > 3 && node->inputs[3] >= 0 ? in[3] : NULL;
    *why = "W not a constant 8-bit tensor of rank 3 to 5";
    if (!w || (w->dtype != TDM_INT8 && w->dtype != TDM_UINT8) || w->rank < 3 || w->rank > 5)
        return false;
    s->M = w->dims[0];
    s->group = tdm_attr_int(node, "group", 1);
    *why = "bad group or w_zero_point";
    if (s->M < 1 || s->group < 1 || s->M % s->group) return false;
    if (n_in > 3 && node->n_inputs > 3 && node->inputs[3] >= 0 &&
        (!wz || wz->dtype != w->dtype || (wz->count != 1 && wz->count != s->M)))
        return false;
    bool has_xz = n_in > 2 && node->n_inputs > 2 && node->inputs[2] >= 0;
    s->xzp_rt = has_xz && !in[2];
    if (has_xz && in[2] && !dn_q8_scalar(in[2], &s->xzp)) return false;
    *why = "a computed x_zero_point of a 1-D / 3-D convolution";
    if (s->xzp_rt && w->rank != 4) return false;
    int64_t per_m = w->count / s->M;
    s->wfold = tdm_alloc(s->base.alloc, (size_t)w->count + 1);
    s->wsum = tdm_alloc(s->base.alloc, (size_t)s->M * sizeof(int32_t) + 1);
    if (!s->wfold || !s->wsum) return false;
    for (int64_t m = 0; m < s->M; m++) {
        int32_t z = wz ? (wz->dtype == TDM_INT8 ? ((const int8_t *)wz->data)[wz->count == 1 ? 0 : m]
                                                : ((const uint8_t *)wz->data)[wz->count == 1 ? 0 : m])
                       : 0;
        int64_t pos = 0, neg = 0; /* sums of the positive and of the negative weights */
        for (int64_t k = m * per_m; k < (m + 1) * per_m; k++) {
            int32_t v = (w->dtype == TDM_INT8 ? ((const int8_t *)w->data)[k]
                                              : ((const uint8_t *)w->data)[k]) - z;
            *why = "W - w_zero_point outside int8";
            if (v < -128 || v > 127) return false;
            s->wfold[k] = (int8_t)v;
            if (v > 0) pos += v;
            else neg -= v;
        }
        *why = "a channel's 255 * sum of its positive (or negative) weights above 2^24";
        if (255 * (pos > neg ? pos : neg) > (1 << 24)) return false;
        s->wsum[m] = (int32_t)(pos - neg);
    }
    s->wt = *w;
    s->wt.dtype = TDM_INT8;
    s->wt.data = s->wfold;
    s->w = &s->wt;
    s->yt = dnnl_s32;
    /* int8 X as uint8: always in padded mode (2-D), without VNNI elsewhere */
    s->flip = w->rank == 4 || s->novnni;
    *why = NULL;
    return qc_halves(s, s->wfold, w->count, w->dims[1]);
}

/* The primitive takes an int32 bias: QLinearConv's, or in padded mode x_zero_point's
 * compensation (ConvInteger: always, the run's). */
static bool qc_has_bias(const qc_state *s, const qc_entry *e) {
    return s->integer ? e->pad : (e->pad ? s->bias_zp : s->bias) != NULL;
}

static tdm_status *qc_prepare(const tdm_node *node, int opset, int n_in,
                              const tdm_tensor *const *in, const tdm_allocator *a, void **state) {
    (void)opset;
    qc_state *s;
    TDM_TRY(dn_state_new(a, sizeof *s, sizeof(qc_entry), qc_clear, (dn_state **)&s));
    *state = s;
    s->xl = tdm_attr_int(node, "x_nhwc", 0) != 0;
    s->yl = tdm_attr_int(node, "y_nhwc", 0) != 0;
    s->novnni = !dn_has_vnni();
    s->integer = strcmp(node->op_type, "ConvInteger") == 0;
    const char *why = NULL;
    bool ok = s->integer ? qc_setup_integer(s, node, n_in, in, &why) : qc_setup(s, node, n_in, in);
    if (!s->base.generic && !ok) {
        s->base.generic = true;
        /* (what `inspect --plan` shows for the node) */
        if (why) dn_note_impl(&s->base, "tandem loops (%s)", why);
    }
    return NULL;
}

/* X and Y as NCHW headers (same data): channels-last ones (x_nhwc / y_nhwc) with their dims
 * permuted, so that shapes and geometry read the same in both layouts. */
static void to_nchw_dims(tdm_tensor *t) {
    if (t->rank != 4) return;
    int64_t c = t->dims[3];
    t->dims[3] = t->dims[2];
    t->dims[2] = t->dims[1];
    t->dims[1] = c;
}

static void qc_views(const qc_state *s, const tdm_kernel_ctx *ctx, tdm_tensor *xv, tdm_tensor *yv) {
    *xv = *ctx->in[0];
    *yv = *ctx->out[0];
    if (s->xl) to_nchw_dims(xv);
    if (s->yl) to_nchw_dims(yv);
}

/* Geometry of the node for input x and output y (ONNX pads, auto_pad resolved). */
typedef struct qc_geom {
    int sp;
    dnnl_dims_t strides, dil, pl, pr;
} qc_geom;

static bool qc_geometry(const tdm_node *node, const tdm_tensor *x, const tdm_tensor *w,
                        const tdm_tensor *y, qc_geom *g) {
    int sp = x->rank - 2;
    g->sp = sp;
    size_t ns = 0, nd = 0, np = 0;
    const int64_t *st = tdm_attr_ints(node, "strides", &ns);
    const int64_t *dl = tdm_attr_ints(node, "dilations", &nd);
    const int64_t *pd = tdm_attr_ints(node, "pads", &np);
    const char *ap = tdm_attr_string(node, "auto_pad", "NOTSET");
    for (int d = 0; d < sp; d++) {
        int64_t s = st && ns == (size_t)sp ? st[d] : 1, dd = dl && nd == (size_t)sp ? dl[d] : 1;
        int64_t k = w->dims[2 + d], in = x->dims[2 + d], out = y->dims[2 + d];
        if (s < 1 || dd < 1) return false;
        int64_t pb, pe;
        if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
            int64_t tot = (out - 1) * s + (k - 1) * dd + 1 - in;
            if (tot < 0) tot = 0;
            pb = !strcmp(ap, "SAME_UPPER") ? tot / 2 : tot - tot / 2;
        } else if (!strcmp(ap, "VALID")) {
            pb = 0;
        } else {
            pb = pd && np == 2 * (size_t)sp ? pd[d] : 0;
        }
        /* the end pad that gives exactly `out` (oneDNN checks the output size) */
        pe = (out - 1) * s + (k - 1) * dd + 1 - in - pb;
        g->strides[d] = s;
        g->dil[d] = dd - 1;
        g->pl[d] = pb;
        g->pr[d] = pe;
    }
    return true;
}

static void md_tag(dnnl_memory_desc_t *md, int nd, const int64_t *dims, dnnl_data_type_t dt,
                   dnnl_format_tag_t tag) {
    dnnl_dims_t d;
    for (int i = 0; i < nd; i++) d[i] = dims[i];
    if (dnnl_memory_desc_init_by_tag(md, nd, d, dt, tag) != dnnl_success) memset(md, 0, sizeof *md);
}

static dnnl_format_tag_t tag_plain(int nd) {
    return nd == 3 ? dnnl_abc : nd == 4 ? dnnl_abcd : nd == 5 ? dnnl_abcde : dnnl_abcdef;
}

static dnnl_format_tag_t tag_nhwc(int nd) {
    return nd == 3 ? dnnl_acb : nd == 4 ? dnnl_acdb : dnnl_acdeb;
}

/* md is the dense channels-last layout of its dims. */
static bool is_nhwc(const dnnl_memory_desc_t *md) {
    dnnl_memory_desc_t t;
    if (md->ndims < 3 || md->ndims > 5 ||
        dnnl_memory_desc_init_by_tag(&t, md->ndims, md->dims, md->data_type,
                                     tag_nhwc(md->ndims)) != dnnl_success)
        return false;
    return dnnl_memory_desc_equal(&t, md);
}

#if defined(__SSE2__)
/* 16 x 16 bytes: dst row c = src column c (SSE2, the x86-64 baseline): unpacks of 8, 16, 32
 * and 64 bits, each stage interleaving row pairs twice as far apart. */
static void tr16(const uint8_t *src, int64_t lds, uint8_t *dst, int64_t ldd) {
    __m128i a[16], t[16];
    for (int i = 0; i < 16; i++) a[i] = _mm_loadu_si128((const __m128i *)(src + i * lds));
    for (int k = 0; k < 8; k++) {
        t[2 * k] = _mm_unpacklo_epi8(a[2 * k], a[2 * k + 1]);
        t[2 * k + 1] = _mm_unpackhi_epi8(a[2 * k], a[2 * k + 1]);
    }
    for (int m = 0; m < 4; m++) { /* a[4m + r]: columns 4r..4r+3 of rows 4m..4m+3 */
        a[4 * m] = _mm_unpacklo_epi16(t[4 * m], t[4 * m + 2]);
        a[4 * m + 1] = _mm_unpackhi_epi16(t[4 * m], t[4 * m + 2]);
        a[4 * m + 2] = _mm_unpacklo_epi16(t[4 * m + 1], t[4 * m + 3]);
        a[4 * m + 3] = _mm_unpackhi_epi16(t[4 * m + 1], t[4 * m + 3]);
    }
    for (int q = 0; q < 2; q++) /* t[8q + j]: columns 2j, 2j+1 of rows 8q..8q+7 */
        for (int r = 0; r < 4; r++) {
            t[8 * q + 2 * r] = _mm_unpacklo_epi32(a[8 * q + r], a[8 * q + 4 + r]);
            t[8 * q + 2 * r + 1] = _mm_unpackhi_epi32(a[8 * q + r], a[8 * q + 4 + r]);
        }
    for (int j = 0; j < 8; j++) {
        _mm_storeu_si128((__m128i *)(dst + (2 * j) * ldd), _mm_unpacklo_epi64(t[j], t[8 + j]));
        _mm_storeu_si128((__m128i *)(dst + (2 * j + 1) * ldd), _mm_unpackhi_epi64(t[j], t[8 + j]));
    }
}
#endif

/* dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols (bytes): the NCHW <-> NHWC moves
 * of 8-bit images (oneDNN's reorders of them measured 30-40 ms for 1x32x112x112). 16 x 16
 * tiles with SSE2 where they fit, element by element at the edges (and without SSE2). */
void dn_tr_u8(const uint8_t *src, int64_t rows, int64_t cols, int64_t lds, uint8_t *dst,
                  int64_t ldd) {
    int64_t r16 = 0, c16 = 0;
#if defined(__SSE2__)
    r16 = rows / 16 * 16;
    c16 = cols / 16 * 16;
    for (int64_t i = 0; i < r16; i += 16)
        for (int64_t j = 0; j < c16; j += 16) tr16(src + i * lds + j, lds, dst + j * ldd + i, ldd);
#endif
    for (int64_t i = 0; i < rows; i++) /* the edges: columns >= c16 of every row, then ... */
        for (int64_t j = c16; j < cols; j++) dst[j * ldd + i] = src[i * lds + j];
    for (int64_t i = r16; i < rows; i++) /* ... rows >= r16 of the other columns */
        for (int64_t j = 0; j < c16; j++) dst[j * ldd + i] = src[i * lds + j];
}

void dn_x2_u8(const uint8_t *src, bool nhwc, int64_t C, int64_t G, int64_t n, int64_t plane,
              uint8_t *dst) {
    int64_t Cg = C / G;
    if (!nhwc) {
        for (int64_t g = 0; g < G; g++) {
            dn_tr_u8(src + g * Cg * plane, Cg, n, plane, dst + 2 * g * Cg, 2 * C);
            dn_tr_u8(src + g * Cg * plane, Cg, n, plane, dst + 2 * g * Cg + Cg, 2 * C);
        }
        return;
    }
    for (int64_t j = 0; j < n; j++)
        for (int64_t g = 0; g < G; g++) {
            memcpy(dst + j * 2 * C + 2 * g * Cg, src + j * C + g * Cg, (size_t)Cg);
            memcpy(dst + j * 2 * C + 2 * g * Cg + Cg, src + j * C + g * Cg, (size_t)Cg);
        }
}

/* The primitive for the chunk of `units` output channels from m0, over mb images; with `two`
 * the halves' one (p->conv2, over X' of 2C channels; the exact one built first, the same dst
 * layout). */
static tdm_status *qc_part_build(qc_state *s, qc_entry *e, const qc_geom *g, const tdm_tensor *x,
                                 const tdm_tensor *y, int64_t m0, int64_t units, bool two,
                                 qc_part *p, bool *ok) {
    *ok = false;
    int nd = x->rank;
    int64_t C = x->dims[1] * (two ? 2 : 1), Cg = C / s->group, Mg = s->M / s->group;
    int64_t sdims[5], ddims[5], wdims[6];
    memcpy(sdims, x->dims, sizeof(int64_t) * (size_t)nd);
    memcpy(ddims, y->dims, sizeof(int64_t) * (size_t)nd);
    sdims[0] = ddims[0] = e->mb;
    ddims[1] = units;
    qc_geom gp = *g;
    if (e->pad) {
        sdims[2] = e->Hp;
        sdims[3] = e->Wp;
        /* (a negative end pad -- strides past the last rows, ResNet's stride-2 1x1
         * projections -- stays the primitive's: X is copied whole) */
        for (int d = 0; d < 2; d++) {
            gp.pl[d] = 0;
            gp.pr[d] = g->pr[d] < 0 ? g->pr[d] : 0;
        }
        g = &gp;
    }
    bool has_bias = qc_has_bias(s, e);
    int wnd = nd;
    if (s->group > 1) {
        wnd = nd + 1;
        wdims[0] = s->group;
        wdims[1] = Mg;
        wdims[2] = Cg;
        for (int d = 0; d < g->sp; d++) wdims[3 + d] = s->w->dims[2 + d];
    } else {
        wdims[0] = units;
        wdims[1] = C;
        for (int d = 0; d < g->sp; d++) wdims[2 + d] = s->w->dims[2 + d];
    }
    dnnl_memory_desc_t src, wei, dst, bias;
    sdims[1] = C;
    md_tag(&src, nd, sdims, e->xt, two ? tag_nhwc(nd) : dnnl_format_tag_any);
    md_tag(&wei, wnd, wdims, dnnl_s8, dnnl_format_tag_any);
    md_tag(&dst, nd, ddims, s->yt, dnnl_format_tag_any);
    int64_t bd = units;
    md_tag(&bias, 1, &bd, dnnl_s32, dnnl_a);
    dnnl_convolution_desc_t cd;
    if (dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                   dnnl_convolution_direct, &src, &wei,
                                                   has_bias ? &bias : NULL, &dst, g->strides,
                                                   g->dil, g->pl, g->pr) != dnnl_success)
        return NULL;
    dnnl_primitive_attr_t attr;
    TDM_TRY(dn_attr_new(&attr));
    bool good = s->integer || dnnl_primitive_attr_set_output_scales(attr, units, 1 << 1,
                                                                    s->oscale + m0) == dnnl_success;
    if (good && e->xzp && !e->pad)
        good = dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_SRC, 1, 0, &e->xzp) == dnnl_success;
    if (good) good = dn_attr_q8_out(attr, s->clip, s->clo, s->chi, s->yzp);
    dnnl_primitive_desc_t pd = NULL;
    if (good && dnnl_primitive_desc_create(&pd, &cd, attr, s->base.eng, NULL) != dnnl_success)
        pd = NULL;
    dnnl_primitive_attr_destroy(attr);
    if (!pd || dn_refuse_ref(&s->base, pd)) return NULL;
    dnnl_memory_desc_t psrc;
    dn_query_md(pd, dnnl_query_src_md, &psrc);
    if (two) {
        dnnl_memory_desc_t pdst;
        dn_query_md(pd, dnnl_query_dst_md, &pdst);
        if (!dnnl_memory_desc_equal(&pdst, &p->dst)) {
            dnnl_primitive_desc_destroy(pd);
            return NULL;
        }
        e->src2 = psrc;
        dn_query_md(pd, dnnl_query_weights_md, &p->wei2);
        p->wbytes2 = dn_md_bytes(&p->wei2);
        TDM_TRY(dn_prim_from_pd(pd, &p->conv2));
        dn_note_impl(&s->base, "%s (halves)", dn_prim_impl(&p->conv2));
        *ok = true;
        return NULL;
    }
    dn_query_md(pd, dnnl_query_weights_md, &p->wei);
    dn_query_md(pd, dnnl_query_dst_md, &p->dst);
    if (m0 == 0) {
        e->src = psrc;
    } else if (!dnnl_memory_desc_equal(&psrc, &e->src)) {
        dnnl_primitive_desc_destroy(pd);
        return NULL;
    }
    p->bias = bias;
    /* Y's chunk: [mb, units, spatial] inside the plain [mb, M, spatial] images (y_nhwc:
     * inside the channels-last [mb, spatial, M] ones) */
    dnnl_dims_t dd, ds;
    int64_t st = 1;
    if (s->yl) {
        ds[1] = 1;
        st = s->M;
        for (int i = nd - 1; i >= 2; i--) {
            ds[i] = st;
            st *= ddims[i];
        }
        ds[0] = st;
    }
    for (int i = nd - 1; i >= 0; i--) {
        dd[i] = ddims[i];
        if (s->yl) continue;
        ds[i] = st;
        st *= i == 1 ? s->M : ddims[i];
    }
    if (dnnl_memory_desc_init_by_strides(&p->usr_dst, nd, dd, s->yt, ds) != dnnl_success) {
        dnnl_primitive_desc_destroy(pd);
        return NULL;
    }
    p->units = units;
    p->wbytes = dn_md_bytes(&p->wei);
    TDM_TRY(dn_prim_from_pd(pd, &p->conv));
    p->dst_nhwc = !s->yl && is_nhwc(&p->dst) && !s->integer; /* (own moves: bytes only) */
    if (!p->dst_nhwc) { /* (none when equal: straight into Y) */
        TDM_TRY(dn_reorder_new(s->base.eng, &p->dst, &p->usr_dst, &p->r_dst));
        if (!p->r_dst.p && !dnnl_memory_desc_equal(&p->dst, &p->usr_dst)) return NULL;
    }
    dn_note_impl(&s->base, "%s", dn_prim_impl(&p->conv));
    *ok = true;
    return NULL;
}

static tdm_status *qc_build(dn_state *ds, tdm_kernel_ctx *ctx, dn_entry *he) {
    qc_state *s = (qc_state *)ds;
    qc_entry *e = (qc_entry *)he;
    tdm_tensor xv, yv;
    qc_views(s, ctx, &xv, &yv);
    const tdm_tensor *x = &xv, *y = &yv;
    qc_geom g;
    if (!qc_geometry(ctx->node, x, s->w, y, &g)) return NULL;
    int threads = dn_threads(ctx);
    e->nd = x->rank;
    e->N = x->dims[0];
    e->xt = x->dtype == TDM_INT8 && !s->flip ? dnnl_s8 : dnnl_u8; /* (flip: X ^ 0x80) */
    e->xzp = s->xzp + (s->integer && s->flip && x->dtype == TDM_INT8 ? 128 : 0);
    e->osz = 1;
    for (int d = 2; d < y->rank; d++) e->osz *= y->dims[d];
    e->mb = threads == 1 ? e->N : 1;
    e->chunk = s->group == 1 ? dn_chunk(s->M, 16, e->N, threads) : s->M;
    e->n_chunks = (s->M + e->chunk - 1) / e->chunk;
    e->part = tdm_calloc(s->base.alloc, (size_t)e->n_chunks, sizeof *e->part);
    if (!e->part) return dn_oom(ctx);
    /* (uint8 X only: oneDNN runs int8 X through a +128 shift, which without VNNI halves the
     * weights, and a zero point's compensation then grows the error: 10 steps measured) */
    e->pad = (s->integer || (s->bias_zp && g.pr[0] >= 0 && g.pr[1] >= 0)) && x->rank == 4 &&
             e->xt == dnnl_u8;
    if (s->xzp_rt && !e->pad) return NULL; /* (a computed zero point: padded mode only) */
    bool ok = false;
    for (int attempt = 0; !ok && attempt < 2; attempt++) {
        if (attempt == 1) { /* padded mode refused: the zero point as oneDNN's */
            if (!e->pad || s->xzp_rt) break;
            for (int64_t c = 0; c < e->n_chunks; c++) {
                dn_prim_clear(&e->part[c].conv);
                dn_prim_clear(&e->part[c].r_dst);
                memset(&e->part[c], 0, sizeof e->part[c]);
            }
            e->pad = false;
        }
        if (e->pad) {
            e->H = x->dims[2];
            e->W = x->dims[3];
            e->ph = g.pl[0];
            e->pw = g.pl[1];
            e->Hp = e->H + g.pl[0] + (g.pr[0] > 0 ? g.pr[0] : 0);
            e->Wp = e->W + g.pl[1] + (g.pr[1] > 0 ? g.pr[1] : 0);
        }
        ok = true;
        for (int64_t c = 0; ok && c < e->n_chunks; c++) {
            int64_t m0 = c * e->chunk, units = s->M - m0 < e->chunk ? s->M - m0 : e->chunk;
            TDM_TRY(qc_part_build(s, e, &g, x, y, m0, units, false, &e->part[c], &ok));
        }
        if (ok && e->pad && !is_nhwc(&e->src)) ok = false;
    }
    if (!ok) return NULL;
    /* the exact halves (all chunks or none; without them large bytes saturate as before) */
    e->halves = s->wh && e->xt == dnnl_u8;
    for (int64_t c = 0; e->halves && c < e->n_chunks; c++) {
        int64_t m0 = c * e->chunk, units = s->M - m0 < e->chunk ? s->M - m0 : e->chunk;
        bool two_ok = false;
        TDM_TRY(qc_part_build(s, e, &g, x, y, m0, units, true, &e->part[c], &two_ok));
        e->halves = two_ok;
    }
    for (int64_t c = 0; !e->halves && c < e->n_chunks; c++) dn_prim_clear(&e->part[c].conv2);
    /* X: plain images -> the primitive's layout */
    int64_t sdims[5];
    memcpy(sdims, x->dims, sizeof(int64_t) * (size_t)x->rank);
    sdims[0] = e->mb;
    md_tag(&e->usr_src, x->rank, sdims, e->xt, s->xl ? tag_nhwc(x->rank) : tag_plain(x->rank));
    e->C = x->dims[1];
    e->isz = 1;
    for (int d = 2; d < x->rank; d++) e->isz *= x->dims[d];
    /* own moves: the padded copy, or plain X to a channels-last src (x_nhwc: X is read as it
     * is when the primitive takes channels-last, else reordered) */
    e->src_nhwc = e->pad || (!s->xl && is_nhwc(&e->src) && e->C > 1);
    if (!e->src_nhwc) TDM_TRY(dn_reorder_new(s->base.eng, &e->usr_src, &e->src, &e->r_src));
    e->src_conv = e->src_nhwc || e->r_src.p;
    e->src_bytes = e->src_conv ? (dn_md_bytes(&e->src) + 63) / 64 * 64 : 0;
    if (e->halves && (dn_md_bytes(&e->src2) + 63) / 64 * 64 > e->src_bytes)
        e->src_bytes = (dn_md_bytes(&e->src2) + 63) / 64 * 64;
    size_t tmp = 0;
    for (int64_t i = 0; i < e->n_chunks; i++) {
        const qc_part *p = &e->part[i];
        size_t t = (p->r_dst.p || p->dst_nhwc ? (dn_md_bytes(&p->dst) + 63) / 64 * 64 : 0) +
                   ((p->conv.scratch > p->conv2.scratch ? p->conv.scratch : p->conv2.scratch) +
                    63) / 64 * 64;
        if (t > tmp) tmp = t;
    }
    e->tmp_bytes = tmp;
    /* the constant weights, chunk after chunk, each in its primitive's layout */
    size_t total = 0;
    for (int64_t c = 0; c < e->n_chunks; c++) {
        e->part[c].woff = total;
        total += (e->part[c].wbytes + 63) / 64 * 64;
        e->part[c].woff2 = total;
        if (e->halves) total += (e->part[c].wbytes2 + 63) / 64 * 64;
    }
    e->wbuf = tdm_alloc(s->base.alloc, total + 64);
    if (!e->wbuf) return dn_oom(ctx);
    int64_t per_m = s->w->count / s->M;
    for (int64_t c2 = 0; c2 < e->n_chunks * (e->halves ? 2 : 1); c2++) { /* then the halves' */
        int64_t c = c2 % e->n_chunks;
        bool two = c2 >= e->n_chunks;
        qc_part *p = &e->part[c];
        dnnl_memory_desc_t usr;
        int64_t wd[6];
        int wnd = x->rank;
        if (s->group > 1) {
            wnd++;
            wd[0] = s->group;
            wd[1] = s->M / s->group;
            for (int d = 1; d < s->w->rank; d++) wd[1 + d] = s->w->dims[d];
        } else {
            wd[0] = p->units;
            for (int d = 1; d < s->w->rank; d++) wd[d] = s->w->dims[d];
        }
        if (two) wd[s->group > 1 ? 2 : 1] *= 2; /* [units, 2C, k...] or [G, Mg, 2Cg, k...] */
        md_tag(&usr, wnd, wd, dnnl_s8, tag_plain(wnd));
        const dnnl_memory_desc_t *pw = two ? &p->wei2 : &p->wei;
        dn_prim r;
        TDM_TRY(dn_reorder_new(s->base.eng, &usr, pw, &r));
        const int8_t *wsrc = two ? s->wh + 2 * c * e->chunk * per_m
                                 : (const int8_t *)s->w->data + c * e->chunk * per_m;
        tdm_status *st = dn_exec_reorder(ctx, s->base.eng, &r, &usr, wsrc, pw,
                                         (char *)e->wbuf + (two ? p->woff2 : p->woff));
        dn_prim_clear(&r);
        TDM_TRY(st);
    }
    e->h.generic = false;
    return NULL;
}

typedef struct qc_run {
    qc_state *s;
    qc_entry *e;
    const tdm_tensor *x;
    tdm_tensor *y;
    char *srcbuf, *tmp;
    bool two;            /* X has a byte above s->lim: X' and the halves' primitives */
    int32_t xzp;         /* X's zero point of this run (padding's byte) */
    const int32_t *bias; /* ConvInteger in padded mode: this run's -xzp * sum(w) */
} qc_run;

/* Padded mode: the border of one padded channels-last image (C bytes a pixel) set to the
 * zero point; the interior rows are copied in after (a memset of the whole image first
 * measured ~7% of PP-OCRv4 det's int8 time on the AMX machine). */
static void qc_pad_border(const qc_entry *e, uint8_t *pimg, int64_t C, uint8_t zp) {
    size_t rowb = (size_t)(e->Wp * C);
    int64_t pe = e->Wp - e->W - e->pw;
    memset(pimg, zp, (size_t)e->ph * rowb);
    for (int64_t h = e->ph; h < e->ph + e->H; h++) {
        uint8_t *row = pimg + (size_t)h * rowb;
        memset(row, zp, (size_t)(e->pw * C));
        memset(row + (e->pw + e->W) * C, zp, (size_t)(pe * C));
    }
    memset(pimg + (size_t)(e->ph + e->H) * rowb, zp, (size_t)(e->Hp - e->H - e->ph) * rowb);
}

/* X' = [X, X] channels-last (padded with the zero point in padded mode) for group i. */
static void qc_src2_item(const qc_run *r, int64_t i) {
    const qc_entry *e = r->e;
    size_t es = (size_t)dn_md_bytes(&e->usr_src);
    int64_t C = e->C, C2 = 2 * C;
    int64_t rows = e->pad ? e->H : 1, cols = e->pad ? e->W : e->isz; /* pixels: rows x cols */
    uint8_t *dst = (uint8_t *)r->srcbuf + (size_t)i * e->src_bytes;
    for (int64_t k = 0; k < e->mb; k++) {
        const uint8_t *img = (const uint8_t *)r->x->data + (size_t)i * es + (size_t)(k * C * e->isz);
        uint8_t *pimg = dst + (size_t)(k * C2 * (e->pad ? e->Hp * e->Wp : e->isz));
        if (e->pad) qc_pad_border(e, pimg, C2, (uint8_t)r->xzp);
        for (int64_t h = 0; h < rows; h++) {
            uint8_t *row = pimg + (e->pad ? ((h + e->ph) * e->Wp + e->pw) * C2 : 0);
            dn_x2_u8(img + h * cols * (r->s->xl ? C : 1), r->s->xl, C, r->s->group, cols, e->isz,
                     row);
        }
    }
}

static tdm_status *qc_src_item(void *arg, tdm_kernel_ctx *ctx, int64_t i) {
    qc_run *r = arg;
    if (r->two) {
        qc_src2_item(r, i);
        return NULL;
    }
    size_t es = (size_t)dn_md_bytes(&r->e->usr_src);
    if (r->e->pad) { /* zero point on the border, then each row of pixels in the interior */
        const qc_entry *e = r->e;
        uint8_t *dst = (uint8_t *)r->srcbuf + (size_t)i * e->src_bytes;
        for (int64_t k = 0; k < e->mb; k++) {
            const uint8_t *img = (const uint8_t *)r->x->data + (size_t)i * es +
                                 (size_t)(k * e->C * e->isz);
            uint8_t *pimg = dst + (size_t)(k * e->Hp * e->Wp * e->C);
            qc_pad_border(e, pimg, e->C, (uint8_t)r->xzp);
            for (int64_t h = 0; h < e->H; h++) {
                uint8_t *row = pimg + ((h + e->ph) * e->Wp + e->pw) * e->C;
                if (r->s->xl) /* a row of channels-last pixels */
                    memcpy(row, img + h * e->W * e->C, (size_t)(e->W * e->C));
                else
                    dn_tr_u8(img + h * e->W, e->C, e->W, e->isz, row, e->C);
            }
        }
        return NULL;
    }
    if (r->e->src_nhwc) {
        const qc_entry *e = r->e;
        for (int64_t k = 0; k < e->mb; k++) /* [C, HW] -> [HW, C] per image */
            dn_tr_u8((const uint8_t *)r->x->data + (size_t)i * es + (size_t)(k * e->C * e->isz), e->C,
                  e->isz, e->isz,
                  (uint8_t *)r->srcbuf + (size_t)i * e->src_bytes + (size_t)(k * e->C * e->isz),
                  e->C);
        return NULL;
    }
    return dn_exec_reorder(ctx, r->s->base.eng, &r->e->r_src, &r->e->usr_src,
                           (const char *)r->x->data + (size_t)i * es, &r->e->src,
                           r->srcbuf + (size_t)i * r->e->src_bytes);
}

static tdm_status *qc_conv_item(void *arg, tdm_kernel_ctx *ctx, int64_t i) {
    qc_run *r = arg;
    qc_state *s = r->s;
    qc_entry *e = r->e;
    int64_t img = i / e->n_chunks, c = i % e->n_chunks;
    qc_part *p = &e->part[c];
    int64_t m0 = c * e->chunk;
    const void *src = e->src_conv || r->two ? (const void *)(r->srcbuf + (size_t)img * e->src_bytes)
                                 : (const void *)((const char *)r->x->data +
                                                  (size_t)img * dn_md_bytes(&e->usr_src));
    const char *wei = (const char *)e->wbuf + (r->two ? p->woff2 : p->woff);
    size_t ye = s->integer ? sizeof(int32_t) : 1;
    char *ydst = (char *)r->y->data + (size_t)(img * e->mb * s->M + m0) * (size_t)e->osz * ye;
    char *tmp = r->tmp + (size_t)i * e->tmp_bytes;
    bool via_tmp = p->r_dst.p || p->dst_nhwc;
    if (s->yl) ydst = (char *)r->y->data + (size_t)(img * e->mb * s->M * e->osz + m0) * ye;
    char *dst = via_tmp ? tmp : ydst;
    char *scratch = via_tmp ? tmp + (dn_md_bytes(&p->dst) + 63) / 64 * 64 : tmp;
    dn_arg args[4];
    int n = 0;
    args[n++] = (dn_arg){DNNL_ARG_SRC, r->two ? &e->src2 : &e->src, src};
    args[n++] = (dn_arg){DNNL_ARG_WEIGHTS, r->two ? &p->wei2 : &p->wei, wei};
    args[n++] = (dn_arg){DNNL_ARG_DST, &p->dst, dst};
    const int32_t *bias_v = r->bias ? r->bias : e->pad ? s->bias_zp : s->bias;
    if (qc_has_bias(s, e)) args[n++] = (dn_arg){DNNL_ARG_BIAS, &p->bias, bias_v + m0};
    const dn_prim *conv = r->two ? &p->conv2 : &p->conv;
    TDM_TRY(dn_exec_held(ctx, s->base.eng, conv, n, args, conv->scratch ? scratch : NULL,
                         r->two ? &p->held2 : &p->held));
    if (p->dst_nhwc) { /* [HW, units] -> Y's channels m0.. of each image ([units, HW]) */
        for (int64_t k = 0; k < e->mb; k++)
            dn_tr_u8((const uint8_t *)tmp + (size_t)(k * p->units * e->osz), e->osz, p->units,
                  p->units, (uint8_t *)ydst + (size_t)(k * s->M * e->osz), e->osz);
        return NULL;
    }
    if (!p->r_dst.p) return NULL;
    dn_arg ra[2] = {{DNNL_ARG_FROM, &p->dst, tmp}, {DNNL_ARG_TO, &p->usr_dst, ydst}};
    return dn_exec(ctx, s->base.eng, &p->r_dst, 2, ra);
}

/* The reference kernels (k_misc_quant.c's int_conv, exact int32 sums of widened products,
 * threaded over planes): QLinearConv's, and ConvInteger's (24x faster than the nn family's
 * k_nn_conv.c loops that ran it before: 38 / 910 ms, 1x64x56x56 3x3, 1 thread). */
static tdm_status *qc_generic(tdm_kernel_ctx *ctx, qc_state *s) {
    /* a ConvInteger left to the loops at prepare says why, once (INFO) */
    if (s && s->integer && s->base.generic && s->base.impl[0] && !atomic_flag_test_and_set(&s->told))
        dn_log(ctx, TDM_LOG_INFO, "runs on %s", s->base.impl);
    return s && s->integer ? tdm_misc_conv_integer_run(ctx) : tdm_misc_qlinear_conv_run(ctx);
}

static tdm_status *qc_run_node(tdm_kernel_ctx *ctx) {
    qc_state *s = ctx->state;
    if (!s || (s->xl && ctx->in[0]->rank != 4) || (s->yl && ctx->out[0]->rank != 4))
        return qc_generic(ctx, s);
    tdm_tensor xv, yv;
    qc_views(s, ctx, &xv, &yv);
    const tdm_tensor *x = &xv;
    tdm_tensor *y = &yv;
    if (s->base.generic || (x->dtype != TDM_UINT8 && x->dtype != TDM_INT8) ||
        x->rank != s->w->rank || x->rank < 3 || y->count == 0 ||
        (ctx->n_in > 2 && ctx->in[2] && ctx->in[2]->dtype != x->dtype) || x->dims[1] != s->w->dims[1] * s->group ||
        (x->dtype == TDM_INT8 && s->novnni && !s->flip) || /* (int8 X without a zero point) */
        (s->xzp_rt && (!ctx->in[2] || ctx->in[2]->count != 1)))
        return qc_generic(ctx, s);
    bool flip = s->flip && x->dtype == TDM_INT8;
    int32_t xzp_rt = 0;
    if (s->xzp_rt) dn_q8_scalar(ctx->in[2], &xzp_rt);
    int64_t key[DN_KEY];
    int nk = 0;
    key[nk++] = dn_threads(ctx);
    key[nk++] = x->dtype;
    for (int d = 0; d < x->rank; d++) key[nk++] = x->dims[d];
    dn_entry *he;
    /* oneDNN plans a primitive for the thread count at its creation: 1, as it runs */
    int prev = dn_omp_begin();
    tdm_status *st = dn_cache_get(&s->base, ctx, key, nk, qc_build, &he);
    if (st) {
        dn_omp_end(prev);
        return st;
    }
    qc_entry *e = (qc_entry *)he;
    if (e->h.generic) {
        dn_entry_done(&s->base, he);
        dn_omp_end(prev);
        return qc_generic(ctx, s);
    }
    int64_t groups = e->N / e->mb, items = groups * e->n_chunks;
    size_t fb = flip ? ((size_t)x->count + 63) / 64 * 64 : 0; /* X ^ 0x80 first */
    /* ConvInteger in padded mode: the run's bias -xzp * sum(w) (exact in int32: qc_setup_integer
     * bounds 255 * sum |w| below 2^24) */
    bool run_bias = s->integer && e->pad;
    int32_t xzp = s->xzp_rt ? xzp_rt + (flip ? 128 : 0) : e->xzp;
    size_t bb = run_bias ? ((size_t)s->M * sizeof(int32_t) + 63) / 64 * 64 : 0;
    size_t need = fb + bb + (size_t)groups * e->src_bytes + (size_t)items * e->tmp_bytes;
    bool own = false;
    char *buf = dn_scratch_get(&s->base, ctx, need, &own);
    if (need && !buf) {
        st = dn_oom(ctx);
    } else {
        if (flip) st = dn_q8_flip_x(ctx, x, (uint8_t *)buf, &xv); /* (x is &xv) */
        int32_t *rb = run_bias ? (int32_t *)(buf + fb) : NULL;
        for (int64_t m = 0; rb && m < s->M; m++) rb[m] = -xzp * s->wsum[m];
        char *sb = buf + fb + bb;
        qc_run r = {s, e, x, y, sb, sb + (size_t)groups * e->src_bytes,
                    !st && e->halves && dn_q8_halves_use(s->lim, ctx, x, xzp), xzp, rb};
        if (!st && (e->src_conv || r.two)) st = dn_parallel(ctx, groups, qc_src_item, &r);
        if (!st) st = dn_parallel(ctx, items, qc_conv_item, &r);
    }
    dn_scratch_put(&s->base, ctx, buf, own);
    dn_entry_done(&s->base, he);
    dn_omp_end(prev);
    return st;
}

tdm_status *dn_qconv_prepare(const tdm_node *node, int opset, int n_in,
                             const tdm_tensor *const *in, const tdm_allocator *a, void **state) {
    return qc_prepare(node, opset, n_in, in, a, state);
}
void dn_qconv_release(void *state, const tdm_allocator *a) { qc_release(state, a); }
tdm_status *dn_qconv_run(tdm_kernel_ctx *ctx) { return qc_run_node(ctx); }

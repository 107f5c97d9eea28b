/* CPU kernels, misc family: Resize (opset 10-19) and Upsample (7-9).
 *
 * nearest: every axis gets an index table and the output is a gather (any element size).
 * linear / cubic: separable, one pass per axis whose size or mapping changes; each pass
 * applies per-output-position taps (clamped indices + weights) along that axis. Work is
 * done in float (double for double and 32/64-bit integer tensors). */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/alloc.h"
#include "core/checked.h"

/* ops/misc_resize.c */
tdm_status *tdm_misc_resize_sizes(const tdm_node *node, int opset, int rank,
                                  const int64_t *in_dims, const tdm_tensor *scales,
                                  const tdm_tensor *sizes, int64_t *out_dims, double *scale,
                                  double *out_len);
tdm_status *tdm_misc_resize_run(tdm_kernel_ctx *ctx);
/* k_misc.c */
void tdm_misc_store_f64(tdm_dtype dt, double v, void *dst);
tdm_status *tdm_misc_upsample_run(tdm_kernel_ctx *ctx);

enum { RS_NEAREST, RS_LINEAR, RS_CUBIC };
enum { CT_HALF_PIXEL, CT_PYTORCH, CT_ALIGN, CT_ASYM, CT_TF_NN, CT_TF_CROP, CT_HALF_SYM };
enum { NM_FLOOR_PREF, NM_CEIL_PREF, NM_FLOOR, NM_CEIL, NM_SIMPLE };

typedef struct rs_params {
    int mode, ctm, nearest;
    double cubic_a, extrap;
    bool exclude_outside, antialias;
} rs_params;

typedef struct rs_axis {
    int64_t in_len, out_len;
    int taps;             /* 0: identity along this axis (linear/cubic passes skip it) */
    int64_t *idx;         /* [out_len * taps] (nearest: [out_len], -1 = extrapolate) */
    double *w;            /* [out_len * taps] */
    unsigned char *ext;   /* [out_len]: 1 = extrapolation value (tf_crop_and_resize) */
} rs_axis;

static int lookup(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

static tdm_status *read_params(const tdm_kernel_ctx *ctx, bool legacy, rs_params *p) {
    const tdm_node *n = ctx->node;
    const char *mode = tdm_attr_string(n, "mode", "nearest");
    static const char *const modes[] = {"nearest", "linear", "cubic", "bilinear", "trilinear"};
    int m = lookup(mode, modes, 5);
    if (m < 0 || (legacy && m == RS_CUBIC))
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "unsupported mode '%s'", mode);
    p->mode = m >= 3 ? RS_LINEAR : m;
    p->cubic_a = -0.75;
    p->extrap = 0;
    p->exclude_outside = false;
    p->antialias = false;
    if (legacy) {
        p->ctm = CT_ASYM;
        p->nearest = NM_SIMPLE;
        return NULL;
    }
    static const char *const ctms[] = {"half_pixel", "pytorch_half_pixel", "align_corners",
                                       "asymmetric", "tf_half_pixel_for_nn",
                                       "tf_crop_and_resize", "half_pixel_symmetric"};
    const char *ct = tdm_attr_string(n, "coordinate_transformation_mode", "half_pixel");
    p->ctm = lookup(ct, ctms, 7);
    if (p->ctm < 0)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "unknown coordinate_transformation_mode '%s'", ct);
    static const char *const nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    const char *nm = tdm_attr_string(n, "nearest_mode", "round_prefer_floor");
    p->nearest = lookup(nm, nms, 4);
    if (p->nearest < 0)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "unknown nearest_mode '%s'", nm);
    p->cubic_a = tdm_attr_float(n, "cubic_coeff_a", -0.75f);
    p->exclude_outside = tdm_attr_int(n, "exclude_outside", 0) != 0;
    p->extrap = tdm_attr_float(n, "extrapolation_value", 0.0f);
    p->antialias = ctx->opset >= 18 && tdm_attr_int(n, "antialias", 0) != 0;
    if (p->antialias && p->mode == RS_NEAREST)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "antialias needs linear or cubic mode");
    return NULL;
}

static double src_coord(const rs_params *p, double x, double scale, int64_t in_len,
                        double out_len, int64_t out_int, double r0, double r1) {
    double in = (double)in_len;
    switch (p->ctm) {
    case CT_ALIGN: return out_len == 1 ? 0 : x * (in - 1) / (out_len - 1);
    case CT_ASYM: return x / scale;
    case CT_TF_NN: return (x + 0.5) / scale;
    case CT_PYTORCH: return out_len > 1 ? (x + 0.5) / scale - 0.5 : 0;
    case CT_TF_CROP:
        if (out_len == 1) return (r1 - r0) * (in - 1) / 2 + r0 * (in - 1);
        return x * (r1 - r0) * (in - 1) / (out_len - 1) + r0 * (in - 1);
    case CT_HALF_SYM: {
        double adj = (double)out_int / out_len;
        return in / 2 * (1 - adj) + (x + 0.5) / scale - 0.5;
    }
    default: return (x + 0.5) / scale - 0.5;
    }
}

static double cubic_w(double t, double a) {
    t = fabs(t);
    if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
    if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
    return 0;
}

/* Fills one axis's table. */
static tdm_status *plan_axis(tdm_kernel_ctx *ctx, const rs_params *p, rs_axis *ax, double scale,
                             double out_len, double r0, double r1) {
    int64_t in = ax->in_len, out = ax->out_len;
    int taps = 1;
    double aa = 1;
    if (p->mode != RS_NEAREST) {
        taps = p->mode == RS_LINEAR ? 2 : 4;
        if (p->antialias && scale < 1) {
            aa = scale;
            double start = floor((p->mode == RS_LINEAR ? -1.0 : -2.0) / scale) + 1;
            double t = 2 - 2 * start;
            if (t > 4.0 * (double)in + 8)
                return tdm_node_error(ctx->node, TDM_ERR_LIMIT, "antialias filter is too wide");
            taps = (int)t;
        }
    }
    ax->taps = taps;
    size_t n;
    if (!tdm_mul_size((size_t)out, (size_t)taps, &n) || n > ((size_t)1 << 34))
        return tdm_node_error(ctx->node, TDM_ERR_LIMIT, "resize tables too large");
    ax->idx = tdm_kscratch(ctx, (n + 1) * sizeof(int64_t));
    ax->w = tdm_kscratch(ctx, (n + 1) * sizeof(double));
    ax->ext = p->ctm == CT_TF_CROP ? tdm_kscratch(ctx, (size_t)out + 1) : NULL;
    if (!ax->idx || !ax->w || (p->ctm == CT_TF_CROP && !ax->ext))
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in Resize");
    double lim = (double)in + taps + 2;
    for (int64_t o = 0; o < out; o++) {
        double x = src_coord(p, (double)o, scale, in, out_len, out, r0, r1);
        if (ax->ext) ax->ext[o] = (x < 0 || x > (double)(in - 1)) ? 1 : 0;
        if (!(x > -lim)) x = -lim; /* also catches NaN */
        if (x > lim) x = lim;
        double fl = floor(x), r;
        int64_t base;
        if (x == fl) {
            base = (int64_t)fl - 1;
            r = 1;
        } else {
            base = (int64_t)fl;
            r = x - fl;
        }
        int64_t *ix = ax->idx + o * taps;
        double *w = ax->w + o * taps;
        if (p->mode == RS_NEAREST) {
            bool up;
            switch (p->nearest) {
            case NM_FLOOR_PREF: up = r == 1 || r > 0.5; break;
            case NM_CEIL_PREF: up = r >= 0.5; break;
            case NM_FLOOR: up = r == 1; break;
            case NM_CEIL: up = true; break;
            default: up = scale < 1 ? true : r == 1; break;
            }
            int64_t i = base + (up ? 1 : 0);
            ix[0] = i < 0 ? 0 : i >= in ? in - 1 : i;
            w[0] = 1;
            continue;
        }
        int k0 = 1 - taps / 2;
        double sum = 0;
        for (int k = 0; k < taps; k++) {
            double t = ((double)(k0 + k) - r) * aa;
            w[k] = p->mode == RS_LINEAR ? fmax(0.0, 1 - fabs(t)) : cubic_w(t, p->cubic_a);
            ix[k] = base + k0 + k;
            sum += w[k];
        }
        if (aa != 1 && sum != 0)
            for (int k = 0; k < taps; k++) w[k] /= sum;
        if (p->exclude_outside) {
            sum = 0;
            for (int k = 0; k < taps; k++) {
                if (ix[k] < 0 || ix[k] >= in) w[k] = 0;
                sum += w[k];
            }
            if (sum != 0)
                for (int k = 0; k < taps; k++) w[k] /= sum;
        }
        for (int k = 0; k < taps; k++) ix[k] = ix[k] < 0 ? 0 : ix[k] >= in ? in - 1 : ix[k];
    }
    return NULL;
}

/* ---- nearest: gather ---- */

typedef struct nn_job {
    const char *src;
    char *dst;
    int rank;
    size_t es;
    const int64_t *odims, *istr;
    rs_axis *ax;
    const char *fill; /* extrapolation value as one element */
} nn_job;

static void nn_rows(void *arg, int64_t b, int64_t e) {
    const nn_job *j = arg;
    int r = j->rank;
    const rs_axis *last = &j->ax[r - 1];
    int64_t ol = j->odims[r - 1];
    for (int64_t row = b; row < e; row++) {
        int64_t rem = row, off = 0;
        bool ext = false;
        for (int a = r - 2; a >= 0; a--) {
            int64_t c = rem % j->odims[a];
            rem /= j->odims[a];
            off += j->ax[a].idx[c] * j->istr[a];
            if (j->ax[a].ext && j->ax[a].ext[c]) ext = true;
        }
        const char *s = j->src + (size_t)off * j->es;
        char *d = j->dst + (size_t)row * (size_t)ol * j->es;
        const int64_t *ix = last->idx;
        switch (j->es) {
        case 1:
            for (int64_t i = 0; i < ol; i++) d[i] = s[ix[i]];
            break;
        case 2:
            for (int64_t i = 0; i < ol; i++) ((uint16_t *)d)[i] = ((const uint16_t *)s)[ix[i]];
            break;
        case 4:
            for (int64_t i = 0; i < ol; i++) ((uint32_t *)d)[i] = ((const uint32_t *)s)[ix[i]];
            break;
        default:
            for (int64_t i = 0; i < ol; i++) ((uint64_t *)d)[i] = ((const uint64_t *)s)[ix[i]];
            break;
        }
        if (!j->fill) continue;
        for (int64_t i = 0; i < ol; i++)
            if (ext || (last->ext && last->ext[i])) memcpy(d + (size_t)i * j->es, j->fill, j->es);
    }
}

/* Nearest with the last axis unchanged (a channel-blocked tensor [N, C/B, H, W, B] upsampled
 * in H and W): whole last-axis rows are copied, and the source offset is worked out once per
 * output row of the second-to-last axis. */
static void nn_planes(void *arg, int64_t b, int64_t e) {
    const nn_job *j = arg;
    int r = j->rank;
    const rs_axis *ax2 = &j->ax[r - 2];
    int64_t ol = j->odims[r - 1], o2 = j->odims[r - 2];
    size_t rowb = (size_t)ol * j->es, str2 = (size_t)j->istr[r - 2] * j->es;
    for (int64_t row = b; row < e; row++) {
        int64_t rem = row, off = 0;
        for (int a = r - 3; a >= 0; a--) {
            int64_t c = rem % j->odims[a];
            rem /= j->odims[a];
            off += j->ax[a].idx[c] * j->istr[a];
        }
        const char *s = j->src + (size_t)off * j->es;
        char *d = j->dst + (size_t)row * (size_t)o2 * rowb;
        for (int64_t i = 0; i < o2; i++) memcpy(d + (size_t)i * rowb, s + (size_t)ax2->idx[i] * str2, rowb);
    }
}

/* The last axis is copied as it is (nearest, no extrapolation): nn_planes applies. */
static bool last_axis_ident(const rs_axis *ax, int rank) {
    const rs_axis *l = &ax[rank - 1];
    if (rank < 3 || l->in_len != l->out_len || l->ext || ax[rank - 2].ext) return false;
    for (int64_t i = 0; i < l->out_len; i++)
        if (l->idx[i] != i) return false;
    return true;
}

/* Nearest upsampling by whole factors of the last two axes, the others kept (YOLO's 2x
 * Resize): each input row becomes one output row (each element repeated kw times), copied
 * kh times; no index arithmetic per row (nn_rows' divisions cost 6x ONNX Runtime's time). */
typedef struct nn_rep_job {
    const char *src;
    char *dst;
    size_t es;
    int64_t h, w, kh, kw;
} nn_rep_job;

static void nn_rep_rows(void *arg, int64_t b, int64_t e) {
    const nn_rep_job *j = arg;
    int64_t ow = j->w * j->kw;
    size_t orow = (size_t)ow * j->es;
    for (int64_t row = b; row < e; row++) { /* row = plane * h + input row */
        int64_t pl = row / j->h, ih = row % j->h;
        const char *s = j->src + (size_t)row * (size_t)j->w * j->es;
        char *d = j->dst + ((size_t)(pl * j->h + ih) * (size_t)j->kh) * orow;
        if (j->es == 4) {
            const uint32_t *s4 = (const uint32_t *)s;
            uint32_t *d4 = (uint32_t *)d;
            if (j->kw == 2)
                for (int64_t i = 0; i < j->w; i++) d4[2 * i] = d4[2 * i + 1] = s4[i];
            else
                for (int64_t i = 0; i < j->w; i++)
                    for (int64_t t = 0; t < j->kw; t++) d4[i * j->kw + t] = s4[i];
        } else {
            for (int64_t i = 0; i < j->w; i++)
                for (int64_t t = 0; t < j->kw; t++)
                    memcpy(d + (size_t)(i * j->kw + t) * j->es, s + (size_t)i * j->es, j->es);
        }
        for (int64_t t = 1; t < j->kh; t++) memcpy(d + (size_t)t * orow, d, orow);
    }
}

/* The factor k when axis ax maps output c to input c / k (k >= 1, out = k * in, nothing
 * extrapolated); 0 otherwise. */
static int64_t nn_repeat_factor(const rs_axis *ax) {
    if (ax->in_len < 1 || ax->out_len % ax->in_len || !ax->idx) return 0;
    int64_t k = ax->out_len / ax->in_len;
    for (int64_t c = 0; c < ax->out_len; c++)
        if (ax->idx[c] != c / k || (ax->ext && ax->ext[c])) return 0;
    return k;
}

static bool nn_repeat(tdm_kernel_ctx *ctx, const rs_axis *ax, int rank, const tdm_tensor *x,
                      tdm_tensor *y) {
    if (rank < 2) return false;
    for (int a = 0; a < rank - 2; a++)
        if (nn_repeat_factor(&ax[a]) != 1) return false;
    int64_t kh = nn_repeat_factor(&ax[rank - 2]), kw = nn_repeat_factor(&ax[rank - 1]);
    if (kh < 1 || kw < 1) return false;
    nn_rep_job j = {x->data, y->data, tdm_dtype_elem_size(x->dtype), x->dims[rank - 2],
                    x->dims[rank - 1], kh, kw};
    int64_t rows = x->count / j.w;
    tdm_parallel_for(ctx->pool, rows, 4096 / (j.w * kh * kw + 1) + 1, nn_rep_rows, &j);
    return true;
}

/* ---- linear / cubic: separable passes, templated on the work type ---- */

#define RS_PASS(W, NAME)                                                                     \
    typedef struct NAME##_job {                                                              \
        const W *src;                                                                        \
        W *dst;                                                                              \
        int64_t in_len, out_len, inner;                                                      \
        int taps;                                                                            \
        const int64_t *idx;                                                                  \
        const W *w;                                                                          \
        const unsigned char *ext;                                                            \
        W extv;                                                                              \
    } NAME##_job;                                                                            \
    /* inner == 1: units are rows of the axis */                                             \
    static void NAME##_rows(void *arg, int64_t b, int64_t e) {                               \
        const NAME##_job *j = arg;                                                           \
        for (int64_t u = b; u < e; u++) {                                                    \
            const W *s = j->src + u * j->in_len;                                             \
            W *d = j->dst + u * j->out_len;                                                  \
            for (int64_t o = 0; o < j->out_len; o++) {                                       \
                const int64_t *ix = j->idx + o * j->taps;                                    \
                const W *w = j->w + o * j->taps;                                             \
                W acc = 0;                                                                   \
                for (int k = 0; k < j->taps; k++) acc += w[k] * s[ix[k]];                    \
                d[o] = (j->ext && j->ext[o]) ? j->extv : acc;                                \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
    /* inner > 1: units are (outer, output position) pairs; vectorized over inner */         \
    static void NAME##_planes(void *arg, int64_t b, int64_t e) {                             \
        const NAME##_job *j = arg;                                                           \
        int64_t in = j->inner;                                                               \
        for (int64_t u = b; u < e; u++) {                                                    \
            int64_t ou = u / j->out_len, o = u % j->out_len;                                 \
            const W *s = j->src + ou * j->in_len * in;                                       \
            W *d = j->dst + u * in;                                                          \
            if (j->ext && j->ext[o]) {                                                       \
                for (int64_t i = 0; i < in; i++) d[i] = j->extv;                             \
                continue;                                                                    \
            }                                                                                \
            const int64_t *ix = j->idx + o * j->taps;                                        \
            const W *w = j->w + o * j->taps;                                                 \
            const W *r0 = s + ix[0] * in;                                                    \
            W w0 = w[0];                                                                     \
            for (int64_t i = 0; i < in; i++) d[i] = w0 * r0[i];                              \
            for (int k = 1; k < j->taps; k++) {                                              \
                const W *rk = s + ix[k] * in;                                                \
                W wk = w[k];                                                                 \
                for (int64_t i = 0; i < in; i++) d[i] += wk * rk[i];                         \
            }                                                                                \
        }                                                                                    \
    }

RS_PASS(float, pf)
RS_PASS(double, pd)

/* Converts n elements of dtype dt to the work type (float or double). */
static void to_work(tdm_dtype dt, const void *src, int64_t n, bool dbl, void *dst) {
#define CV(T)                                                                                \
    for (int64_t i = 0; i < n; i++) {                                                        \
        if (dbl) ((double *)dst)[i] = (double)((const T *)src)[i];                           \
        else ((float *)dst)[i] = (float)((const T *)src)[i];                                 \
    }                                                                                        \
    break
    switch (dt) {
    case TDM_FLOAT: CV(float);
    case TDM_DOUBLE: CV(double);
    case TDM_INT8: CV(int8_t);
    case TDM_UINT8: CV(uint8_t);
    case TDM_INT16: CV(int16_t);
    case TDM_UINT16: CV(uint16_t);
    case TDM_INT32: CV(int32_t);
    case TDM_UINT32: CV(uint32_t);
    case TDM_INT64: CV(int64_t);
    case TDM_UINT64: CV(uint64_t);
    case TDM_FLOAT16:
        for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = tdm_f16_to_f32(((const uint16_t *)src)[i]);
        break;
    case TDM_BFLOAT16:
        for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = tdm_bf16_to_f32(((const uint16_t *)src)[i]);
        break;
    default: break;
    }
#undef CV
}

static void from_work(tdm_dtype dt, const void *src, int64_t n, bool dbl, void *dst) {
    size_t es = tdm_dtype_elem_size(dt);
    if (dt == TDM_FLOAT && !dbl) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    if (dt == TDM_FLOAT16 && !dbl) {
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = tdm_f32_to_f16(((const float *)src)[i]);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        double v = dbl ? ((const double *)src)[i] : (double)((const float *)src)[i];
        tdm_misc_store_f64(dt, v, (char *)dst + (size_t)i * es);
    }
}

static tdm_status *run_separable(tdm_kernel_ctx *ctx, const rs_params *p, rs_axis *ax, int rank,
                                 const tdm_tensor *x, tdm_tensor *y) {
    tdm_dtype dt = x->dtype;
    bool dbl = dt == TDM_DOUBLE || dt == TDM_INT32 || dt == TDM_INT64 || dt == TDM_UINT32 ||
               dt == TDM_UINT64;
    size_t ws = dbl ? sizeof(double) : sizeof(float);
    bool native = (dt == TDM_FLOAT && !dbl) || dt == TDM_DOUBLE;
    int last = -1;
    for (int a = 0; a < rank; a++)
        if (ax[a].taps) last = a;
    if (last < 0) {
        memcpy(y->data, x->data, x->nbytes);
        return NULL;
    }
    const void *cur = x->data;
    void *owned = NULL;
    if (!native) {
        owned = tdm_kscratch(ctx, (size_t)x->count * ws + 64);
        if (!owned) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in Resize");
        to_work(dt, x->data, x->count, dbl, owned);
        cur = owned;
    }
    int64_t dims[TDM_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    for (int a = 0; a <= last; a++) {
        if (!ax[a].taps) continue;
        int64_t outer = 1, inner = 1;
        for (int i = 0; i < a; i++) outer *= dims[i];
        for (int i = a + 1; i < rank; i++) inner *= dims[i];
        int64_t on = outer * ax[a].out_len * inner;
        void *dst;
        if (a == last && native) {
            dst = y->data;
        } else {
            dst = tdm_kscratch(ctx, (size_t)on * ws + 64);
            if (!dst) {
                tdm_free(ctx->alloc, owned);
                return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in Resize");
            }
        }
        size_t nw = (size_t)ax[a].out_len * (size_t)ax[a].taps;
        int64_t units = inner == 1 ? outer : outer * ax[a].out_len;
        int64_t per = (inner == 1 ? ax[a].out_len : inner) * ax[a].taps;
        int64_t grain = per >= 8192 ? 1 : 8192 / (per + 1) + 1;
        if (dbl) {
            pd_job j = {cur, dst, ax[a].in_len, ax[a].out_len, inner, ax[a].taps, ax[a].idx,
                        ax[a].w, ax[a].ext, p->extrap};
            tdm_parallel_for(ctx->pool, units, grain, inner == 1 ? pd_rows : pd_planes, &j);
        } else {
            float *wf = tdm_kscratch(ctx, nw * sizeof(float) + 64);
            if (!wf) {
                if (dst != y->data) tdm_free(ctx->alloc, dst);
                tdm_free(ctx->alloc, owned);
                return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in Resize");
            }
            for (size_t i = 0; i < nw; i++) wf[i] = (float)ax[a].w[i];
            pf_job j = {cur, dst, ax[a].in_len, ax[a].out_len, inner, ax[a].taps, ax[a].idx,
                        wf, ax[a].ext, (float)p->extrap};
            tdm_parallel_for(ctx->pool, units, grain, inner == 1 ? pf_rows : pf_planes, &j);
            tdm_free(ctx->alloc, wf);
        }
        tdm_free(ctx->alloc, owned);
        owned = dst == y->data ? NULL : dst;
        cur = dst;
        dims[a] = ax[a].out_len;
    }
    if (owned) {
        from_work(dt, owned, y->count, dbl, y->data);
        tdm_free(ctx->alloc, owned);
    }
    return NULL;
}

static const tdm_tensor *nonempty(const tdm_kernel_ctx *ctx, int i) {
    if (i >= ctx->n_in || !ctx->in[i] || ctx->in[i]->count == 0) return NULL;
    return ctx->in[i];
}

static tdm_status *resize_common(tdm_kernel_ctx *ctx, bool legacy, const tdm_tensor *scales,
                                 const tdm_tensor *sizes, const tdm_tensor *roi) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    int rank = x->rank;
    rs_params p = {0};
    TDM_TRY(read_params(ctx, legacy, &p));
    int64_t od[TDM_MAX_RANK];
    double sc[TDM_MAX_RANK], ol[TDM_MAX_RANK];
    TDM_TRY(tdm_misc_resize_sizes(ctx->node, ctx->opset, rank, x->dims, scales, sizes, od, sc, ol));
    if (y->rank != rank)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "output rank mismatch");
    for (int a = 0; a < rank; a++)
        if (y->dims[a] != od[a])
            return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "output shape mismatch");
    if (y->count == 0) return NULL;
    if (x->count == 0)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "cannot resize an empty tensor");
    /* roi: [starts..., ends...] over all axes, or over `axes` (Resize-18). */
    double r0[TDM_MAX_RANK], r1[TDM_MAX_RANK];
    for (int a = 0; a < rank; a++) {
        r0[a] = 0;
        r1[a] = 1;
    }
    if (p.ctm == CT_TF_CROP) {
        size_t na = 0;
        const int64_t *axes = ctx->opset >= 18 ? tdm_attr_ints(ctx->node, "axes", &na) : NULL;
        int n = axes ? (int)na : rank;
        if (!roi || roi->count != 2 * n)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "tf_crop_and_resize needs roi with %d values", 2 * n);
        for (int i = 0; i < n; i++) {
            int a = i;
            if (axes) TDM_TRY(tdm_norm_axis(ctx->node, axes[i], rank, &a));
            r0[a] = tdm_tensor_get_f64(roi, i);
            r1[a] = tdm_tensor_get_f64(roi, n + i);
        }
    }
    rs_axis ax[TDM_MAX_RANK];
    memset(ax, 0, sizeof ax);
    tdm_status *st = NULL;
    for (int a = 0; a < rank && !st; a++) {
        ax[a].in_len = x->dims[a];
        ax[a].out_len = od[a];
        bool ident = od[a] == x->dims[a] && fabs(sc[a] - 1) <= 1e-9 &&
                     (p.ctm != CT_TF_CROP || (fabs(r0[a]) <= 1e-9 && fabs(r1[a] - 1) <= 1e-9));
        if (ident && p.mode != RS_NEAREST) continue;
        st = plan_axis(ctx, &p, &ax[a], sc[a], ol[a], r0[a], r1[a]);
    }
    if (!st) {
        if (p.mode == RS_NEAREST && p.ctm != CT_TF_CROP && nn_repeat(ctx, ax, rank, x, y)) {
            /* done */
        } else if (p.mode == RS_NEAREST) {
            int64_t istr[TDM_MAX_RANK];
            tdm_strides(rank, x->dims, istr);
            char fill[8];
            tdm_misc_store_f64(x->dtype, p.extrap, fill);
            nn_job j = {x->data, y->data, rank, tdm_dtype_elem_size(x->dtype), y->dims, istr, ax,
                        p.ctm == CT_TF_CROP ? fill : NULL};
            int64_t rows = y->count / y->dims[rank - 1];
            int64_t grain = 4096 / (y->dims[rank - 1] + 1) + 1;
            if (!j.fill && last_axis_ident(ax, rank)) {
                int64_t plane = y->dims[rank - 1] * y->dims[rank - 2];
                tdm_parallel_for(ctx->pool, y->count / plane, 4096 / (plane + 1) + 1, nn_planes, &j);
            } else {
                tdm_parallel_for(ctx->pool, rows, grain, nn_rows, &j);
            }
        } else {
            st = run_separable(ctx, &p, ax, rank, x, y);
        }
    }
    for (int a = 0; a < rank; a++) {
        tdm_free(ctx->alloc, ax[a].idx);
        tdm_free(ctx->alloc, ax[a].w);
        tdm_free(ctx->alloc, ax[a].ext);
    }
    return st;
}

tdm_status *tdm_misc_resize_run(tdm_kernel_ctx *ctx) {
    if (ctx->opset < 11) return resize_common(ctx, true, nonempty(ctx, 1), NULL, NULL);
    return resize_common(ctx, false, nonempty(ctx, 2), nonempty(ctx, 3), nonempty(ctx, 1));
}

tdm_status *tdm_misc_upsample_run(tdm_kernel_ctx *ctx) {
    if (ctx->opset >= 9) return resize_common(ctx, true, nonempty(ctx, 1), NULL, NULL);
    size_t n = 0;
    const float *s = tdm_attr_floats(ctx->node, "scales", &n);
    if (!s || n > TDM_MAX_RANK)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "bad 'scales' attribute");
    int64_t d = (int64_t)n;
    tdm_tensor t = {.dtype = TDM_FLOAT, .rank = 1, .dims = {d}, .count = d,
                    .nbytes = n * sizeof(float), .data = (void *)s};
    return resize_common(ctx, true, &t, NULL, NULL);
}

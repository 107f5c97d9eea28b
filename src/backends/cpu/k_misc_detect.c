/* CPU kernels, misc family: detection and sampling ops (NonMaxSuppression, RoiAlign,
 * GridSample). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/alloc.h"
#include "core/checked.h"

tdm_status *tdm_misc_nms_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_roialign_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_gridsample_run(tdm_kernel_ctx *ctx);

/* ---- NonMaxSuppression ---- */

typedef struct nms_cand {
    float score;
    int64_t idx;
} nms_cand;

static int nms_cmp(const void *a, const void *b) {
    const nms_cand *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx ? 1 : 0;
}

/* Box as (ymin, xmin, ymax, xmax, area). */
static void nms_box(const tdm_tensor *t, int64_t off, bool center, float *b) {
    float v[4];
    for (int i = 0; i < 4; i++) v[i] = (float)tdm_tensor_get_f64(t, off + i);
    if (center) {
        float hw = v[2] / 2, hh = v[3] / 2;
        b[0] = v[1] - hh;
        b[1] = v[0] - hw;
        b[2] = v[1] + hh;
        b[3] = v[0] + hw;
    } else {
        b[0] = fminf(v[0], v[2]);
        b[1] = fminf(v[1], v[3]);
        b[2] = fmaxf(v[0], v[2]);
        b[3] = fmaxf(v[1], v[3]);
    }
    b[4] = (b[2] - b[0]) * (b[3] - b[1]);
}

static bool nms_suppress(const float *a, const float *b, float thr) {
    float ix0 = fmaxf(a[1], b[1]), ix1 = fminf(a[3], b[3]);
    if (ix1 <= ix0) return false;
    float iy0 = fmaxf(a[0], b[0]), iy1 = fminf(a[2], b[2]);
    if (iy1 <= iy0) return false;
    float inter = (ix1 - ix0) * (iy1 - iy0);
    if (inter <= 0) return false;
    float uni = a[4] + b[4] - inter;
    if (a[4] <= 0 || b[4] <= 0 || uni <= 0) return false;
    return inter / uni > thr;
}

tdm_status *tdm_misc_nms_run(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *boxes = ctx->in[0], *scores = ctx->in[1];
    if (boxes->rank != 3 || boxes->dims[2] != 4 || scores->rank != 3 ||
        scores->dims[0] != boxes->dims[0] || scores->dims[2] != boxes->dims[1])
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "boxes [N, B, 4] and scores [N, C, B] do not match");
    int64_t nb = boxes->dims[0], nc = scores->dims[1], n = boxes->dims[1];
    const tdm_tensor *t_max = ctx->n_in > 2 ? ctx->in[2] : NULL;
    const tdm_tensor *t_iou = ctx->n_in > 3 ? ctx->in[3] : NULL;
    const tdm_tensor *t_score = ctx->n_in > 4 ? ctx->in[4] : NULL;
    int64_t max_out = t_max && t_max->count > 0 ? tdm_tensor_get_i64(t_max, 0) : 0;
    float iou = t_iou && t_iou->count > 0 ? (float)tdm_tensor_get_f64(t_iou, 0) : 0.0f;
    bool has_score = t_score && t_score->count > 0;
    float sthr = has_score ? (float)tdm_tensor_get_f64(t_score, 0) : 0.0f;
    if (iou < 0 || iou > 1)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "iou_threshold %g is not in [0, 1]",
                              (double)iou);
    bool center = tdm_attr_int(node, "center_point_box", 0) != 0;
    if (max_out < 0) max_out = 0;
    if (max_out > n) max_out = n;
    int64_t cap;
    if (!tdm_mul_i64(nb, nc, &cap) || !tdm_mul_i64(cap, max_out, &cap) || cap > ((int64_t)1 << 32))
        return tdm_node_error(node, TDM_ERR_LIMIT, "too many candidate boxes");
    size_t nbox = (size_t)n;
    float *bx = tdm_kscratch(ctx, nbox * 5 * sizeof(float) + 64);
    nms_cand *cand = tdm_kscratch(ctx, nbox * sizeof(nms_cand) + 64);
    int64_t *sel = tdm_kscratch(ctx, (size_t)max_out * sizeof(int64_t) + 64);
    int64_t *res = tdm_kscratch(ctx, (size_t)cap * 3 * sizeof(int64_t) + 64);
    tdm_status *st = NULL;
    if (!bx || !cand || !sel || !res) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in NonMaxSuppression");
        goto done;
    }
    int64_t k = 0;
    for (int64_t b = 0; b < nb && max_out > 0; b++) {
        for (int64_t i = 0; i < n; i++) nms_box(boxes, (b * n + i) * 4, center, bx + i * 5);
        for (int64_t c = 0; c < nc; c++) {
            int64_t m = 0, off = (b * nc + c) * n;
            for (int64_t i = 0; i < n; i++) {
                float s = (float)tdm_tensor_get_f64(scores, off + i);
                if (has_score && !(s > sthr)) continue;
                cand[m].score = s;
                cand[m].idx = i;
                m++;
            }
            qsort(cand, (size_t)m, sizeof *cand, nms_cmp);
            int64_t ns = 0;
            for (int64_t i = 0; i < m && ns < max_out; i++) {
                const float *cb = bx + cand[i].idx * 5;
                bool keep = true;
                for (int64_t j = 0; j < ns && keep; j++)
                    if (nms_suppress(cb, bx + sel[j] * 5, iou)) keep = false;
                if (!keep) continue;
                sel[ns++] = cand[i].idx;
                res[k * 3] = b;
                res[k * 3 + 1] = c;
                res[k * 3 + 2] = cand[i].idx;
                k++;
            }
        }
    }
    int64_t dims[2] = {k, 3};
    st = ctx->alloc_output(ctx, 0, TDM_INT64, 2, dims);
    if (!st && k) memcpy(ctx->out[0]->data, res, (size_t)k * 3 * sizeof(int64_t));
done:
    tdm_free(ctx->alloc, bx);
    tdm_free(ctx->alloc, cand);
    tdm_free(ctx->alloc, sel);
    tdm_free(ctx->alloc, res);
    return st;
}

/* ---- RoiAlign ---- */

typedef struct roi_job {
    const void *x;
    void *y;
    const double *rois; /* [R, 4] */
    const int64_t *bidx;
    int64_t c, h, w, oh, ow;
    double scale;
    int64_t sampling;
    bool half_pixel, max_mode, dbl;
} roi_job;

#define ROI_BODY(T)                                                                          \
    {                                                                                        \
        const T *X = (const T *)j->x + j->bidx[r] * j->c * j->h * j->w;                      \
        T *Y = (T *)j->y + r * j->c * j->oh * j->ow;                                         \
        int64_t hw = j->h * j->w, ohw = j->oh * j->ow;                                       \
        for (int64_t ph = 0; ph < j->oh; ph++)                                               \
            for (int64_t pw = 0; pw < j->ow; pw++) {                                         \
                bool first = true;                                                           \
                for (int64_t c = 0; c < j->c; c++) Y[c * ohw + ph * j->ow + pw] = 0;         \
                for (int64_t iy = 0; iy < gh; iy++) {                                        \
                    double yy = y0 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;                 \
                    for (int64_t ix = 0; ix < gw; ix++) {                                    \
                        double xx = x0 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;             \
                        int64_t p1 = 0, p2 = 0, p3 = 0, p4 = 0;                              \
                        double w1 = 0, w2 = 0, w3 = 0, w4 = 0;                               \
                        if (!(yy < -1.0 || yy > (double)j->h || xx < -1.0 ||                 \
                              xx > (double)j->w)) {                                          \
                            double y = yy < 0 ? 0 : yy, x = xx < 0 ? 0 : xx;                 \
                            int64_t yl = (int64_t)y, xl = (int64_t)x, yh, xh;                \
                            if (yl >= j->h - 1) { yh = yl = j->h - 1; y = (double)yl; }      \
                            else yh = yl + 1;                                                \
                            if (xl >= j->w - 1) { xh = xl = j->w - 1; x = (double)xl; }      \
                            else xh = xl + 1;                                                \
                            double ly = y - (double)yl, lx = x - (double)xl, hy = 1 - ly, hx = 1 - lx;       \
                            w1 = hy * hx; w2 = hy * lx; w3 = ly * hx; w4 = ly * lx;          \
                            p1 = yl * j->w + xl; p2 = yl * j->w + xh;                        \
                            p3 = yh * j->w + xl; p4 = yh * j->w + xh;                        \
                        }                                                                    \
                        T W1 = (T)w1, W2 = (T)w2, W3 = (T)w3, W4 = (T)w4;                    \
                        for (int64_t c = 0; c < j->c; c++) {                                 \
                            const T *xc = X + c * hw;                                        \
                            T *yc = Y + c * ohw + ph * j->ow + pw;                           \
                            if (!j->max_mode) {                                              \
                                *yc += W1 * xc[p1] + W2 * xc[p2] + W3 * xc[p3] + W4 * xc[p4]; \
                            } else {                                                         \
                                T v = W1 * xc[p1], t;                                        \
                                t = W2 * xc[p2]; if (t > v) v = t;                           \
                                t = W3 * xc[p3]; if (t > v) v = t;                           \
                                t = W4 * xc[p4]; if (t > v) v = t;                           \
                                if (first || v > *yc) *yc = v;                               \
                            }                                                                \
                        }                                                                    \
                        first = false;                                                       \
                    }                                                                        \
                }                                                                            \
                if (!j->max_mode)                                                            \
                    for (int64_t c = 0; c < j->c; c++)                                       \
                        Y[c * ohw + ph * j->ow + pw] /= (T)cnt;                              \
            }                                                                                \
    }

/* Separable sample tables: one axis's sample positions for every output bin. */
typedef struct roi_tap {
    int64_t lo, hi;
    double l; /* weight of hi; lo gets 1 - l */
    int ok;   /* inside [-1, len] */
} roi_tap;

#define ROI_TAPS_MAX 512

static void roi_axis(double start, double bin, int64_t n_out, int64_t g, int64_t len, roi_tap *t) {
    for (int64_t p = 0; p < n_out; p++)
        for (int64_t i = 0; i < g; i++) {
            roi_tap *e = &t[p * g + i];
            double v = start + (double)p * bin + ((double)i + 0.5) * bin / (double)g;
            e->ok = !(v < -1.0 || v > (double)len);
            e->lo = e->hi = 0;
            e->l = 0;
            if (!e->ok) continue;
            if (v < 0) v = 0;
            e->lo = (int64_t)v;
            if (e->lo >= len - 1) {
                e->lo = e->hi = len - 1;
                v = (double)e->lo;
            } else {
                e->hi = e->lo + 1;
            }
            e->l = v - (double)e->lo;
        }
}

/* Channel-outer loop over the tables (each input plane stays in cache). */
#define ROI_FAST(T)                                                                          \
    {                                                                                        \
        const T *X = (const T *)j->x + j->bidx[r] * j->c * j->h * j->w;                      \
        T *Y = (T *)j->y + r * j->c * j->oh * j->ow;                                         \
        int64_t hw = j->h * j->w, ohw = j->oh * j->ow;                                       \
        for (int64_t c = 0; c < j->c; c++) {                                                 \
            const T *xc = X + c * hw;                                                        \
            T *yc = Y + c * ohw;                                                             \
            for (int64_t ph = 0; ph < j->oh; ph++)                                           \
                for (int64_t pw = 0; pw < j->ow; pw++) {                                     \
                    T acc = 0;                                                               \
                    bool first = true;                                                       \
                    for (int64_t iy = 0; iy < gh; iy++) {                                    \
                        const roi_tap *a = &ty[ph * gh + iy];                                \
                        for (int64_t ix = 0; ix < gw; ix++) {                                \
                            const roi_tap *b2 = &tx[pw * gw + ix];                           \
                            T v = 0;                                                         \
                            if (a->ok && b2->ok) {                                           \
                                T w1 = (T)((1 - a->l) * (1 - b2->l)), w2 = (T)((1 - a->l) * b2->l); \
                                T w3 = (T)(a->l * (1 - b2->l)), w4 = (T)(a->l * b2->l);      \
                                T v1 = w1 * xc[a->lo * j->w + b2->lo];                       \
                                T v2 = w2 * xc[a->lo * j->w + b2->hi];                       \
                                T v3 = w3 * xc[a->hi * j->w + b2->lo];                       \
                                T v4 = w4 * xc[a->hi * j->w + b2->hi];                       \
                                if (!j->max_mode) {                                          \
                                    v = v1 + v2 + v3 + v4;                                   \
                                } else {                                                     \
                                    v = v1;                                                  \
                                    if (v2 > v) v = v2;                                      \
                                    if (v3 > v) v = v3;                                      \
                                    if (v4 > v) v = v4;                                      \
                                }                                                            \
                            }                                                                \
                            if (!j->max_mode) acc += v;                                      \
                            else if (first || v > acc) acc = v;                              \
                            first = false;                                                   \
                        }                                                                    \
                    }                                                                        \
                    yc[ph * j->ow + pw] = j->max_mode ? acc : acc / (T)cnt;                  \
                }                                                                            \
        }                                                                                    \
    }

static void roi_rows(void *arg, int64_t b, int64_t e) {
    const roi_job *j = arg;
    for (int64_t r = b; r < e; r++) {
        double off = j->half_pixel ? 0.5 : 0.0;
        const double *ro = j->rois + r * 4;
        double x0 = ro[0] * j->scale - off, y0 = ro[1] * j->scale - off;
        double x1 = ro[2] * j->scale - off, y1 = ro[3] * j->scale - off;
        double rw = x1 - x0, rh = y1 - y0;
        if (!j->half_pixel) {
            if (rw < 1) rw = 1;
            if (rh < 1) rh = 1;
        }
        double bh = rh / (double)j->oh, bw = rw / (double)j->ow;
        int64_t gh = j->sampling > 0 ? j->sampling : (int64_t)ceil(rh / (double)j->oh);
        int64_t gw = j->sampling > 0 ? j->sampling : (int64_t)ceil(rw / (double)j->ow);
        if (gh < 0) gh = 0;
        if (gw < 0) gw = 0;
        int64_t cnt = gh * gw > 1 ? gh * gw : 1;
        if (j->oh * gh <= ROI_TAPS_MAX && j->ow * gw <= ROI_TAPS_MAX) {
            roi_tap ty[ROI_TAPS_MAX], tx[ROI_TAPS_MAX];
            roi_axis(y0, bh, j->oh, gh, j->h, ty);
            roi_axis(x0, bw, j->ow, gw, j->w, tx);
            if (j->dbl) ROI_FAST(double) else ROI_FAST(float)
        } else if (j->dbl) ROI_BODY(double) else ROI_BODY(float)
    }
}

tdm_status *tdm_misc_roialign_run(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *x = ctx->in[0], *rois = ctx->in[1], *bi = ctx->in[2];
    tdm_tensor *y = ctx->out[0];
    if (x->rank != 4 || rois->rank != 2 || rois->dims[1] != 4 || bi->rank != 1 ||
        bi->dims[0] != rois->dims[0])
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "bad input shapes");
    if (x->dtype != TDM_FLOAT && x->dtype != TDM_DOUBLE)
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED, "RoiAlign supports float and double");
    const char *mode = tdm_attr_string(node, "mode", "avg");
    bool max_mode = !strcmp(mode, "max");
    if (!max_mode && strcmp(mode, "avg"))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "unknown mode '%s'", mode);
    const char *ct = tdm_attr_string(node, "coordinate_transformation_mode",
                                     ctx->opset >= 16 ? "half_pixel" : "output_half_pixel");
    bool half = !strcmp(ct, "half_pixel");
    if (!half && strcmp(ct, "output_half_pixel"))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "unknown coordinate_transformation_mode '%s'", ct);
    int64_t nr = rois->dims[0];
    if (y->count == 0) return NULL;
    if (x->dims[2] == 0 || x->dims[3] == 0)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "X has an empty spatial dimension");
    double *rv = tdm_kscratch(ctx, (size_t)nr * 4 * sizeof(double) + 64);
    int64_t *bv = tdm_kscratch(ctx, (size_t)nr * sizeof(int64_t) + 64);
    tdm_status *st = NULL;
    if (!rv || !bv) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in RoiAlign");
        goto done;
    }
    for (int64_t i = 0; i < nr * 4; i++) {
        rv[i] = tdm_tensor_get_f64(rois, i);
        if (!isfinite(rv[i]) || fabs(rv[i]) > 1e15) {
            st = tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "roi coordinate is not finite");
            goto done;
        }
    }
    for (int64_t i = 0; i < nr; i++) {
        bv[i] = tdm_tensor_get_i64(bi, i);
        if (bv[i] < 0 || bv[i] >= x->dims[0]) {
            st = tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                "batch index %lld is out of range [0, %lld)", (long long)bv[i],
                                (long long)x->dims[0]);
            goto done;
        }
    }
    int64_t sampling = tdm_attr_int(node, "sampling_ratio", 0);
    double scale = tdm_attr_float(node, "spatial_scale", 1.0f);
    /* sample grids come from the rois: bound them (sampling 0 = adaptive) */
    for (int64_t r = 0; r < nr && sampling <= 0; r++) {
        double gh = ceil(fabs(rv[r * 4 + 3] - rv[r * 4 + 1]) * fabs(scale) / (double)y->dims[2]);
        double gw = ceil(fabs(rv[r * 4 + 2] - rv[r * 4 + 0]) * fabs(scale) / (double)y->dims[3]);
        if (gh * gw > 1e8) {
            st = tdm_node_error(node, TDM_ERR_LIMIT, "roi %lld needs too many samples", (long long)r);
            goto done;
        }
    }
    if (sampling > 1 << 14) {
        st = tdm_node_error(node, TDM_ERR_LIMIT, "sampling_ratio is too large");
        goto done;
    }
    roi_job j = {x->data, y->data, rv, bv, x->dims[1], x->dims[2], x->dims[3], y->dims[2],
                 y->dims[3], scale, sampling, half, max_mode, x->dtype == TDM_DOUBLE};
    tdm_parallel_for(ctx->pool, nr, 1, roi_rows, &j);
done:
    tdm_free(ctx->alloc, rv);
    tdm_free(ctx->alloc, bv);
    return st;
}

/* ---- GridSample (2-D and 3-D spatial) ---- */

enum { GS_NEAREST, GS_LINEAR, GS_CUBIC };
enum { GP_ZEROS, GP_BORDER, GP_REFLECT };

static double gs_reflect(double x, double lo, double hi) {
    double rng = hi - lo;
    if (rng <= 0) return lo;
    if (x < lo) {
        double dx = lo - x, n = floor(dx / rng), r = dx - n * rng;
        return fmod(n, 2) == 0 ? lo + r : hi - r;
    }
    if (x > hi) {
        double dx = x - hi, n = floor(dx / rng), r = dx - n * rng;
        return fmod(n, 2) == 0 ? hi - r : lo + r;
    }
    return x;
}

typedef struct gs_job {
    const void *x;
    void *y;
    const tdm_tensor *grid;
    int sp;                       /* spatial dims */
    int64_t n_c, in[3], out_count; /* in: spatial dims of X, outermost first */
    int mode, pad;
    bool align, dbl;
} gs_job;

/* Tap indices (or -1 for a zero) and weights along one spatial dim. */
static int gs_taps(const gs_job *j, double g, int64_t len, int64_t *ix, double *w) {
    double lo = j->align ? 0 : -0.5, hi = j->align ? (double)len - 1 : (double)len - 0.5;
    double v = j->align ? (g + 1) / 2 * (double)(len - 1) : ((g + 1) * (double)len - 1) / 2;
    if (!isfinite(v)) v = -1e9;
    if (v < -1e9) v = -1e9;
    if (v > 1e9) v = 1e9;
    if (j->mode == GS_NEAREST) v = nearbyint(v);
    if (v < lo || v > hi) {
        /* border: bicubic keeps the coordinate and clamps its taps (as ORT and PyTorch) */
        if (j->pad == GP_BORDER && j->mode != GS_CUBIC)
            v = v < 0 ? 0 : v > (double)(len - 1) ? (double)(len - 1) : v;
        else if (j->pad == GP_REFLECT) v = gs_reflect(v, lo, hi);
    }
    int n;
    double f = floor(v), t = v - f;
    int64_t base = (int64_t)f;
    if (j->mode == GS_NEAREST) {
        n = 1;
        ix[0] = (int64_t)v; /* truncation, as the reference does */
        w[0] = 1;
    } else if (j->mode == GS_LINEAR) {
        n = 2;
        ix[0] = base;
        ix[1] = base + 1;
        w[0] = 1 - t;
        w[1] = t;
    } else {
        n = 4;
        const double A = -0.75;
        double d[4] = {t + 1, t, 1 - t, 2 - t};
        for (int k = 0; k < 4; k++) {
            double a = d[k];
            w[k] = a <= 1 ? ((A + 2) * a - (A + 3)) * a * a + 1
                          : ((A * a - 5 * A) * a + 8 * A) * a - 4 * A;
            ix[k] = base - 1 + k;
        }
    }
    for (int k = 0; k < n; k++) {
        int64_t i = ix[k];
        if (i >= 0 && i < len) continue;
        if (j->pad == GP_ZEROS) {
            ix[k] = -1;
        } else if (j->pad == GP_BORDER) {
            ix[k] = i < 0 ? 0 : len - 1;
        } else {
            int64_t r = (int64_t)gs_reflect((double)i, lo, hi);
            ix[k] = r < 0 ? 0 : r >= len ? len - 1 : r;
        }
    }
    return n;
}

static void gs_points(void *arg, int64_t b, int64_t e) {
    const gs_job *j = arg;
    int sp = j->sp;
    int64_t plane = 1;
    for (int d = 0; d < sp; d++) plane *= j->in[d];
    for (int64_t u = b; u < e; u++) { /* u = batch * out_count + point */
        int64_t nb = u / j->out_count;
        int64_t ix[3][4];
        double w[3][4];
        int nt[3];
        for (int d = 0; d < sp; d++) {
            /* grid holds (x, y[, z]): component d is spatial dim sp-1-d */
            double g = tdm_tensor_get_f64(j->grid, u * sp + d);
            int sd = sp - 1 - d;
            nt[sd] = gs_taps(j, g, j->in[sd], ix[sd], w[sd]);
        }
        /* flatten the tap product once per point; zero-padding taps drop out */
        int64_t toff[64];
        double tw[64];
        int nt_all = 0, k[3] = {0, 0, 0};
        for (;;) {
            double wt = 1;
            int64_t off = 0;
            bool zero = false;
            for (int d = 0; d < sp; d++) {
                int64_t i = ix[d][k[d]];
                if (i < 0) zero = true;
                off = off * j->in[d] + i;
                wt *= w[d][k[d]];
            }
            if (!zero) {
                toff[nt_all] = off;
                tw[nt_all++] = wt;
            }
            int d = sp - 1;
            while (d >= 0 && ++k[d] == nt[d]) k[d--] = 0;
            if (d < 0) break;
        }
        int64_t ob = nb * j->n_c * j->out_count + u % j->out_count;
        if (j->dbl) {
            const double *X = (const double *)j->x + nb * j->n_c * plane;
            double *Y = (double *)j->y + ob;
            for (int64_t c = 0; c < j->n_c; c++, X += plane) {
                double acc = 0;
                for (int t = 0; t < nt_all; t++) acc += tw[t] * X[toff[t]];
                Y[c * j->out_count] = acc;
            }
        } else {
            const float *X = (const float *)j->x + nb * j->n_c * plane;
            float *Y = (float *)j->y + ob;
            for (int64_t c = 0; c < j->n_c; c++, X += plane) {
                double acc = 0;
                for (int t = 0; t < nt_all; t++) acc += tw[t] * (double)X[toff[t]];
                Y[c * j->out_count] = (float)acc;
            }
        }
    }
}

tdm_status *tdm_misc_gridsample_run(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *x = ctx->in[0], *g = ctx->in[1];
    tdm_tensor *y = ctx->out[0];
    int sp = x->rank - 2;
    if (sp < 1 || sp > 3 || g->rank != x->rank || g->dims[g->rank - 1] != sp ||
        g->dims[0] != x->dims[0])
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "X [N, C, spatial...] and grid [N, out..., %d] do not match", sp);
    if (x->dtype != TDM_FLOAT && x->dtype != TDM_DOUBLE)
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED, "GridSample supports float and double");
    const char *m = tdm_attr_string(node, "mode", ctx->opset >= 20 ? "linear" : "bilinear");
    int mode;
    if (!strcmp(m, "nearest")) mode = GS_NEAREST;
    else if (!strcmp(m, "bilinear") || !strcmp(m, "linear")) mode = GS_LINEAR;
    else if (!strcmp(m, "bicubic") || !strcmp(m, "cubic")) mode = GS_CUBIC;
    else return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "unknown mode '%s'", m);
    const char *pm = tdm_attr_string(node, "padding_mode", "zeros");
    int pad;
    if (!strcmp(pm, "zeros")) pad = GP_ZEROS;
    else if (!strcmp(pm, "border")) pad = GP_BORDER;
    else if (!strcmp(pm, "reflection")) pad = GP_REFLECT;
    else return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "unknown padding_mode '%s'", pm);
    if (y->count == 0) return NULL;
    for (int d = 0; d < sp; d++)
        if (x->dims[2 + d] == 0)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "X has an empty spatial dim");
    gs_job j = {x->data, y->data, g, sp, x->dims[1], {1, 1, 1}, 1, mode, pad,
                tdm_attr_int(node, "align_corners", 0) != 0, x->dtype == TDM_DOUBLE};
    for (int d = 0; d < sp; d++) j.in[d] = x->dims[2 + d];
    for (int d = 0; d < sp; d++) j.out_count *= g->dims[1 + d];
    tdm_parallel_for(ctx->pool, x->dims[0] * j.out_count, 256, gs_points, &j);
    return NULL;
}

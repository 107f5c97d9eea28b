/* CPU kernels (nn family): Conv, ConvTranspose, ConvInteger.
 *
 * Conv lowers each (image, group) to one GEMM: W_g[M/g, C/g*k] x col[C/g*k, out], where col
 * is the im2col expansion of the input (skipped for 1x1 stride-1 unpadded convolutions,
 * whose input already has that layout). The expansion is built for a range of outer output
 * rows at a time (about 1 MiB, so it is still in cache when the GEMM packs it); these
 * (image, group, rows) tasks run in parallel when there are enough of them, otherwise the
 * GEMM and im2col use the threads inside. Depthwise 2-D convolutions use a direct loop.
 * ConvTranspose computes col = W_g^T x X_g with one GEMM and scatters col into the output
 * (col2im). 1-D problems run as 2-D with a height of one. */
#include <stdatomic.h>
#include <string.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_nn.h"
#include "core/alloc.h"
#include "core/checked.h"

#define COL_TARGET ((int64_t)256 << 10) /* floats of im2col scratch per task (1 MiB) */

/* Geometry as used by the kernels: spatial dims, padded to 2-D for 1-D problems. */
typedef struct conv_shape {
    int nsp;
    int64_t in[TDM_MAX_RANK], out[TDM_MAX_RANK], k[TDM_MAX_RANK];
    int64_t s[TDM_MAX_RANK], d[TDM_MAX_RANK], p[TDM_MAX_RANK];
    int64_t isz, osz, ksz;
} conv_shape;

static void conv_shape_from(const tdm_nn_geom *g, conv_shape *cs) {
    int off = g->nsp == 1 ? 1 : 0;
    cs->nsp = g->nsp + off;
    if (off) {
        cs->in[0] = cs->out[0] = cs->k[0] = cs->s[0] = cs->d[0] = 1;
        cs->p[0] = 0;
    }
    for (int i = 0; i < g->nsp; i++) {
        cs->in[i + off] = g->in[i];
        cs->out[i + off] = g->out[i];
        cs->k[i + off] = g->kernel[i];
        cs->s[i + off] = g->stride[i];
        cs->d[i + off] = g->dil[i];
        cs->p[i + off] = g->pad_b[i];
    }
    cs->isz = cs->osz = cs->ksz = 1;
    for (int i = 0; i < cs->nsp; i++) {
        cs->isz *= cs->in[i];
        cs->osz *= cs->out[i];
        cs->ksz *= cs->k[i];
    }
}

/* Range [lo, hi) of output positions o with 0 <= o*s + off < n. */
static void valid_range(int64_t n, int64_t s, int64_t off, int64_t count, int64_t *lo,
                        int64_t *hi) {
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t b = n - off <= 0 ? 0 : (n - off - 1) / s + 1;
    if (b > count) b = count;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* ---- im2col ---- */

typedef struct im2col_job {
    const conv_shape *cs;
    const float *x; /* the group's first input channel */
    float *col;     /* [rows, ncols] */
    int64_t o0, o1; /* outer output rows of this chunk */
    int64_t ncols;  /* (o1 - o0) * inner */
} im2col_job;

static void im2col_rows(void *arg, int64_t r0, int64_t r1) {
    const im2col_job *j = arg;
    const conv_shape *cs = j->cs;
    int nsp = cs->nsp;
    for (int64_t r = r0; r < r1; r++) {
        int64_t c = r / cs->ksz, kr = r % cs->ksz;
        int64_t kc[TDM_MAX_RANK];
        for (int i = nsp - 1; i >= 0; i--) {
            kc[i] = kr % cs->k[i];
            kr /= cs->k[i];
        }
        const float *x = j->x + c * cs->isz;
        float *dst = j->col + r * j->ncols;
        if (nsp == 2) {
            int64_t W = cs->in[1], OW = cs->out[1], sw = cs->s[1];
            int64_t offw = kc[1] * cs->d[1] - cs->p[1];
            int64_t lo, hi;
            valid_range(W, sw, offw, OW, &lo, &hi);
            for (int64_t oh = j->o0; oh < j->o1; oh++, dst += OW) {
                int64_t ih = oh * cs->s[0] + kc[0] * cs->d[0] - cs->p[0];
                if (ih < 0 || ih >= cs->in[0]) {
                    memset(dst, 0, (size_t)OW * sizeof(float));
                    continue;
                }
                const float *src = x + ih * W;
                for (int64_t ow = 0; ow < lo; ow++) dst[ow] = 0.0f;
                if (sw == 1) {
                    if (hi > lo) memcpy(dst + lo, src + lo + offw, (size_t)(hi - lo) * sizeof(float));
                } else {
                    for (int64_t ow = lo; ow < hi; ow++) dst[ow] = src[ow * sw + offw];
                }
                for (int64_t ow = hi; ow < OW; ow++) dst[ow] = 0.0f;
            }
            continue;
        }
        /* general N-D: odometer over the chunk's output positions */
        int64_t oc[TDM_MAX_RANK] = {0};
        oc[0] = j->o0;
        for (int64_t p = 0; p < j->ncols; p++) {
            int64_t off = 0;
            bool ok = true;
            for (int i = 0; i < nsp; i++) {
                int64_t ii = oc[i] * cs->s[i] + kc[i] * cs->d[i] - cs->p[i];
                if (ii < 0 || ii >= cs->in[i]) {
                    ok = false;
                    break;
                }
                off = off * cs->in[i] + ii;
            }
            dst[p] = ok ? x[off] : 0.0f;
            for (int i = nsp - 1; i >= 0; i--) {
                if (++oc[i] < cs->out[i]) break;
                oc[i] = 0;
            }
        }
    }
}

/* ---- depthwise 2-D ---- */

typedef struct dw_job {
    const conv_shape *cs;
    const float *x, *w, *b;
    float *y;
    int64_t C, M, mult; /* input channels, output channels, outputs per input channel */
} dw_job;

static void dw_planes(void *arg, int64_t p0, int64_t p1) {
    const dw_job *j = arg;
    const conv_shape *cs = j->cs;
    int64_t H = cs->in[0], W = cs->in[1], OH = cs->out[0], OW = cs->out[1];
    int64_t KH = cs->k[0], KW = cs->k[1], sh = cs->s[0], sw = cs->s[1];
    for (int64_t p = p0; p < p1; p++) {
        int64_t n = p / j->M, m = p % j->M, c = m / j->mult;
        const float *x = j->x + (n * j->C + c) * H * W;
        const float *w = j->w + m * KH * KW;
        float *y = j->y + p * OH * OW;
        float bias = j->b ? j->b[m] : 0.0f;
        for (int64_t oh = 0; oh < OH; oh++) {
            float *yr = y + oh * OW;
            for (int64_t ow = 0; ow < OW; ow++) yr[ow] = bias;
            for (int64_t kh = 0; kh < KH; kh++) {
                int64_t ih = oh * sh + kh * cs->d[0] - cs->p[0];
                if (ih < 0 || ih >= H) continue;
                const float *xr = x + ih * W;
                for (int64_t kw = 0; kw < KW; kw++) {
                    float wv = w[kh * KW + kw];
                    int64_t off = kw * cs->d[1] - cs->p[1], lo, hi;
                    valid_range(W, sw, off, OW, &lo, &hi);
                    if (sw == 1) {
                        for (int64_t ow = lo; ow < hi; ow++) yr[ow] += wv * xr[ow + off];
                    } else {
                        for (int64_t ow = lo; ow < hi; ow++) yr[ow] += wv * xr[ow * sw + off];
                    }
                }
            }
        }
    }
}

/* ---- Conv ---- */

static tdm_status *check_float_params(tdm_kernel_ctx *ctx, int from) {
    for (int i = from; i < ctx->n_in; i++)
        if (ctx->in[i] && ctx->in[i]->dtype != TDM_FLOAT)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "input %d has type %s, expected that of the input", i,
                                  tdm_dtype_name(ctx->in[i]->dtype));
    return NULL;
}

typedef struct conv_job {
    tdm_kernel_ctx *ctx;
    const conv_shape *cs;
    const float *x, *w;
    float *y;
    int64_t C, M, Cg, Mg, group, rows, inner, chunk, nchunks;
    float beta;
    tdm_threadpool *pool; /* inner parallelism when tasks run one after another */
    atomic_int failed;
} conv_job;

/* Tasks are (image, group, chunk of outer output rows): im2col, then one GEMM into the
 * chunk's columns of the output. */
static void conv_tasks(void *arg, int64_t t0, int64_t t1) {
    conv_job *j = arg;
    const conv_shape *cs = j->cs;
    float *col = tdm_kscratch(j->ctx, (size_t)(j->rows * j->chunk * j->inner) * sizeof(float));
    if (!col) {
        atomic_store(&j->failed, 1);
        return;
    }
    for (int64_t t = t0; t < t1; t++) {
        int64_t n = t / (j->group * j->nchunks), gi = t / j->nchunks % j->group;
        int64_t o0 = t % j->nchunks * j->chunk;
        int64_t o1 = o0 + j->chunk < cs->out[0] ? o0 + j->chunk : cs->out[0];
        const float *xg = j->x + (n * j->C + gi * j->Cg) * cs->isz;
        const float *wg = j->w + gi * j->Mg * j->rows;
        float *yg = j->y + (n * j->M + gi * j->Mg) * cs->osz;
        im2col_job ij = {cs, xg, col, o0, o1, (o1 - o0) * j->inner};
        tdm_parallel_for(j->pool, j->rows, 4096 / (ij.ncols + 1) + 1, im2col_rows, &ij);
        tdm_sgemm(tdm_cpu_simd_of(j->ctx), j->pool, false, false, j->Mg, ij.ncols, j->rows, 1.0f, wg, j->rows, col,
                  ij.ncols, j->beta, yg + o0 * j->inner, cs->osz);
    }
    tdm_free(j->ctx->alloc, col);
}

static tdm_status *conv_f32(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *w = ctx->in[1];
    const tdm_tensor *b = ctx->n_in > 2 ? ctx->in[2] : NULL;
    tdm_tensor *y = ctx->out[0];
    TDM_TRY(check_float_params(ctx, 1));
    tdm_nn_geom g;
    TDM_TRY(tdm_nn_geom_init(ctx->node, ctx->opset, TDM_NN_CONV, x->rank, x->dims, w->dims, &g));
    int64_t group = tdm_attr_int(ctx->node, "group", 1);
    int64_t N = x->dims[0], C = x->dims[1], M = w->dims[0];
    if (group < 1 || C % group || M % group || w->dims[1] * group != C || w->rank != x->rank)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "weight shape does not match the input and group");
    if (b && b->count != M)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "bias has %lld values for %lld output channels",
                              (long long)b->count, (long long)M);
    if (y->count == 0) return NULL;
    conv_shape cs;
    conv_shape_from(&g, &cs);
    int64_t Cg = C / group, Mg = M / group;
    const float *xd = x->data, *wd = w->data, *bd = b ? b->data : NULL;
    float *yd = y->data;

    if (cs.nsp == 2 && Cg == 1 && group == C && group > 1) {
        dw_job job = {&cs, xd, wd, bd, yd, C, M, Mg};
        int64_t planes = N * M, work = cs.osz * cs.ksz;
        tdm_parallel_for(ctx->pool, planes, work > 65536 ? 1 : 65536 / (work + 1) + 1, dw_planes,
                         &job);
        return NULL;
    }

    bool pointwise = true;
    for (int i = 0; i < cs.nsp; i++)
        if (cs.k[i] != 1 || cs.s[i] != 1 || cs.p[i] != 0 || cs.out[i] != cs.in[i]) pointwise = false; /* end pads too */
    if (bd) {
        for (int64_t n = 0; n < N; n++)
            for (int64_t m = 0; m < M; m++) {
                float *yp = yd + (n * M + m) * cs.osz;
                for (int64_t i = 0; i < cs.osz; i++) yp[i] = bd[m];
            }
    }
    float beta = bd ? 1.0f : 0.0f;
    int64_t rows = Cg * cs.ksz;
    if (rows == 0) { /* no input channels: each output is the bias (or 0), a sum of nothing */
        if (!bd) memset(yd, 0, (size_t)y->count * sizeof(float));
        return NULL;
    }
    if (pointwise) {
        for (int64_t n = 0; n < N; n++)
            for (int64_t gi = 0; gi < group; gi++)
                tdm_sgemm(tdm_cpu_simd_of(ctx), ctx->pool, false, false, Mg, cs.osz, rows, 1.0f, wd + gi * Mg * rows,
                          rows, xd + (n * C + gi * Cg) * cs.isz, cs.isz, beta,
                          yd + (n * M + gi * Mg) * cs.osz, cs.osz);
        return NULL;
    }
    /* Chunks of outer output rows whose im2col block stays around 1 MiB (at least 128
     * columns), small enough to give every thread a few tasks. */
    int64_t inner = cs.osz / cs.out[0], col_n;
    if (!tdm_mul_i64(rows, inner, &col_n) || col_n > TDM_MAX_TENSOR_BYTES / 4)
        return tdm_node_error(ctx->node, TDM_ERR_LIMIT, "the column buffer is too large");
    int64_t target = COL_TARGET / rows > 128 ? COL_TARGET / rows : 128;
    int64_t chunk = (target + inner - 1) / inner;
    if (chunk > cs.out[0]) chunk = cs.out[0];
    int threads = tdm_threadpool_size(ctx->pool);
    while (threads > 1 && chunk > 1 && (chunk / 2) * inner >= 64 &&
           N * group * ((cs.out[0] + chunk - 1) / chunk) < 4 * threads)
        chunk = (chunk + 1) / 2;
    conv_job job = {ctx, &cs, xd, wd, yd, C, M, Cg, Mg, group, rows, inner, chunk,
                    (cs.out[0] + chunk - 1) / chunk, beta, NULL, 0};
    int64_t tasks = N * group * job.nchunks;
    if (threads > 1 && tasks >= threads) {
        tdm_parallel_for(ctx->pool, tasks, 1, conv_tasks, &job);
    } else {
        job.pool = ctx->pool;
        conv_tasks(&job, 0, tasks);
    }
    if (atomic_load(&job.failed))
        return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    return NULL;
}

tdm_status *tdm_nn_run_conv(tdm_kernel_ctx *ctx) {
    tdm_dtype dt = ctx->in[0]->dtype;
    if (dt == TDM_FLOAT) return conv_f32(ctx);
    return tdm_nn_run_as(ctx, dt, TDM_FLOAT, conv_f32);
}

/* ---- ConvTranspose ---- */

typedef struct col2im_job {
    const conv_shape *cs; /* in = the op's input (col columns), out = the op's output */
    const float *col;     /* [Mg * ksz, isz] */
    float *y;             /* the group's first output channel */
} col2im_job;

static void col2im_channels(void *arg, int64_t m0, int64_t m1) {
    const col2im_job *j = arg;
    const conv_shape *cs = j->cs;
    int nsp = cs->nsp;
    for (int64_t m = m0; m < m1; m++) {
        float *y = j->y + m * cs->osz;
        for (int64_t kr = 0; kr < cs->ksz; kr++) {
            const float *src = j->col + (m * cs->ksz + kr) * cs->isz;
            int64_t kc[TDM_MAX_RANK], t = kr;
            for (int i = nsp - 1; i >= 0; i--) {
                kc[i] = t % cs->k[i];
                t /= cs->k[i];
            }
            if (nsp == 2) {
                int64_t IW = cs->in[1], OW = cs->out[1], sw = cs->s[1];
                int64_t offw = kc[1] * cs->d[1] - cs->p[1], lo, hi;
                valid_range(OW, sw, offw, IW, &lo, &hi);
                for (int64_t ih = 0; ih < cs->in[0]; ih++) {
                    int64_t oh = ih * cs->s[0] + kc[0] * cs->d[0] - cs->p[0];
                    if (oh < 0 || oh >= cs->out[0]) continue;
                    float *yr = y + oh * OW;
                    const float *sr = src + ih * IW;
                    for (int64_t iw = lo; iw < hi; iw++) yr[iw * sw + offw] += sr[iw];
                }
                continue;
            }
            int64_t ic[TDM_MAX_RANK] = {0};
            for (int64_t p = 0; p < cs->isz; p++) {
                int64_t off = 0;
                bool ok = true;
                for (int i = 0; i < nsp; i++) {
                    int64_t o = ic[i] * cs->s[i] + kc[i] * cs->d[i] - cs->p[i];
                    if (o < 0 || o >= cs->out[i]) {
                        ok = false;
                        break;
                    }
                    off = off * cs->out[i] + o;
                }
                if (ok) y[off] += src[p];
                for (int i = nsp - 1; i >= 0; i--) {
                    if (++ic[i] < cs->in[i]) break;
                    ic[i] = 0;
                }
            }
        }
    }
}

/* 2-D ConvTranspose by tiles of whole input rows: col = W_g^T x X_g[:, rows of the tile]
 * (about CONVT_TILE floats, so it stays in cache and needs no large per-run buffer) is
 * scattered into Y at once. When the kernel's extent in H is at most the stride, two input
 * rows never write the same output row, so the tiles run in parallel; otherwise they run
 * one after the other (GEMM and scatter using the threads inside). `exact`: every output
 * element gets exactly one tap (stride == kernel, no dilation, pads or output padding), so the
 * scatter writes col + bias and Y needs no initialisation; else Y starts as the bias (or 0)
 * and the scatter adds. */
#define CONVT_TILE ((int64_t)64 << 10)

typedef struct convt_job {
    const conv_shape *cs;
    const tdm_cpu_simd *simd;
    tdm_threadpool *pool; /* NULL inside parallel tiles */
    const tdm_allocator *alloc;
    const float *x, *w, *bias; /* the group's first input channel, weights, bias (or NULL) */
    float *y;                  /* the group's first output channel */
    float *col;                /* sequential tiles: the shared tile buffer */
    int64_t Cg, Mg, rows, th, IH;
    bool exact;
    _Atomic bool oom;
    /* the tile being scattered (sequential tiles) */
    int64_t h0, h1;
} convt_job;

/* Scatters the tile col (input rows h0..h1) into output channels m0..m1. */
static void convt_scatter(const convt_job *j, const float *col, int64_t h0, int64_t h1, int64_t m0,
                          int64_t m1) {
    const conv_shape *cs = j->cs;
    int64_t IW = cs->in[1], OW = cs->out[1], OH = cs->out[0], KH = cs->k[0], KW = cs->k[1];
    int64_t sh = cs->s[0], sw = cs->s[1], ncol = (h1 - h0) * IW, ksz = cs->ksz;
    for (int64_t m = m0; m < m1; m++) {
        float *y = j->y + m * cs->osz;
        float b = j->bias ? j->bias[m] : 0.0f;
        const float *cm = col + m * ksz * ncol;
        if (j->exact) { /* oh = ih * KH + kh, ow = iw * KW + kw */
            for (int64_t ih = h0; ih < h1; ih++)
                for (int64_t kh = 0; kh < KH; kh++) {
                    float *yr = y + (ih * sh + kh) * OW;
                    const float *src = cm + kh * KW * ncol + (ih - h0) * IW;
                    if (KW == 2) {
                        const float *s0 = src, *s1 = src + ncol;
                        for (int64_t iw = 0; iw < IW; iw++) {
                            yr[2 * iw] = s0[iw] + b;
                            yr[2 * iw + 1] = s1[iw] + b;
                        }
                    } else {
                        for (int64_t iw = 0; iw < IW; iw++)
                            for (int64_t kw = 0; kw < KW; kw++)
                                yr[iw * sw + kw] = src[kw * ncol + iw] + b;
                    }
                }
            continue;
        }
        for (int64_t kr = 0; kr < ksz; kr++) {
            const float *src = cm + kr * ncol;
            int64_t kh = kr / KW, kw = kr % KW;
            int64_t offw = kw * cs->d[1] - cs->p[1], lo, hi;
            valid_range(OW, sw, offw, IW, &lo, &hi);
            for (int64_t ih = h0; ih < h1; ih++) {
                int64_t oh = ih * sh + kh * cs->d[0] - cs->p[0];
                if (oh < 0 || oh >= OH) continue;
                float *yr = y + oh * OW;
                const float *sr = src + (ih - h0) * IW;
                for (int64_t iw = lo; iw < hi; iw++) yr[iw * sw + offw] += sr[iw];
            }
        }
    }
}

static void convt_gemm(const convt_job *j, tdm_threadpool *pool, float *col, int64_t h0,
                       int64_t h1) {
    int64_t IW = j->cs->in[1], ncol = (h1 - h0) * IW;
    tdm_sgemm(j->simd, pool, true, false, j->rows, ncol, j->Cg, 1.0f, j->w, j->rows,
              j->x + h0 * IW, j->cs->isz, 0.0f, col, ncol);
}

static void convt_scatter_task(void *arg, int64_t m0, int64_t m1) {
    const convt_job *j = arg;
    convt_scatter(j, j->col, j->h0, j->h1, m0, m1);
}

/* Parallel tiles t0..t1 (independent output rows), each task with its own buffer. */
static void convt_tiles_task(void *arg, int64_t t0, int64_t t1) {
    convt_job *j = arg;
    float *col = tdm_alloc(j->alloc, (size_t)(j->rows * j->th * j->cs->in[1]) * sizeof(float));
    if (!col) {
        atomic_store(&j->oom, true);
        return;
    }
    for (int64_t t = t0; t < t1; t++) {
        int64_t h0 = t * j->th, h1 = h0 + j->th < j->IH ? h0 + j->th : j->IH;
        convt_gemm(j, NULL, col, h0, h1);
        convt_scatter(j, col, h0, h1, 0, j->Mg);
    }
    tdm_free(j->alloc, col);
}

static void fill_channels(float *y, int64_t M, int64_t osz, const float *bias) {
    for (int64_t m = 0; m < M; m++) {
        float b = bias ? bias[m] : 0.0f;
        float *yp = y + m * osz;
        if (b == 0.0f) memset(yp, 0, (size_t)osz * sizeof(float));
        else
            for (int64_t i = 0; i < osz; i++) yp[i] = b;
    }
}

static tdm_status *conv_transpose_2d(tdm_kernel_ctx *ctx, const conv_shape *cs, int64_t group) {
    const tdm_tensor *x = ctx->in[0], *w = ctx->in[1];
    const tdm_tensor *b = ctx->n_in > 2 ? ctx->in[2] : NULL;
    tdm_tensor *y = ctx->out[0];
    int64_t N = x->dims[0], C = x->dims[1], M = y->dims[1];
    int64_t Cg = C / group, Mg = M / group, rows = Mg * cs->ksz, IH = cs->in[0], IW = cs->in[1];
    bool exact = true;
    for (int i = 0; i < 2; i++)
        if (cs->s[i] != cs->k[i] || (cs->k[i] > 1 && cs->d[i] != 1) || cs->p[i] != 0 ||
            cs->out[i] != cs->in[i] * cs->s[i])
            exact = false;
    int64_t per_row = rows * IW, th = per_row > 0 ? CONVT_TILE / per_row : 1;
    if (th < 1) th = 1;
    if (th > IH) th = IH;
    int64_t tiles = (IH + th - 1) / th;
    bool independent = (cs->k[0] - 1) * cs->d[0] + 1 <= cs->s[0];
    int T = tdm_threadpool_size(ctx->pool);
    bool par = independent && T > 1 && tiles >= T;
    float *col = NULL;
    if (!par) {
        col = tdm_kscratch(ctx, (size_t)(rows * th * IW) * sizeof(float));
        if (!col) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    const float *xd = x->data, *wd = w->data, *bd = b ? b->data : NULL;
    float *yd = y->data;
    tdm_status *st = NULL;
    for (int64_t n = 0; n < N && !st; n++)
        for (int64_t gi = 0; gi < group && !st; gi++) {
            convt_job j = {.cs = cs, .simd = tdm_cpu_simd_of(ctx), .pool = ctx->pool,
                           .alloc = ctx->alloc, .x = xd + (n * C + gi * Cg) * cs->isz,
                           .w = wd + gi * Cg * rows, .bias = bd ? bd + gi * Mg : NULL,
                           .y = yd + (n * M + gi * Mg) * cs->osz, .col = col, .Cg = Cg,
                           .Mg = Mg, .rows = rows, .th = th, .IH = IH, .exact = exact};
            atomic_init(&j.oom, false);
            if (!exact) fill_channels(j.y, Mg, cs->osz, j.bias);
            if (par) {
                tdm_parallel_for(ctx->pool, tiles, 1, convt_tiles_task, &j);
                if (atomic_load(&j.oom))
                    st = tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
                continue;
            }
            for (int64_t t = 0; t < tiles; t++) {
                j.h0 = t * th;
                j.h1 = j.h0 + th < IH ? j.h0 + th : IH;
                convt_gemm(&j, ctx->pool, col, j.h0, j.h1);
                tdm_parallel_for(ctx->pool, Mg, 1, convt_scatter_task, &j);
            }
        }
    tdm_free(ctx->alloc, col);
    return st;
}

static tdm_status *conv_transpose_f32(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *w = ctx->in[1];
    const tdm_tensor *b = ctx->n_in > 2 ? ctx->in[2] : NULL;
    tdm_tensor *y = ctx->out[0];
    TDM_TRY(check_float_params(ctx, 1));
    tdm_nn_geom g;
    TDM_TRY(tdm_nn_geom_init(ctx->node, ctx->opset, TDM_NN_CONVT, x->rank, x->dims, w->dims, &g));
    int64_t group = tdm_attr_int(ctx->node, "group", 1);
    int64_t N = x->dims[0], C = x->dims[1], M = y->dims[1];
    if (group < 1 || C % group || w->dims[0] != C || w->rank != x->rank ||
        w->dims[1] * group != M)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "weight shape does not match the input and group");
    if (b && b->count != M)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "bias has %lld values for %lld output channels",
                              (long long)b->count, (long long)M);
    if (y->count == 0) return NULL;
    conv_shape cs;
    conv_shape_from(&g, &cs);
    if (cs.nsp == 2) return conv_transpose_2d(ctx, &cs, group);
    /* for col2im, cs.in is the op's input and cs.out its output */
    int64_t Cg = C / group, Mg = M / group, rows = Mg * cs.ksz, col_n;
    if (!tdm_mul_i64(rows, cs.isz, &col_n) || col_n > TDM_MAX_TENSOR_BYTES / 4)
        return tdm_node_error(ctx->node, TDM_ERR_LIMIT, "the column buffer is too large");
    float *col = tdm_kscratch(ctx, (size_t)col_n * sizeof(float));
    if (!col) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    const float *xd = x->data, *wd = w->data;
    float *yd = y->data;
    memset(yd, 0, (size_t)y->count * sizeof(float)); /* col2im adds */
    for (int64_t n = 0; n < N; n++) {
        for (int64_t gi = 0; gi < group; gi++) {
            const float *xg = xd + (n * C + gi * Cg) * cs.isz;
            const float *wg = wd + gi * Cg * rows;
            tdm_sgemm(tdm_cpu_simd_of(ctx), ctx->pool, true, false, rows, cs.isz, Cg, 1.0f, wg, rows, xg, cs.isz, 0.0f,
                      col, cs.isz);
            col2im_job job = {&cs, col, yd + (n * M + gi * Mg) * cs.osz};
            tdm_parallel_for(ctx->pool, Mg, 1, col2im_channels, &job);
        }
    }
    tdm_free(ctx->alloc, col);
    if (b) {
        const float *bd = b->data;
        for (int64_t n = 0; n < N; n++)
            for (int64_t m = 0; m < M; m++) {
                float *yp = yd + (n * M + m) * cs.osz;
                for (int64_t i = 0; i < cs.osz; i++) yp[i] += bd[m];
            }
    }
    return NULL;
}

tdm_status *tdm_nn_run_conv_transpose(tdm_kernel_ctx *ctx) {
    tdm_dtype dt = ctx->in[0]->dtype;
    if (dt == TDM_FLOAT) return conv_transpose_f32(ctx);
    return tdm_nn_run_as(ctx, dt, TDM_FLOAT, conv_transpose_f32);
}

/* ---- ConvInteger (direct loops on widened values) ---- */

static int32_t q8(const tdm_tensor *t, int64_t i) {
    return t->dtype == TDM_INT8 ? ((const int8_t *)t->data)[i] : ((const uint8_t *)t->data)[i];
}

tdm_status *tdm_nn_run_conv_integer(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *w = ctx->in[1];
    const tdm_tensor *xz = ctx->n_in > 2 ? ctx->in[2] : NULL, *wz = ctx->n_in > 3 ? ctx->in[3] : NULL;
    tdm_tensor *y = ctx->out[0];
    if (w->dtype != TDM_INT8 && w->dtype != TDM_UINT8)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "w must be int8 or uint8");
    tdm_nn_geom g;
    TDM_TRY(tdm_nn_geom_init(ctx->node, ctx->opset, TDM_NN_CONV, x->rank, x->dims, w->dims, &g));
    int64_t group = tdm_attr_int(ctx->node, "group", 1);
    int64_t N = x->dims[0], C = x->dims[1], M = w->dims[0];
    if (group < 1 || C % group || M % group || w->dims[1] * group != C || w->rank != x->rank)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "weight shape does not match the input and group");
    if ((xz && (xz->count != 1 || xz->dtype != x->dtype)) ||
        (wz && ((wz->count != 1 && wz->count != M) || wz->dtype != w->dtype)))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "invalid zero point");
    if (y->count == 0) return NULL;
    conv_shape cs;
    conv_shape_from(&g, &cs);
    int64_t Cg = C / group, Mg = M / group;
    int32_t *wx = tdm_kscratch(ctx, (size_t)(x->count + w->count) * sizeof(int32_t));
    if (!wx) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    int32_t *ww = wx + x->count;
    int32_t xzv = xz ? q8(xz, 0) : 0;
    for (int64_t i = 0; i < x->count; i++) wx[i] = q8(x, i) - xzv;
    int64_t wper = w->count / M;
    for (int64_t i = 0; i < w->count; i++)
        ww[i] = q8(w, i) - (wz ? q8(wz, wz->count == 1 ? 0 : i / wper) : 0);
    int32_t *yd = y->data;
    int nsp = cs.nsp;
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++) {
            int64_t gi = m / Mg;
            int64_t oc[TDM_MAX_RANK] = {0};
            for (int64_t p = 0; p < cs.osz; p++) {
                uint32_t acc = 0;
                for (int64_t c = 0; c < Cg; c++) {
                    const int32_t *xc = wx + (n * C + gi * Cg + c) * cs.isz;
                    const int32_t *wc = ww + (m * Cg + c) * cs.ksz;
                    for (int64_t kr = 0; kr < cs.ksz; kr++) {
                        int64_t t = kr, off = 0, mul = 1;
                        bool ok = true;
                        for (int i = nsp - 1; i >= 0; i--) {
                            int64_t k = t % cs.k[i];
                            t /= cs.k[i];
                            int64_t ii = oc[i] * cs.s[i] + k * cs.d[i] - cs.p[i];
                            if (ii < 0 || ii >= cs.in[i]) ok = false;
                            off += ii * mul;
                            mul *= cs.in[i];
                        }
                        if (ok) acc += (uint32_t)xc[off] * (uint32_t)wc[kr];
                    }
                }
                yd[(n * M + m) * cs.osz + p] = (int32_t)acc;
                for (int i = nsp - 1; i >= 0; i--) {
                    if (++oc[i] < cs.out[i]) break;
                    oc[i] = 0;
                }
            }
        }
    tdm_free(ctx->alloc, wx);
    return NULL;
}

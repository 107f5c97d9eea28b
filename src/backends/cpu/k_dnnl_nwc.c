/* dnnl family: tandem's ConvNwc1d (ops/fused.h), a convolution along L that reads its input
 * as a sequence X [N, L, C] (channels last) and writes Y [N, O, L'] (channels first).
 *
 * Per image, Y = B (or the first full tap's product), then one accumulating matrix product
 * per kernel tap t:
 *   Y[:, p0..p1) += W_t . X[p0 + t - begin .. p1 + t - begin)^T
 * with W_t = W[:, :, t] packed at prepare as [k][O][C] (rows of C), and X's rows read in
 * place (C floats each, consecutive positions consecutive rows). Taps near a padded edge
 * cover a shorter range of output positions [p0, p1), so pads cost nothing. Each product is
 * oneDNN's sgemm on one thread (tandem's own, tdm_sgemm, measured slower here: 97-117 ms
 * against 81-103 for the model, also with one product of K = k C over overlapping rows of
 * X, which oneDNN refuses); the items are blocks of output channels of an image
 * (dn_parallel). An activation "GeluTanh" runs on each item's rows after its last product,
 * while they are in cache. The sum over taps
 * and channels runs in float32, tap after tap, so results differ from the direct
 * convolution's order by rounding only.
 * Measured against oneDNN's direct convolution on magika's shape (X [8, 512, 256], W [512,
 * 256, 5]), with that path's Transpose and reorders: bench/results (the s14-avx2 file). */
#include <string.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_dnnl.h"
#include "backends/cpu/k_unary.h"
#include "core/alloc.h"

typedef struct nwc_state {
    const tdm_tensor *wsrc; /* the constant W seen at prepare (NULL: W packed per run) */
    float *wt;              /* W packed [k][O][C] */
    bool gelu;              /* activation "GeluTanh" */
} nwc_state;

/* y[0..n) = tanh-GELU(y) in place, through a buffer (the SIMD loops take no overlap). */
static void nwc_gelu(const tdm_cpu_simd *simd, float *y, int64_t n) {
    float tmp[1024];
    tdm_uparams p = {.op = TDM_U_GELU_TANH};
    for (int64_t i = 0; i < n; i += 1024) {
        int64_t c = n - i < 1024 ? n - i : 1024;
        memcpy(tmp, y + i, (size_t)c * sizeof(float));
        simd->unary_f32(&p, tmp, y + i, c);
    }
}

/* W [O, C, k(, 1)] -> wt [k][O][C] */
static void nwc_pack(const float *w, int64_t O, int64_t C, int64_t k, float *wt) {
    for (int64_t o = 0; o < O; o++)
        for (int64_t c = 0; c < C; c++) {
            const float *src = w + (o * C + c) * k;
            for (int64_t t = 0; t < k; t++) wt[(t * O + o) * C + c] = src[t];
        }
}

static bool nwc_w_ok(const tdm_tensor *w) {
    return w && w->dtype == TDM_FLOAT && (w->rank == 3 || w->rank == 4) &&
           (w->rank == 3 || w->dims[3] == 1);
}

tdm_status *dn_nwc_prepare(const tdm_node *node, int opset, int n_in,
                           const tdm_tensor *const *in, const tdm_allocator *a, void **state) {
    (void)opset;
    nwc_state *s = tdm_calloc(a, 1, sizeof *s);
    if (!s) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory preparing ConvNwc1d");
    *state = s;
    s->gelu = strcmp(tdm_attr_string(node, "activation", ""), "GeluTanh") == 0;
    const tdm_tensor *w = n_in >= 2 ? in[1] : NULL;
    if (!nwc_w_ok(w) || w->count == 0) return NULL;
    s->wt = tdm_alloc(a, (size_t)w->count * sizeof(float));
    if (!s->wt) return NULL; /* packed per run instead (run() reports its own failure) */
    nwc_pack(w->data, w->dims[0], w->dims[1], w->dims[2], s->wt);
    s->wsrc = w;
    return NULL;
}

void dn_nwc_release(void *state, const tdm_allocator *a) {
    nwc_state *s = state;
    if (!s) return;
    tdm_free(a, s->wt);
    tdm_free(a, s);
}

/* Y [N, O, Lo, D] from X [N, L, C, D] and W [O, C, k] term by term (D > 1: X's channels are
 * not rows of the sequence, so the products cannot read it in place). */
static void nwc_plain(const float *x, const float *w, const float *b, int64_t N, int64_t L,
                      int64_t C, int64_t D, int64_t O, int64_t k, int64_t Lo, int64_t begin,
                      float *y) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t p = 0; p < Lo; p++)
                for (int64_t d = 0; d < D; d++) {
                    float acc = b ? b[o] : 0.0f;
                    for (int64_t t = 0; t < k; t++) {
                        int64_t l = p + t - begin;
                        if (l < 0 || l >= L) continue;
                        for (int64_t c = 0; c < C; c++)
                            acc += w[(o * C + c) * k + t] * x[((n * L + l) * C + c) * D + d];
                    }
                    y[((n * O + o) * Lo + p) * D + d] = acc;
                }
}

typedef struct nwc_job {
    const float *x, *wt, *b;
    float *y;
    int64_t L, C, O, k, Lo, begin, rows, blocks;
    const tdm_cpu_simd *simd;
    bool gelu;
} nwc_job;

/* Output positions [*p0, *p1) that tap t reaches (output p reads input p + t - begin). */
static void nwc_range(const nwc_job *j, int64_t t, int64_t *p0, int64_t *p1) {
    *p0 = j->begin - t > 0 ? j->begin - t : 0;
    *p1 = j->L + j->begin - t < j->Lo ? j->L + j->begin - t : j->Lo;
}

/* Item = (image, block of output channels). Without B, the first tap that reaches every
 * output position writes Y (beta 0) and the others add to it; else Y starts as B. */
static tdm_status *nwc_item(void *arg, tdm_kernel_ctx *ctx, int64_t item) {
    (void)ctx;
    const nwc_job *j = arg;
    int64_t n = item / j->blocks, o0 = item % j->blocks * j->rows;
    int64_t M = j->O - o0 < j->rows ? j->O - o0 : j->rows;
    float *y = j->y + (n * j->O + o0) * j->Lo;
    int64_t first = -1, p0, p1;
    for (int64_t t = 0; !j->b && j->C > 0 && first < 0 && t < j->k; t++) {
        nwc_range(j, t, &p0, &p1);
        if (p0 == 0 && p1 == j->Lo) first = t;
    }
    if (first < 0)
        for (int64_t o = 0; o < M; o++) {
            float v = j->b ? j->b[o0 + o] : 0.0f, *row = y + o * j->Lo;
            for (int64_t p = 0; p < j->Lo; p++) row[p] = v;
        }
    const float *x = j->x + n * j->L * j->C;
    for (int64_t i = 0; j->C > 0 && i < j->k; i++) {
        int64_t t = first < 0 ? i : i == 0 ? first : i <= first ? i - 1 : i;
        nwc_range(j, t, &p0, &p1);
        if (p1 <= p0) continue;
        float beta = first >= 0 && i == 0 ? 0.0f : 1.0f;
        const float *a = j->wt + (t * j->O + o0) * j->C, *bm = x + (p0 + t - j->begin) * j->C;
        if (dnnl_sgemm('N', 'T', M, p1 - p0, j->C, 1.0f, a, j->C, bm, j->C, beta, y + p0, j->Lo) !=
            dnnl_success)
            tdm_sgemm(j->simd, NULL, false, true, M, p1 - p0, j->C, 1.0f, a, j->C, bm, j->C, beta,
                      y + p0, j->Lo);
    }
    if (j->gelu) nwc_gelu(j->simd, y, M * j->Lo); /* the block's rows, still in cache */
    return NULL;
}

tdm_status *dn_nwc_run(tdm_kernel_ctx *ctx) {
    const nwc_state *s = ctx->state;
    const tdm_tensor *x = ctx->in[0], *w = ctx->in[1];
    const tdm_tensor *b = ctx->n_in > 2 ? ctx->in[2] : NULL;
    tdm_tensor *y = ctx->out[0];
    if (!s || !x || !nwc_w_ok(w) || x->dtype != TDM_FLOAT || x->rank != w->rank)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "ConvNwc1d needs float32 X [N, L, C(, D)] and W [O, C, k(, 1)] of one rank");
    int64_t N = x->dims[0], L = x->dims[1], C = x->dims[2];
    int64_t O = w->dims[0], k = w->dims[2];
    size_t np = 0;
    const int64_t *pads = tdm_attr_ints(ctx->node, "pads", &np);
    int64_t begin = pads && np == 2 ? pads[0] : 0, end = pads && np == 2 ? pads[1] : 0;
    if (w->dims[1] != C || k < 1 || begin < 0 || end < 0 || L + begin + end - k + 1 < 0)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "ConvNwc1d: X [%lld, %lld, %lld] does not fit W [%lld, %lld, %lld]",
                              (long long)N, (long long)L, (long long)C, (long long)O,
                              (long long)w->dims[1], (long long)k);
    int64_t Lo = L + begin + end - k + 1;
    if (b && (b->dtype != TDM_FLOAT || b->count != O))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "B must be float32 [%lld]",
                              (long long)O);
    int64_t D = x->rank == 4 ? x->dims[3] : 1;
    if (!y || y->dtype != TDM_FLOAT || y->count != N * O * Lo * D)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "ConvNwc1d: output of the wrong size");
    if (y->count == 0) return NULL;
    if (D != 1) { /* not the form the pass expects: the plain sum */
        nwc_plain(x->data, w->data, b ? b->data : NULL, N, L, C, D, O, k, Lo, begin, y->data);
        if (s->gelu) nwc_gelu(tdm_cpu_simd_of(ctx), y->data, y->count);
        return NULL;
    }
    float *own = NULL;
    const float *wt = s->wt;
    if (w != s->wsrc || !wt) {
        own = tdm_alloc(ctx->alloc, (size_t)w->count * sizeof(float));
        if (!own) return dn_oom(ctx);
        nwc_pack(w->data, O, C, k, own);
        wt = own;
    }
    int threads = dn_threads(ctx);
    nwc_job j = {x->data, wt, b ? b->data : NULL, y->data, L, C, O, k, Lo, begin, O, 1,
                 tdm_cpu_simd_of(ctx), s->gelu};
    /* Blocks of output channels whose Y rows (about 256 KB) stay in the core's cache from
     * one tap's product to the next: magika's 512 x 508 image in 4 blocks of 128 rows
     * (AVX2, 1 thread, ab_time.py CPU per run of the model, load 3-5: 79.2 -> 75.1 ms; 256
     * rows 71.2, 96 rows 70.7, 128 rows 69.6 in one run). More blocks
     * when the images alone do not give every thread two items. */
    int64_t rows = 65536 / Lo / 16 * 16;
    if (rows < 16) rows = 16;
    if (threads > 1 && N * ((O + rows - 1) / rows) < 2 * (int64_t)threads) {
        int64_t want = (2 * (int64_t)threads + N - 1) / N;
        int64_t r2 = ((O + want - 1) / want + 15) / 16 * 16;
        if (r2 < rows) rows = r2;
    }
    if (rows < O) {
        j.rows = rows;
        j.blocks = (O + rows - 1) / rows;
    }
    int omp = dn_omp_begin();
    tdm_status *st = dn_parallel(ctx, N * j.blocks, nwc_item, &j);
    dn_omp_end(omp);
    tdm_free(ctx->alloc, own);
    return st;
}

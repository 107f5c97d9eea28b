/* CPU kernels, misc family: signal ops (HannWindow, HammingWindow, BlackmanWindow, DFT,
 * STFT). Transforms run in double: radix-2 FFT for power-of-two lengths, Bluestein's
 * chirp-z through a power-of-two FFT otherwise. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/alloc.h"
#include "core/checked.h"

/* k_misc.c */
void tdm_misc_store_f64(tdm_dtype dt, double v, void *dst);

tdm_status *tdm_misc_hann_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_hamming_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_blackman_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_dft_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_stft_run(tdm_kernel_ctx *ctx);

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* ---- windows ---- */

static tdm_status *window_run(tdm_kernel_ctx *ctx, int kind) {
    tdm_tensor *y = ctx->out[0];
    int64_t n = y->count;
    bool periodic = tdm_attr_int(ctx->node, "periodic", 1) != 0;
    double nn = periodic ? (double)n : (double)n - 1;
    size_t es = tdm_dtype_elem_size(y->dtype);
    for (int64_t i = 0; i < n; i++) {
        double a = nn > 0 ? 2 * M_PI * (double)i / nn : 0, v; /* nn == 0: size 1, symmetric */
        if (kind == 0) v = 0.5 - 0.5 * cos(a);
        else if (kind == 1) v = 25.0 / 46.0 - (1 - 25.0 / 46.0) * cos(a);
        else v = 0.42 - 0.5 * cos(a) + 0.08 * cos(2 * a);
        tdm_misc_store_f64(y->dtype, v, (char *)y->data + (size_t)i * es);
    }
    return NULL;
}

tdm_status *tdm_misc_hann_run(tdm_kernel_ctx *ctx) { return window_run(ctx, 0); }
tdm_status *tdm_misc_hamming_run(tdm_kernel_ctx *ctx) { return window_run(ctx, 1); }
tdm_status *tdm_misc_blackman_run(tdm_kernel_ctx *ctx) { return window_run(ctx, 2); }

/* ---- complex transforms ---- */

/* Plan for length-L transforms: interleaved complex (re, im) buffers of doubles. */
typedef struct fft_plan {
    int64_t L, M;      /* transform length; power-of-two work length (M == L if pow2) */
    double *tw;        /* M/2 twiddles e^{-2 pi i k / M} */
    double *chirp;     /* Bluestein: L values e^{-i pi n^2 / L} */
    double *chirp_f;   /* Bluestein: FFT of the conjugate chirp filter, M values */
} fft_plan;

static bool is_pow2(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

/* In-place radix-2 FFT of m (power of two) points; inverse uses conjugate twiddles. */
static void fft_pow2(double *a, int64_t m, const double *tw, int64_t tw_m, bool inv) {
    for (int64_t i = 1, j = 0; i < m; i++) {
        int64_t bit = m >> 1;
        for (; j & bit; bit >>= 1) j ^= bit;
        j ^= bit;
        if (i < j) {
            double t0 = a[2 * i], t1 = a[2 * i + 1];
            a[2 * i] = a[2 * j];
            a[2 * i + 1] = a[2 * j + 1];
            a[2 * j] = t0;
            a[2 * j + 1] = t1;
        }
    }
    for (int64_t len = 2; len <= m; len <<= 1) {
        int64_t half = len >> 1, step = tw_m / len;
        for (int64_t s = 0; s < m; s += len) {
            for (int64_t k = 0; k < half; k++) {
                double wr = tw[2 * k * step], wi = tw[2 * k * step + 1];
                if (inv) wi = -wi;
                double *p = a + 2 * (s + k), *q = a + 2 * (s + k + half);
                double xr = q[0] * wr - q[1] * wi, xi = q[0] * wi + q[1] * wr;
                q[0] = p[0] - xr;
                q[1] = p[1] - xi;
                p[0] += xr;
                p[1] += xi;
            }
        }
    }
}

static void plan_free(const tdm_allocator *a, fft_plan *p) {
    tdm_free(a, p->tw);
    tdm_free(a, p->chirp);
    tdm_free(a, p->chirp_f);
}

static tdm_status *plan_make(tdm_kernel_ctx *ctx, int64_t L, fft_plan *p) {
    memset(p, 0, sizeof *p);
    p->L = L;
    if (L > ((int64_t)1 << 28))
        return tdm_node_error(ctx->node, TDM_ERR_LIMIT, "transform length %lld is too large",
                              (long long)L);
    int64_t M = 1;
    if (is_pow2(L)) M = L;
    else while (M < 2 * L - 1) M <<= 1;
    p->M = M;
    p->tw = tdm_kscratch(ctx, (size_t)M * sizeof(double) + 64);
    if (!p->tw) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in DFT");
    for (int64_t k = 0; k < M / 2; k++) {
        double a = -2 * M_PI * (double)k / (double)M;
        p->tw[2 * k] = cos(a);
        p->tw[2 * k + 1] = sin(a);
    }
    if (M == L) return NULL;
    p->chirp = tdm_kscratch(ctx, (size_t)L * 2 * sizeof(double) + 64);
    p->chirp_f = tdm_kscratch(ctx, (size_t)M * 2 * sizeof(double) + 64);
    if (!p->chirp || !p->chirp_f) {
        plan_free(ctx->alloc, p);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in DFT");
    }
    for (int64_t n = 0; n < L; n++) {
        int64_t q = (int64_t)(((unsigned __int128)n * (unsigned __int128)n) % (unsigned __int128)(2 * L));
        double a = -M_PI * (double)q / (double)L;
        p->chirp[2 * n] = cos(a);
        p->chirp[2 * n + 1] = sin(a);
    }
    memset(p->chirp_f, 0, (size_t)M * 2 * sizeof(double));
    for (int64_t n = 0; n < L; n++) { /* conj chirp, symmetric wrap */
        p->chirp_f[2 * n] = p->chirp[2 * n];
        p->chirp_f[2 * n + 1] = -p->chirp[2 * n + 1];
        if (n) {
            p->chirp_f[2 * (M - n)] = p->chirp[2 * n];
            p->chirp_f[2 * (M - n) + 1] = -p->chirp[2 * n + 1];
        }
    }
    fft_pow2(p->chirp_f, M, p->tw, M, false);
    return NULL;
}

/* Transforms x (L complex points, interleaved) in place; `work` holds 2*M doubles.
 * inv: conjugate exponent (no 1/L scaling). */
static void dft_apply(const fft_plan *p, double *x, double *work, bool inv) {
    int64_t L = p->L, M = p->M;
    if (M == L) {
        fft_pow2(x, L, p->tw, M, inv);
        return;
    }
    /* inverse via conjugation: conj(DFT(conj(x))) */
    if (inv)
        for (int64_t n = 0; n < L; n++) x[2 * n + 1] = -x[2 * n + 1];
    memset(work, 0, (size_t)M * 2 * sizeof(double));
    for (int64_t n = 0; n < L; n++) {
        double cr = p->chirp[2 * n], ci = p->chirp[2 * n + 1];
        work[2 * n] = x[2 * n] * cr - x[2 * n + 1] * ci;
        work[2 * n + 1] = x[2 * n] * ci + x[2 * n + 1] * cr;
    }
    fft_pow2(work, M, p->tw, M, false);
    for (int64_t k = 0; k < M; k++) {
        double ar = work[2 * k], ai = work[2 * k + 1];
        double br = p->chirp_f[2 * k], bi = p->chirp_f[2 * k + 1];
        work[2 * k] = ar * br - ai * bi;
        work[2 * k + 1] = ar * bi + ai * br;
    }
    fft_pow2(work, M, p->tw, M, true);
    double s = 1.0 / (double)M;
    for (int64_t k = 0; k < L; k++) {
        double ar = work[2 * k] * s, ai = work[2 * k + 1] * s;
        double cr = p->chirp[2 * k], ci = p->chirp[2 * k + 1];
        x[2 * k] = ar * cr - ai * ci;
        x[2 * k + 1] = ar * ci + ai * cr;
    }
    if (inv)
        for (int64_t n = 0; n < L; n++) x[2 * n + 1] = -x[2 * n + 1];
}

/* Reads element i (complex component comp) of a float tensor as double. */
static inline double ld(const tdm_tensor *t, int64_t i) {
    switch (t->dtype) {
    case TDM_FLOAT: return ((const float *)t->data)[i];
    case TDM_DOUBLE: return ((const double *)t->data)[i];
    default: return tdm_tensor_get_f64(t, i);
    }
}

typedef struct dft_job {
    const tdm_tensor *x;
    tdm_tensor *y;
    const fft_plan *plan;
    double *work;       /* per chunk: 2*L + 2*M doubles */
    int64_t n_sig, n_chunks, inner, in_len, out_len, in_c, out_c;
    bool inv, one, irfft;
} dft_job;

static void dft_chunks(void *arg, int64_t b, int64_t e) {
    const dft_job *j = arg;
    int64_t L = j->plan->L;
    size_t es = tdm_dtype_elem_size(j->y->dtype);
    for (int64_t ch = b; ch < e; ch++) {
        double *buf = j->work + ch * (2 * L + 2 * j->plan->M);
        double *wk = buf + 2 * L;
        int64_t s0 = j->n_sig * ch / j->n_chunks, s1 = j->n_sig * (ch + 1) / j->n_chunks;
        for (int64_t s = s0; s < s1; s++) {
            int64_t outer = s / j->inner, in = s % j->inner;
            int64_t ibase = outer * j->in_len * j->inner + in, obase = outer * j->out_len * j->inner + in;
            memset(buf, 0, (size_t)L * 2 * sizeof(double));
            int64_t n = j->in_len < L ? j->in_len : L;
            if (j->irfft) { /* Hermitian completion of the one-sided spectrum */
                int64_t m = L / 2 + 1 < n ? L / 2 + 1 : n;
                for (int64_t k = 0; k < m; k++) {
                    int64_t e0 = (ibase + k * j->inner) * j->in_c;
                    double re = ld(j->x, e0), im = j->in_c == 2 ? ld(j->x, e0 + 1) : 0;
                    buf[2 * k] = re;
                    buf[2 * k + 1] = im;
                    if (k > 0 && L - k != k && L - k < L) {
                        buf[2 * (L - k)] = re;
                        buf[2 * (L - k) + 1] = -im;
                    }
                }
            } else {
                for (int64_t k = 0; k < n; k++) {
                    int64_t e0 = (ibase + k * j->inner) * j->in_c;
                    buf[2 * k] = ld(j->x, e0);
                    buf[2 * k + 1] = j->in_c == 2 ? ld(j->x, e0 + 1) : 0;
                }
            }
            dft_apply(j->plan, buf, wk, j->inv);
            double sc = j->inv ? 1.0 / (double)L : 1.0;
            for (int64_t k = 0; k < j->out_len; k++) {
                int64_t o = (obase + k * j->inner) * j->out_c;
                char *d = (char *)j->y->data;
                tdm_misc_store_f64(j->y->dtype, buf[2 * k] * sc, d + (size_t)o * es);
                if (j->out_c == 2)
                    tdm_misc_store_f64(j->y->dtype, buf[2 * k + 1] * sc, d + (size_t)(o + 1) * es);
            }
        }
    }
}

/* Runs length-L transforms over the `n_sig` signals of x viewed as [outer, in_len, inner, in_c]
 * into y viewed as [outer, out_len, inner, out_c]. */
static tdm_status *dft_core(tdm_kernel_ctx *ctx, const tdm_tensor *x, tdm_tensor *y, int64_t outer,
                            int64_t in_len, int64_t inner, int64_t L, int64_t out_len, bool inv,
                            bool irfft) {
    fft_plan plan;
    TDM_TRY(plan_make(ctx, L, &plan));
    int64_t n_sig = outer * inner;
    int64_t n_chunks = 4 * (int64_t)tdm_threadpool_size(ctx->pool);
    if (n_chunks > n_sig) n_chunks = n_sig;
    if (n_chunks < 1) n_chunks = 1;
    size_t per = (size_t)(2 * L + 2 * plan.M), total;
    if (!tdm_mul_size(per * sizeof(double), (size_t)n_chunks, &total)) {
        plan_free(ctx->alloc, &plan);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "DFT work buffer too large");
    }
    double *work = tdm_kscratch(ctx, total + 64);
    if (!work) {
        plan_free(ctx->alloc, &plan);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in DFT");
    }
    dft_job j = {x, y, &plan, work, n_sig, n_chunks, inner, in_len, out_len,
                 x->dims[x->rank - 1], y->dims[y->rank - 1], inv, false, irfft};
    if (n_sig > 0) tdm_parallel_for(ctx->pool, n_chunks, 1, dft_chunks, &j);
    tdm_free(ctx->alloc, work);
    plan_free(ctx->alloc, &plan);
    return NULL;
}

tdm_status *tdm_misc_dft_run(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    int r = x->rank;
    int64_t axis = 1;
    if (ctx->opset >= 20) {
        axis = -2;
        if (ctx->n_in > 2 && ctx->in[2] && ctx->in[2]->count > 0)
            axis = tdm_tensor_get_i64(ctx->in[2], 0);
    } else {
        axis = tdm_attr_int(ctx->node, "axis", 1);
    }
    int a;
    TDM_TRY(tdm_norm_axis(ctx->node, axis, r, &a));
    if (a == r - 1 || (x->dims[r - 1] != 1 && x->dims[r - 1] != 2))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "bad axis or complex dimension");
    bool inv = tdm_attr_int(ctx->node, "inverse", 0) != 0;
    bool one = tdm_attr_int(ctx->node, "onesided", 0) != 0;
    int64_t L = x->dims[a];
    if (ctx->n_in > 1 && ctx->in[1] && ctx->in[1]->count > 0) L = tdm_tensor_get_i64(ctx->in[1], 0);
    else if (inv && one) L = 2 * (x->dims[a] - 1);
    if (L < 1) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "dft_length must be positive");
    int64_t out_len = (one && !inv) ? L / 2 + 1 : L;
    if (y->dims[a] != out_len)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "output shape mismatch");
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < a; i++) outer *= x->dims[i];
    for (int i = a + 1; i < r - 1; i++) inner *= x->dims[i];
    return dft_core(ctx, x, y, outer, x->dims[a], inner, L, out_len, inv, inv && one);
}

tdm_status *tdm_misc_stft_run(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    const tdm_tensor *win = ctx->n_in > 2 ? ctx->in[2] : NULL;
    if (x->rank != 3 || (x->dims[2] != 1 && x->dims[2] != 2))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "signal must be [batch, length, 1|2]");
    int64_t step = tdm_tensor_get_i64(ctx->in[1], 0);
    int64_t fl = ctx->n_in > 3 && ctx->in[3] ? tdm_tensor_get_i64(ctx->in[3], 0)
                 : win ? win->dims[0] : x->dims[1];
    if (win && (win->rank != 1 || win->dims[0] != fl))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "window length must equal frame_length");
    if (step < 1 || fl < 1 || fl > x->dims[1])
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "bad frame_step or frame_length");
    int64_t frames = 1 + (x->dims[1] - fl) / step;
    bool one = tdm_attr_int(node, "onesided", 1) != 0;
    int64_t bins = one ? fl / 2 + 1 : fl;
    if (y->rank != 4 || y->dims[1] != frames || y->dims[2] != bins)
        return tdm_node_error(node, TDM_ERR_INTERNAL, "output shape mismatch");
    /* frames of the windowed signal as a [batch*frames, fl, 1, c] double tensor */
    int64_t nb = x->dims[0], c = x->dims[2];
    int64_t fdims[4] = {nb * frames, fl, 1, c};
    tdm_tensor *fr;
    TDM_TRY(tdm_tensor_new(ctx->alloc, TDM_DOUBLE, 4, fdims, &fr));
    double *fd = fr->data;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t f = 0; f < frames; f++)
            for (int64_t k = 0; k < fl; k++) {
                double w = win ? tdm_tensor_get_f64(win, k) : 1.0;
                int64_t src = ((b * x->dims[1]) + f * step + k) * c;
                double *d = fd + ((b * frames + f) * fl + k) * c;
                for (int64_t q = 0; q < c; q++) d[q] = ld(x, src + q) * w;
            }
    tdm_status *st = dft_core(ctx, fr, y, nb * frames, fl, 1, fl, bins, false, false);
    tdm_tensor_destroy(fr);
    return st;
}

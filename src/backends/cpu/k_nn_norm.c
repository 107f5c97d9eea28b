/* CPU kernels (nn family): BatchNormalization, InstanceNormalization, LRN,
 * MeanVarianceNormalization. Computed in float32 (statistics accumulated in double); other
 * floating dtypes are converted around the float kernel. */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_nn.h"
#include "core/alloc.h"

static tdm_status *dispatch(tdm_kernel_ctx *ctx, tdm_kernel_fn f32) {
    for (int i = 0; i < ctx->n_in; i++)
        if (ctx->in[i] && ctx->in[i]->dtype != TDM_FLOAT)
            return tdm_nn_run_as(ctx, TDM_UNDEFINED, TDM_FLOAT, f32);
    return f32(ctx);
}

static int64_t spatial_size(const tdm_tensor *x) {
    int64_t s = 1;
    for (int i = 2; i < x->rank; i++) s *= x->dims[i];
    return s;
}

/* Mean and (biased) variance of n values, two passes in double. */
static void moments(const float *x, int64_t n, double *mean, double *var) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    double m = n ? s / (double)n : 0.0, v = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = x[i] - m;
        v += d * d;
    }
    *mean = m;
    *var = n ? v / (double)n : 0.0;
}

/* ---- BatchNormalization ---- */

typedef struct bn_job {
    const float *x;
    float *y;
    const float *a, *b; /* y = x * a + b, per channel or per element of a channel */
    int64_t C, sp;
    bool per_elem;
} bn_job;

static void bn_planes(void *arg, int64_t p0, int64_t p1) {
    const bn_job *j = arg;
    for (int64_t p = p0; p < p1; p++) {
        int64_t c = p % j->C;
        const float *x = j->x + p * j->sp;
        float *y = j->y + p * j->sp;
        if (j->per_elem) {
            const float *a = j->a + c * j->sp, *b = j->b + c * j->sp;
            for (int64_t i = 0; i < j->sp; i++) y[i] = x[i] * a[i] + b[i];
        } else {
            float a = j->a[c], b = j->b[c];
            for (int64_t i = 0; i < j->sp; i++) y[i] = x[i] * a + b;
        }
    }
}

static tdm_status *batchnorm_f32(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    if (x->rank < 2)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input must have rank >= 2");
    int64_t N = x->dims[0], C = x->dims[1], sp = spatial_size(x);
    float eps = tdm_attr_float(ctx->node, "epsilon", 1e-5f);
    float mom = tdm_attr_float(ctx->node, "momentum", 0.9f);
    bool training;
    if (ctx->opset >= 14) training = tdm_attr_int(ctx->node, "training_mode", 0) != 0;
    else training = ctx->n_out > 1 && ctx->out[1] != NULL &&
                    !(ctx->opset < 7 && tdm_attr_int(ctx->node, "is_test", 0) != 0);
    const tdm_tensor *p[4];
    bool per_elem = false;
    for (int i = 0; i < 4; i++) {
        p[i] = ctx->in[1 + i];
        if (!p[i])
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input %d is required", 1 + i);
        if (p[i]->count == C * sp && sp != 1) per_elem = true;
        else if (p[i]->count != C)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "input %d has %lld values for %lld channels", 1 + i,
                                  (long long)p[i]->count, (long long)C);
    }
    if (per_elem && training)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED,
                              "training statistics with spatial=0 are not supported");
    for (int i = 0; i < 4; i++)
        if (per_elem && p[i]->count != C * sp)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "scale, B, mean and var must have the same shape");
    int64_t np = per_elem ? C * sp : C;
    float *ab = tdm_kscratch(ctx, (size_t)(2 * np) * sizeof(float));
    if (!ab) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    const float *scale = p[0]->data, *bias = p[1]->data, *mean = p[2]->data, *var = p[3]->data;
    const float *xd = x->data;
    if (training) {
        for (int64_t c = 0; c < C; c++) {
            double s = 0.0, q = 0.0;
            for (int64_t n = 0; n < N; n++) {
                const float *xp = xd + (n * C + c) * sp;
                for (int64_t i = 0; i < sp; i++) s += xp[i];
            }
            double cnt = (double)(N * sp), m = cnt > 0 ? s / cnt : 0.0;
            for (int64_t n = 0; n < N; n++) {
                const float *xp = xd + (n * C + c) * sp;
                for (int64_t i = 0; i < sp; i++) q += (xp[i] - m) * (xp[i] - m);
            }
            double v = cnt > 0 ? q / cnt : 0.0;
            float a = (float)(scale[c] / sqrt(v + eps));
            ab[c] = a;
            ab[np + c] = (float)(bias[c] - m * a);
            float bm = (float)m, bv = (float)v;
            if (ctx->n_out > 1 && ctx->out[1]) ((float *)ctx->out[1]->data)[c] = mean[c] * mom + bm * (1 - mom);
            if (ctx->n_out > 2 && ctx->out[2]) ((float *)ctx->out[2]->data)[c] = var[c] * mom + bv * (1 - mom);
            if (ctx->n_out > 3 && ctx->out[3]) ((float *)ctx->out[3]->data)[c] = bm;
            if (ctx->n_out > 4 && ctx->out[4]) ((float *)ctx->out[4]->data)[c] = bv;
        }
    } else {
        for (int64_t i = 0; i < np; i++) {
            float a = scale[i] / sqrtf(var[i] + eps);
            ab[i] = a;
            ab[np + i] = bias[i] - mean[i] * a;
        }
        for (int o = 1; o < ctx->n_out; o++) { /* running stats pass through */
            tdm_tensor *t = ctx->out[o];
            if (!t) continue;
            const tdm_tensor *src = p[o == 2 || o == 4 ? 3 : 2];
            if (t->count == src->count && t->dtype == TDM_FLOAT)
                memcpy(t->data, src->data, (size_t)t->count * sizeof(float));
        }
    }
    bn_job job = {xd, y->data, ab, ab + np, C, sp, per_elem};
    tdm_parallel_for(ctx->pool, N * C, sp > 16384 ? 1 : 16384 / (sp + 1) + 1, bn_planes, &job);
    tdm_free(ctx->alloc, ab);
    return NULL;
}

tdm_status *tdm_nn_run_batchnorm(tdm_kernel_ctx *ctx) { return dispatch(ctx, batchnorm_f32); }

/* ---- InstanceNormalization ---- */

typedef struct in_job {
    const float *x, *scale, *bias;
    float *y;
    int64_t C, sp;
    float eps;
} in_job;

static void in_planes(void *arg, int64_t p0, int64_t p1) {
    const in_job *j = arg;
    for (int64_t p = p0; p < p1; p++) {
        int64_t c = p % j->C;
        const float *x = j->x + p * j->sp;
        float *y = j->y + p * j->sp;
        double m, v;
        moments(x, j->sp, &m, &v);
        float a = (float)(j->scale[c] / sqrt(v + j->eps));
        float b = (float)(j->bias[c] - m * a);
        for (int64_t i = 0; i < j->sp; i++) y[i] = x[i] * a + b;
    }
}

static tdm_status *instancenorm_f32(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *s = ctx->in[1], *b = ctx->in[2];
    if (x->rank < 2 || s->count != x->dims[1] || b->count != x->dims[1])
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "scale and B must have one value per channel");
    int64_t sp = spatial_size(x);
    in_job job = {x->data, s->data, b->data, ctx->out[0]->data, x->dims[1], sp,
                  tdm_attr_float(ctx->node, "epsilon", 1e-5f)};
    tdm_parallel_for(ctx->pool, x->dims[0] * x->dims[1], sp > 8192 ? 1 : 8192 / (sp + 1) + 1,
                     in_planes, &job);
    return NULL;
}

tdm_status *tdm_nn_run_instancenorm(tdm_kernel_ctx *ctx) { return dispatch(ctx, instancenorm_f32); }

/* ---- LRN ---- */

typedef struct lrn_job {
    const float *x;
    float *y;
    int64_t C, sp, size;
    float alpha, beta, bias;
} lrn_job;

static void lrn_planes(void *arg, int64_t p0, int64_t p1) {
    const lrn_job *j = arg;
    for (int64_t p = p0; p < p1; p++) {
        int64_t n = p / j->C, c = p % j->C;
        int64_t lo = c - (j->size - 1) / 2, hi = c + j->size / 2; /* inclusive */
        if (lo < 0) lo = 0;
        if (hi > j->C - 1) hi = j->C - 1;
        const float *x = j->x + p * j->sp;
        float *y = j->y + p * j->sp;
        for (int64_t i = 0; i < j->sp; i++) y[i] = 0.0f;
        for (int64_t cc = lo; cc <= hi; cc++) {
            const float *xc = j->x + (n * j->C + cc) * j->sp;
            for (int64_t i = 0; i < j->sp; i++) y[i] += xc[i] * xc[i];
        }
        float k = j->alpha / (float)j->size;
        for (int64_t i = 0; i < j->sp; i++) {
            float d = j->bias + k * y[i];
            y[i] = x[i] * (j->beta == 0.75f ? 1.0f / sqrtf(d * sqrtf(d)) : powf(d, -j->beta));
        }
    }
}

static tdm_status *lrn_f32(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    int64_t size = tdm_attr_int(ctx->node, "size", 0);
    if (size < 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "size must be positive");
    if (x->rank < 2)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input must have rank >= 2");
    int64_t sp = spatial_size(x);
    lrn_job job = {x->data, ctx->out[0]->data, x->dims[1], sp, size,
                   tdm_attr_float(ctx->node, "alpha", 1e-4f),
                   tdm_attr_float(ctx->node, "beta", 0.75f),
                   tdm_attr_float(ctx->node, "bias", 1.0f)};
    int64_t work = sp * (size < x->dims[1] ? size : x->dims[1]); /* the window within C */
    tdm_parallel_for(ctx->pool, x->dims[0] * x->dims[1], work > 16384 ? 1 : 16384 / (work + 1) + 1,
                     lrn_planes, &job);
    return NULL;
}

tdm_status *tdm_nn_run_lrn(tdm_kernel_ctx *ctx) { return dispatch(ctx, lrn_f32); }

/* ---- MeanVarianceNormalization: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9) ---- */

static tdm_status *mvn_f32(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    float *y = ctx->out[0]->data;
    const float *xd = x->data;
    int r = x->rank;
    bool red[TDM_MAX_RANK] = {false};
    size_t na = 0;
    const int64_t *axes = tdm_attr_ints(ctx->node, "axes", &na);
    static const int64_t def_axes[3] = {0, 2, 3};
    if (!axes) {
        axes = def_axes;
        na = 3;
    }
    for (size_t i = 0; i < na; i++) {
        int ax;
        TDM_TRY(tdm_norm_axis(ctx->node, axes[i], r, &ax));
        red[ax] = true;
    }
    /* kept-index strides: 0 on reduced axes */
    int64_t kstr[TDM_MAX_RANK], kept = 1;
    for (int i = r - 1; i >= 0; i--) {
        kstr[i] = red[i] ? 0 : kept;
        if (!red[i]) kept *= x->dims[i];
    }
    if (x->count == 0) return NULL;
    double *acc = tdm_kscratch(ctx, (size_t)kept * 2 * sizeof(double));
    if (!acc) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    memset(acc, 0, (size_t)kept * 2 * sizeof(double));
    double *sq = acc + kept;
    int64_t group = x->count / kept;
    for (int pass = 0; pass < 2; pass++) {
        int64_t idx[TDM_MAX_RANK] = {0}, k = 0;
        for (int64_t e = 0; e < x->count; e++) {
            if (pass == 0) {
                acc[k] += xd[e];
                sq[k] += (double)xd[e] * xd[e];
            } else {
                y[e] = (float)((xd[e] - acc[k]) / (sq[k] + 1e-9));
            }
            for (int i = r - 1; i >= 0; i--) {
                k += kstr[i];
                if (++idx[i] < x->dims[i]) break;
                k -= kstr[i] * idx[i];
                idx[i] = 0;
            }
        }
        if (pass == 0) {
            for (int64_t i = 0; i < kept; i++) {
                double m = acc[i] / (double)group, v = sq[i] / (double)group - m * m;
                acc[i] = m;
                sq[i] = sqrt(v > 0 ? v : 0);
            }
        }
    }
    tdm_free(ctx->alloc, acc);
    return NULL;
}

tdm_status *tdm_nn_run_mvn(tdm_kernel_ctx *ctx) { return dispatch(ctx, mvn_f32); }

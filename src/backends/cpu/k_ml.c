/* CPU kernels: ai.onnx.ml linear models and feature transforms (LinearRegressor, Scaler,
 * Normalizer, Binarizer, Imputer, ArrayFeatureExtractor). Tree ensembles are in
 * k_ml_tree.c. The attributes were checked by the schemas (src/ops/ml.c). */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/ml_util.h"
#include "core/alloc.h"

/* Element i of a float, double, int32 or int64 tensor. */
static inline double get(const tdm_tensor *t, int64_t i) {
    switch (t->dtype) {
    case TDM_FLOAT: return ((const float *)t->data)[i];
    case TDM_DOUBLE: return ((const double *)t->data)[i];
    case TDM_INT32: return ((const int32_t *)t->data)[i];
    default: return (double)((const int64_t *)t->data)[i];
    }
}

static int64_t features(const tdm_tensor *x) { return x->rank ? x->dims[x->rank - 1] : 1; }

static tdm_status *run_linear_regressor(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    float *y = ctx->out[0]->data;
    size_t n_coef = 0, n_int = 0;
    const float *coef = tdm_attr_floats(ctx->node, "coefficients", &n_coef);
    const float *ic = tdm_attr_floats(ctx->node, "intercepts", &n_int);
    int64_t T = tdm_attr_int(ctx->node, "targets", 1), F = features(x);
    int64_t N = F ? x->count / F : 0;
    if ((size_t)(F * T) != n_coef)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "%lld features but %zu coefficients for %lld targets", (long long)F,
                              n_coef, (long long)T);
    int post = ml_parse_post(tdm_attr_string(ctx->node, "post_transform", "NONE"));
    double s[64];
    double *row = T <= 64 ? s : tdm_alloc(ctx->alloc, (size_t)T * sizeof *row);
    if (!row) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    for (int64_t n = 0; n < N; n++) {
        for (int64_t t = 0; t < T; t++) {
            double acc = ic && n_int == (size_t)T ? ic[t] : 0;
            for (int64_t f = 0; f < F; f++) acc += get(x, n * F + f) * coef[t * F + f];
            row[t] = acc;
        }
        if (T > 1 || post == PT_PROBIT) ml_post_transform(post, row, T);
        for (int64_t t = 0; t < T; t++) y[n * T + t] = (float)row[t];
    }
    if (row != s) tdm_free(ctx->alloc, row);
    return NULL;
}

/* As ONNX Runtime: one score per class (one score between two labels: > 0 is the second);
 * transforms over 2+ classes; a single score becomes [1 - s, s] when two labels exist. */
static tdm_status *run_linear_classifier(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *yt = ctx->out[0], *zt = ctx->n_out > 1 ? ctx->out[1] : NULL;
    size_t n_coef = 0, n_icpt = 0, n_int = 0;
    const float *coef = tdm_attr_floats(ctx->node, "coefficients", &n_coef);
    const float *icpt = tdm_attr_floats(ctx->node, "intercepts", &n_icpt);
    const int64_t *lint = tdm_attr_ints(ctx->node, "classlabels_ints", &n_int);
    const tdm_attr *lstr = tdm_node_attr(ctx->node, "classlabels_strings");
    size_t n_str = lstr && lstr->type == TDM_ATTR_STRINGS ? lstr->n : 0;
    int64_t C = (int64_t)n_icpt, F = features(x), N = F ? x->count / F : 0;
    if (C == 0 || (size_t)(F * C) != n_coef)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "%lld features but %zu coefficients for %lld classes", (long long)F,
                              n_coef, (long long)C);
    int post = ml_parse_post(tdm_attr_string(ctx->node, "post_transform", "NONE"));
    bool two = C == 1 && (n_str ? n_str : n_int) == 2; /* one score, two labels */
    int64_t zc = two ? 2 : C;
    double sbuf[64];
    double *s = C <= 64 ? sbuf : tdm_alloc(ctx->alloc, (size_t)C * sizeof *s);
    if (!s) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    tdm_status *st = NULL;
    for (int64_t n = 0; n < N && !st; n++) {
        for (int64_t c = 0; c < C; c++) {
            float acc = 0; /* float, as ONNX Runtime's GEMM */
            for (int64_t f = 0; f < F; f++) acc += (float)get(x, n * F + f) * coef[c * F + f];
            s[c] = (float)(acc + icpt[c]);
        }
        int64_t k; /* label: index into the labels, or -1 / -2 for the literal "1" / "0" */
        if (C == 1) {
            bool pos = s[0] > 0;
            k = (n_str ? n_str : n_int) == 2 ? (pos ? 1 : 0) : (pos ? -1 : -2);
        } else {
            k = 0;
            for (int64_t c = 1; c < C; c++)
                if (s[c] > s[k]) k = c;
        }
        if (n_str) {
            const char *lab = k >= 0 ? lstr->strings[k] : k == -1 ? "1" : "0";
            char *cpy = tdm_strdup(yt->alloc, lab);
            if (!cpy) {
                st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
                break;
            }
            tdm_free(yt->alloc, ((char **)yt->data)[n]);
            ((char **)yt->data)[n] = cpy;
        } else {
            ((int64_t *)yt->data)[n] = k >= 0 ? lint[k] : k == -1 ? 1 : 0;
        }
        if (!zt) continue;
        float *z = (float *)zt->data + n * zc;
        if (C > 1) {
            ml_post_transform(post, s, C);
            for (int64_t c = 0; c < C; c++) z[c] = (float)s[c];
        } else if (post == PT_PROBIT) {
            z[0] = (float)ml_probit(s[0]);
            if (two) z[1] = 0;
        } else if (two) {
            z[0] = (float)(1 - s[0]);
            z[1] = (float)s[0];
        } else {
            z[0] = (float)s[0];
        }
    }
    if (s != sbuf) tdm_free(ctx->alloc, s);
    return st;
}

static tdm_status *run_scaler(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    float *y = ctx->out[0]->data;
    size_t ns = 0, no = 0;
    const float *scale = tdm_attr_floats(ctx->node, "scale", &ns);
    const float *offset = tdm_attr_floats(ctx->node, "offset", &no);
    int64_t F = features(x);
    if ((ns > 1 && (int64_t)ns != F) || (no > 1 && (int64_t)no != F))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "scale (%zu) and offset (%zu) must have 1 or %lld entries", ns, no,
                              (long long)F);
    for (int64_t i = 0; i < x->count; i++) {
        int64_t f = F ? i % F : 0;
        double o = no ? offset[no == 1 ? 0 : f] : 0, sc = ns ? scale[ns == 1 ? 0 : f] : 1;
        y[i] = (float)((get(x, i) - o) * sc);
    }
    return NULL;
}

static tdm_status *run_normalizer(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    float *y = ctx->out[0]->data;
    const char *norm = tdm_attr_string(ctx->node, "norm", "MAX");
    int64_t F = features(x), N = F ? x->count / F : 0;
    for (int64_t n = 0; n < N; n++) {
        const int64_t o = n * F;
        float z = 0; /* the row's norm, in float as ONNX Runtime sums it */
        if (!strcmp(norm, "MAX")) {
            z = -INFINITY;
            for (int64_t f = 0; f < F; f++) z = fmaxf(z, (float)get(x, o + f));
        } else if (!strcmp(norm, "L1")) {
            for (int64_t f = 0; f < F; f++) z += (float)fabs(get(x, o + f));
        } else {
            for (int64_t f = 0; f < F; f++) z += (float)(get(x, o + f) * get(x, o + f));
        }
        for (int64_t f = 0; f < F; f++) {
            double v = get(x, o + f);
            if (z == 0.0f) y[o + f] = (float)v;
            else if (!strcmp(norm, "L2")) y[o + f] = (float)(v < 0 ? -1 : 1) * sqrtf((float)(v * v) / z);
            else y[o + f] = (float)v / z;
        }
    }
    return NULL;
}

static tdm_status *run_binarizer(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *yt = ctx->out[0];
    double th = tdm_attr_float(ctx->node, "threshold", 0.0f);
    for (int64_t i = 0; i < x->count; i++) {
        double v = get(x, i);
        double r = v > th ? 1.0 : isnan(v) ? v : 0.0;
        switch (yt->dtype) {
        case TDM_FLOAT: ((float *)yt->data)[i] = (float)r; break;
        case TDM_DOUBLE: ((double *)yt->data)[i] = r; break;
        case TDM_INT32: ((int32_t *)yt->data)[i] = (int32_t)r; break;
        default: ((int64_t *)yt->data)[i] = (int64_t)r; break;
        }
    }
    return NULL;
}

static tdm_status *run_imputer(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *yt = ctx->out[0];
    int64_t F = features(x);
    const tdm_attr *fi = tdm_node_attr(ctx->node, "imputed_value_floats");
    const tdm_attr *ii = tdm_node_attr(ctx->node, "imputed_value_int64s");
    size_t nv = fi ? fi->n : ii ? ii->n : 0;
    if (nv == 0 || (nv > 1 && (int64_t)nv != F))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "%zu imputed values for %lld features", nv, (long long)F);
    if (x->dtype == TDM_FLOAT || x->dtype == TDM_DOUBLE) {
        if (!fi)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "a float input needs imputed_value_floats");
        double rep = tdm_attr_float(ctx->node, "replaced_value_float", 0.0f);
        for (int64_t i = 0; i < x->count; i++) {
            double v = get(x, i);
            bool hit = isnan(rep) ? isnan(v) : v == rep;
            double r = hit ? fi->floats[nv == 1 ? 0 : i % F] : v;
            if (yt->dtype == TDM_FLOAT) ((float *)yt->data)[i] = (float)r;
            else ((double *)yt->data)[i] = r;
        }
        return NULL;
    }
    if (!ii)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "an integer input needs imputed_value_int64s");
    int64_t rep = tdm_attr_int(ctx->node, "replaced_value_int64", 0);
    for (int64_t i = 0; i < x->count; i++) {
        int64_t v = x->dtype == TDM_INT32 ? ((const int32_t *)x->data)[i]
                                          : ((const int64_t *)x->data)[i];
        int64_t r = v == rep ? ii->ints[nv == 1 ? 0 : i % F] : v;
        if (yt->dtype == TDM_INT32) ((int32_t *)yt->data)[i] = (int32_t)r;
        else ((int64_t *)yt->data)[i] = r;
    }
    return NULL;
}

static tdm_status *run_array_feature_extractor(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *idx = ctx->in[1];
    tdm_tensor *y = ctx->out[0];
    int64_t F = features(x), K = idx->count, rows = F ? x->count / F : 0;
    const int64_t *ix = idx->data;
    for (int64_t k = 0; k < K; k++)
        if (ix[k] < 0 || ix[k] >= F)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "index %lld is out of range [0, %lld)", (long long)ix[k],
                                  (long long)F);
    size_t es = tdm_dtype_size(x->dtype);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < K; k++) {
            int64_t from = r * F + ix[k], to = r * K + k;
            if (x->dtype == TDM_STRING) {
                char **dst = y->data;
                char *c = tdm_strdup(y->alloc, ((char *const *)x->data)[from]);
                if (!c) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
                tdm_free(y->alloc, dst[to]);
                dst[to] = c;
            } else {
                memcpy((char *)y->data + to * es, (const char *)x->data + from * es, es);
            }
        }
    return NULL;
}

#define NUM (TDM_T(TDM_FLOAT) | TDM_T(TDM_DOUBLE) | TDM_T(TDM_INT32) | TDM_T(TDM_INT64))
const tdm_kernel_def tdm_cpu_kernels_ml[] = {
    {"ai.onnx.ml", "LinearRegressor", 1, 0, 0, NUM, run_linear_regressor, NULL, NULL},
    {"ai.onnx.ml", "LinearClassifier", 1, 0, 0, NUM, run_linear_classifier, NULL, NULL},
    {"ai.onnx.ml", "Scaler", 1, 0, 0, NUM, run_scaler, NULL, NULL},
    {"ai.onnx.ml", "Normalizer", 1, 0, 0, NUM, run_normalizer, NULL, NULL},
    {"ai.onnx.ml", "Binarizer", 1, 0, 0, NUM, run_binarizer, NULL, NULL},
    {"ai.onnx.ml", "Imputer", 1, 0, 0, NUM, run_imputer, NULL, NULL},
    {"ai.onnx.ml", "ArrayFeatureExtractor", 1, 0, 0, NUM | TDM_T(TDM_STRING),
     run_array_feature_extractor, NULL, NULL},
};
const int tdm_cpu_kernels_ml_count = (int)(sizeof tdm_cpu_kernels_ml / sizeof tdm_cpu_kernels_ml[0]);

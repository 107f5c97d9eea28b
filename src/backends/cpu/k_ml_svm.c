/* CPU kernels: support vector machines (ai.onnx.ml SVMClassifier, SVMRegressor).
 *
 * prepare() reads the attributes once (checked by the schemas in src/ops/ml.c) into a model:
 * the kernel and its parameters, where each class's support vectors start, which form the
 * model has (support vectors, or linear: one coefficient row per class), and the labels.
 * A run converts the rows to float, computes the kernel values of blocks of rows against
 * all support vectors (one GEMM per block for the dot-product kernels), and finishes each
 * row: one-vs-one pair scores and votes, pairwise probabilities coupled into class
 * probabilities, post transform, label. Rows are split over the session's threads.
 *
 * The numbers are ONNX Runtime's, whose behaviour defines what converted scikit-learn models
 * mean: rows and support vectors in float, the RBF distance summed in float, pair scores
 * summed in double, the probability coupling of libsvm run in float (at most 100 rounds),
 * the label from the votes even when probabilities are given, and its binary rules (two
 * scores [-s, s] or [1 - s, s]; a linear two-class model's label from its largest score). */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/ml_util.h"
#include "core/alloc.h"
#include "core/threadpool.h"

enum { K_LINEAR, K_POLY, K_RBF, K_SIGMOID };

typedef struct svm_model {
    const float *sv;   /* [V, F] support vectors (borrowed from the node); NULL: linear form */
    const float *coef; /* classifier: [C - 1, V], or [C, F] linear; regressor: [V] or [F] */
    const float *rho, *prob_a, *prob_b;
    const int64_t *per_class; /* support vectors of each class [C] */
    int64_t *first;           /* index of each class's first support vector [C] */
    int64_t V, F, C, pairs;
    int64_t z_cols; /* scores per row (classifier) */
    int kernel, post;
    float gamma, coef0, degree;
    bool classifier, proba, all_positive, one_class;
    const int64_t *labels_int;
    char **labels_str;
} svm_model;

static void svm_release(void *state, const tdm_allocator *a) {
    svm_model *m = state;
    if (!m) return;
    tdm_free(a, m->first);
    tdm_free(a, m);
}

static int parse_kernel(const char *s) {
    return !strcmp(s, "POLY") ? K_POLY : !strcmp(s, "RBF") ? K_RBF
           : !strcmp(s, "SIGMOID") ? K_SIGMOID : K_LINEAR;
}

static tdm_status *svm_prepare(const tdm_node *node, int opset, int n_in,
                               const tdm_tensor *const *in, const tdm_allocator *a,
                               void **state) {
    (void)opset, (void)n_in, (void)in;
    svm_model *m = tdm_calloc(a, 1, sizeof *m);
    if (!m) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    m->classifier = !strcmp(node->op_type, "SVMClassifier");
    m->kernel = parse_kernel(tdm_attr_string(node, "kernel_type", "LINEAR"));
    m->post = ml_parse_post(tdm_attr_string(node, "post_transform", "NONE"));
    size_t n_kp = 0, n_coef = 0, n_sv = 0, n_pa = 0, n = 0;
    const float *kp = tdm_attr_floats(node, "kernel_params", &n_kp);
    if (kp && n_kp == 3) m->gamma = kp[0], m->coef0 = kp[1], m->degree = kp[2];
    m->coef = tdm_attr_floats(node, "coefficients", &n_coef);
    m->rho = tdm_attr_floats(node, "rho", &n);
    m->sv = tdm_attr_floats(node, "support_vectors", &n_sv);
    tdm_status *st = NULL;
    if (m->classifier) {
        m->prob_a = tdm_attr_floats(node, "prob_a", &n_pa);
        m->prob_b = tdm_attr_floats(node, "prob_b", &n);
        m->proba = n_pa > 0;
        m->labels_int = tdm_attr_ints(node, "classlabels_ints", &n);
        m->C = (int64_t)n;
        const tdm_attr *ls = tdm_node_attr(node, "classlabels_strings");
        if (ls && ls->type == TDM_ATTR_STRINGS && ls->n) {
            m->labels_str = ls->strings;
            m->labels_int = NULL;
            m->C = (int64_t)ls->n;
        }
        m->pairs = m->C * (m->C - 1) / 2;
        m->per_class = tdm_attr_ints(node, "vectors_per_class", &n);
        m->first = tdm_calloc(a, (size_t)(m->C > 0 ? m->C : 1), sizeof *m->first);
        if (!m->first) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        for (int64_t c = 0; !st && c < m->C && (size_t)c < n; c++) {
            m->first[c] = m->V;
            m->V += m->per_class[c];
        }
        m->all_positive = true;
        for (size_t i = 0; i < n_coef; i++)
            if (!(m->coef[i] >= 0)) m->all_positive = false;
    } else {
        m->V = tdm_attr_int(node, "n_supports", 0);
        m->one_class = tdm_attr_int(node, "one_class", 0) != 0;
        m->C = 1;
    }
    if (m->V > 0) {
        m->F = m->V ? (int64_t)n_sv / m->V : 0;
        if (!st && (m->F == 0 || (size_t)(m->F * m->V) != n_sv))
            st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                         "support_vectors (%zu values) is not a multiple of %lld vectors", n_sv,
                         (long long)m->V);
    } else {
        m->sv = NULL;
        m->V = 0;
        m->kernel = K_LINEAR; /* the linear form: the coefficients are the vectors */
        m->F = m->C > 0 ? (int64_t)n_coef / m->C : 0;
    }
    if (m->classifier)
        m->z_cols = !m->sv || m->proba ? m->C : m->C > 2 ? m->pairs : 2;
    if (st) {
        svm_release(m, a);
        return st;
    }
    *state = m;
    return NULL;
}

/* ---- kernel values ---- */

/* K[r, v] = kernel(x_r, vec_v) for `rows` rows of x [rows, F] against n vectors [n, F];
 * `bias` is added to the dot products of the linear kernel (the linear form's rho[0]). */
static void kernel_block(const tdm_cpu_simd *simd, const svm_model *m, const float *x,
                         int64_t rows, const float *vec, int64_t n, float bias, float *K) {
    int64_t F = m->F;
    if (m->kernel == K_RBF) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t v = 0; v < n; v++) {
                const float *a = x + r * F, *b = vec + v * F;
                float sum = 0; /* in float and in order, as ONNX Runtime */
                for (int64_t f = 0; f < F; f++) {
                    float d = a[f] - b[f];
                    sum += d * d;
                }
                K[r * n + v] = expf(-m->gamma * sum);
            }
        return;
    }
    float alpha = m->kernel == K_LINEAR ? 1.0f : m->gamma;
    float c = m->kernel == K_LINEAR ? bias : m->coef0;
    tdm_sgemm(simd, NULL, false, true, rows, n, F, alpha, x, F, vec, F, 0.0f, K, n);
    for (int64_t i = 0; i < rows * n; i++) {
        float k = K[i] + c;
        if (m->kernel == K_POLY)
            k = m->degree == 2 ? k * k : m->degree == 3 ? k * k * k : powf(k, m->degree);
        else if (m->kernel == K_SIGMOID)
            k = tanhf(k);
        K[i] = k;
    }
}

/* ---- classifier rows ---- */

/* libsvm's coupling of pairwise probabilities r [C, C] into class probabilities p [C]
 * (Wu, Lin and Weng 2004, method 2), in float as ONNX Runtime runs it. Q [C, C], Qp [C]. */
static void couple(int64_t C, const float *r, float *p, float *Q, float *Qp) {
    memset(Q, 0, (size_t)(C * C) * sizeof *Q);
    for (int64_t i = 0; i < C; i++) {
        p[i] = 1.0f / (float)C;
        for (int64_t j = 0; j < C; j++) {
            if (j == i) continue;
            Q[i * C + i] += r[j * C + i] * r[j * C + i];
            Q[i * C + j] = j < i ? Q[j * C + i] : -r[j * C + i] * r[i * C + j];
        }
    }
    float eps = 0.005f / (float)C;
    for (int round = 0; round < 100; round++) {
        float pQp = 0;
        for (int64_t i = 0; i < C; i++) {
            Qp[i] = 0;
            for (int64_t j = 0; j < C; j++) Qp[i] += Q[i * C + j] * p[j];
            pQp += p[i] * Qp[i];
        }
        float worst = 0;
        for (int64_t i = 0; i < C; i++) {
            float e = fabsf(Qp[i] - pQp);
            if (e > worst) worst = e;
        }
        if (worst < eps) break;
        for (int64_t i = 0; i < C; i++) {
            float d = (-Qp[i] + pQp) / Q[i * C + i];
            p[i] += d;
            pQp = (pQp + d * (d * Q[i * C + i] + 2 * Qp[i])) / (1 + d) / (1 + d);
            for (int64_t j = 0; j < C; j++) {
                Qp[j] = (Qp[j] + d * Q[i * C + j]) / (1 + d);
                p[j] /= (1 + d);
            }
        }
    }
}

static float logistic_f(float v) {
    float e = 1.0f / (1.0f + expf(-fabsf(v)));
    return v < 0 ? 1.0f - e : e;
}

/* Scratch of one worker: kernel values of a block, pair scores, votes, probability work. */
typedef struct svm_scratch {
    float *K, *pair, *r, *Q, *Qp;
    double *z;
    int64_t *votes;
} svm_scratch;

/* Transforms n scores (n > 1) and writes them. */
static void write_scores(const svm_model *m, const float *s, int64_t n, double *tmp, float *z) {
    for (int64_t i = 0; i < n; i++) tmp[i] = s[i];
    if (n > 1) ml_post_transform(m->post, tmp, n);
    else if (m->post == PT_PROBIT) tmp[0] = ml_probit(tmp[0]);
    for (int64_t i = 0; i < n; i++) z[i] = (float)tmp[i];
}

/* One row with support vectors: k [V] kernel values. Returns the label index. */
static int64_t finish_svc(const svm_model *m, const float *k, svm_scratch *w, float *z) {
    int64_t C = m->C, p = 0;
    memset(w->votes, 0, (size_t)C * sizeof *w->votes);
    for (int64_t i = 0; i + 1 < C; i++)
        for (int64_t j = i + 1; j < C; j++, p++) {
            /* pair (i, j): class i's vectors weigh with row j - 1, class j's with row i */
            const float *ci = m->coef + (j - 1) * m->V + m->first[i];
            const float *cj = m->coef + i * m->V + m->first[j];
            const float *ki = k + m->first[i], *kj = k + m->first[j];
            double sum = 0;
            for (int64_t v = 0; v < m->per_class[i]; v++) sum += ci[v] * ki[v];
            for (int64_t v = 0; v < m->per_class[j]; v++) sum += cj[v] * kj[v];
            sum += m->rho[p];
            w->pair[p] = (float)sum;
            w->votes[sum > 0 ? i : j]++;
        }
    int64_t best = 0;
    for (int64_t c = 1; c < C; c++)
        if (w->votes[c] > w->votes[best]) best = c;
    if (m->proba) {
        memset(w->r, 0, (size_t)(C * C) * sizeof *w->r);
        p = 0;
        for (int64_t i = 0; i + 1 < C; i++)
            for (int64_t j = i + 1; j < C; j++, p++) {
                float q = 1.0f - logistic_f(w->pair[p] * m->prob_a[p] + m->prob_b[p]);
                q = fminf(fmaxf(q, 1.0e-7f), 1 - 1.0e-7f);
                w->r[i * C + j] = q;
                w->r[j * C + i] = 1 - q;
            }
        float *prob = w->pair; /* the pair scores are no longer needed */
        couple(C, w->r, prob, w->Q, w->Qp);
        write_scores(m, prob, C, w->z, z);
    } else if (C > 2) {
        write_scores(m, w->pair, m->pairs, w->z, z);
    } else {
        float s = w->pair[0];
        if (m->post == PT_PROBIT) z[0] = (float)ml_probit(s), z[1] = 0;
        else if (m->post == PT_NONE) z[0] = -s, z[1] = s;
        else z[0] = 1.0f - s, z[1] = s;
    }
    return best;
}

/* One row of the linear form: s [C] scores. Returns the label index. */
static int64_t finish_linear(const svm_model *m, const float *s, svm_scratch *w, float *z) {
    int64_t best = 0;
    for (int64_t c = 1; c < m->C; c++)
        if (s[c] > s[best]) best = c;
    float top = s[best];
    if (m->C == 2 && !m->proba &&
        ((m->all_positive && top >= 0.5f) || (!m->all_positive && top > 0)))
        best = 1;
    write_scores(m, s, m->C, w->z, z);
    return best;
}

typedef struct svm_job {
    const svm_model *m;
    const float *x; /* [N, F] */
    float *z;       /* classifier: [N, z_cols]; regressor: [N] */
    int64_t *labels;
    const tdm_allocator *alloc;
    int failed;
    const tdm_cpu_simd *simd; /* the device's GEMM micro-kernel (cpu_simd.h) */
} svm_job;

enum { SVM_BLOCK = 64 };

static void svm_rows(void *arg, int64_t begin, int64_t end) {
    svm_job *j = arg;
    const svm_model *m = j->m;
    int64_t C = m->C, kc = m->sv ? m->V : C;
    size_t nf = (size_t)(SVM_BLOCK * kc) + (size_t)(m->pairs + 2 * C * C + 2 * C + 2);
    svm_scratch w = {0};
    w.K = tdm_alloc(j->alloc, nf * sizeof(float));
    w.z = tdm_alloc(j->alloc, (size_t)(m->pairs + C + 1) * sizeof *w.z);
    w.votes = tdm_alloc(j->alloc, (size_t)(C + 1) * sizeof *w.votes);
    if (!w.K || !w.z || !w.votes) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        goto done;
    }
    w.pair = w.K + SVM_BLOCK * kc;
    w.r = w.pair + m->pairs + C; /* pair scores, then the C probabilities that replace them */
    w.Q = w.r + C * C;
    w.Qp = w.Q + C * C;
    for (int64_t b = begin; b < end; b += SVM_BLOCK) {
        int64_t rows = end - b < SVM_BLOCK ? end - b : SVM_BLOCK;
        const float *x = j->x + b * m->F;
        if (m->sv) kernel_block(j->simd, m, x, rows, m->sv, m->V, 0.0f, w.K);
        else kernel_block(j->simd, m, x, rows, m->coef, kc, m->rho[0], w.K);
        for (int64_t r = 0; r < rows; r++) {
            const float *k = w.K + r * kc;
            if (!m->classifier) {
                float y = k[0];
                if (m->sv) {
                    y = 0;
                    for (int64_t v = 0; v < m->V; v++) y += k[v] * m->coef[v];
                    y += m->rho[0];
                }
                j->z[b + r] = m->one_class ? (y > 0 ? 1.0f : -1.0f) : y;
                continue;
            }
            float *z = j->z + (b + r) * m->z_cols;
            j->labels[b + r] = m->sv ? finish_svc(m, k, &w, z) : finish_linear(m, k, &w, z);
        }
    }
done:
    tdm_free(j->alloc, w.K);
    tdm_free(j->alloc, w.z);
    tdm_free(j->alloc, w.votes);
}

/* X as float [N, F] (ONNX Runtime converts every input type to float); *owned when copied. */
static const float *rows_as_float(const tdm_tensor *x, const tdm_allocator *a, float **owned) {
    *owned = NULL;
    if (x->dtype == TDM_FLOAT) return x->data;
    float *f = tdm_alloc(a, (size_t)x->count * sizeof *f + 1);
    if (!f) return NULL;
    for (int64_t i = 0; i < x->count; i++)
        f[i] = x->dtype == TDM_DOUBLE ? (float)((const double *)x->data)[i]
               : x->dtype == TDM_INT32 ? (float)((const int32_t *)x->data)[i]
                                       : (float)((const int64_t *)x->data)[i];
    *owned = f;
    return f;
}

static tdm_status *write_labels(const svm_model *m, const int64_t *lab, int64_t N, tdm_tensor *y) {
    for (int64_t r = 0; r < N; r++) {
        if (!m->labels_str) {
            ((int64_t *)y->data)[r] = m->labels_int[lab[r]];
            continue;
        }
        char *c = tdm_strdup(y->alloc, m->labels_str[lab[r]]);
        if (!c) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        tdm_free(y->alloc, ((char **)y->data)[r]);
        ((char **)y->data)[r] = c;
    }
    return NULL;
}

static tdm_status *run_svm(tdm_kernel_ctx *ctx) {
    const svm_model *m = ctx->state;
    const tdm_tensor *x = ctx->in[0];
    if (!m) return TDM_ERR(TDM_ERR_INTERNAL, "svm: not prepared");
    int64_t F = x->rank ? x->dims[x->rank - 1] : 1, N = x->rank == 2 ? x->dims[0] : 1;
    if (F != m->F || x->rank < 1 || x->rank > 2)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "the model has %lld features but the input has %lld",
                              (long long)m->F, (long long)F);
    tdm_tensor *zt = m->classifier ? (ctx->n_out > 1 ? ctx->out[1] : NULL) : ctx->out[0];
    int64_t zn = N * (m->classifier ? m->z_cols : 1);
    float *owned = NULL;
    const float *xf = rows_as_float(x, ctx->alloc, &owned);
    float *z = zt ? zt->data : tdm_alloc(ctx->alloc, (size_t)zn * sizeof *z + 1);
    int64_t *lab = m->classifier ? tdm_alloc(ctx->alloc, (size_t)N * sizeof *lab + 1) : NULL;
    tdm_status *st = NULL;
    if (!xf || !z || (m->classifier && !lab)) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    svm_job j = {m, xf, z, lab, ctx->alloc, 0, tdm_cpu_simd_of(ctx)};
    tdm_parallel_for(ctx->pool, N, SVM_BLOCK, svm_rows, &j);
    if (j.failed) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    else if (m->classifier) st = write_labels(m, lab, N, ctx->out[0]);
done:
    if (!zt) tdm_free(ctx->alloc, z);
    tdm_free(ctx->alloc, owned);
    tdm_free(ctx->alloc, lab);
    return st;
}

#define NUM (TDM_T(TDM_FLOAT) | TDM_T(TDM_DOUBLE) | TDM_T(TDM_INT32) | TDM_T(TDM_INT64))
const tdm_kernel_def tdm_cpu_kernels_ml_svm[] = {
    {"ai.onnx.ml", "SVMClassifier", 1, 0, 0, NUM, run_svm, svm_prepare, svm_release},
    {"ai.onnx.ml", "SVMRegressor", 1, 0, 0, NUM, run_svm, svm_prepare, svm_release},
};
const int tdm_cpu_kernels_ml_svm_count =
    (int)(sizeof tdm_cpu_kernels_ml_svm / sizeof tdm_cpu_kernels_ml_svm[0]);

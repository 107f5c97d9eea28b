/* CPU kernels: ai.onnx.ml encoders (OneHotEncoder, LabelEncoder, CategoryMapper,
 * FeatureVectorizer). The key lists are sorted once at plan time (prepare) and looked up
 * with a binary search per element. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/alloc.h"

/* A lookup table: keys (strings, int64 or doubles) sorted, with the position each had in
 * the attribute list. */
typedef struct ml_map {
    int kind;           /* 0 strings, 1 int64, 2 floating */
    int64_t n;
    const char **s;     /* borrowed from the node */
    int64_t *i;
    double *f;
    int64_t *pos;       /* original index of the k-th sorted key */
} ml_map;

static void map_free(ml_map *m, const tdm_allocator *a) {
    if (!m) return;
    tdm_free(a, m->s);
    tdm_free(a, m->i);
    tdm_free(a, m->f);
    tdm_free(a, m->pos);
    tdm_free(a, m);
}

/* qsort has no context: sort (key, position) pairs. */
typedef struct sk { const char *s; int64_t i; double f; int64_t pos; } sk;
static int cmp_s(const void *a, const void *b) { return strcmp(((const sk *)a)->s, ((const sk *)b)->s); }
static int cmp_i(const void *a, const void *b) {
    int64_t x = ((const sk *)a)->i, y = ((const sk *)b)->i;
    return x < y ? -1 : x > y;
}
/* NaN sorts last and equals NaN (a NaN key maps NaN inputs). */
static int cmp_fv(double x, double y) {
    if (isnan(x) || isnan(y)) return isnan(x) - isnan(y);
    return x < y ? -1 : x > y;
}
static int cmp_f(const void *a, const void *b) { return cmp_fv(((const sk *)a)->f, ((const sk *)b)->f); }

/* Builds a map over keys given as a strings, ints or floats attribute, or a tensor. */
static tdm_status *map_build(const tdm_allocator *a, const tdm_attr *at, const tdm_tensor *t,
                             ml_map **out) {
    if (!at && !t) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "no keys");
    ml_map *m = tdm_calloc(a, 1, sizeof *m);
    if (!m) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    int64_t n = at ? (int64_t)at->n : t ? t->count : 0;
    m->kind = at ? (at->type == TDM_ATTR_STRINGS ? 0 : at->type == TDM_ATTR_INTS ? 1 : 2)
                 : (t->dtype == TDM_STRING ? 0 : t->dtype == TDM_INT64 || t->dtype == TDM_INT32 ? 1 : 2);
    m->n = n;
    sk *tmp = tdm_calloc(a, (size_t)(n ? n : 1), sizeof *tmp);
    m->pos = tdm_calloc(a, (size_t)(n ? n : 1), sizeof *m->pos);
    if (m->kind == 0) m->s = tdm_calloc(a, (size_t)(n ? n : 1), sizeof *m->s);
    if (m->kind == 1) m->i = tdm_calloc(a, (size_t)(n ? n : 1), sizeof *m->i);
    if (m->kind == 2) m->f = tdm_calloc(a, (size_t)(n ? n : 1), sizeof *m->f);
    if (!tmp || !m->pos || (!m->s && !m->i && !m->f)) {
        tdm_free(a, tmp);
        map_free(m, a);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int64_t k = 0; k < n; k++) {
        tmp[k].pos = k;
        if (at) {
            if (m->kind == 0) tmp[k].s = at->strings[k];
            else if (m->kind == 1) tmp[k].i = at->ints[k];
            else tmp[k].f = at->floats[k];
        } else if (m->kind == 0) {
            tmp[k].s = ((char *const *)t->data)[k];
        } else if (m->kind == 1) {
            tmp[k].i = t->dtype == TDM_INT32 ? ((const int32_t *)t->data)[k] : ((const int64_t *)t->data)[k];
        } else {
            tmp[k].f = t->dtype == TDM_DOUBLE ? ((const double *)t->data)[k] : ((const float *)t->data)[k];
        }
    }
    qsort(tmp, (size_t)n, sizeof *tmp, m->kind == 0 ? cmp_s : m->kind == 1 ? cmp_i : cmp_f);
    for (int64_t k = 0; k < n; k++) {
        m->pos[k] = tmp[k].pos;
        if (m->kind == 0) m->s[k] = tmp[k].s;
        else if (m->kind == 1) m->i[k] = tmp[k].i;
        else m->f[k] = tmp[k].f;
    }
    tdm_free(a, tmp);
    *out = m;
    return NULL;
}

/* The attribute-list index of a key, -1 when absent (the first of equal keys). */
static int64_t map_find_s(const ml_map *m, const char *s) {
    int64_t lo = 0, hi = m->n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (strcmp(m->s[mid], s) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < m->n && !strcmp(m->s[lo], s) ? m->pos[lo] : -1;
}
static int64_t map_find_i(const ml_map *m, int64_t v) {
    int64_t lo = 0, hi = m->n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (m->i[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo < m->n && m->i[lo] == v ? m->pos[lo] : -1;
}
static int64_t map_find_f(const ml_map *m, double v) {
    int64_t lo = 0, hi = m->n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (cmp_fv(m->f[mid], v) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < m->n && !cmp_fv(m->f[lo], v) ? m->pos[lo] : -1;
}

/* Element e of a tensor as the map's key type. */
static int64_t lookup(const ml_map *m, const tdm_tensor *x, int64_t e) {
    switch (x->dtype) {
    case TDM_STRING: return m->kind == 0 ? map_find_s(m, ((char *const *)x->data)[e]) : -1;
    case TDM_INT64: return m->kind == 1 ? map_find_i(m, ((const int64_t *)x->data)[e]) : -1;
    case TDM_INT32: return m->kind == 1 ? map_find_i(m, ((const int32_t *)x->data)[e]) : -1;
    case TDM_FLOAT: {
        double v = ((const float *)x->data)[e];
        return m->kind == 2 ? map_find_f(m, v) : m->kind == 1 ? map_find_i(m, (int64_t)v) : -1;
    }
    case TDM_DOUBLE: {
        double v = ((const double *)x->data)[e];
        return m->kind == 2 ? map_find_f(m, v) : m->kind == 1 ? map_find_i(m, (int64_t)v) : -1;
    }
    default: return -1;
    }
}

static void release_map(void *state, const tdm_allocator *a) { map_free(state, a); }

/* ---- OneHotEncoder ---- */

static tdm_status *prepare_one_hot(const tdm_node *node, int opset, int n_in,
                                   const tdm_tensor *const *in, const tdm_allocator *a, void **state) {
    (void)opset, (void)n_in, (void)in;
    const tdm_attr *ci = tdm_node_attr(node, "cats_int64s");
    const tdm_attr *cs = tdm_node_attr(node, "cats_strings");
    return map_build(a, ci && ci->type == TDM_ATTR_INTS && ci->n ? ci : cs, NULL, (ml_map **)state);
}

static tdm_status *run_one_hot(tdm_kernel_ctx *ctx) {
    const ml_map *m = ctx->state;
    const tdm_tensor *x = ctx->in[0];
    float *y = ctx->out[0]->data;
    bool zeros = tdm_attr_int(ctx->node, "zeros", 1) != 0;
    memset(y, 0, (size_t)(x->count * m->n) * sizeof *y);
    for (int64_t e = 0; e < x->count; e++) {
        int64_t k = lookup(m, x, e);
        if (k >= 0) y[e * m->n + k] = 1.0f;
        else if (!zeros)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "element %lld is not a known category (zeros = 0)",
                                  (long long)e);
    }
    return NULL;
}

/* ---- LabelEncoder ---- */

typedef struct label_enc {
    ml_map *keys;
    const tdm_attr *vals;   /* values as a list attribute, or */
    const tdm_tensor *vt;   /* as a tensor (opset 4) */
    const tdm_tensor *dflt; /* default_tensor (opset 4), or NULL */
} label_enc;

static void release_label_enc(void *state, const tdm_allocator *a) {
    label_enc *l = state;
    if (!l) return;
    map_free(l->keys, a);
    tdm_free(a, l);
}

static const tdm_attr *first_list(const tdm_node *node, const char *prefix) {
    static const char *const kinds[3] = {"strings", "int64s", "floats"};
    for (int k = 0; k < 3; k++) {
        char name[32];
        snprintf(name, sizeof name, "%s_%s", prefix, kinds[k]);
        const tdm_attr *a = tdm_node_attr(node, name);
        if (a && (a->type == TDM_ATTR_STRINGS || a->type == TDM_ATTR_INTS || a->type == TDM_ATTR_FLOATS))
            return a;
    }
    return NULL;
}

static tdm_status *prepare_label_enc(const tdm_node *node, int opset, int n_in,
                                     const tdm_tensor *const *in, const tdm_allocator *a,
                                     void **state) {
    (void)opset, (void)n_in, (void)in;
    label_enc *l = tdm_calloc(a, 1, sizeof *l);
    if (!l) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    l->vals = first_list(node, "values");
    l->vt = tdm_attr_tensor(node, "values_tensor");
    l->dflt = tdm_attr_tensor(node, "default_tensor");
    tdm_status *st = map_build(a, first_list(node, "keys"), tdm_attr_tensor(node, "keys_tensor"),
                               &l->keys);
    if (st) {
        tdm_free(a, l);
        return st;
    }
    *state = l;
    return NULL;
}

static tdm_status *run_label_enc(tdm_kernel_ctx *ctx) {
    const label_enc *l = ctx->state;
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    const char *dstr = tdm_attr_string(ctx->node, "default_string", "_Unused");
    int64_t dint = tdm_attr_int(ctx->node, "default_int64", -1);
    float dflt_f = tdm_attr_float(ctx->node, "default_float", -0.0f);
    if (l->dflt && l->dflt->count == 1) {
        if (l->dflt->dtype == TDM_STRING) dstr = ((char *const *)l->dflt->data)[0];
        else if (l->dflt->dtype == TDM_INT64) dint = ((const int64_t *)l->dflt->data)[0];
        else if (l->dflt->dtype == TDM_FLOAT) dflt_f = ((const float *)l->dflt->data)[0];
    }
    for (int64_t e = 0; e < x->count; e++) {
        int64_t k = lookup(l->keys, x, e);
        switch (y->dtype) {
        case TDM_STRING: {
            const char *v = k < 0 ? dstr : l->vt ? ((char *const *)l->vt->data)[k] : l->vals->strings[k];
            char *c = tdm_strdup(y->alloc, v);
            if (!c) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
            tdm_free(y->alloc, ((char **)y->data)[e]);
            ((char **)y->data)[e] = c;
            break;
        }
        case TDM_INT64:
            ((int64_t *)y->data)[e] = k < 0 ? dint : l->vt ? ((const int64_t *)l->vt->data)[k] : l->vals->ints[k];
            break;
        case TDM_FLOAT:
            ((float *)y->data)[e] = k < 0 ? dflt_f : l->vt ? ((const float *)l->vt->data)[k] : l->vals->floats[k];
            break;
        default: { /* opset 4's values_tensor of another type: element copies */
            size_t es = tdm_dtype_size(y->dtype);
            if (!l->vt || l->vt->dtype != y->dtype || !es)
                return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "values of type %s",
                                      tdm_dtype_name(y->dtype));
            char *dst = (char *)y->data + (size_t)e * es;
            if (k >= 0) memcpy(dst, (const char *)l->vt->data + (size_t)k * es, es);
            else if (l->dflt && l->dflt->dtype == y->dtype && l->dflt->count == 1)
                memcpy(dst, l->dflt->data, es);
            else if (y->dtype == TDM_DOUBLE || y->dtype == TDM_FLOAT16 || y->dtype == TDM_BFLOAT16)
                memset(dst, 0, es), dst[es - 1] = (char)0x80; /* the spec's -0.0 */
            else memset(dst, 0xff, es);                        /* the spec's -1 */
            break;
        }
        }
    }
    return NULL;
}

/* ---- CategoryMapper ---- */

static tdm_status *prepare_category(const tdm_node *node, int opset, int n_in,
                                    const tdm_tensor *const *in, const tdm_allocator *a,
                                    void **state) {
    (void)opset, (void)n_in, (void)in;
    ml_map *pair = tdm_calloc(a, 2, sizeof *pair);
    if (!pair) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    ml_map *ms = NULL, *mi = NULL;
    tdm_status *st = map_build(a, tdm_node_attr(node, "cats_strings"), NULL, &ms);
    if (!st) st = map_build(a, tdm_node_attr(node, "cats_int64s"), NULL, &mi);
    if (st) {
        map_free(ms, a);
        tdm_free(a, pair);
        return st;
    }
    pair[0] = *ms, pair[1] = *mi; /* the maps' arrays now belong to pair */
    tdm_free(a, ms);
    tdm_free(a, mi);
    *state = pair;
    return NULL;
}

static void release_category(void *state, const tdm_allocator *a) {
    ml_map *pair = state;
    if (!pair) return;
    for (int k = 0; k < 2; k++) {
        tdm_free(a, pair[k].s);
        tdm_free(a, pair[k].i);
        tdm_free(a, pair[k].f);
        tdm_free(a, pair[k].pos);
    }
    tdm_free(a, pair);
}

static tdm_status *run_category(tdm_kernel_ctx *ctx) {
    const ml_map *pair = ctx->state;
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    const tdm_attr *ci = tdm_node_attr(ctx->node, "cats_int64s");
    const tdm_attr *cs = tdm_node_attr(ctx->node, "cats_strings");
    if (x->dtype == TDM_STRING) {
        int64_t d = tdm_attr_int(ctx->node, "default_int64", -1);
        for (int64_t e = 0; e < x->count; e++) {
            int64_t k = lookup(&pair[0], x, e);
            ((int64_t *)y->data)[e] = k < 0 ? d : ci->ints[k];
        }
        return NULL;
    }
    const char *d = tdm_attr_string(ctx->node, "default_string", "_Unused");
    for (int64_t e = 0; e < x->count; e++) {
        int64_t k = lookup(&pair[1], x, e);
        char *c = tdm_strdup(y->alloc, k < 0 ? d : cs->strings[k]);
        if (!c) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        tdm_free(y->alloc, ((char **)y->data)[e]);
        ((char **)y->data)[e] = c;
    }
    return NULL;
}

/* ---- FeatureVectorizer ---- */

static tdm_status *run_feature_vectorizer(tdm_kernel_ctx *ctx) {
    float *y = ctx->out[0]->data;
    size_t nd = 0;
    const int64_t *dims = tdm_attr_ints(ctx->node, "inputdimensions", &nd);
    int64_t total = ctx->out[0]->dims[1], N = ctx->out[0]->dims[0];
    memset(y, 0, (size_t)(N * total) * sizeof *y);
    int64_t col = 0;
    for (int i = 0; i < ctx->n_in && (size_t)i < nd; i++) {
        const tdm_tensor *x = ctx->in[i];
        int64_t C = x->rank ? x->dims[x->rank - 1] : 1, rows = C ? x->count / C : 0;
        if (rows != N)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "input %d has %lld rows, input 0 has %lld", i, (long long)rows,
                                  (long long)N);
        int64_t take = C < dims[i] ? C : dims[i]; /* fewer columns: zeros after them */
        for (int64_t r = 0; r < N; r++)
            for (int64_t c = 0; c < take; c++) {
                int64_t e = r * C + c;
                double v = x->dtype == TDM_FLOAT    ? ((const float *)x->data)[e]
                           : x->dtype == TDM_DOUBLE ? ((const double *)x->data)[e]
                           : x->dtype == TDM_INT32  ? ((const int32_t *)x->data)[e]
                                                    : (double)((const int64_t *)x->data)[e];
                y[r * total + col + c] = (float)v;
            }
        col += dims[i];
    }
    return NULL;
}

#define ML_NUM (TDM_T(TDM_FLOAT) | TDM_T(TDM_DOUBLE) | TDM_T(TDM_INT32) | TDM_T(TDM_INT64))
const tdm_kernel_def tdm_cpu_kernels_ml_encode[] = {
    {"ai.onnx.ml", "OneHotEncoder", 1, 0, 0, ML_NUM | TDM_T(TDM_STRING), run_one_hot,
     prepare_one_hot, release_map},
    {"ai.onnx.ml", "LabelEncoder", 1, 0, 0, TDM_T(TDM_STRING) | TDM_T(TDM_INT64) | TDM_T(TDM_FLOAT),
     run_label_enc, prepare_label_enc, release_label_enc},
    {"ai.onnx.ml", "CategoryMapper", 1, 0, 0, TDM_T(TDM_STRING) | TDM_T(TDM_INT64), run_category,
     prepare_category, release_category},
    {"ai.onnx.ml", "FeatureVectorizer", 1, 0, 0, ML_NUM, run_feature_vectorizer, NULL, NULL},
};
const int tdm_cpu_kernels_ml_encode_count =
    (int)(sizeof tdm_cpu_kernels_ml_encode / sizeof tdm_cpu_kernels_ml_encode[0]);

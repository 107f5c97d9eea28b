/* CPU kernels, misc family: Unique and Det. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/alloc.h"

/* k_misc.c */
void tdm_misc_store_f64(tdm_dtype dt, double v, void *dst);

tdm_status *tdm_misc_unique_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_det_run(tdm_kernel_ctx *ctx);

/* ---- Unique ---- */

typedef struct uq_view {
    const tdm_tensor *x;
    int64_t pre, len, post;
} uq_view;

/* Orders NaNs after everything else and equal to each other. */
#define UQ_FCMP(a, b) (isnan(a) ? (isnan(b) ? 0 : 1) : isnan(b) ? -1 : (a) < (b) ? -1 : (a) > (b))
#define UQ_ICMP(a, b) ((a) < (b) ? -1 : (a) > (b))

static int uq_elem(const tdm_tensor *t, int64_t i, int64_t j) {
    const void *d = t->data;
    switch (t->dtype) {
    case TDM_FLOAT: { float a = ((const float *)d)[i], b = ((const float *)d)[j]; return UQ_FCMP(a, b); }
    case TDM_DOUBLE: { double a = ((const double *)d)[i], b = ((const double *)d)[j]; return UQ_FCMP(a, b); }
    case TDM_FLOAT16: case TDM_BFLOAT16: {
        double a = tdm_tensor_get_f64(t, i), b = tdm_tensor_get_f64(t, j);
        return UQ_FCMP(a, b);
    }
    case TDM_INT8: return UQ_ICMP(((const int8_t *)d)[i], ((const int8_t *)d)[j]);
    case TDM_UINT8: case TDM_BOOL: return UQ_ICMP(((const uint8_t *)d)[i], ((const uint8_t *)d)[j]);
    case TDM_INT16: return UQ_ICMP(((const int16_t *)d)[i], ((const int16_t *)d)[j]);
    case TDM_UINT16: return UQ_ICMP(((const uint16_t *)d)[i], ((const uint16_t *)d)[j]);
    case TDM_INT32: return UQ_ICMP(((const int32_t *)d)[i], ((const int32_t *)d)[j]);
    case TDM_UINT32: return UQ_ICMP(((const uint32_t *)d)[i], ((const uint32_t *)d)[j]);
    case TDM_INT64: return UQ_ICMP(((const int64_t *)d)[i], ((const int64_t *)d)[j]);
    case TDM_UINT64: return UQ_ICMP(((const uint64_t *)d)[i], ((const uint64_t *)d)[j]);
    case TDM_STRING: {
        const char *a = ((char *const *)d)[i], *b = ((char *const *)d)[j];
        int c = strcmp(a ? a : "", b ? b : "");
        return c < 0 ? -1 : c > 0;
    }
    default: return 0;
    }
}

static int uq_slice(const uq_view *v, int64_t a, int64_t b) {
    for (int64_t p = 0; p < v->pre; p++) {
        int64_t oa = (p * v->len + a) * v->post, ob = (p * v->len + b) * v->post;
        for (int64_t q = 0; q < v->post; q++) {
            int c = uq_elem(v->x, oa + q, ob + q);
            if (c) return c;
        }
    }
    return 0;
}

/* Stable merge sort of idx[0..n) by slice order. */
static void uq_sort(const uq_view *v, int64_t *idx, int64_t *tmp, int64_t n) {
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) tmp[k++] = uq_slice(v, idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
            while (i < mid) tmp[k++] = idx[i++];
            while (j < hi) tmp[k++] = idx[j++];
        }
        memcpy(idx, tmp, (size_t)n * sizeof *idx);
    }
}

tdm_status *tdm_misc_unique_run(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *x = ctx->in[0];
    const tdm_attr *ax = tdm_node_attr(node, "axis");
    bool sorted = tdm_attr_int(node, "sorted", 1) != 0;
    uq_view v = {x, 1, x->count, 1};
    int axis = -1;
    if (ax) {
        if (x->rank == 0)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "axis given for a scalar input");
        TDM_TRY(tdm_norm_axis(node, ax->i, x->rank, &axis));
        v.len = x->dims[axis];
        for (int i = 0; i < axis; i++) v.pre *= x->dims[i];
        for (int i = axis + 1; i < x->rank; i++) v.post *= x->dims[i];
    }
    int64_t n = v.len;
    size_t nb = (size_t)n * sizeof(int64_t) + 64;
    int64_t *idx = tdm_kscratch(ctx, nb), *tmp = tdm_kscratch(ctx, nb);
    int64_t *grp = tdm_kscratch(ctx, nb);   /* group of each original index */
    int64_t *first = tdm_kscratch(ctx, nb); /* first occurrence per group */
    int64_t *cnt = tdm_kscratch(ctx, nb);
    int64_t *rank = tdm_kscratch(ctx, nb);  /* output position of each group */
    tdm_status *st = NULL;
    if (!idx || !tmp || !grp || !first || !cnt || !rank) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in Unique");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    uq_sort(&v, idx, tmp, n);
    int64_t u = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i == 0 || uq_slice(&v, idx[i - 1], idx[i]) != 0) {
            first[u] = idx[i];
            cnt[u] = 0;
            u++;
        }
        grp[idx[i]] = u - 1;
        cnt[u - 1]++;
    }
    /* output order: sorted groups, or groups by first occurrence */
    for (int64_t g = 0; g < u; g++) rank[g] = g;
    if (!sorted) {
        /* order groups by first occurrence: sort group ids by first[] */
        for (int64_t g = 0; g < u; g++) tmp[g] = g;
        for (int64_t w = 1; w < u; w *= 2) { /* merge sort by first[] */
            for (int64_t lo = 0; lo < u; lo += 2 * w) {
                int64_t mid = lo + w < u ? lo + w : u, hi = lo + 2 * w < u ? lo + 2 * w : u;
                int64_t i = lo, j = mid, k = lo;
                while (i < mid && j < hi) idx[k++] = first[tmp[j]] < first[tmp[i]] ? tmp[j++] : tmp[i++];
                while (i < mid) idx[k++] = tmp[i++];
                while (j < hi) idx[k++] = tmp[j++];
            }
            memcpy(tmp, idx, (size_t)u * sizeof *idx);
        }
        for (int64_t k = 0; k < u; k++) rank[tmp[k]] = k;
    }
    int64_t ydims[TDM_MAX_RANK];
    int yr = ax ? x->rank : 1;
    if (ax) {
        memcpy(ydims, x->dims, sizeof ydims);
        ydims[axis] = u;
    } else {
        ydims[0] = u;
    }
    if ((st = ctx->alloc_output(ctx, 0, x->dtype, yr, ydims))) goto done;
    tdm_tensor *y = ctx->out[0];
    size_t es = tdm_dtype_elem_size(x->dtype);
    for (int64_t g = 0; g < u; g++) {
        int64_t o = rank[g], s = first[g];
        for (int64_t p = 0; p < v.pre; p++) {
            int64_t so = (p * n + s) * v.post, dof = (p * u + o) * v.post;
            if (x->dtype == TDM_STRING) {
                for (int64_t q = 0; q < v.post; q++) {
                    const char *str = ((char *const *)x->data)[so + q];
                    char *c = tdm_strdup(y->alloc, str ? str : "");
                    if (!c) {
                        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in Unique");
                        goto done;
                    }
                    ((char **)y->data)[dof + q] = c;
                }
            } else {
                memcpy((char *)y->data + (size_t)dof * es, (const char *)x->data + (size_t)so * es,
                       (size_t)v.post * es);
            }
        }
    }
    int64_t d1 = u;
    if (ctx->n_out > 1 && !(st = ctx->alloc_output(ctx, 1, TDM_INT64, 1, &d1)) && ctx->out[1])
        for (int64_t g = 0; g < u; g++) ((int64_t *)ctx->out[1]->data)[rank[g]] = first[g];
    if (!st && ctx->n_out > 2 && !(st = ctx->alloc_output(ctx, 2, TDM_INT64, 1, &n)) && ctx->out[2])
        for (int64_t i = 0; i < n; i++) ((int64_t *)ctx->out[2]->data)[i] = rank[grp[i]];
    if (!st && ctx->n_out > 3 && !(st = ctx->alloc_output(ctx, 3, TDM_INT64, 1, &d1)) && ctx->out[3])
        for (int64_t g = 0; g < u; g++) ((int64_t *)ctx->out[3]->data)[rank[g]] = cnt[g];
done:
    tdm_free(ctx->alloc, idx);
    tdm_free(ctx->alloc, tmp);
    tdm_free(ctx->alloc, grp);
    tdm_free(ctx->alloc, first);
    tdm_free(ctx->alloc, cnt);
    tdm_free(ctx->alloc, rank);
    return st;
}

/* ---- Det ---- */

tdm_status *tdm_misc_det_run(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    int r = x->rank;
    if (r < 2 || x->dims[r - 1] != x->dims[r - 2])
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input must be [*, M, M]");
    int64_t m = x->dims[r - 1], nmat = y->count;
    if (m > 65536) return tdm_node_error(ctx->node, TDM_ERR_LIMIT, "matrix is too large");
    double *a = tdm_kscratch(ctx, (size_t)(m * m) * sizeof(double) + 64);
    if (!a) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in Det");
    size_t es = tdm_dtype_elem_size(y->dtype);
    for (int64_t b = 0; b < nmat; b++) {
        for (int64_t i = 0; i < m * m; i++) a[i] = tdm_tensor_get_f64(x, b * m * m + i);
        double det = 1;
        for (int64_t c = 0; c < m && det != 0; c++) {
            int64_t piv = c;
            for (int64_t i = c + 1; i < m; i++)
                if (fabs(a[i * m + c]) > fabs(a[piv * m + c])) piv = i;
            if (a[piv * m + c] == 0) {
                det = 0;
                break;
            }
            if (piv != c) {
                for (int64_t k = 0; k < m; k++) {
                    double t = a[c * m + k];
                    a[c * m + k] = a[piv * m + k];
                    a[piv * m + k] = t;
                }
                det = -det;
            }
            double d = a[c * m + c];
            det *= d;
            for (int64_t i = c + 1; i < m; i++) {
                double f = a[i * m + c] / d;
                if (f == 0) continue;
                for (int64_t k = c + 1; k < m; k++) a[i * m + k] -= f * a[c * m + k];
            }
        }
        tdm_misc_store_f64(y->dtype, det, (char *)y->data + (size_t)b * es);
    }
    tdm_free(ctx->alloc, a);
    return NULL;
}

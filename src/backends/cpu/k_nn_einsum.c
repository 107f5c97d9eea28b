/* CPU kernel (nn family): Einsum.
 *
 * Operands are strided views with one label per axis (a repeated label inside an operand
 * becomes one axis whose stride is the sum: the diagonal; a size-1 axis that broadcasts
 * gets stride 0). Operands are contracted left to right: at each step the labels of the
 * running result (A) and the next operand (B) are sorted into batch (kept, in both), M (A
 * only), K (in both, not needed later) and N (B only), labels of B needed nowhere later are
 * summed out while B is copied, and one batched GEMM computes [batch, M, N]. Works in
 * float32 for float32 inputs and in double for every other dtype. */
#include <string.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_nn.h"
#include "core/alloc.h"
#include "core/checked.h"

#define EMAX TDM_EINSUM_MAX_LABELS

typedef struct eview {
    int rank;
    int labels[EMAX];
    int64_t dims[EMAX];
    int64_t strides[EMAX];
    const void *data;
} eview;

typedef struct ectx {
    tdm_kernel_ctx *k;
    bool dbl; /* work type: double (else float) */
    size_t es;
} ectx;

static bool has_label(const int *labels, int n, int l) {
    for (int i = 0; i < n; i++)
        if (labels[i] == l) return true;
    return false;
}

/* Copies `v` into a new contiguous buffer whose axes are `tl` (labels of v, in that order),
 * summing over v's other axes. */
static tdm_status *materialize(const ectx *e, const eview *v, int nt, const int *tl,
                               const tdm_einsum_spec *spec, void **out, int64_t *out_count) {
    int64_t tstr[EMAX], count = 1;
    for (int i = nt - 1; i >= 0; i--) {
        tstr[i] = count;
        if (!tdm_mul_i64(count, spec->dim[tl[i]], &count) ||
            count > TDM_MAX_TENSOR_BYTES / 8)
            return tdm_node_error(e->k->node, TDM_ERR_LIMIT, "intermediate result too large");
    }
    int64_t ostr[EMAX];
    for (int a = 0; a < v->rank; a++) {
        ostr[a] = 0;
        for (int i = 0; i < nt; i++)
            if (tl[i] == v->labels[a]) ostr[a] = tstr[i];
    }
    void *buf = tdm_kscratch(e->k, (size_t)(count ? count : 1) * e->es);
    if (!buf) return tdm_node_error(e->k->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    memset(buf, 0, (size_t)(count ? count : 1) * e->es);
    int64_t total = 1;
    for (int a = 0; a < v->rank; a++) total *= v->dims[a];
    if (total > 0 && count > 0) {
        int r = v->rank;
        int64_t idx[EMAX] = {0}, in_off = 0, out_off = 0;
        int64_t inner = r ? v->dims[r - 1] : 1;
        int64_t is = r ? v->strides[r - 1] : 0, os = r ? ostr[r - 1] : 0;
        for (int64_t done = 0; done < total; done += inner) {
            if (e->dbl) {
                const double *s = (const double *)v->data + in_off;
                double *d = (double *)buf + out_off;
                for (int64_t t = 0; t < inner; t++) d[t * os] += s[t * is];
            } else {
                const float *s = (const float *)v->data + in_off;
                float *d = (float *)buf + out_off;
                for (int64_t t = 0; t < inner; t++) d[t * os] += s[t * is];
            }
            for (int a = r - 2; a >= 0; a--) {
                in_off += v->strides[a];
                out_off += ostr[a];
                if (++idx[a] < v->dims[a]) break;
                in_off -= v->strides[a] * idx[a];
                out_off -= ostr[a] * idx[a];
                idx[a] = 0;
            }
        }
    }
    *out = buf;
    *out_count = count;
    return NULL;
}

static void view_contiguous(eview *v, int n, const int *labels, const tdm_einsum_spec *spec,
                            const void *data) {
    v->rank = n;
    v->data = data;
    int64_t s = 1;
    for (int i = n - 1; i >= 0; i--) {
        v->labels[i] = labels[i];
        v->dims[i] = spec->dim[labels[i]];
        v->strides[i] = s;
        s *= v->dims[i];
    }
}

/* View of input k: diagonals merged, broadcast axes with stride 0. */
static tdm_status *input_view(const ectx *e, const tdm_einsum_spec *spec, int k,
                              const tdm_tensor *t, const void *data, eview *v) {
    int64_t st[TDM_MAX_RANK];
    tdm_strides(t->rank, t->dims, st);
    v->rank = 0;
    v->data = data;
    for (int a = 0; a < t->rank; a++) {
        int l = spec->labels[k][a];
        int64_t d = t->dims[a], s = d == 1 ? 0 : st[a];
        int found = -1;
        for (int b = 0; b < v->rank; b++)
            if (v->labels[b] == l) found = b;
        if (found >= 0) {
            if (d != spec->dim[l] && d != 1)
                return tdm_node_error(e->k->node, TDM_ERR_INVALID_ARGUMENT,
                                      "repeated label with different sizes in input %d", k);
            v->strides[found] += s;
            continue;
        }
        v->labels[v->rank] = l;
        v->dims[v->rank] = spec->dim[l];
        v->strides[v->rank] = s;
        v->rank++;
    }
    return NULL;
}

static void batched_gemm(const ectx *e, int64_t batch, int64_t M, int64_t N, int64_t K,
                         const void *A, const void *B, void *C) {
    for (int64_t b = 0; b < batch; b++) {
        if (e->dbl)
            tdm_nn_dgemm(false, false, M, N, K, 1.0, (const double *)A + b * M * K, K,
                         (const double *)B + b * K * N, N, 0.0, (double *)C + b * M * N, N);
        else
            tdm_sgemm(tdm_cpu_simd_of(e->k), e->k->pool, false, false, M, N, K, 1.0f, (const float *)A + b * M * K, K,
                      (const float *)B + b * K * N, N, 0.0f, (float *)C + b * M * N, N);
    }
}

static tdm_status *einsum_work(ectx *e, const tdm_einsum_spec *spec, const void *const *data,
                               void *ydata) {
    tdm_kernel_ctx *ctx = e->k;
    int n = spec->n_ops;
    tdm_status *st = NULL;
    /* labels needed after operand k: the output's and those of operands > k */
    bool later[TDM_EINSUM_MAX_OPS][EMAX];
    for (int k = n - 1; k >= 0; k--)
        for (int l = 0; l < EMAX; l++)
            later[k][l] = k == n - 1 ? has_label(spec->out_labels, spec->out_rank, l)
                                     : later[k + 1][l] || has_label(spec->labels[k + 1],
                                                                    spec->rank[k + 1], l);
    eview v;
    TDM_TRY(input_view(e, spec, 0, ctx->in[0], data[0], &v));
    int cn = 0, cl[EMAX];
    for (int a = 0; a < v.rank; a++)
        if (later[0][v.labels[a]]) cl[cn++] = v.labels[a];
    void *cur = NULL;
    int64_t cnt;
    TDM_TRY(materialize(e, &v, cn, cl, spec, &cur, &cnt));
    for (int k = 1; k < n && !st; k++) {
        eview bv;
        st = input_view(e, spec, k, ctx->in[k], data[k], &bv);
        if (st) break;
        int bl[EMAX], nb = 0, ml[EMAX], nm = 0, kl[EMAX], nk = 0, nl[EMAX], nn = 0;
        for (int i = 0; i < cn; i++) {
            int l = cl[i];
            bool inb = false;
            for (int a = 0; a < bv.rank; a++) inb |= bv.labels[a] == l;
            if (inb && later[k][l]) bl[nb++] = l;
            else if (inb) kl[nk++] = l;
            else ml[nm++] = l;
        }
        for (int a = 0; a < bv.rank; a++) {
            int l = bv.labels[a];
            if (!has_label(cl, cn, l) && later[k][l]) nl[nn++] = l;
        }
        int64_t B = 1, M = 1, K = 1, N = 1;
        for (int i = 0; i < nb; i++) B *= spec->dim[bl[i]];
        for (int i = 0; i < nm; i++) M *= spec->dim[ml[i]];
        for (int i = 0; i < nk; i++) K *= spec->dim[kl[i]];
        for (int i = 0; i < nn; i++) N *= spec->dim[nl[i]];
        int order[EMAX], no = 0;
        eview av;
        view_contiguous(&av, cn, cl, spec, cur);
        void *ap = NULL, *bp = NULL, *res = NULL;
        for (int i = 0; i < nb; i++) order[no++] = bl[i];
        for (int i = 0; i < nm; i++) order[no++] = ml[i];
        for (int i = 0; i < nk; i++) order[no++] = kl[i];
        st = materialize(e, &av, no, order, spec, &ap, &cnt);
        no = nb;
        for (int i = 0; i < nk; i++) order[no++] = kl[i];
        for (int i = 0; i < nn; i++) order[no++] = nl[i];
        if (!st) st = materialize(e, &bv, no, order, spec, &bp, &cnt);
        int64_t rc;
        if (!st && (!tdm_mul_i64(B, M, &rc) || !tdm_mul_i64(rc, N, &rc) ||
                    rc > TDM_MAX_TENSOR_BYTES / 8))
            st = tdm_node_error(ctx->node, TDM_ERR_LIMIT, "intermediate result too large");
        if (!st) {
            res = tdm_kscratch(ctx, (size_t)(rc ? rc : 1) * e->es);
            if (!res) st = tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
        }
        if (!st) {
            memset(res, 0, (size_t)(rc ? rc : 1) * e->es);
            if (K > 0) batched_gemm(e, B, M, N, K, ap, bp, res);
        }
        tdm_free(ctx->alloc, ap);
        tdm_free(ctx->alloc, bp);
        tdm_free(ctx->alloc, cur);
        cur = res;
        cn = 0;
        for (int i = 0; i < nb; i++) cl[cn++] = bl[i];
        for (int i = 0; i < nm; i++) cl[cn++] = ml[i];
        for (int i = 0; i < nn; i++) cl[cn++] = nl[i];
    }
    if (!st) {
        eview fv;
        view_contiguous(&fv, cn, cl, spec, cur);
        void *out = NULL;
        st = materialize(e, &fv, spec->out_rank, spec->out_labels, spec, &out, &cnt);
        if (!st) {
            memcpy(ydata, out, (size_t)cnt * e->es);
            tdm_free(ctx->alloc, out);
        }
    }
    tdm_free(ctx->alloc, cur);
    return st;
}

tdm_status *tdm_nn_run_einsum(tdm_kernel_ctx *ctx) {
    const char *eq = tdm_attr_string(ctx->node, "equation", NULL);
    if (!eq) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "missing equation");
    int n = ctx->n_in;
    if (n < 1 || n > TDM_EINSUM_MAX_OPS)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "bad input count");
    int ranks[TDM_EINSUM_MAX_OPS];
    int64_t dims[TDM_EINSUM_MAX_OPS][TDM_MAX_RANK];
    tdm_dtype dt = ctx->in[0]->dtype;
    for (int k = 0; k < n; k++) {
        if (!ctx->in[k] || ctx->in[k]->dtype != dt)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "all inputs must have the same type");
        ranks[k] = ctx->in[k]->rank;
        for (int a = 0; a < TDM_MAX_RANK; a++) dims[k][a] = a < ranks[k] ? ctx->in[k]->dims[a] : 1;
    }
    tdm_einsum_spec spec;
    bool ok;
    TDM_TRY(tdm_nn_einsum_parse(ctx->node, eq, n, ranks, (const int64_t(*)[TDM_MAX_RANK])dims,
                                &spec, &ok));
    if (!ok) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "bad equation");
    ectx e = {ctx, dt != TDM_FLOAT, dt != TDM_FLOAT ? sizeof(double) : sizeof(float)};
    tdm_dtype wt = e.dbl ? TDM_DOUBLE : TDM_FLOAT;
    const void *data[TDM_EINSUM_MAX_OPS];
    void *conv[TDM_EINSUM_MAX_OPS] = {0};
    void *ywork = NULL;
    tdm_status *st = NULL;
    for (int k = 0; k < n && !st; k++) {
        data[k] = ctx->in[k]->data;
        if (dt == wt) continue;
        conv[k] = tdm_kscratch(ctx, (size_t)(ctx->in[k]->count ? ctx->in[k]->count : 1) * e.es);
        if (!conv[k]) {
            st = tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
            break;
        }
        tdm_nn_convert(ctx->in[k]->data, dt, conv[k], wt, ctx->in[k]->count);
        data[k] = conv[k];
    }
    tdm_tensor *y = ctx->out[0];
    if (!st && dt != wt) {
        ywork = tdm_kscratch(ctx, (size_t)(y->count ? y->count : 1) * e.es);
        if (!ywork) st = tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (!st) st = einsum_work(&e, &spec, data, ywork ? ywork : y->data);
    if (!st && ywork) tdm_nn_convert(ywork, wt, y->data, dt, y->count);
    tdm_free(ctx->alloc, ywork);
    for (int k = 0; k < n; k++) tdm_free(ctx->alloc, conv[k]);
    return st;
}

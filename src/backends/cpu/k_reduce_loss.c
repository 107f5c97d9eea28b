/* CPU kernels: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (reduce family).
 *
 * Both view the input as [N, C, D] (D = product of the trailing dims) and the target as
 * [N, D]. loss[n, d] = -w[t] * logp[n, t, d] with t = target[n, d]; elements whose target
 * equals ignore_index contribute 0 and weigh 0. "mean" divides the sum by the total
 * weight, "sum" sums, "none" keeps the [N, d1, ...] losses. */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_reduce.h"
#include "core/alloc.h"

static double get_c(const void *p, tdm_rd_ctype ct, int64_t i) {
    return ct == TDM_RD_F64 ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

/* Checks shapes and reads [N, C, D]. */
static tdm_status *loss_shapes(tdm_kernel_ctx *ctx, const tdm_tensor *x, const tdm_tensor *t,
                               const tdm_tensor *w, int64_t *N, int64_t *C, int64_t *D) {
    const tdm_node *node = ctx->node;
    if (x->rank < 2)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input must have rank >= 2");
    bool ok = t->rank == x->rank - 1 && t->dims[0] == x->dims[0];
    for (int i = 1; ok && i < t->rank; i++) ok = t->dims[i] == x->dims[i + 1];
    if (!ok) {
        char a[128], b[128];
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "target shape %s does not match input shape %s",
                              tdm_shape_str(t->rank, t->dims, a, sizeof a),
                              tdm_shape_str(x->rank, x->dims, b, sizeof b));
    }
    if (t->dtype != TDM_INT32 && t->dtype != TDM_INT64)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "target must be int32 or int64");
    *N = x->dims[0];
    *C = x->dims[1];
    *D = 1;
    for (int i = 2; i < x->rank; i++) *D *= x->dims[i];
    if (w && (w->rank != 1 || w->dims[0] != *C))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "weight must be 1-D with %lld values", (long long)*C);
    return NULL;
}

static tdm_status *loss_reduction(const tdm_node *node, int *red) {
    const char *r = tdm_attr_string(node, "reduction", "mean");
    if (strcmp(r, "none") == 0) *red = 0;
    else if (strcmp(r, "sum") == 0) *red = 1;
    else if (strcmp(r, "mean") == 0) *red = 2;
    else return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "unknown reduction '%s'", r);
    return NULL;
}

/* The NLL part shared by both ops; lp holds [N, C, D] log-probabilities in ct. */
static tdm_status *nll_core(tdm_kernel_ctx *ctx, tdm_rd_ctype ct, const void *lp, int64_t N,
                            int64_t C, int64_t D, const tdm_tensor *target, const void *w,
                            tdm_tensor *out) {
    const tdm_node *node = ctx->node;
    int red = 0;
    TDM_TRY(loss_reduction(node, &red));
    bool has_ii = tdm_node_attr(node, "ignore_index") != NULL;
    int64_t ii = tdm_attr_int(node, "ignore_index", 0);
    double *losses = NULL;
    if (red == 0) {
        if (out->count != N * D)
            return tdm_node_error(node, TDM_ERR_INTERNAL, "output size mismatch");
        losses = tdm_kscratch(ctx, (size_t)(N * D) * sizeof(double));
        if (!losses) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in %s", node->op_type);
    }
    double sum = 0, wsum = 0;
    for (int64_t n = 0; n < N; n++) {
        for (int64_t d = 0; d < D; d++) {
            int64_t j = n * D + d;
            int64_t t = tdm_tensor_get_i64(target, j);
            double l = 0;
            if (!(has_ii && t == ii)) {
                if (t < 0 || t >= C) {
                    tdm_free(ctx->alloc, losses);
                    return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                          "target value %lld is out of range [0, %lld)",
                                          (long long)t, (long long)C);
                }
                double wt = w ? get_c(w, ct, t) : 1.0;
                l = -get_c(lp, ct, (n * C + t) * D + d) * wt;
                sum += l;
                wsum += wt;
            }
            if (losses) losses[j] = l;
        }
    }
    if (losses) {
        tdm_rd_store(losses, TDM_RD_F64, out->data, out->dtype, N * D);
        tdm_free(ctx->alloc, losses);
    } else {
        double v = red == 2 ? sum / wsum : sum;
        tdm_rd_store(&v, TDM_RD_F64, out->data, out->dtype, 1);
    }
    return NULL;
}

static tdm_rd_ctype float_ctype(tdm_dtype dt) {
    return dt == TDM_DOUBLE ? TDM_RD_F64 : TDM_RD_F32;
}

tdm_status *tdm_rd_run_nll_loss(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *t = ctx->in[1];
    const tdm_tensor *w = ctx->n_in > 2 ? ctx->in[2] : NULL;
    int64_t N = 0, C = 0, D = 0;
    TDM_TRY(loss_shapes(ctx, x, t, w, &N, &C, &D));
    tdm_rd_ctype ct = float_ctype(x->dtype);
    const void *xd, *wd = NULL;
    void *x_owned = NULL, *w_owned = NULL;
    TDM_TRY(tdm_rd_load(ctx, x, ct, &xd, &x_owned));
    tdm_status *st = w ? tdm_rd_load(ctx, w, ct, &wd, &w_owned) : NULL;
    if (!st) st = nll_core(ctx, ct, xd, N, C, D, t, wd, ctx->out[0]);
    tdm_free(ctx->alloc, x_owned);
    tdm_free(ctx->alloc, w_owned);
    return st;
}

tdm_status *tdm_rd_run_sce_loss(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *t = ctx->in[1];
    const tdm_tensor *w = ctx->n_in > 2 ? ctx->in[2] : NULL;
    tdm_tensor *lp_out = ctx->n_out > 1 ? ctx->out[1] : NULL;
    int64_t N = 0, C = 0, D = 0;
    TDM_TRY(loss_shapes(ctx, x, t, w, &N, &C, &D));
    tdm_rd_ctype ct = float_ctype(x->dtype);
    const void *xd, *wd = NULL;
    void *x_owned = NULL, *w_owned = NULL, *lp = NULL;
    tdm_status *st = tdm_rd_load(ctx, x, ct, &xd, &x_owned);
    if (!st && w) st = tdm_rd_load(ctx, w, ct, &wd, &w_owned);
    bool direct = lp_out && tdm_rd_native(lp_out->dtype, ct);
    if (!st) {
        lp = direct ? lp_out->data : tdm_kscratch(ctx, (size_t)x->count * tdm_rd_csize(ct));
        if (!lp) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in SoftmaxCrossEntropyLoss");
    }
    if (!st) {
        tdm_rd_softmax(ctx->pool, ct, 1, xd, lp, N, C, D);
        st = nll_core(ctx, ct, lp, N, C, D, t, wd, ctx->out[0]);
    }
    if (!st && lp_out && !direct) tdm_rd_store(lp, ct, lp_out->data, lp_out->dtype, x->count);
    tdm_free(ctx->alloc, x_owned);
    tdm_free(ctx->alloc, w_owned);
    if (!direct) tdm_free(ctx->alloc, lp);
    return st;
}

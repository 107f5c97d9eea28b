/* CPU kernels, misc family: QConvTranspose (ops/fused.h), the reference every CPU runs when
 * oneDNN's int8 deconvolution cannot (k_dnnl_qdeconv.c): exact sums in 32-bit integers,
 * then the requantisation of the QConv reference (k_misc_quant.c): acc * (x_scale *
 * w_scale[m] / y_scale in float) + y_zero_point in double, rounded half to even, clamped to
 * the type's range narrowed by qmin / qmax. X and Y may be channels-last (x_nhwc / y_nhwc):
 * the loops read and write through strides, so no copy is made. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/alloc.h"
#include "ops/nn_geom.h"

/* k_misc.c */
void tdm_misc_store_f64(tdm_dtype dt, double v, void *dst);

tdm_status *tdm_misc_qconv_transpose_run(tdm_kernel_ctx *ctx);

typedef struct qdc_job {
    const tdm_tensor *x, *w, *wzp;
    const int32_t *bias; /* [M] or NULL */
    int32_t xzp;
    int sp;
    int64_t C, M, group, Cg, Mg;
    int64_t isz, osz, ksz;                 /* spatial sizes of X, Y and the kernel */
    int64_t xs_c, xs_p, xs_n, ys_c, ys_p, ys_n; /* strides of a channel, a pixel, an image */
    tdm_nn_geom g;
    uint32_t *acc; /* [N, M, osz] plain, wrapping sums */
} qdc_job;

static int32_t ld8(const tdm_tensor *t, int64_t i) {
    return t->dtype == TDM_INT8 ? ((const int8_t *)t->data)[i] : ((const uint8_t *)t->data)[i];
}

/* One (image, output channel) plane: every input pixel of the group's channels scattered
 * through every tap that lands inside Y. */
static void qdc_planes(void *arg, int64_t b, int64_t e) {
    const qdc_job *j = arg;
    int sp = j->sp;
    for (int64_t u = b; u < e; u++) {
        int64_t n = u / j->M, m = u % j->M, grp = m / j->Mg, mi = m % j->Mg;
        uint32_t *out = j->acc + u * j->osz;
        uint32_t b0 = j->bias ? (uint32_t)j->bias[m] : 0;
        for (int64_t o = 0; o < j->osz; o++) out[o] = b0;
        int32_t wz = 0;
        if (j->wzp) wz = ld8(j->wzp, j->wzp->count == 1 ? 0 : m);
        for (int64_t c = grp * j->Cg; c < (grp + 1) * j->Cg; c++) {
            const int64_t wbase = (c * j->Mg + mi) * j->ksz;
            int64_t ic[TDM_MAX_RANK] = {0};
            for (int64_t p = 0; p < j->isz; p++) {
                int32_t xv = ld8(j->x, n * j->xs_n + c * j->xs_c + p * j->xs_p) - j->xzp;
                int64_t kc[TDM_MAX_RANK] = {0};
                for (int64_t k = 0; xv != 0 && k < j->ksz; k++) {
                    int64_t off = 0;
                    bool ok = true;
                    for (int d = 0; d < sp && ok; d++) {
                        int64_t o = ic[d] * j->g.stride[d] + kc[d] * j->g.dil[d] - j->g.pad_b[d];
                        ok = o >= 0 && o < j->g.out[d];
                        off = off * j->g.out[d] + o;
                    }
                    if (ok) out[off] += (uint32_t)(xv * (ld8(j->w, wbase + k) - wz));
                    for (int d = sp - 1; d >= 0 && ++kc[d] == j->g.kernel[d]; d--) kc[d] = 0;
                }
                for (int d = sp - 1; d >= 0 && ++ic[d] == j->g.in[d]; d--) ic[d] = 0;
            }
        }
    }
}

static bool is8(const tdm_tensor *t) { return t->dtype == TDM_UINT8 || t->dtype == TDM_INT8; }

tdm_status *tdm_misc_qconv_transpose_run(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *const *in = ctx->in;
    tdm_tensor *y = ctx->out[0];
    const tdm_tensor *x = in[0], *w = in[3], *xs = in[1], *ws = in[4], *ys = in[6];
    const tdm_tensor *xz = in[2], *wz = in[5], *yz = in[7];
    const tdm_tensor *bias = ctx->n_in > 8 ? in[8] : NULL;
    bool xl = tdm_attr_int(node, "x_nhwc", 0) != 0, yl = tdm_attr_int(node, "y_nhwc", 0) != 0;
    if (!x || !w || !xs || !ws || !ys || !is8(x) || !is8(w) || !is8(y) || (xz && !is8(xz)) ||
        (wz && !is8(wz)) || (yz && !is8(yz)))
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED, "QConvTranspose takes 8-bit x, w and y");
    int r = x->rank, sp = r - 2;
    if (r < 3 || w->rank != r || y->rank != r || ((xl || yl) && r != 4))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "bad QConvTranspose ranks");
    qdc_job j = {.x = x, .w = w, .wzp = wz, .sp = sp};
    /* X's and Y's dims as NCHW */
    int64_t xd[TDM_MAX_RANK], yd[TDM_MAX_RANK];
    memcpy(xd, x->dims, sizeof(int64_t) * (size_t)r);
    memcpy(yd, y->dims, sizeof(int64_t) * (size_t)r);
    if (xl) xd[1] = x->dims[3], xd[2] = x->dims[1], xd[3] = x->dims[2];
    if (yl) yd[1] = y->dims[3], yd[2] = y->dims[1], yd[3] = y->dims[2];
    j.group = tdm_attr_int(node, "group", 1);
    j.C = xd[1];
    if (j.group < 1 || j.C != w->dims[0] || j.C % j.group)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "channels do not match the group count");
    j.Cg = j.C / j.group;
    j.Mg = w->dims[1];
    j.M = j.Mg * j.group;
    TDM_TRY(tdm_nn_geom_init(node, 1, TDM_NN_CONVT, r, xd, w->dims, &j.g));
    if (yd[0] != xd[0] || yd[1] != j.M)
        return tdm_node_error(node, TDM_ERR_INTERNAL, "QConvTranspose output shape mismatch");
    j.isz = j.osz = j.ksz = 1;
    for (int d = 0; d < sp; d++) {
        if (j.g.out[d] != yd[2 + d])
            return tdm_node_error(node, TDM_ERR_INTERNAL, "QConvTranspose output shape mismatch");
        j.isz *= xd[2 + d];
        j.osz *= yd[2 + d];
        j.ksz *= w->dims[2 + d];
    }
    if (xs->count != 1 || ys->count != 1 || (xz && xz->count != 1) || (yz && yz->count != 1) ||
        (ws->count != 1 && ws->count != j.M) || (wz && wz->count != ws->count))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "scales must be per-tensor (w: or per output channel)");
    if (bias && (bias->dtype != TDM_INT32 || bias->count != j.M))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "bias must be int32 with M values");
    j.bias = bias ? bias->data : NULL;
    j.xzp = xz ? ld8(xz, 0) : 0;
    j.xs_c = xl ? 1 : j.isz;
    j.xs_p = xl ? j.C : 1;
    j.xs_n = j.C * j.isz;
    j.ys_c = yl ? 1 : j.osz;
    j.ys_p = yl ? j.M : 1;
    j.ys_n = j.M * j.osz;
    if (y->count == 0) return NULL;
    j.acc = tdm_kscratch(ctx, (size_t)y->count * sizeof(uint32_t) + 64);
    if (!j.acc) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in QConvTranspose");
    tdm_parallel_for(ctx->pool, xd[0] * j.M, 1, qdc_planes, &j);
    double lo = y->dtype == TDM_INT8 ? -128 : 0, hi = y->dtype == TDM_INT8 ? 127 : 255;
    const tdm_attr *qa = tdm_node_attr(node, "qmin"), *qb = tdm_node_attr(node, "qmax");
    if (qa && qa->type == TDM_ATTR_INT && (double)qa->i > lo) lo = (double)qa->i;
    if (qb && qb->type == TDM_ATTR_INT && (double)qb->i < hi) hi = (double)qb->i;
    float fx = (float)tdm_tensor_get_f64(xs, 0), fy = (float)tdm_tensor_get_f64(ys, 0);
    double z = yz ? ld8(yz, 0) : 0;
    for (int64_t n = 0; n < xd[0]; n++)
        for (int64_t m = 0; m < j.M; m++) {
            float mult = fx * (float)tdm_tensor_get_f64(ws, ws->count == 1 ? 0 : m) / fy;
            const int32_t *a = (const int32_t *)j.acc + (n * j.M + m) * j.osz;
            for (int64_t p = 0; p < j.osz; p++) {
                double v = nearbyint((double)a[p] * (double)mult + z);
                v = v < lo ? lo : v > hi ? hi : v;
                tdm_misc_store_f64(y->dtype, v,
                                   (char *)y->data + n * j.ys_n + m * j.ys_c + p * j.ys_p);
            }
        }
    tdm_free(ctx->alloc, j.acc);
    return NULL;
}

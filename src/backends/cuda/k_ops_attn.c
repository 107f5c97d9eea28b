/* CUDA kernel table "ops_attn": tandem's fused Attention (src/ops/fused.h) on
 * kernels/cuda_attention.cu. Same contract as the CPU kernel (k_fused_attn.c): Q, K, V of
 * rank 4 whose first two axes broadcast like MatMul's batch dims, an optional additive mask
 * of rank <= 4 broadcast to the scores [B, H, So, To] (it may widen them when S or T is 1).
 * float32, float16 and bfloat16 (float32 accumulation); the mask has Q's dtype. */
#include <math.h>
#include <string.h>

#include "backends/cuda/kernels/k_ops.h"
#include "ops/fused.h"

/* Strides of a [B?, H?, rows, cols] operand's first two axes (0 when broadcast). */
static void pair_strides(const tdm_tensor *x, int64_t *s) {
    int64_t mat = x->dims[2] * x->dims[3];
    s[1] = x->dims[1] == 1 ? 0 : mat;
    s[0] = x->dims[0] == 1 ? 0 : mat * x->dims[1];
}

static tdm_status *run_attention(tdm_kernel_ctx *ctx) {
    const tdm_tensor *q = ctx->in[0], *k = ctx->in[1], *v = ctx->in[2];
    const tdm_tensor *m = ctx->n_in > 3 ? ctx->in[3] : NULL;
    tdm_tensor *y = ctx->out[0];
    if (q->rank != 4 || k->rank != 4 || v->rank != 4 || y->rank != 4 || (m && m->rank > 4))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "Q, K, V must have rank 4 and the mask rank <= 4");
    if (q->dims[3] != k->dims[3])
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "Q and K head sizes differ");
    tcu_attn_desc d;
    memset(&d, 0, sizeof d);
    d.S = q->dims[2];
    d.T = k->dims[2];
    d.D = q->dims[3];
    d.Dv = v->dims[3];
    d.B = y->dims[0];
    d.H = y->dims[1];
    int64_t md[4] = {1, 1, 1, 1};
    if (m)
        for (int i = 0; i < m->rank; i++) md[4 - m->rank + i] = m->dims[i];
    d.So = d.S != 1 ? d.S : md[2];
    d.To = d.T != 1 ? d.T : md[3];
    if (d.To != v->dims[2] || d.So != y->dims[2] || d.Dv != y->dims[3])
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "the scores have %lld columns, V %lld rows", (long long)d.To,
                              (long long)v->dims[2]);
    int64_t full[4] = {d.B, d.H, d.So, d.To};
    const tdm_tensor *ops[3] = {q, k, v};
    for (int i = 0; i < 2; i++)
        for (int o = 0; o < 3; o++)
            if (ops[o]->dims[i] != 1 && ops[o]->dims[i] != full[i])
                return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                      "batch / head dims do not broadcast");
    int64_t stride = 1;
    for (int i = 3; i >= 0; i--) {
        if (md[i] != 1 && md[i] != full[i])
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "the mask does not broadcast to the scores");
        d.mask_stride[i] = md[i] == 1 ? 0 : stride;
        stride *= md[i];
    }
    pair_strides(q, d.q_stride);
    pair_strides(k, d.k_stride);
    pair_strides(v, d.v_stride);
    const tdm_attr *sa = tdm_node_attr(ctx->node, "scale");
    d.scale = sa ? tdm_attr_float(ctx->node, "scale", 0.0f)
                 : (d.D > 0 ? 1.0f / sqrtf((float)d.D) : 1.0f);
    const void *qp, *kp, *vp, *mp;
    void *yp;
    TDM_TRY(kops_in(ctx, 0, &qp));
    TDM_TRY(kops_in(ctx, 1, &kp));
    TDM_TRY(kops_in(ctx, 2, &vp));
    TDM_TRY(kops_in(ctx, 3, &mp));
    TDM_TRY(kops_out(ctx, 0, &yp));
    if (!y->count) return NULL;
    if (d.To == 0) /* empty sums: zeros, like the CPU kernel */
        return cuda_check(cudaMemsetAsync(yp, 0, y->nbytes, cuda_ctx_device(ctx)->stream),
                          "clearing the attention output");
    return kops_status(ctx, tcu_attention((int)q->dtype, qp, kp, vp, m ? mp : NULL, yp, &d,
                                          kops_stream(ctx)),
                       "Attention");
}

const cuda_kernel_entry cuda_kernels_ops_attn[] = {
    {{TDM_FUSED_DOMAIN, "Attention", 1, 0, 0, KOPS_F, run_attention, NULL, NULL}, 0, 0, 0, NULL},
};
const int cuda_kernels_ops_attn_count =
    (int)(sizeof cuda_kernels_ops_attn / sizeof cuda_kernels_ops_attn[0]);

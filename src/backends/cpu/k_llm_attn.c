/* CPU kernel: ONNX opset-23 Attention (float32).
 *
 * Q [B, Hq, S, D] / K [B, Hk, Skv, D] / V [B, Hk, Skv, Dv], or 3-D [B, S, heads * size] with
 * q_num_heads and kv_num_heads; past_key / past_value [B, Hk, P, D] are prepended to K / V
 * (present_key / present_value = the concatenation, T = P + Skv rows). Query head h reads
 * kv head h / (Hq / Hk). Logits = scale * Q.K^T (scale default 1/sqrt(D)), soft-capped
 * (softcap * tanh(x / softcap)) when softcap > 0, plus the mask (bool: false = -inf; float:
 * added; broadcast to [B, Hq, S, T] from the right) and, with is_causal, -inf for key t >
 * s + P (bottom-right alignment). A row with nothing to attend to gives zeros. Softmax, . V.
 * Not implemented (refused at load, ops/llm.c): qk_matmul_output, other dtypes. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/k_llm.h"
#include "core/alloc.h"

typedef struct att_job {
    const float *q, *kc, *vc, *fmask;
    const uint8_t *bmask;
    float *y, *scratch;
    int64_t B, Hq, Hk, S, T, P, D, Dv, per_task;
    int64_t qs[3], ys[3]; /* strides of (b, h, s) in Q and Y */
    int64_t ms[4];        /* mask strides over [B, Hq, S, T] (0 = broadcast) */
    bool causal, has_mask;
    float scale, softcap;
    const tdm_llm_fns *f;
    const tdm_cpu_simd *simd;
} att_job;

static void att_heads(void *arg, int64_t p0, int64_t p1) {
    const att_job *j = arg;
    unsigned csr = tdm_cpu_flush_subnormals(); /* tiny attention weights: see cpu_simd.h */
    for (int64_t p = p0; p < p1; p++) {
        int64_t b = p / j->Hq, h = p % j->Hq, g = h / (j->Hq / j->Hk);
        float *scores = j->scratch + p * j->per_task, *bias = scores + j->T + 16;
        const float *kc = j->kc + (b * j->Hk + g) * j->T * j->D;
        const float *vc = j->vc + (b * j->Hk + g) * j->T * j->Dv;
        for (int64_t s = 0; s < j->S; s++) {
            const float *q = j->q + b * j->qs[0] + h * j->qs[1] + s * j->qs[2];
            float *y = j->y + b * j->ys[0] + h * j->ys[1] + s * j->ys[2];
            int64_t n = j->T;
            if (j->causal) n = s + j->P + 1 < j->T ? s + j->P + 1 : j->T;
            const float *bp = NULL;
            if (j->has_mask) {
                int64_t mo = b * j->ms[0] + h * j->ms[1] + s * j->ms[2];
                for (int64_t t = 0; t < n; t++) {
                    int64_t i = mo + t * j->ms[3];
                    bias[t] = j->fmask ? j->fmask[i] : (j->bmask[i] ? 0.0f : -INFINITY);
                }
                bp = bias;
            }
            tdm_llm_attn_row(j->f, j->simd, q, kc, j->D, vc, j->Dv, n, j->D, j->Dv, j->scale,
                             j->softcap, bp, false, 0.0f, scores, y);
        }
    }
    tdm_cpu_subnormals_restore(csr);
}

/* dst [B, H, P + n, w] = past rows then the new rows (src row (b, h, i) at src_off). */
static void concat_cache(float *dst, const float *past, const float *src, int64_t B, int64_t H,
                         int64_t P, int64_t n, int64_t w, bool three_d) {
    size_t row = (size_t)w * sizeof(float);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            float *d = dst + (b * H + h) * (P + n) * w;
            if (P) memcpy(d, past + (b * H + h) * P * w, (size_t)P * row);
            for (int64_t i = 0; i < n; i++) {
                const float *s = three_d ? src + ((b * n + i) * H + h) * w : src + ((b * H + h) * n + i) * w;
                memcpy(d + (P + i) * w, s, row);
            }
        }
}

tdm_status *tdm_llm_run_attention23(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *q = ctx->in[0], *k = ctx->in[1], *v = ctx->in[2];
    const tdm_tensor *mask = ctx->n_in > 3 ? ctx->in[3] : NULL;
    const tdm_tensor *pk = ctx->n_in > 4 ? ctx->in[4] : NULL, *pv = ctx->n_in > 5 ? ctx->in[5] : NULL;
    att_job j;
    memset(&j, 0, sizeof j);
    if (k->dtype != TDM_FLOAT || v->dtype != TDM_FLOAT || q->rank != k->rank || q->rank != v->rank ||
        (q->rank != 3 && q->rank != 4))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "Q, K, V must be float32 of the same rank (3 or 4)");
    bool three = q->rank == 3;
    int64_t Skv;
    j.B = q->dims[0];
    if (three) {
        j.Hq = tdm_attr_int(node, "q_num_heads", 0);
        j.Hk = tdm_attr_int(node, "kv_num_heads", 0);
        if (j.Hq <= 0 || j.Hk <= 0 || q->dims[2] % j.Hq || k->dims[2] % j.Hk || v->dims[2] % j.Hk)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "3-D Q/K/V hidden sizes must be multiples of q_num_heads / kv_num_heads");
        j.S = q->dims[1];
        Skv = k->dims[1];
        j.D = q->dims[2] / j.Hq;
        j.Dv = v->dims[2] / j.Hk;
        if (k->dims[2] / j.Hk != j.D || v->dims[1] != Skv)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "K's head size differs from Q's");
        j.qs[0] = j.S * j.Hq * j.D, j.qs[1] = j.D, j.qs[2] = j.Hq * j.D;
        j.ys[0] = j.S * j.Hq * j.Dv, j.ys[1] = j.Dv, j.ys[2] = j.Hq * j.Dv;
    } else {
        j.Hq = q->dims[1];
        j.Hk = k->dims[1];
        j.S = q->dims[2];
        Skv = k->dims[2];
        j.D = q->dims[3];
        j.Dv = v->dims[3];
        if (k->dims[3] != j.D || v->dims[1] != j.Hk || v->dims[2] != Skv)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "K / V shapes do not match Q");
        j.qs[0] = j.Hq * j.S * j.D, j.qs[1] = j.S * j.D, j.qs[2] = j.D;
        j.ys[0] = j.Hq * j.S * j.Dv, j.ys[1] = j.S * j.Dv, j.ys[2] = j.Dv;
    }
    if (j.Hk <= 0 || j.Hq % j.Hk || k->dims[0] != j.B || v->dims[0] != j.B)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "batch sizes differ or Q's heads are not a multiple of K's");
    if (!pk != !pv)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "past_key and past_value go together");
    if (pk) {
        if (pk->dtype != TDM_FLOAT || pv->dtype != TDM_FLOAT || pk->rank != 4 || pv->rank != 4 ||
            pk->dims[0] != j.B || pk->dims[1] != j.Hk || pk->dims[3] != j.D || pv->dims[0] != j.B ||
            pv->dims[1] != j.Hk || pv->dims[3] != j.Dv || pv->dims[2] != pk->dims[2])
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "past_key / past_value must be [B, kv heads, P, head size]");
        j.P = pk->dims[2];
    }
    j.T = j.P + Skv;
    if (mask) {
        if (mask->rank > 4 || (mask->dtype != TDM_FLOAT && mask->dtype != TDM_BOOL))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "attn_mask must be bool or float32, rank <= 4");
        int64_t full[4] = {j.B, j.Hq, j.S, j.T}, stride = 1;
        for (int d = 3; d >= 0; d--) {
            int md = d - (4 - mask->rank);
            int64_t n = md >= 0 ? mask->dims[md] : 1;
            if (n != 1 && n != full[d])
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                      "attn_mask does not broadcast to [%lld, %lld, %lld, %lld]",
                                      (long long)j.B, (long long)j.Hq, (long long)j.S, (long long)j.T);
            j.ms[d] = n == 1 ? 0 : stride;
            stride *= n;
        }
        j.has_mask = true;
        if (mask->dtype == TDM_FLOAT) j.fmask = mask->data;
        else j.bmask = mask->data;
    }
    j.causal = tdm_attr_int(node, "is_causal", 0) != 0;
    j.softcap = tdm_attr_float(node, "softcap", 0.0f);
    const tdm_attr *sa = tdm_node_attr(node, "scale");
    j.scale = sa ? tdm_attr_float(node, "scale", 1.0f) : 1.0f / sqrtf((float)(j.D > 0 ? j.D : 1));

    tdm_tensor *prk = ctx->n_out > 1 ? ctx->out[1] : NULL, *prv = ctx->n_out > 2 ? ctx->out[2] : NULL;
    size_t kn = (size_t)(j.B * j.Hk * j.T * j.D), vn = (size_t)(j.B * j.Hk * j.T * j.Dv);
    j.per_task = 2 * (j.T + 16);
    size_t need = (size_t)(j.B * j.Hq * j.per_task) + (prk ? 0 : kn) + (prv ? 0 : vn);
    float *mem = tdm_kscratch(ctx, (need ? need : 1) * sizeof(float));
    if (!mem) return tdm_node_error(node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    j.scratch = mem;
    float *extra = mem + j.B * j.Hq * j.per_task;
    float *kc = prk ? prk->data : extra;
    if (!prk) extra += kn;
    float *vc = prv ? prv->data : extra;
    concat_cache(kc, pk ? pk->data : NULL, k->data, j.B, j.Hk, j.P, Skv, j.D, three);
    concat_cache(vc, pv ? pv->data : NULL, v->data, j.B, j.Hk, j.P, Skv, j.Dv, three);
    j.kc = kc;
    j.vc = vc;
    j.q = q->data;
    j.y = ctx->out[0]->data;
    j.simd = tdm_cpu_simd_of(ctx);
    j.f = tdm_llm_fns_for(j.simd->level);
    tdm_parallel_for(ctx->pool, j.B * j.Hq, 1, att_heads, &j);
    tdm_free(ctx->alloc, mem);
    return NULL;
}

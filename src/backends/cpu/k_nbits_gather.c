/* com.microsoft GatherBlockQuantized on the CPU (schema and semantics in ops/quant_nbits.c):
 * uint8 data of 2, 4 or 8-bit codes packed along the last dim, gathered on axis 0 and
 * dequantized as (code - zero_point) * scale, one scale per block of block_size along
 * quantize_axis. An index outside [-s, s) gives a slice of zeros (ONNX Runtime's rule). */
#include <string.h>

#include "backends/cpu/cpu_kernels.h"

static inline int code_at(const uint8_t *p, int64_t i, int bits) {
    int64_t bit = i * bits;
    return (p[bit >> 3] >> (bit & 7)) & ((1 << bits) - 1);
}

typedef struct gbq {
    const uint8_t *data, *zp;
    const float *scales;
    int bits;
    int64_t bs, slice;   /* logical elements per index */
    int64_t dq, stride_q, nbq; /* quantize axis: logical dim, stride, blocks */
    int64_t s_last, z_row;     /* scales' last dim; bytes per row of packed zero points */
    bool q_last;
} gbq;

static inline float zp_at(const gbq *g, int64_t si) {
    if (!g->zp) return (float)(1 << (g->bits - 1));
    if (g->bits == 8) return (float)g->zp[si];
    int64_t r = si / g->s_last, c = si % g->s_last;
    return (float)((g->zp[r * g->z_row + (c * g->bits >> 3)] >> ((c * g->bits) & 7)) &
                   ((1 << g->bits) - 1));
}

/* out[0 .. slice) = dequantized logical elements [base, base + slice) of data */
static void dequant_slice(const gbq *g, int64_t base, float *out) {
    if (g->q_last) { /* blocks along the last dim: scale and zero point per run of bs */
        for (int64_t j = 0; j < g->slice;) {
            int64_t L = base + j, row = L / g->dq, c = L % g->dq;
            int64_t si = row * g->nbq + c / g->bs;
            int64_t end = (c / g->bs + 1) * g->bs;
            if (end > g->dq) end = g->dq;
            int64_t run = end - c;
            float s = g->scales[si], z = zp_at(g, si);
            for (int64_t t = 0; t < run; t++)
                out[j + t] = ((float)code_at(g->data, L + t, g->bits) - z) * s;
            j += run;
        }
        return;
    }
    for (int64_t j = 0; j < g->slice; j++) {
        int64_t L = base + j;
        int64_t outer = L / (g->stride_q * g->dq), cq = (L / g->stride_q) % g->dq;
        int64_t si = (outer * g->nbq + cq / g->bs) * g->stride_q + L % g->stride_q;
        out[j] = ((float)code_at(g->data, L, g->bits) - zp_at(g, si)) * g->scales[si];
    }
}

tdm_status *tdm_cpu_run_gather_bq(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *D = ctx->in[0], *I = ctx->in[1], *S = ctx->in[2];
    const tdm_tensor *Z = ctx->n_in > 3 ? ctx->in[3] : NULL;
    tdm_tensor *Y = ctx->out[0];
    int bits = (int)tdm_attr_int(node, "bits", 4);
    int64_t bs = tdm_attr_int(node, "block_size", 128);
    int r = D->rank, qa;
    if (D->dtype != TDM_UINT8 || r < 1 || (bits != 2 && bits != 4 && bits != 8) || bs < 16)
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED, "data must be uint8 with bits 2, 4 or 8");
    TDM_TRY(tdm_norm_axis(node, tdm_attr_int(node, "quantize_axis", 1), r, &qa));
    if (I->dtype != TDM_INT32 && I->dtype != TDM_INT64)
        return tdm_node_error(node, TDM_ERR_INVALID_MODEL, "indices must be int32 or int64");
    int64_t ld[TDM_MAX_RANK];
    memcpy(ld, D->dims, sizeof ld);
    ld[r - 1] *= 8 / bits;
    gbq g = {D->data, Z ? Z->data : NULL, S->data, bits, bs, 1, ld[qa], 1, 0, 0, 0, qa == r - 1};
    for (int i = 1; i < r; i++) g.slice *= ld[i];
    for (int i = qa + 1; i < r; i++) g.stride_q *= ld[i];
    g.nbq = (g.dq + bs - 1) / bs;
    g.s_last = qa == r - 1 ? g.nbq : ld[r - 1];
    g.z_row = (g.s_last * bits + 7) / 8;
    int64_t scount = S->count ? S->count : 0, want = 1;
    for (int i = 0; i < r; i++) want *= i == qa ? g.nbq : ld[i];
    if (scount != want)
        return tdm_node_error(node, TDM_ERR_INVALID_MODEL, "scales have %lld values, expected %lld",
                              (long long)scount, (long long)want);
    if (Z && (Z->dtype != TDM_UINT8 || Z->count != (bits == 8 ? want : want / g.s_last * g.z_row)))
        return tdm_node_error(node, TDM_ERR_INVALID_MODEL,
                              "zero_points must be uint8 with the scales' shape, packed");
    float *out = Y->data;
    int64_t n = I->count, rows = ld[0];
    for (int64_t i = 0; i < n; i++) {
        int64_t ix = I->dtype == TDM_INT32 ? ((const int32_t *)I->data)[i]
                                           : ((const int64_t *)I->data)[i];
        if (ix < 0) ix += rows;
        float *o = out + i * g.slice;
        if (ix < 0 || ix >= rows)
            memset(o, 0, (size_t)g.slice * sizeof(float));
        else
            dequant_slice(&g, ix * g.slice, o);
    }
    return NULL;
}

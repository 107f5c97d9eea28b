/* CPU kernel: Attention (ops/fused.h). Per (batch, head): scores = Q.K^T * scale (one
 * GEMM), + mask, row softmax, . V (one GEMM). The first two axes of Q, K, V and the mask
 * broadcast like MatMul's batch dims, and the mask may widen the scores' rows / columns
 * like the Add it replaces, so the kernel equals the subgraph it came from for every input
 * that subgraph accepts. Parallel over (batch, head) pairs, and over blocks of a pair's
 * score rows when there are fewer pairs than threads (BERT at batch 1 has 12 pairs: on 16
 * threads the pairs ran one after another on one thread, oneDNN's sgemm being serial).
 * Speed: the two products go to oneDNN's sgemm (serial JIT code; tdm_sgemm if it refuses);
 * the mask add, max, exp and sum of a row are the device's softmax_row variant (cpu_simd.h,
 * k_softmax_row.c: vectorised with a polynomial exp on AVX2 and AVX-512); subnormal results
 * flush to zero while a thread runs its pairs (tdm_cpu_flush_subnormals). */
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <string.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_dnnl.h"
#include "backends/cpu/k_fused.h"
#include "core/alloc.h"

/* C = alpha * A . op(B) (row-major, beta 0): oneDNN's sgemm, else tdm_sgemm. */
static void attn_gemm(const tdm_cpu_simd *simd, tdm_threadpool *pool, bool tb, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float *C, int64_t ldc) {
    if (dnnl_sgemm('N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc) ==
        dnnl_success)
        return;
    tdm_sgemm(simd, pool, false, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc);
}

typedef struct attn_job {
    tdm_kernel_ctx *ctx;
    const float *q, *k, *v, *mask;
    float *y;
    int64_t H;               /* output heads */
    int64_t S, T, D, Dv;     /* Q rows, K rows, head size, V columns */
    int64_t So, To;          /* score rows / columns after the mask's broadcast */
    int64_t qs[2], ks[2], vs[2]; /* (batch, head) strides, 0 when broadcast */
    int64_t ms[4];           /* mask strides over [B, H, So, To], 0 when broadcast */
    float scale;
    int64_t rows;            /* score rows a unit of work takes (So when not split) */
    int64_t chunks;          /* units per pair: ceil(So / rows) */
    tdm_threadpool *pool;    /* for the GEMMs when pairs run one after another */
    const tdm_cpu_simd *simd; /* the softmax row and tdm_sgemm's micro-kernel */
    atomic_int failed;
} attn_job;

/* Units u0..u1 of work: unit u is rows [c * rows, (c + 1) * rows) of pair u / chunks
 * (c = u % chunks); a widened score matrix (Q or K broadcast along its rows) is one unit per
 * pair. */
static void attn_units(void *arg, int64_t u0, int64_t u1) {
    attn_job *j = arg;
    if (omp_get_max_threads() != 1) omp_set_num_threads(1); /* sgemm stays serial */
    bool widen = j->So != j->S || j->To != j->T;
    size_t n = (size_t)(j->rows * j->To + (widen ? j->S * j->T : 0));
    float *buf = tdm_kscratch(j->ctx, (n ? n : 1) * sizeof(float));
    if (!buf) {
        atomic_store(&j->failed, 1);
        return;
    }
    float *scores = buf, *base = widen ? buf + j->rows * j->To : buf;
    unsigned csr = tdm_cpu_flush_subnormals(); /* P.V of tiny weights: see cpu_simd.h */
    for (int64_t u = u0; u < u1; u++) {
        int64_t p = u / j->chunks, s0 = u % j->chunks * j->rows;
        int64_t s1 = s0 + j->rows < j->So ? s0 + j->rows : j->So, ns = s1 - s0;
        int64_t b = p / j->H, h = p % j->H;
        const float *q = j->q + b * j->qs[0] + h * j->qs[1];
        const float *k = j->k + b * j->ks[0] + h * j->ks[1];
        const float *v = j->v + b * j->vs[0] + h * j->vs[1];
        if (widen) { /* (one unit: s0 = 0, ns = So) */
            attn_gemm(j->simd, j->pool, true, j->S, j->T, j->D, j->scale, q, j->D, k, j->D, base, j->T);
            for (int64_t s = 0; s < j->So; s++)
                for (int64_t t = 0; t < j->To; t++)
                    scores[s * j->To + t] = base[(j->S == 1 ? 0 : s) * j->T + (j->T == 1 ? 0 : t)];
        } else {
            attn_gemm(j->simd, j->pool, true, ns, j->T, j->D, j->scale, q + s0 * j->D, j->D, k,
                      j->D, scores, j->T);
        }
        for (int64_t s = s0; s < s1; s++) {
            float *row = scores + (s - s0) * j->To;
            const float *m = j->mask ? j->mask + b * j->ms[0] + h * j->ms[1] + s * j->ms[2] : NULL;
            j->simd->softmax_row(row, NULL, m, j->ms[3] != 0, j->To);
        }
        attn_gemm(j->simd, j->pool, false, ns, j->Dv, j->To, 1.0f, scores, j->To, v, j->Dv,
                  j->y + (p * j->So + s0) * j->Dv, j->Dv);
    }
    tdm_cpu_subnormals_restore(csr);
    tdm_free(j->ctx->alloc, buf);
}

/* Strides of a [B?, H?, rows, cols] operand's first two axes against the output's. */
static void pair_strides(const tdm_tensor *x, int64_t *s) {
    int64_t mat = x->dims[2] * x->dims[3];
    s[1] = x->dims[1] == 1 ? 0 : mat;
    s[0] = x->dims[0] == 1 ? 0 : mat * x->dims[1];
}

tdm_status *tdm_fused_run_attention(tdm_kernel_ctx *ctx) {
    const tdm_tensor *q = ctx->in[0], *k = ctx->in[1], *v = ctx->in[2];
    const tdm_tensor *m = ctx->n_in > 3 ? ctx->in[3] : NULL;
    tdm_tensor *y = ctx->out[0];
    if (q->rank != 4 || k->rank != 4 || v->rank != 4 || (m && m->rank > 4))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "Q, K, V must have rank 4 and the mask rank <= 4");
    if (k->dtype != TDM_FLOAT || v->dtype != TDM_FLOAT || (m && m->dtype != TDM_FLOAT))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "inputs must be float32");
    if (q->dims[3] != k->dims[3])
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "Q and K head sizes differ");
    attn_job j = {.ctx = ctx, .q = q->data, .k = k->data, .v = v->data, .y = y->data};
    j.S = q->dims[2];
    j.T = k->dims[2];
    j.D = q->dims[3];
    j.Dv = v->dims[3];
    j.H = y->dims[1];
    int64_t md[4] = {1, 1, 1, 1};
    if (m)
        for (int d = 0; d < m->rank; d++) md[4 - m->rank + d] = m->dims[d];
    j.So = j.S != 1 ? j.S : md[2];
    j.To = j.T != 1 ? j.T : md[3];
    if (j.To != v->dims[2] || j.So != y->dims[2])
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "the scores have %lld columns, V %lld rows", (long long)j.To,
                              (long long)v->dims[2]);
    /* every operand's axis must be 1 or the output's (infer computed the output shape) */
    int64_t full[4] = {y->dims[0], y->dims[1], j.So, j.To};
    const tdm_tensor *ops[3] = {q, k, v};
    for (int d = 0; d < 2; d++)
        for (int o = 0; o < 3; o++)
            if (ops[o]->dims[d] != 1 && ops[o]->dims[d] != full[d])
                return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                      "batch / head dims do not broadcast");
    int64_t stride = 1;
    for (int d = 3; d >= 0; d--) {
        if (md[d] != 1 && md[d] != full[d])
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "the mask does not broadcast to the scores");
        j.ms[d] = md[d] == 1 ? 0 : stride;
        stride *= md[d];
    }
    if (m) j.mask = m->data;
    pair_strides(q, j.qs);
    pair_strides(k, j.ks);
    pair_strides(v, j.vs);
    float scale = tdm_attr_float(ctx->node, "scale", 0.0f);
    const tdm_attr *sa = tdm_node_attr(ctx->node, "scale");
    j.scale = sa ? scale : (j.D > 0 ? 1.0f / sqrtf((float)j.D) : 1.0f);
    if (y->count == 0 || j.To == 0) return NULL; /* no rows, or empty sums: y stays zero */
    int64_t pairs = y->dims[0] * y->dims[1];
    int threads = tdm_threadpool_size(ctx->pool);
    j.simd = tdm_cpu_simd_of(ctx);
    /* fewer pairs than threads: each pair's rows in blocks, about two units a thread (blocks
     * of at least 8 rows) */
    bool widen = j.So != j.S || j.To != j.T;
    j.chunks = 1;
    if (threads > 1 && pairs < threads && !widen) {
        int64_t want = (2 * (int64_t)threads + pairs - 1) / pairs, most = (j.So + 7) / 8;
        j.chunks = want < most ? want : most;
        if (j.chunks < 1) j.chunks = 1;
    }
    j.rows = (j.So + j.chunks - 1) / j.chunks;
    if (j.rows < 1) j.rows = 1;
    j.chunks = (j.So + j.rows - 1) / j.rows;
    if (j.chunks < 1) j.chunks = 1;
    int64_t units = pairs * j.chunks;
    int omp = dn_omp_begin();
    if (threads > 1 && units > 1) {
        tdm_parallel_for(ctx->pool, units, 1, attn_units, &j);
    } else {
        j.pool = ctx->pool;
        attn_units(&j, 0, units);
    }
    dn_omp_end(omp);
    if (atomic_load(&j.failed))
        return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    return NULL;
}

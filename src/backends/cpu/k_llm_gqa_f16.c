/* CPU kernel: com.microsoft GroupQueryAttention in float16 (T = float16: query, key, value,
 * past/present caches, cos/sin caches and the output), the half-precision KV cache of
 * tools/gguf_to_onnx.py --kv-dtype float16. Semantics are those of the float32 kernel
 * (k_llm_gqa.c: cache rows, causal ranges, in-place present when it shares past's buffer,
 * rotary on the new rows, soft-cap, smooth_softmax, local window); attention_bias and
 * head_sink are refused in float16.
 *
 * The arithmetic is float32: query rows are widened (and rotated) once, the new key rows are
 * rotated in float32 and rounded to float16 as they enter the cache, outputs are rounded to
 * float16 at the end. Decode (one query row; items = (batch, kv head)): the cache is read 64
 * rows at a time, widened into a float32 block in L1 (F16C / AVX-512 conversions; the portable
 * variant uses core/half.h) that every head of the kv group then uses with the float kernel's
 * row routines (k_llm_simd.c: scores, p.V) and softmax, so each float16 cache row is read and
 * widened once per group. Prefill and chunks (items = (batch, kv head, block of up to 16 query
 * rows)): the block's key / value range is widened once, then per head two oneDNN sgemm calls
 * (scores, p.V) around each row's softmax, as the float kernel does. Items are shared out over
 * the pool one slot per thread; the scratch (one slot per thread) is kept by the node between
 * runs and grown by half again when a longer cache needs more: a decode step allocates
 * nothing. Not done (float kernel only): splitting one group's decode over several threads. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include <omp.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/k_dnnl.h"
#include "backends/cpu/k_llm.h"
#include "core/alloc.h"
#include "core/half.h"

/* out[i] = float(h[i]) for i < n: the variants (portable, F16C with AVX2, AVX-512). */
typedef void (*widen_fn)(const uint16_t *restrict h, int64_t n, float *restrict out);

static void widen_portable(const uint16_t *restrict h, int64_t n, float *restrict out) {
    for (int64_t i = 0; i < n; i++) out[i] = tdm_f16_to_f32(h[i]);
}

#ifdef TDM_SIMD_X86
#include <immintrin.h>

/* The cache rows are read once, in order, in short runs (one kv head's rows), widened a block
 * of 64 rows at a time between which the group's heads compute from L1: prefetching one block
 * ahead (64 rows of 64 halves, 8 KiB) lets the next block's loads run during that compute
 * (measured by test_llm_attn_f16: 2048 and 8192 were slower). Prefetches past the end of the
 * buffer are harmless (no faults). */
#ifndef WIDEN_AHEAD
#define WIDEN_AHEAD 4096
#endif

__attribute__((target("avx2,fma,f16c"))) static void widen_f16c(const uint16_t *restrict h,
                                                                 int64_t n, float *restrict out) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm_prefetch((const char *)(h + i + WIDEN_AHEAD), _MM_HINT_T0);
        for (int c = 0; c < 4; c++)
            _mm256_storeu_ps(out + i + 8 * c,
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i + 8 * c))));
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    for (; i < n; i++) out[i] = tdm_f16_to_f32(h[i]);
}

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c"))) static void
widen_avx512(const uint16_t *restrict h, int64_t n, float *restrict out) {
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        _mm_prefetch((const char *)(h + i + WIDEN_AHEAD), _MM_HINT_T0);
        _mm_prefetch((const char *)(h + i + WIDEN_AHEAD + 32), _MM_HINT_T0);
        for (int c = 0; c < 4; c++)
            _mm512_storeu_ps(out + i + 16 * c,
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i + 16 * c))));
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(out + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, h + i)));
    }
}
#endif

/* h[i] = float16(x[i]) for i < n, round to nearest even (as core/half.h): the variants. */
typedef void (*narrow_fn)(const float *restrict x, int64_t n, uint16_t *restrict h);

static void narrow_portable(const float *restrict x, int64_t n, uint16_t *restrict h) {
    for (int64_t i = 0; i < n; i++) h[i] = tdm_f32_to_f16(x[i]);
}

#ifdef TDM_SIMD_X86
__attribute__((target("avx2,fma,f16c"))) static void narrow_f16c(const float *restrict x,
                                                                  int64_t n,
                                                                  uint16_t *restrict h) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) h[i] = tdm_f32_to_f16(x[i]);
}

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c"))) static void
narrow_avx512(const float *restrict x, int64_t n, uint16_t *restrict h) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        _mm256_mask_storeu_epi16(h + i, m,
                                 _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i),
                                                 _MM_FROUND_TO_NEAREST_INT));
    }
}
#endif

static narrow_fn pick_narrow(tdm_cpu_isa level) {
#ifdef TDM_SIMD_X86
    if (level >= TDM_ISA_AVX2)
        return level >= TDM_ISA_AVX512_CORE ? narrow_avx512 : narrow_f16c;
#endif
    (void)level;
    return narrow_portable;
}

/* The widening variant for this level (the SIMD ones need F16C, which the AVX2 level
 * includes: cpu_isa.h). */
static widen_fn pick_widen(tdm_cpu_isa level) {
#ifdef TDM_SIMD_X86
    if (level >= TDM_ISA_AVX2)
        return level >= TDM_ISA_AVX512_CORE ? widen_avx512 : widen_f16c;
#endif
    (void)level;
    return widen_portable;
}

tdm_llm_widen_fn tdm_llm_widen_for(tdm_cpu_isa level) { return pick_widen(level); }
tdm_llm_narrow_fn tdm_llm_narrow_for(tdm_cpu_isa level) { return pick_narrow(level); }

/* ---- the kernel ---- */

enum { KV_BLOCK = 64, MAX_HEAD = 1024 };

typedef struct gqa16_job {
    const uint16_t *q, *k, *v, *pk, *pv, *cos, *sin;
    uint16_t *kc, *vc, *y;
    const int64_t *past, *tot;
    int64_t B, S, H, KVH, D, P, L, rot, win, qstride, kstride, koff, voff;
    bool rotary, interleaved, k_inplace, v_inplace, smooth, causal;
    float scale, softcap;
    widen_fn widen;
    narrow_fn narrow;
    const tdm_llm_fns *f;
    const tdm_cpu_simd *simd;
    float *scratch;
    int64_t per_slot, items, slots, rows_per_block, row_blocks;
} gqa16_job;

/* x (rot values, float32) rotated at position pos with the float16 caches. */
static void rotate16(const gqa16_job *j, float *x, int64_t pos) {
    float c[MAX_HEAD / 2], s[MAX_HEAD / 2];
    int64_t half = j->rot / 2;
    j->widen(j->cos + pos * half, half, c);
    j->widen(j->sin + pos * half, half, s);
    tdm_llm_rotate(x, c, s, j->rot, j->interleaved);
}

/* Pass 1: one (batch, kv head) pair per item: the present cache rows. */
static void gqa16_cache(void *arg, int64_t p0, int64_t p1) {
    const gqa16_job *j = arg;
    size_t row = (size_t)j->D * sizeof(uint16_t);
    float buf[MAX_HEAD];
    for (int64_t p = p0; p < p1; p++) {
        int64_t b = p / j->KVH, g = p % j->KVH, past = j->past[b];
        for (int c = 0; c < 2; c++) {
            uint16_t *dst = (c ? j->vc : j->kc) + p * j->L * j->D;
            const uint16_t *pst = c ? j->pv : j->pk;
            if (!(c ? j->v_inplace : j->k_inplace)) {
                if (past > 0) memcpy(dst, pst + p * j->P * j->D, (size_t)past * row);
                int64_t end = past + j->S;
                if (end < j->L) memset(dst + end * j->D, 0, (size_t)(j->L - end) * row);
            }
            for (int64_t s = 0; s < j->S; s++) {
                const uint16_t *src = (c ? j->v : j->k) + (b * j->S + s) * j->kstride +
                                      (c ? j->voff : j->koff) + g * j->D;
                uint16_t *r = dst + (past + s) * j->D;
                if (c == 1 || !j->rotary) {
                    memcpy(r, src, row);
                    continue;
                }
                j->widen(src, j->D, buf);
                rotate16(j, buf, past + s);
                j->narrow(buf, j->D, r);
            }
        }
    }
}

/* Item p of pass 2: query row s of (batch b, kv head g), all heads of the group together:
 * each block of KV_BLOCK cache rows is widened to float32 once (into L1) and used by every
 * head of the group with the float kernel's row routines. */
static void gqa16_item(const gqa16_job *j, int64_t p, float *scratch) {
    int64_t group = j->H / j->KVH, ld = j->L + 16;
    int64_t s = p % j->S, bg = p / j->S, b = bg / j->KVH, g = bg % j->KVH;
    float *scores = scratch, *qbuf = scores + group * ld, *ybuf = qbuf + group * j->D;
    float *blk = ybuf + group * j->D; /* KV_BLOCK rows of keys or values */
    const uint16_t *kc = j->kc + bg * j->L * j->D, *vc = j->vc + bg * j->L * j->D;
    int64_t past = j->past[b], tot = j->tot[b];
    int64_t n = j->causal && past + s + 1 < tot ? past + s + 1 : tot;
    int64_t lo = j->win > 0 && n > j->win ? n - j->win : 0;
    bool live[64];
    for (int64_t i = 0; i < group; i++) {
        const uint16_t *q = j->q + (b * j->S + s) * j->qstride + (g * group + i) * j->D;
        float *qf = qbuf + i * j->D;
        j->widen(q, j->D, qf);
        if (j->rotary) rotate16(j, qf, past + s);
    }
    for (int64_t t = lo; t < n; t += KV_BLOCK) {
        int64_t cnt = n - t < KV_BLOCK ? n - t : KV_BLOCK;
        j->widen(kc + t * j->D, cnt * j->D, blk);
        for (int64_t i = 0; i < group; i++)
            j->f->scores(qbuf + i * j->D, blk, j->D, cnt, j->D, j->scale, scores + i * ld + (t - lo));
    }
    memset(ybuf, 0, (size_t)(group * j->D) * sizeof(float));
    bool any = false;
    for (int64_t i = 0; i < group; i++) {
        live[i] = n > lo && tdm_llm_softmax(j->simd, scores + i * ld, n - lo, j->softcap, NULL,
                                            j->smooth, 0.0f);
        any |= live[i];
    }
    for (int64_t t = lo; t < n && any; t += KV_BLOCK) {
        int64_t cnt = n - t < KV_BLOCK ? n - t : KV_BLOCK;
        j->widen(vc + t * j->D, cnt * j->D, blk);
        for (int64_t i = 0; i < group; i++)
            if (live[i]) j->f->pv(scores + i * ld + (t - lo), blk, j->D, cnt, j->D, ybuf + i * j->D);
    }
    uint16_t *y = j->y + (b * j->S + s) * j->H * j->D + g * group * j->D;
    j->narrow(ybuf, group * j->D, y);
}

/* C = alpha * A . op(B) (row-major, beta 0): oneDNN's sgemm (serial), else tdm_sgemm. */
static void gemm16(const tdm_cpu_simd *simd, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                   const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc) {
    if (dnnl_sgemm('N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc) == dnnl_success)
        return;
    tdm_sgemm(simd, NULL, false, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc);
}

/* Item p of pass 2 when S > 1 (prefill, chunks): query rows s0..s1 of (b, g). The keys and
 * values of the block's whole row range are widened once into float32; then per head one GEMM
 * for the scores, each row's softmax on its own (causal) range with zeros elsewhere, and one
 * GEMM for the output rows. */
static void gqa16_block(const gqa16_job *j, int64_t p, float *scratch) {
    int64_t group = j->H / j->KVH, bg = p / j->row_blocks;
    int64_t s0 = (p % j->row_blocks) * j->rows_per_block;
    int64_t s1 = s0 + j->rows_per_block < j->S ? s0 + j->rows_per_block : j->S;
    int64_t b = bg / j->KVH, g = bg % j->KVH, rows = s1 - s0, past = j->past[b], tot = j->tot[b];
    int64_t lo[16] = {0}, n[16] = {0}; /* rows_per_block <= 16 */
    for (int64_t r = 0; r < rows; r++) {
        int64_t s = s0 + r;
        n[r] = j->causal && past + s + 1 < tot ? past + s + 1 : tot;
        lo[r] = j->win > 0 && n[r] > j->win ? n[r] - j->win : 0;
    }
    int64_t a0 = lo[0], e0 = n[0];
    for (int64_t r = 1; r < rows; r++) {
        a0 = lo[r] < a0 ? lo[r] : a0;
        e0 = n[r] > e0 ? n[r] : e0;
    }
    int64_t cols = e0 - a0, ld = cols + 1;
    float *sc = scratch, *qb = sc + 16 * (j->L + 1), *yb = qb + 16 * j->D;
    float *kf = yb + 16 * j->D, *vf = kf + j->L * j->D;
    const uint16_t *kc = j->kc + bg * j->L * j->D, *vc = j->vc + bg * j->L * j->D;
    j->widen(kc + a0 * j->D, cols * j->D, kf);
    j->widen(vc + a0 * j->D, cols * j->D, vf);
    for (int64_t i = 0; i < group; i++) {
        int64_t h = g * group + i;
        for (int64_t r = 0; r < rows; r++) {
            float *qf = qb + r * j->D;
            j->widen(j->q + (b * j->S + s0 + r) * j->qstride + h * j->D, j->D, qf);
            if (j->rotary) rotate16(j, qf, past + s0 + r);
        }
        if (cols > 0) gemm16(j->simd, true, rows, cols, j->D, j->scale, qb, j->D, kf, j->D, sc, ld);
        for (int64_t r = 0; r < rows; r++) {
            float *row = sc + r * ld;
            int64_t a = lo[r] - a0, e = n[r] - a0;
            if (e <= a || !tdm_llm_softmax(j->simd, row + a, e - a, j->softcap, NULL, j->smooth, 0.0f))
                a = e = 0; /* nothing to attend to: a zero row */
            memset(row, 0, (size_t)a * sizeof(float));
            memset(row + e, 0, (size_t)(ld - e) * sizeof(float));
        }
        if (cols > 0) gemm16(j->simd, false, rows, j->D, cols, 1.0f, sc, ld, vf, j->D, yb, j->D);
        else memset(yb, 0, (size_t)(rows * j->D) * sizeof(float));
        for (int64_t r = 0; r < rows; r++) {
            uint16_t *y = j->y + (b * j->S + s0 + r) * j->H * j->D + h * j->D;
            j->narrow(yb + r * j->D, j->D, y);
        }
    }
}

static void gqa16_slots(void *arg, int64_t k0, int64_t k1) {
    const gqa16_job *j = arg;
    if (j->S > 1 && omp_get_max_threads() != 1) omp_set_num_threads(1); /* sgemm stays serial */
    unsigned csr = tdm_cpu_flush_subnormals(); /* tiny attention weights: see cpu_simd.h */
    for (int64_t k = k0; k < k1; k++)
        for (int64_t p = k; p < j->items; p += j->slots) {
            if (j->S > 1) gqa16_block(j, p, j->scratch + k * j->per_slot);
            else gqa16_item(j, p, j->scratch + k * j->per_slot);
        }
    tdm_cpu_subnormals_restore(csr);
}

static bool is_cache(const tdm_tensor *t, int64_t B, int64_t KVH, int64_t D) {
    return t->dtype == TDM_FLOAT16 && t->rank == 4 && t->dims[0] == B && t->dims[1] == KVH &&
           t->dims[3] == D;
}

tdm_status *tdm_llm_run_gqa_f16(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *q = ctx->in[0];
    const tdm_tensor *k = ctx->n_in > 1 ? ctx->in[1] : NULL, *v = ctx->n_in > 2 ? ctx->in[2] : NULL;
    const tdm_tensor *pk = ctx->n_in > 3 ? ctx->in[3] : NULL, *pv = ctx->n_in > 4 ? ctx->in[4] : NULL;
    const tdm_tensor *sl = ctx->in[5], *tl = ctx->in[6];
    const tdm_tensor *cosc = ctx->n_in > 7 ? ctx->in[7] : NULL, *sinc = ctx->n_in > 8 ? ctx->in[8] : NULL;
    if ((ctx->n_in > 10 && ctx->in[10]) || (ctx->n_in > 11 && ctx->in[11]))
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED,
                              "attention_bias and head_sink are not implemented in float16");
    gqa16_job j;
    memset(&j, 0, sizeof j);
    tdm_llm_attn_attrs la;
    const tdm_llm_attn_attrs *at = tdm_llm_attn_attrs_of(ctx, &la);
    j.H = at->H;
    j.KVH = at->KVH;
    if (j.H <= 0 || j.KVH <= 0 || j.H % j.KVH)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "bad num_heads / kv_num_heads");
    if (j.H / j.KVH > 64)
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED, "more than 64 query heads per kv head");
    if (q->dtype != TDM_FLOAT16 || q->rank != 3)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "query must be float16 [B, S, hidden]");
    j.B = q->dims[0];
    j.S = q->dims[1];
    bool packed = !k;
    if (packed != !v)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "key and value must both be given or both omitted");
    int64_t parts = packed ? j.H + 2 * j.KVH : j.H;
    if (q->dims[2] % parts)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "query's last dim %lld is not a multiple of %lld heads",
                              (long long)q->dims[2], (long long)parts);
    j.D = q->dims[2] / parts;
    if (j.D <= 0 || j.D > MAX_HEAD)
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED, "head size %lld (1 to %d in float16)",
                              (long long)j.D, MAX_HEAD);
    if (!packed) {
        const tdm_tensor *kv[2] = {k, v};
        for (int i = 0; i < 2; i++)
            if (kv[i]->dtype != TDM_FLOAT16 || kv[i]->rank != 3 || kv[i]->dims[0] != j.B ||
                kv[i]->dims[1] != j.S || kv[i]->dims[2] != j.KVH * j.D)
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                      "%s must be float16 [%lld, %lld, %lld] (kv_num_heads * head size)",
                                      i ? "value" : "key", (long long)j.B, (long long)j.S,
                                      (long long)(j.KVH * j.D));
    }
    if (!pk != !pv)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "past_key and past_value go together");
    if (pk) {
        if (!is_cache(pk, j.B, j.KVH, j.D) || !is_cache(pv, j.B, j.KVH, j.D) ||
            pv->dims[2] != pk->dims[2]) {
            char buf[96];
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "past_key / past_value have shape %s, expected float16 "
                                  "[%lld, %lld, length, %lld], both the same",
                                  tdm_shape_str(pk->rank, pk->dims, buf, sizeof buf), (long long)j.B,
                                  (long long)j.KVH, (long long)j.D);
        }
        j.P = pk->dims[2];
    }
    if (sl->dtype != TDM_INT32 || sl->count != j.B)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "seqlens_k must be int32 [%lld]",
                              (long long)j.B);
    if (tl->dtype != TDM_INT32 || tl->count != 1)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "total_sequence_length must be one int32");
    int64_t total = ((const int32_t *)tl->data)[0];
    j.L = j.P > total ? j.P : total;
    for (int o = 0; o <= 2; o++) {
        tdm_tensor *t = ctx->n_out > o ? ctx->out[o] : NULL;
        if (t && (t->dtype != TDM_FLOAT16 || (o > 0 && (t->rank != 4 || t->dims[2] != j.L))))
            return tdm_node_error(node, TDM_ERR_INTERNAL, "an output has the wrong type or shape");
    }
    j.rotary = at->rotary;
    j.interleaved = at->interleaved;
    int64_t maxpos = 0;
    if (j.rotary) {
        if (!cosc || !sinc || cosc->dtype != TDM_FLOAT16 || sinc->dtype != TDM_FLOAT16 ||
            cosc->rank != 2 || sinc->rank != 2 || sinc->dims[0] != cosc->dims[0] ||
            sinc->dims[1] != cosc->dims[1] || cosc->dims[1] <= 0 || 2 * cosc->dims[1] > j.D)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "cos_cache and sin_cache must be float16 [max_length, n] with "
                                  "1 <= n <= head_size / 2 (%lld)", (long long)(j.D / 2));
        j.rot = 2 * cosc->dims[1];
        maxpos = cosc->dims[0];
        j.cos = cosc->data;
        j.sin = sinc->data;
    }
    j.smooth = at->smooth;
    j.causal = at->causal;
    j.win = at->win;
    j.softcap = at->softcap;
    j.scale = tdm_llm_attn_scale(at, j.D);

    /* scratch: per slot the group's scores and query / output rows; then per batch item the
     * first new row and the valid rows */
    int64_t group = j.H / j.KVH;
    int64_t threads = tdm_threadpool_size(ctx->pool);
    /* decode: one item per (batch, kv head); S > 1: per block of up to 16 query rows */
    j.rows_per_block = j.S > 16 ? 16 : (j.S > 0 ? j.S : 1);
    j.row_blocks = (j.S + j.rows_per_block - 1) / j.rows_per_block;
    j.items = j.B * j.KVH * (j.S > 1 ? j.row_blocks : j.S);
    j.slots = j.items < threads ? j.items : threads;
    if (j.slots < 1) j.slots = 1;
    int64_t row_need = group * (j.L + 16) + 2 * group * j.D + KV_BLOCK * j.D;
    int64_t block_need = 16 * (j.L + 1) + 32 * j.D + 2 * j.L * j.D;
    j.per_slot = ((j.S > 1 ? block_need : row_need) + 31) / 16 * 16; /* keeps int64 aligned */
    tdm_tensor *pres_k = ctx->n_out > 1 ? ctx->out[1] : NULL, *pres_v = ctx->n_out > 2 ? ctx->out[2] : NULL;
    size_t cache_halves = (size_t)(j.B * j.KVH * j.L * j.D);
    size_t own_cache = ((pres_k ? 0 : cache_halves) + (pres_v ? 0 : cache_halves) + 1) / 2;
    size_t pos_floats = (size_t)j.B * 2 * sizeof(int64_t) / sizeof(float);
    size_t need = (size_t)(j.slots * j.per_slot) + pos_floats + own_cache;
    float *own = NULL, *mem = tdm_llm_gqa_scratch(ctx, need, &own);
    if (!mem) return tdm_node_error(node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    j.scratch = mem;
    int64_t *past = (int64_t *)(void *)(mem + j.slots * j.per_slot), *tot = past + j.B;
    uint16_t *extra = (uint16_t *)(void *)(mem + j.slots * j.per_slot + pos_floats);

    tdm_status *st = NULL;
    bool first = j.S == total;
    for (int64_t b = 0; b < j.B && !st; b++) {
        int64_t t = (int64_t)((const int32_t *)sl->data)[b] + 1;
        int64_t p = first ? 0 : t - j.S;
        past[b] = p;
        tot[b] = t;
        if (t < 1 || t > total || p < 0 || p > j.P || p + j.S > j.L)
            st = tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                "seqlens_k[%lld] = %lld does not fit: %lld new rows, past length "
                                "%lld, total_sequence_length %lld",
                                (long long)b, (long long)(t - 1), (long long)j.S, (long long)j.P,
                                (long long)total);
        else if (j.rotary && p + j.S > maxpos)
            st = tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                "position %lld is past the rotary caches' %lld rows",
                                (long long)(p + j.S - 1), (long long)maxpos);
    }
    j.past = past;
    j.tot = tot;
    j.q = q->data;
    j.qstride = q->dims[2];
    if (packed) {
        j.k = j.v = q->data;
        j.kstride = q->dims[2];
        j.koff = j.H * j.D;
        j.voff = (j.H + j.KVH) * j.D;
    } else {
        j.k = k->data;
        j.v = v->data;
        j.kstride = j.KVH * j.D;
    }
    j.pk = pk ? pk->data : NULL;
    j.pv = pv ? pv->data : NULL;
    j.y = ctx->out[0]->data;
    j.kc = pres_k ? pres_k->data : extra;
    if (!pres_k) extra += cache_halves;
    j.vc = pres_v ? pres_v->data : extra;
    j.k_inplace = pres_k && pk && pres_k->data == pk->data;
    j.v_inplace = pres_v && pv && pres_v->data == pv->data;
    if (!st && (j.k_inplace || j.v_inplace) && j.L != j.P)
        st = tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                            "present shares past's buffer but is longer (%lld rows, past %lld)",
                            (long long)j.L, (long long)j.P);
    if (!st) {
        j.simd = tdm_cpu_simd_of(ctx);
        j.widen = pick_widen(j.simd->level);
        j.narrow = pick_narrow(j.simd->level);
        j.f = tdm_llm_fns_for(j.simd->level);
        /* a decode step with little to read stays on the caller (TDM_LLM_ATTN_SERIAL_WORK;
         * the slots then run one after another) */
        int64_t longest = 0;
        for (int64_t b = 0; b < j.B; b++) longest = tot[b] > longest ? tot[b] : longest;
        tdm_threadpool *pool = tdm_llm_attn_pool(ctx->pool, j.S == 1, j.B * j.H * longest);
        tdm_parallel_for(pool, j.B * j.KVH, 1, gqa16_cache, &j);
        int omp = j.S > 1 ? dn_omp_begin() : 1;
        tdm_parallel_for(pool, j.slots, 1, gqa16_slots, &j);
        if (j.S > 1) dn_omp_end(omp);
    }
    tdm_llm_gqa_scratch_done(ctx, own);
    return st;
}

/* CPU kernel: com.microsoft GroupQueryAttention (float32), as ONNX Runtime defines it.
 *
 * Shapes: query [B, S, H*D] (or packed QKV [B, S, (H + 2*KVH)*D] with key/value omitted),
 * key/value [B, S, KVH*D], past_key/past_value [B, KVH, P, D] (BNSH), seqlens_k int32 [B]
 * (total length - 1 per batch item), total_sequence_length int32 scalar, cos/sin caches
 * [max_len, rot/2]. Outputs: output [B, S, H*D], present_key/value [B, KVH, L, D] with
 * L = max(P, total_sequence_length).
 *
 * KV cache: the call is a first prompt when S == total_sequence_length; then item b's S new
 * rows go to cache rows 0..S-1 (rows past seqlens_k[b] are right padding). Otherwise item b's
 * new rows go to rows seqlens_k[b]+1-S .. seqlens_k[b], after the cached rows before them.
 * Query row j of item b attends to cache rows [lo, n) with n = min(first row + j + 1,
 * seqlens_k[b] + 1) (causal) and lo = n - local_window_size when a window is set.
 * When present_key's memory IS past_key's (the executor's I/O binding shares the buffers),
 * the kernel writes only the new rows: no copy of the cache. Otherwise present gets the valid
 * past rows, the new rows and zeros elsewhere (what ONNX Runtime outputs).
 * Rotary (do_rotary) rotates the new query and key rows only, at their absolute positions.
 * attention_bias [B or 1, H or 1, S, total_sequence_length] is added to the (soft-capped)
 * logits by absolute key position; head_sink / smooth_softmax add a logit to the softmax's
 * denominator. Not implemented (refused at load, ops/llm.c): position_ids, quantized caches,
 * q/k norm weights, query_seqlens, output_qk, the sliding-window cache. causal=0 lets every
 * query row see all of its item's rows.
 *
 * 8-bit cache (tandem's, the generator's kv_type "int8"; ops/kv_int8.h): past / present int8
 * [B, KVH, L, TDM_KV_I8_ROW(D)], each row D codes and one bfloat16 scale per 32. New rows are
 * rotated in float32 and quantised as they enter the cache (pass 1). The query is quantised
 * too, per 32 values (tdm_llm_q8_query, as llama.cpp's q8_0 dot products do): decode runs
 * integer dot products against the codes (k_llm_gqa_i8.c: all heads of a group per cache
 * row, one call per row range so each query is quantised once, the split over threads as for
 * float32); a block of rows (prefill, chunks) takes the same rounded query and widens its key
 * / value range once into scratch for the two sgemm calls, so a prefill computes what as many
 * decode steps do. 4-bit cache (kv_type "int4"): past / present uint8 [B, KVH, L,
 * TDM_KV_I4_ROW(D)] (Q4_0's layout, ops/kv_int8.h), the same paths with the 4-bit row
 * routines (tdm_llm_i4_fns_for) and quantiser. ONNX Runtime's own quantised caches
 * (k_quant_type, k_scale) stay refused.
 *
 * Speed: two parallel passes on the session's pool: (batch, kv head) pairs write the cache,
 * then (batch, kv head, block of up to 16 query rows) items, one slot per thread. A single row
 * (decode) runs all heads of its group together, 64 cache rows at a time, so the cache is read
 * once per group, not once per head (k_llm_simd.c: SIMD scores and p.V; the device's softmax
 * row); with fewer items than twice the threads, each group's rows split in parts whose
 * softmax partials merge at the end (flash-decoding). A decode step with little to read
 * (TDM_LLM_ATTN_SERIAL_WORK) runs both passes on the calling thread: the two pool regions
 * cost more than their split saves. A block of rows (prefill, chunks) is two
 * oneDNN sgemm calls per head (Q.K^T over the block's rows, each row's softmax on its own
 * causal range, P.V into the output). Scratch memory (one slot per thread) is kept by the node
 * between runs and grown when a longer cache needs more: a decode step allocates nothing. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include <omp.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/k_dnnl.h"
#include "backends/cpu/k_llm.h"
#include "core/alloc.h"

typedef struct gqa_state {
    const tdm_allocator *alloc;
    atomic_flag busy;
    float *arena;
    size_t size; /* floats */
    tdm_llm_attn_attrs at;
} gqa_state;

static void read_attrs(const tdm_node *n, tdm_llm_attn_attrs *at) {
    bool paged = strcmp(n->op_type, "PagedAttention") == 0;
    at->H = tdm_attr_int(n, "num_heads", 0);
    at->KVH = tdm_attr_int(n, "kv_num_heads", 0);
    at->win = tdm_attr_int(n, "local_window_size", -1);
    at->softcap = tdm_attr_float(n, "softcap", 0.0f);
    at->scale = tdm_attr_float(n, "scale", 0.0f);
    at->rotary = tdm_attr_int(n, "do_rotary", 0) != 0;
    at->interleaved = tdm_attr_int(n, "rotary_interleaved", 0) != 0;
    at->smooth = !paged && tdm_attr_int(n, "smooth_softmax", 0) != 0;
    at->causal = tdm_attr_int(n, paged ? "is_causal" : "causal", 1) != 0;
    at->bhsd = paged && strcmp(tdm_attr_string(n, "tandem_kv_layout", "BSHD"), "BHSD") == 0;
}

const tdm_llm_attn_attrs *tdm_llm_attn_attrs_of(const tdm_kernel_ctx *ctx,
                                                tdm_llm_attn_attrs *local) {
    const gqa_state *s = ctx->state;
    if (s) return &s->at;
    read_attrs(ctx->node, local);
    return local;
}

tdm_status *tdm_llm_gqa_prepare(const tdm_node *node, int opset, int n_in,
                                const tdm_tensor *const *in, const tdm_allocator *a, void **state) {
    (void)opset, (void)n_in, (void)in;
    gqa_state *s = tdm_alloc(a, sizeof *s);
    if (!s) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory for GroupQueryAttention state");
    memset(s, 0, sizeof *s);
    s->alloc = a;
    atomic_flag_clear(&s->busy);
    read_attrs(node, &s->at);
    *state = s;
    return NULL;
}

void tdm_llm_gqa_release(void *state, const tdm_allocator *a) {
    gqa_state *s = state;
    if (!s) return;
    tdm_free(a, s->arena);
    tdm_free(a, s);
}

float *tdm_llm_gqa_scratch(tdm_kernel_ctx *ctx, size_t need, float **own) {
    gqa_state *state = ctx->state;
    float *mem = NULL;
    *own = NULL;
    if (state && !atomic_flag_test_and_set(&state->busy)) {
        if (state->size < need) { /* grown by half again at least: a cache that grows by a
                                     row per step reallocates now and then, not every step */
            size_t grow = state->size + state->size / 2;
            size_t want = need > grow ? need : grow;
            tdm_free(state->alloc, state->arena);
            state->size = 0;
            state->arena = tdm_alloc(state->alloc, want * sizeof(float));
            if (state->arena) state->size = want;
        }
        mem = state->arena;
        if (!mem) atomic_flag_clear(&state->busy);
    }
    if (!mem) mem = *own = tdm_kscratch(ctx, need * sizeof(float));
    return mem;
}

void tdm_llm_gqa_scratch_done(tdm_kernel_ctx *ctx, float *own) {
    gqa_state *state = ctx->state;
    if (own) tdm_free(ctx->alloc, own);
    else atomic_flag_clear(&state->busy);
}

typedef struct gqa_job {
    const float *q, *k, *v, *pk, *pv, *cos, *sin, *sink, *bias;
    int64_t bias_s[3]; /* attention_bias strides of (batch, head, query row); 0 = broadcast */
    float *kc, *vc, *y;  /* present caches, output */
    const int64_t *past; /* first new row per batch item */
    const int64_t *tot;  /* valid rows after this call per batch item */
    int64_t B, S, H, KVH, D, P, L, rot, win, qstride, kstride, koff, voff, maxpos;
    bool packed, rotary, interleaved, k_inplace, v_inplace, smooth, causal;
    float scale, softcap;
    const tdm_llm_fns *f;
    const tdm_cpu_simd *simd;
    float *scratch;       /* per pass-2 slot: per_task floats */
    int64_t per_task, row_blocks, rows_per_block, items, slots;
    int64_t parts;  /* decode: each group's cache rows split in parts (threads > groups) */
    /* decode of one batch item in row spans (items = slots): the groups' rows (span_n each)
     * laid end to end, item k takes [cut[k], cut[k + 1]); a group's part i is its piece in the
     * i-th item its rows fall in (tdm_llm_span_parts), parts their most over the groups */
    bool spans;
    int64_t cut[TDM_LLM_MAX_SPANS + 1], span_n;
    float *partial; /* per (batch, head, part): D partial outputs, max logit, 1 + sum */
    /* the 8-bit cache (past / present int8 [B, KVH, L, TDM_KV_I8_ROW(D)]: ops/kv_int8.h),
     * or (q4) the 4-bit one (uint8 [B, KVH, L, TDM_KV_I4_ROW(D)]), through the same paths */
    bool i8, q4;
    int64_t rs;            /* bytes per cache row */
    int8_t *kq, *vq;       /* present caches */
    const int8_t *pkq, *pvq;
    const tdm_llm_i8_fns *fi;
} gqa_job;

/* Pass 1: one (batch, kv head) pair per item: the present cache rows. */
static void gqa_cache_i8(const gqa_job *j, int64_t p0, int64_t p1) {
    float tmp[TDM_LLM_KV_I8_MAX_D];
    for (int64_t p = p0; p < p1; p++) {
        int64_t b = p / j->KVH, g = p % j->KVH, past = j->past[b];
        for (int c = 0; c < 2; c++) {
            int8_t *dst = (c ? j->vq : j->kq) + p * j->L * j->rs;
            const int8_t *pst = c ? j->pvq : j->pkq;
            if (!(c ? j->v_inplace : j->k_inplace)) {
                if (past > 0) memcpy(dst, pst + p * j->P * j->rs, (size_t)(past * j->rs));
                int64_t end = past + j->S;
                if (end < j->L) memset(dst + end * j->rs, 0, (size_t)((j->L - end) * j->rs));
            }
            for (int64_t s = 0; s < j->S; s++) {
                const float *src = (c ? j->v : j->k) + (b * j->S + s) * j->kstride +
                                   (c ? j->voff : j->koff) + g * j->D;
                memcpy(tmp, src, (size_t)j->D * sizeof(float));
                if (c == 0 && j->rotary) {
                    int64_t pos = past + s;
                    tdm_llm_rotate(tmp, j->cos + pos * (j->rot / 2), j->sin + pos * (j->rot / 2),
                                   j->rot, j->interleaved);
                }
                j->fi->quantize_row(tmp, j->D, dst + (past + s) * j->rs);
            }
        }
    }
}

static void gqa_cache(void *arg, int64_t p0, int64_t p1) {
    const gqa_job *j = arg;
    size_t row = (size_t)j->D * sizeof(float);
    if (j->i8) {
        gqa_cache_i8(j, p0, p1);
        return;
    }
    for (int64_t p = p0; p < p1; p++) {
        int64_t b = p / j->KVH, g = p % j->KVH, past = j->past[b];
        for (int c = 0; c < 2; c++) {
            float *dst = (c ? j->vc : j->kc) + p * j->L * j->D;
            const float *pst = c ? j->pv : j->pk;
            if (!(c ? j->v_inplace : j->k_inplace)) {
                if (past > 0) memcpy(dst, pst + p * j->P * j->D, (size_t)past * row);
                int64_t end = past + j->S;
                if (end < j->L) memset(dst + end * j->D, 0, (size_t)(j->L - end) * row);
            }
            for (int64_t s = 0; s < j->S; s++) {
                const float *src = (c ? j->v : j->k) + (b * j->S + s) * j->kstride +
                                   (c ? j->voff : j->koff) + g * j->D;
                float *r = dst + (past + s) * j->D;
                memcpy(r, src, row);
                if (c == 0 && j->rotary) {
                    int64_t pos = past + s;
                    tdm_llm_rotate(r, j->cos + pos * (j->rot / 2), j->sin + pos * (j->rot / 2),
                                   j->rot, j->interleaved);
                }
            }
        }
    }
}

/* Pass 2: one (batch, kv head, block of query rows) per item, all heads of the group
 * together: each block of key / value rows is read once for the group (from L1) rather than
 * once per head. */
enum { GQA_KV_BLOCK = 64 /* cache rows per step: 16 KiB of keys at head size 64 */ };

/* The rows of query row s of item b attends to: [*lo, *n). */
static void row_range(const gqa_job *j, int64_t b, int64_t s, int64_t *lo, int64_t *n) {
    int64_t past = j->past[b], tot = j->tot[b];
    *n = j->causal && past + s + 1 < tot ? past + s + 1 : tot;
    *lo = j->win > 0 && *n > j->win ? *n - j->win : 0;
}

/* The query row of head h at row s (rotated into buf when rotary is on). */
static const float *query_row(const gqa_job *j, int64_t b, int64_t h, int64_t s, float *buf) {
    const float *q = j->q + (b * j->S + s) * j->qstride + h * j->D;
    if (!j->rotary) return q;
    int64_t pos = j->past[b] + s;
    memcpy(buf, q, (size_t)j->D * sizeof(float));
    tdm_llm_rotate(buf, j->cos + pos * (j->rot / 2), j->sin + pos * (j->rot / 2), j->rot,
                   j->interleaved);
    return buf;
}

/* C = alpha * A . op(B) (row-major, beta 0): oneDNN's sgemm (serial JIT code), else tdm_sgemm. */
static void block_gemm(const tdm_cpu_simd *simd, bool tb, int64_t M, int64_t N, int64_t K,
                       float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float *C, int64_t ldc) {
    if (dnnl_sgemm('N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc) == dnnl_success)
        return;
    tdm_sgemm(simd, NULL, false, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc);
}

/* A block of query rows s0..s1 (prefill, chunks): per head, scores = Q.K^T over the block's
 * whole row range with one GEMM, each row's softmax on its own range (zeros elsewhere), then
 * Y = P.V with a second GEMM written straight into the output rows. */
static void gqa_block_gemm(const gqa_job *j, int64_t b, int64_t g, int64_t s0, int64_t s1,
                           float *scratch) {
    int64_t group = j->H / j->KVH, rows = s1 - s0;
    int64_t lo0, n0, lo1, n1;
    row_range(j, b, s0, &lo0, &n0);
    row_range(j, b, s1 - 1, &lo1, &n1);
    int64_t cols = n1 - lo0, ld = cols + 1; /* +1: room for a sink logit after a full row */
    float *sc = scratch, *qb = scratch + rows * (j->L + 1);
    const float *kc, *vc;
    if (j->i8) { /* the block's key / value range widened once (after qb) for the GEMMs */
        float *kw = qb + rows * j->D, *vw = kw + j->L * j->D;
        size_t off = (size_t)((b * j->KVH + g) * j->L + lo0) * (size_t)j->rs;
        j->fi->dequantize_rows(j->kq + off, j->rs, cols, j->D, kw + lo0 * j->D);
        j->fi->dequantize_rows(j->vq + off, j->rs, cols, j->D, vw + lo0 * j->D);
        kc = kw;
        vc = vw;
    } else {
        kc = j->kc + (b * j->KVH + g) * j->L * j->D;
        vc = j->vc + (b * j->KVH + g) * j->L * j->D;
    }
    for (int64_t i = 0; i < group; i++) {
        int64_t h = g * group + i;
        for (int64_t r = 0; r < rows; r++) {
            const float *q = query_row(j, b, h, s0 + r, qb + r * j->D);
            if (q != qb + r * j->D) memcpy(qb + r * j->D, q, (size_t)j->D * sizeof(float));
            if (j->q4) j->fi->rotate(qb + r * j->D, j->D); /* as the cache's rows */
            if (j->i8) tdm_llm_q8_round(qb + r * j->D, j->D); /* as decode's dot products */
        }
        block_gemm(j->simd, true, rows, cols, j->D, j->scale, qb, j->D, kc + lo0 * j->D, j->D, sc, ld);
        for (int64_t r = 0; r < rows; r++) {
            int64_t lo, n, s = s0 + r;
            row_range(j, b, s, &lo, &n);
            float *row = sc + r * ld;
            const float *bias = j->bias ? j->bias + b * j->bias_s[0] + h * j->bias_s[1] +
                                              s * j->bias_s[2] + lo
                                        : NULL;
            int64_t a = lo - lo0, e = n - lo0;
            if (!tdm_llm_softmax(j->simd, row + a, e - a, j->softcap, bias, j->sink || j->smooth,
                                 j->sink ? j->sink[h] : 0.0f))
                a = e = 0; /* nothing to attend to: a zero row */
            memset(row, 0, (size_t)a * sizeof(float));
            memset(row + e, 0, (size_t)(ld - e) * sizeof(float));
        }
        float *y = j->y + (b * j->S + s0) * j->H * j->D + h * j->D;
        block_gemm(j->simd, false, rows, j->D, cols, 1.0f, sc, ld, vc + lo0 * j->D, j->D, y,
                   j->H * j->D);
        for (int64_t r = 0; j->q4 && r < rows; r++) j->fi->rotate(y + r * j->H * j->D, j->D);
    }
}

/* The group's query rows for the cache's dot products: as they are, or (4-bit cache)
 * rotated as its rows are, in buf (group * D floats). */
static void group_queries(const gqa_job *j, int64_t b, int64_t g, int64_t s, float *buf,
                          const float **q) {
    int64_t group = j->H / j->KVH;
    for (int64_t i = 0; i < group; i++) {
        float *bi = buf + i * j->D;
        q[i] = query_row(j, b, g * group + i, s, bi);
        if (!j->q4) continue;
        if (q[i] != bi) memcpy(bi, q[i], (size_t)j->D * sizeof(float));
        j->fi->rotate(bi, j->D);
        q[i] = bi;
    }
}

/* The float cache's p.V of a kv group's heads over rows [lo, n) (p: row lo's weights, head i
 * at p + i * ld; its output at y + i * ys), GQA_KV_BLOCK rows a step: all heads at once
 * (pv_g) when every head is live, else the live ones head by head (a dead head's output
 * stays as it is). */
static void group_pv(const gqa_job *j, const float *p, int64_t ld, int64_t group, const bool *live,
                     const float *vc, int64_t lo, int64_t n, float *y, int64_t ys) {
    bool all = true;
    for (int64_t i = 0; i < group; i++) all = all && live[i];
    for (int64_t t = lo; t < n; t += GQA_KV_BLOCK) {
        int64_t cnt = n - t < GQA_KV_BLOCK ? n - t : GQA_KV_BLOCK;
        if (all)
            j->f->pv_g(p + (t - lo), ld, group, vc + t * j->D, j->D, cnt, j->D, y, ys);
        else
            for (int64_t i = 0; i < group; i++)
                if (live[i])
                    j->f->pv(p + i * ld + (t - lo), vc + t * j->D, j->D, cnt, j->D, y + i * ys);
    }
}

/* Decode with more threads than groups: part k, rows [a, e), of group (b, g), for all its
 * heads. Each head's slot gets the part's output normalised by its own 1 + sum, as if the
 * softmax ran over the part's logits plus one logit equal to their max m (p.V on the
 * numerators exp(x - m), the output times 1 / (1 + sum) after it), m, and 1 + sum;
 * gqa_merge combines them. */
static void gqa_part_rows(const gqa_job *j, int64_t b, int64_t g, int64_t k, int64_t a,
                          int64_t e, float *scratch) {
    int64_t group = j->H / j->KVH, ld = j->L + 16, slot = j->D + 2;
    const float *kc = j->i8 ? NULL : j->kc + (b * j->KVH + g) * j->L * j->D;
    const float *vc = j->i8 ? NULL : j->vc + (b * j->KVH + g) * j->L * j->D;
    float *scores = scratch, *qbuf = scores + group * ld;
    const float *q[64];
    bool live[64];
    float out[64]; /* each head's outputs times out[i]: 1 / (1 + sum) of unnormalised weights */
    for (int64_t i = 0; i < group; i++) {
        float *o = j->partial + ((b * j->H + g * group + i) * j->parts + k) * slot;
        o[j->D] = -INFINITY; /* empty until shown otherwise */
        live[i] = false;
        out[i] = 1.0f;
    }
    if (a >= e) return;
    group_queries(j, b, g, 0, qbuf, q);
    const int8_t *kq = j->i8 ? j->kq + (b * j->KVH + g) * j->L * j->rs : NULL;
    const int8_t *vq = j->i8 ? j->vq + (b * j->KVH + g) * j->L * j->rs : NULL;
    if (j->i8) /* the whole part in one call: the query is quantised once */
        j->fi->scores(q, group, kq + a * j->rs, j->rs, e - a, j->D, j->scale, scores, ld,
                      vq + a * j->rs);
    else
        for (int64_t t = a; t < e; t += GQA_KV_BLOCK) {
            int64_t cnt = e - t < GQA_KV_BLOCK ? e - t : GQA_KV_BLOCK;
            j->f->scores_g(q, group, kc + t * j->D, j->D, cnt, j->D, j->scale, scores + (t - a), ld);
        }
    int64_t cnt = e - a;
    for (int64_t i = 0; i < group; i++) {
        int64_t h = g * group + i;
        float *sc = scores + i * ld, *o = j->partial + ((b * j->H + h) * j->parts + k) * slot;
        if (j->softcap > 0.0f)
            for (int64_t t = 0; t < cnt; t++) sc[t] = j->softcap * tanhf(sc[t] / j->softcap);
        if (j->bias) {
            const float *bias = j->bias + b * j->bias_s[0] + h * j->bias_s[1] + a;
            for (int64_t t = 0; t < cnt; t++) sc[t] += bias[t];
        }
        memset(o, 0, (size_t)j->D * sizeof(float));
        live[i] = tdm_llm_part_softmax(j->simd, sc, cnt, o, j->D, &out[i]);
        if (!live[i]) /* the int8 p.V takes every head */
            memset(sc, 0, (size_t)cnt * sizeof(float));
    }
    float *part = j->partial + ((b * j->H + g * group) * j->parts + k) * slot;
    if (j->i8) {
        j->fi->pv(scores, ld, group, vq + a * j->rs, j->rs, e - a, j->D, part, j->parts * slot);
        for (int64_t i = 0; j->q4 && i < group; i++) /* back from the rows' rotation */
            j->fi->rotate(part + i * j->parts * slot, j->D);
    } else {
        group_pv(j, scores, ld, group, live, vc, a, e, part, j->parts * slot);
    }
    tdm_llm_scale_rows(part, group, j->parts * slot, j->D, out);
}

static void gqa_item_part(const gqa_job *j, int64_t b, int64_t g, int64_t k, float *scratch) {
    int64_t lo, n;
    row_range(j, b, 0, &lo, &n);
    int64_t chunk = (n - lo + j->parts - 1) / j->parts, a = lo + k * chunk;
    gqa_part_rows(j, b, g, k, a, a + chunk < n ? a + chunk : n, scratch);
}

/* Row spans: item k's pieces, group by group (one batch item) */
static void gqa_item_span(const gqa_job *j, int64_t k, float *scratch) {
    int64_t lo, n;
    row_range(j, 0, 0, &lo, &n);
    int64_t N = n - lo;
    for (int64_t r = j->cut[k]; r < j->cut[k + 1];) {
        int64_t g = r / N, end = (g + 1) * N < j->cut[k + 1] ? (g + 1) * N : j->cut[k + 1];
        gqa_part_rows(j, 0, g, k - tdm_llm_span_of(j->cut, g * N), lo + r - g * N,
                      lo + end - g * N, scratch);
        r = end;
    }
}

int64_t tdm_llm_span_cuts(int64_t groups, int64_t N, int64_t lo, int64_t align, int64_t threads,
                          int64_t *cut) {
    int64_t T = threads < TDM_LLM_MAX_SPANS ? threads : TDM_LLM_MAX_SPANS;
    int64_t R = groups * N, near = R / T / 4 < 64 ? R / T / 4 : 64;
    for (int64_t t = 0; t <= T; t++) {
        int64_t c = t * R / T, edge = (c + N / 2) / N * N;
        c = c - edge < near && edge - c < near ? edge : c;
        if (align > 1 && c % N) { /* down to a position that starts a block */
            int64_t at = (lo + c % N) / align * align - lo;
            c = c / N * N + (at > 0 ? at : 0);
        }
        cut[t] = c;
    }
    return T;
}

/* One (row, head)'s parts merged (flash-decoding): part k holds D partial outputs o_k, its max
 * logit m_k and 1 + its sum. y = sum_k w_k (1 + sum_k) o_k / (sum_k w_k sum_k [+ sink term]),
 * w_k = exp(m_k - M). Shared by the GroupQueryAttention and PagedAttention kernels. */
void tdm_llm_merge_parts(const float *part, int64_t parts, int64_t D, bool has_sink, float sink,
                         float *y) {
    int64_t slot = D + 2;
    float m = has_sink ? sink : -INFINITY;
    for (int64_t k = 0; k < parts; k++) m = part[k * slot + D] > m ? part[k * slot + D] : m;
    memset(y, 0, (size_t)D * sizeof(float));
    if (m == -INFINITY) return;
    /* in float: a few terms, each w_k <= 1 and 1 + sum_k >= 2 (the part's own maximum is in
     * its sum). libm's double exp took ~25 TSC ticks a call: a two-thread decode step's
     * GroupQueryAttention (9 heads, 2 parts) 1.5% slower than with expf */
    float den = has_sink ? expf(sink - m) : 0.0f;
    for (int64_t k = 0; k < parts; k++) {
        const float *o = part + k * slot;
        if (o[D] == -INFINITY) continue;
        float w = expf(o[D] - m);
        den += w * (o[D + 1] - 1.0f);
        float c = w * o[D + 1];
        for (int64_t d = 0; d < D; d++) y[d] += c * o[d];
    }
    float inv = den > 0.0f ? 1.0f / den : 0.0f;
    for (int64_t d = 0; d < D; d++) y[d] *= inv;
}

static void gqa_merge(const gqa_job *j) {
    int64_t slot = j->D + 2, group = j->H / j->KVH;
    for (int64_t b = 0; b < j->B; b++)
        for (int64_t h = 0; h < j->H; h++)
            tdm_llm_merge_parts(j->partial + (b * j->H + h) * j->parts * slot,
                                j->spans ? tdm_llm_span_parts(j->cut, h / group, j->span_n)
                                         : j->parts,
                                j->D,
                                j->sink || j->smooth, j->sink ? j->sink[h] : 0.0f,
                                j->y + b * j->H * j->D + h * j->D);
}

/* One query row s of item b, kv group g, on the 8-bit cache: every head of the group per
 * cache row (scores, then p.V over the whole range, the codes widened in registers). */
static void gqa_row_i8(const gqa_job *j, int64_t b, int64_t g, int64_t s, float *scores,
                       float *qbuf) {
    int64_t group = j->H / j->KVH, ld = j->L + 16;
    const int8_t *kq = j->kq + (b * j->KVH + g) * j->L * j->rs;
    const int8_t *vq = j->vq + (b * j->KVH + g) * j->L * j->rs;
    const float *q[64];
    float *y = j->y + (b * j->S + s) * j->H * j->D + g * group * j->D;
    group_queries(j, b, g, s, qbuf, q);
    int64_t lo, n;
    row_range(j, b, s, &lo, &n);
    j->fi->scores(q, group, kq + lo * j->rs, j->rs, n - lo, j->D, j->scale, scores, ld,
                  vq + lo * j->rs);
    memset(y, 0, (size_t)(group * j->D) * sizeof(float));
    /* p.V on the softmax's numerators where it can, each head's outputs times out[i] after it
     * (a one-thread decode step's attention at depth 1000: 0.96 of the time) */
    float out[64];
    for (int64_t i = 0; i < group; i++) {
        int64_t h = g * group + i;
        const float *bias = j->bias ? j->bias + b * j->bias_s[0] + h * j->bias_s[1] +
                                          s * j->bias_s[2] + lo
                                    : NULL;
        if (!tdm_llm_softmax_scaled(j->simd, scores + i * ld, n - lo, j->softcap, bias,
                                    j->sink || j->smooth, j->sink ? j->sink[h] : 0.0f, &out[i]))
            memset(scores + i * ld, 0, (size_t)(n - lo) * sizeof(float)); /* a zero row */
    }
    j->fi->pv(scores, ld, group, vq + lo * j->rs, j->rs, n - lo, j->D, y, j->D);
    tdm_llm_scale_rows(y, group, j->D, j->D, out);
    for (int64_t i = 0; j->q4 && i < group; i++) j->fi->rotate(y + i * j->D, j->D); /* back */
}

/* Item p of pass 2: (batch, kv head, block of query rows). One row (decode): all heads of
 * the group together, GQA_KV_BLOCK cache rows at a time. */
static void gqa_item(const gqa_job *j, int64_t p, float *scratch) {
    int64_t group = j->H / j->KVH, ld = j->L + 16;
    if (j->spans) {
        gqa_item_span(j, p, scratch);
        return;
    }
    if (j->parts > 1) {
        int64_t bg = p / j->parts;
        gqa_item_part(j, bg / j->KVH, bg % j->KVH, p % j->parts, scratch);
        return;
    }
    int64_t bg = p / j->row_blocks, s0 = (p % j->row_blocks) * j->rows_per_block;
    int64_t b = bg / j->KVH, g = bg % j->KVH;
    int64_t s1 = s0 + j->rows_per_block < j->S ? s0 + j->rows_per_block : j->S;
    if (s1 - s0 > 1) {
        gqa_block_gemm(j, b, g, s0, s1, scratch);
        return;
    }
    float *scores = scratch, *qbuf = scores + group * ld;
    if (j->i8) {
        gqa_row_i8(j, b, g, s0, scores, qbuf);
        return;
    }
    const float *kc = j->kc + bg * j->L * j->D, *vc = j->vc + bg * j->L * j->D;
    for (int64_t s = s0; s < s1; s++) {
        const float *q[64]; /* the group's query rows (group <= 64: checked by the run) */
        bool live[64];
        float *y = j->y + (b * j->S + s) * j->H * j->D + g * group * j->D;
        for (int64_t i = 0; i < group; i++) q[i] = query_row(j, b, g * group + i, s, qbuf + i * j->D);
        int64_t lo, n;
        row_range(j, b, s, &lo, &n);
        for (int64_t t = lo; t < n; t += GQA_KV_BLOCK) {
            int64_t cnt = n - t < GQA_KV_BLOCK ? n - t : GQA_KV_BLOCK;
            j->f->scores_g(q, group, kc + t * j->D, j->D, cnt, j->D, j->scale, scores + (t - lo), ld);
        }
        memset(y, 0, (size_t)(group * j->D) * sizeof(float));
        float out[64]; /* as gqa_row_i8: p.V on the numerators, the outputs times out[i] */
        for (int64_t i = 0; i < group; i++) {
            int64_t h = g * group + i;
            const float *bias = j->bias ? j->bias + b * j->bias_s[0] + h * j->bias_s[1] +
                                              s * j->bias_s[2] + lo
                                        : NULL;
            live[i] = tdm_llm_softmax_scaled(j->simd, scores + i * ld, n - lo, j->softcap, bias,
                                             j->sink || j->smooth, j->sink ? j->sink[h] : 0.0f,
                                             &out[i]);
        }
        group_pv(j, scores, ld, group, live, vc, lo, n, y, j->D);
        tdm_llm_scale_rows(y, group, j->D, j->D, out);
    }
}

/* Pass 2's driver: slot k (one per thread) runs items k, k + slots, ... with its scratch. */
static void gqa_slots(void *arg, int64_t k0, int64_t k1) {
    const gqa_job *j = arg;
    if (j->S > 1 && omp_get_max_threads() != 1) omp_set_num_threads(1); /* sgemm stays serial */
    unsigned csr = tdm_cpu_flush_subnormals(); /* tiny attention weights: see cpu_simd.h */
    for (int64_t k = k0; k < k1; k++)
        for (int64_t p = k; p < j->items; p += j->slots) gqa_item(j, p, j->scratch + k * j->per_task);
    tdm_cpu_subnormals_restore(csr);
}

static tdm_status *check_cache(const tdm_node *node, const tdm_tensor *t, const char *what,
                               int64_t B, int64_t KVH, int64_t D, bool i8, bool q4) {
    int64_t last = q4 ? TDM_KV_I4_ROW(D) : i8 ? TDM_LLM_KV_I8_ROW(D) : D;
    if (t->dtype != (q4 ? TDM_UINT8 : i8 ? TDM_INT8 : TDM_FLOAT) || t->rank != 4 || t->dims[0] != B ||
        t->dims[1] != KVH || t->dims[3] != last) {
        char buf[96];
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "%s has %s shape %s, expected %s [%lld, %lld, length, %lld]", what,
                              tdm_dtype_name(t->dtype), tdm_shape_str(t->rank, t->dims, buf, sizeof buf),
                              q4 ? "uint8" : i8 ? "int8" : "float32", (long long)B, (long long)KVH,
                              (long long)last);
    }
    return NULL;
}

tdm_status *tdm_llm_run_gqa(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *q = ctx->in[0];
    const tdm_tensor *k = ctx->n_in > 1 ? ctx->in[1] : NULL, *v = ctx->n_in > 2 ? ctx->in[2] : NULL;
    const tdm_tensor *pk = ctx->n_in > 3 ? ctx->in[3] : NULL, *pv = ctx->n_in > 4 ? ctx->in[4] : NULL;
    const tdm_tensor *sl = ctx->in[5], *tl = ctx->in[6];
    const tdm_tensor *cosc = ctx->n_in > 7 ? ctx->in[7] : NULL, *sinc = ctx->n_in > 8 ? ctx->in[8] : NULL;
    const tdm_tensor *bias = ctx->n_in > 10 ? ctx->in[10] : NULL;
    const tdm_tensor *sink = ctx->n_in > 11 ? ctx->in[11] : NULL;
    gqa_job j;
    memset(&j, 0, sizeof j);
    tdm_llm_attn_attrs la;
    const tdm_llm_attn_attrs *at = tdm_llm_attn_attrs_of(ctx, &la);
    j.H = at->H;
    j.KVH = at->KVH;
    if (j.H <= 0 || j.KVH <= 0 || j.H % j.KVH)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "bad num_heads / kv_num_heads");
    if (j.H / j.KVH > 64)
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED, "more than 64 query heads per kv head");
    if (q->dtype != TDM_FLOAT || q->rank != 3)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "query must be float32 [B, S, hidden]");
    j.B = q->dims[0];
    j.S = q->dims[1];
    j.packed = !k;
    if (j.packed != !v)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "key and value must both be given or both omitted");
    int64_t parts = j.packed ? j.H + 2 * j.KVH : j.H;
    if (q->dims[2] % parts)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "query's last dim %lld is not a multiple of %lld heads",
                              (long long)q->dims[2], (long long)parts);
    j.D = q->dims[2] / parts;
    if (j.D <= 0) return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "head size is 0");
    if (!j.packed) {
        const tdm_tensor *kv[2] = {k, v};
        for (int i = 0; i < 2; i++)
            if (kv[i]->dtype != TDM_FLOAT || kv[i]->rank != 3 || kv[i]->dims[0] != j.B ||
                kv[i]->dims[1] != j.S || kv[i]->dims[2] != j.KVH * j.D)
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                      "%s must be float32 [%lld, %lld, %lld] (kv_num_heads * head size)",
                                      i ? "value" : "key", (long long)j.B, (long long)j.S,
                                      (long long)(j.KVH * j.D));
    }
    if (!pk != !pv)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "past_key and past_value go together");
    /* the 8-bit cache: past (or, without one, present) is int8; the 4-bit one: uint8 */
    const tdm_tensor *c0 = pk ? pk : ctx->n_out > 1 ? ctx->out[1] : NULL;
    j.q4 = c0 && c0->dtype == TDM_UINT8;
    j.i8 = j.q4 || (c0 && c0->dtype == TDM_INT8);
    j.rs = j.q4 ? TDM_KV_I4_ROW(j.D) : j.i8 ? TDM_LLM_KV_I8_ROW(j.D) : j.D * (int64_t)sizeof(float);
    if (j.i8 && j.D > TDM_LLM_KV_I8_MAX_D)
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED, "the %s KV cache takes head sizes up to %d",
                              j.q4 ? "4-bit" : "int8", TDM_LLM_KV_I8_MAX_D);
    for (int o = 1; o <= 2; o++) {
        const tdm_tensor *t = ctx->n_out > o ? ctx->out[o] : NULL;
        if (t) TDM_TRY(check_cache(node, t, o == 1 ? "present_key" : "present_value", j.B, j.KVH, j.D, j.i8, j.q4));
    }
    if (pk) {
        TDM_TRY(check_cache(node, pk, "past_key", j.B, j.KVH, j.D, j.i8, j.q4));
        TDM_TRY(check_cache(node, pv, "past_value", j.B, j.KVH, j.D, j.i8, j.q4));
        if (pv->dims[2] != pk->dims[2])
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "past_key and past_value lengths differ");
        j.P = pk->dims[2];
    }
    if (sl->dtype != TDM_INT32 || sl->count != j.B)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "seqlens_k must be int32 [%lld]",
                              (long long)j.B);
    if (tl->dtype != TDM_INT32 || tl->count != 1)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "total_sequence_length must be one int32");
    int64_t total = ((const int32_t *)tl->data)[0];
    j.L = j.P > total ? j.P : total;
    for (int o = 1; o <= 2; o++) {
        tdm_tensor *t = ctx->n_out > o ? ctx->out[o] : NULL;
        if (t && (t->rank != 4 || t->dims[2] != j.L))
            return tdm_node_error(node, TDM_ERR_INTERNAL, "present has the wrong shape");
    }
    j.rotary = at->rotary;
    j.interleaved = at->interleaved;
    if (j.rotary) {
        if (!cosc || !sinc || cosc->dtype != TDM_FLOAT || sinc->dtype != TDM_FLOAT ||
            cosc->rank != 2 || sinc->rank != 2 || sinc->dims[0] != cosc->dims[0] ||
            sinc->dims[1] != cosc->dims[1] || cosc->dims[1] <= 0 || 2 * cosc->dims[1] > j.D)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "cos_cache and sin_cache must be float32 [max_length, n] with "
                                  "1 <= n <= head_size / 2 (%lld)", (long long)(j.D / 2));
        j.rot = 2 * cosc->dims[1];
        j.maxpos = cosc->dims[0];
        j.cos = cosc->data;
        j.sin = sinc->data;
    }
    if (sink) {
        if (sink->dtype != TDM_FLOAT || sink->count != j.H)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "head_sink must be float32 [%lld]",
                                  (long long)j.H);
        j.sink = sink->data;
    }
    if (bias) { /* [B or 1, H or 1, S, total_sequence_length]: column = absolute key position */
        if (bias->dtype != TDM_FLOAT || bias->rank != 4 || (bias->dims[0] != 1 && bias->dims[0] != j.B) ||
            (bias->dims[1] != 1 && bias->dims[1] != j.H) || bias->dims[2] != j.S ||
            bias->dims[3] != total)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "attention_bias must be float32 [%lld or 1, %lld or 1, %lld, %lld]",
                                  (long long)j.B, (long long)j.H, (long long)j.S, (long long)total);
        j.bias = bias->data;
        j.bias_s[2] = total;
        j.bias_s[1] = bias->dims[1] == 1 ? 0 : j.S * total;
        j.bias_s[0] = bias->dims[0] == 1 ? 0 : bias->dims[1] * j.S * total;
    }
    j.smooth = at->smooth;
    j.causal = at->causal;
    j.win = at->win;
    j.softcap = at->softcap;
    j.scale = tdm_llm_attn_scale(at, j.D);

    /* per item: first new row and valid rows, checked against the buffers */
    bool first = j.S == total;
    int64_t pos_small[8], *pos = pos_small;
    void *pos_heap = NULL;
    if (j.B > 4) {
        if (!(pos_heap = tdm_kscratch(ctx, (size_t)j.B * 2 * sizeof(int64_t))))
            return tdm_node_error(node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
        pos = pos_heap;
    }
    int64_t *past = pos, *tot = pos + j.B;
    tdm_status *st = NULL;
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
        else if (j.rotary && p + j.S > j.maxpos)
            st = tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                "position %lld is past the rotary caches' %lld rows",
                                (long long)(p + j.S - 1), (long long)j.maxpos);
    }
    if (st) {
        tdm_free(ctx->alloc, pos_heap);
        return st;
    }
    j.past = past;
    j.tot = tot;
    j.q = q->data;
    j.qstride = q->dims[2];
    if (j.packed) {
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

    /* the caches: the present outputs, or scratch when they are not asked for */
    tdm_tensor *pres_k = ctx->n_out > 1 ? ctx->out[1] : NULL, *pres_v = ctx->n_out > 2 ? ctx->out[2] : NULL;
    /* floats of an own (scratch) cache: int8 rows rounded up to floats */
    size_t cache = j.i8 ? ((size_t)(j.B * j.KVH * j.L * j.rs) + 3) / 4 : (size_t)(j.B * j.KVH * j.L * j.D);
    size_t own_cache = (pres_k ? 0 : cache) + (pres_v ? 0 : cache);
    int64_t group = j.H / j.KVH;
    /* pass 2 items: (batch, kv head, block of query rows); blocks of 16 rows in a prefill */
    j.rows_per_block = j.S > 16 ? 16 : (j.S > 0 ? j.S : 1);
    j.row_blocks = (j.S + j.rows_per_block - 1) / j.rows_per_block;
    if (j.row_blocks < 1) j.row_blocks = 1;
    j.items = j.B * j.KVH * j.row_blocks;
    int64_t longest = 0;
    for (int64_t b = 0; b < j.B; b++) longest = tot[b] > longest ? tot[b] : longest;
    tdm_threadpool *pool = tdm_llm_attn_pool(ctx->pool, j.S == 1, j.B * j.H * longest);
    int threads = tdm_threadpool_size(pool);
    j.parts = 1;
    j.spans = false;
    int64_t span_lo = 0, span_hi = 0;
    if (j.S == 1 && j.B == 1) row_range(&j, 0, 0, &span_lo, &span_hi);
    j.span_n = span_hi - span_lo;
    if (j.S == 1 && j.B == 1 && threads > 1 && j.items < 2 * threads &&
        j.KVH * j.span_n >= 64 * threads) {
        /* one sequence's decode: the groups' rows laid end to end and cut in as many spans as
         * threads, each a slot's item, so that a slot sets up a piece (its query, softmax and
         * partial outputs: ~1 us) only where its span meets a group; a cut near a group's edge
         * (64 rows, or a quarter of a span if less) moves to it. Each group in as many parts
         * (below) gave 2 threads and 3 kv heads 6 pieces, the spans 4: a two-thread decode
         * step's attention at depth 1000 0.90-0.95 of the time */
        j.spans = true;
        j.items = tdm_llm_span_cuts(j.KVH, j.span_n, span_lo, 1, threads, j.cut);
        for (int64_t g = 0; g < j.KVH; g++) {
            int64_t np = tdm_llm_span_parts(j.cut, g, j.span_n);
            j.parts = np > j.parts ? np : j.parts;
        }
    } else if (j.S == 1 && threads > 1 && j.items < 2 * threads) {
        /* decode with few groups: split each group's cache rows so every thread has as much
         * work */
        j.parts = tdm_llm_decode_parts(threads, longest / 64);
        j.items *= j.parts;
    }
    j.slots = j.items < threads ? j.items : threads;
    if (j.slots < 1) j.slots = 1;
    int64_t row_need = group * (j.L + 16) + group * j.D;
    int64_t block_need = j.rows_per_block * (j.L + 1) + j.rows_per_block * j.D +
                         (j.i8 && j.S > 1 ? 2 * j.L * j.D : 0); /* the widened K / V range */
    j.per_task = (row_need > block_need ? row_need : block_need) + 16;
    size_t part_need = j.parts > 1 || j.spans ? (size_t)(j.B * j.H * j.parts * (j.D + 2)) : 0;
    size_t need = (size_t)(j.slots * j.per_task) + own_cache + part_need;
    float *own = NULL, *mem = tdm_llm_gqa_scratch(ctx, need, &own);
    if (!mem) {
        tdm_free(ctx->alloc, pos_heap);
        return tdm_node_error(node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    j.scratch = mem;
    float *extra = mem + j.slots * j.per_task;
    if (part_need) {
        j.partial = extra;
        extra += part_need;
    }
    j.kc = pres_k ? pres_k->data : extra;
    if (!pres_k) extra += cache;
    j.vc = pres_v ? pres_v->data : extra;
    j.kq = (int8_t *)j.kc;
    j.vq = (int8_t *)j.vc;
    j.pkq = (const int8_t *)j.pk;
    j.pvq = (const int8_t *)j.pv;
    j.k_inplace = pres_k && pk && pres_k->data == pk->data;
    j.v_inplace = pres_v && pv && pres_v->data == pv->data;
    if ((j.k_inplace || j.v_inplace) && j.L != j.P)
        st = tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                            "present shares past's buffer but is longer (%lld rows, past %lld)",
                            (long long)j.L, (long long)j.P);
    if (!st) {
        j.f = tdm_llm_fns_for(tdm_cpu_simd_of(ctx)->level);
        j.fi = (j.q4 ? tdm_llm_i4_fns_for : tdm_llm_i8_fns_for)(tdm_cpu_simd_of(ctx)->level);
        j.simd = tdm_cpu_simd_of(ctx);
        tdm_parallel_for(pool, j.B * j.KVH, 1, gqa_cache, &j);
        int omp = j.S > 1 ? dn_omp_begin() : 1;
        tdm_parallel_for(pool, j.slots, 1, gqa_slots, &j);
        if (j.S > 1) dn_omp_end(omp);
        if (j.parts > 1 || j.spans) gqa_merge(&j);
    }
    tdm_llm_gqa_scratch_done(ctx, own);
    tdm_free(ctx->alloc, pos_heap);
    return st;
}

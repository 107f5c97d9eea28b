/* CPU kernel: com.microsoft PagedAttention (float32), after ONNX Runtime's contrib operator
 * documentation; where tandem differs from it (float32, rank-3 inputs and caches, refused
 * inputs and attributes) is listed at the schema, src/ops/llm.c.
 *
 * Shapes: query [T, H*D] or [1, T, H*D] (or packed QKV [.., (H + 2*KVH)*D] with key/value
 * omitted), key/value [.., T, KVH*D]; key_cache/value_cache [NB, BS, KVH, D] or
 * [NB, BS, KVH*D] (one row of KVH*D floats per cache slot), or with the tandem attribute
 * tandem_kv_layout="BHSD" [NB, KVH, BS, D] (a block holds each kv head's BS rows together: the
 * rows one head reads are contiguous, which the row routines read about twice as fast as the
 * heads interleaved slot by slot, bench/llm/bench_paged.c); cumulative_sequence_length int32
 * [B+1], past_seqlens int32 [B], block_table int32 [B, MB], cos/sin caches [max_pos, rot/2],
 * head_sink [H]. Outputs: output [.., T, H*D], key_cache_out / value_cache_out (the caches).
 *
 * Sequence b owns the packed rows cu[b] .. cu[b+1]-1; its new token j sits at position
 * past[b] + j, stored in cache slot block_table[b][pos / BS] * BS + pos % BS (its key rotated
 * first when do_rotary). Query row j (rotated at the same position) attends to positions
 * [lo, n): n = past[b] + j + 1 (is_causal=1; past[b] + n_b when 0), lo = n - local_window_size
 * when a window is set. Query head h reads kv head h / (H / KVH).
 * The caches are updated in place: when key_cache_out's memory IS key_cache's (the engine's
 * I/O binding gives the same tensor to both), only the new tokens' slots are written; else
 * the output gets a copy of the whole cache first (and without the output, a scratch copy).
 * float16 caches (T stays float32; T_CACHE float16 as the spec allows): the new K (rotated in
 * float32) and V rows are rounded into the cache; reads widen each stretch into float32
 * scratch by kv head (the float16 GQA kernel's F16C / AVX-512 widening) and run the same row
 * routines: half the cache bytes of float32 to read per decode step. A prompt chunk's rows go
 * PAGED_ROWS to an item (paged_rows): each stretch is read (float16: widened) once for all of
 * them.
 * tandem's 8-bit (int8) and 4-bit (uint8) caches, BHSD only ([NB, KVH, BS, row bytes]: the
 * generator's row formats, ops/kv_int8.h; the engine's kv_type int8 / int4): the new K (rotated)
 * and V rows are quantised into their slots by the GQA kernel's row quantisers. A decode row
 * runs the 8- / 4-bit cache's integer scores and p.V once over its range, reading the rows in
 * place through a list of its blocks where the level can (AVX-512 VNNI, AVX2), else gathering
 * them into scratch first (paged_item_q: the query quantised once, as the generator's cache does;
 * at BS = 16 a call per block would pay the query's quantisation and p.V's set-up every 16
 * rows); a prompt chunk widens its stretches into float32
 * (the codes times their scales) with the query rounded as decode's dot products see it, as
 * the GQA kernel's block GEMM does, and the 4-bit rows' rotation is undone on the outputs.
 * Malformed tables (cumulative lengths not monotone or not ending at T, a sequence beyond its
 * table's capacity, a block id out of range, positions past the rotary caches) fail with
 * TDM_ERR_INVALID_ARGUMENT before anything is written.
 *
 * Speed: two parallel passes on the session's pool: the new tokens' K/V rows into their
 * slots, then (token, kv head) items, one scratch slot per thread. An item runs all query
 * heads of its group together, block by block: the K (then V) rows of a block are read once
 * for the group, with the attention row routines of the GroupQueryAttention kernel
 * (k_llm_simd.c scores and p.V, the device's softmax row); runs of consecutive block ids are
 * one contiguous stretch of slots and go as one call. With fewer items than twice the threads
 * (a decode step of one or two sequences), each item's positions split in parts whose softmax
 * partials merge at the end (flash-decoding, as the GQA kernel does); one sequence's decode
 * token on a quantised cache takes row spans instead (the kv groups' positions end to end, cut
 * in one span a thread: tdm_llm_span_cuts, as GQA's one sequence); a decode step with
 * little to read runs both passes on the caller (TDM_LLM_ATTN_SERIAL_WORK). Both passes give
 * each thread one contiguous share: the tokens of pass 1 in one task a thread, and (one row an
 * item) a slot's items consecutive, so that a decode step's thread attends mostly the
 * sequences whose new rows it wrote (SmolLM2, 8 sequences at positions 16-80, 2 threads, us a
 * call: 25.7-25.9 with 8 tasks of one token and items dealt in turn, 22.5-23.9 with both
 * shares; bench/llm/results-2026-12-06-s40-amx.md). The scratch is the
 * node's (the GQA kernel's state: tdm_llm_gqa_prepare), kept between runs: a decode step
 * allocates nothing. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/k_llm.h"
#include "core/alloc.h"

typedef struct paged_job {
    const float *q, *k, *v, *cos, *sin, *sink;
    float *kc, *vc, *y; /* the caches: float, or float16 bits when half */
    const int32_t *cu, *past, *bt;
    const int32_t *seq_of; /* per token: its sequence */
    const int32_t *item_t0; /* rows > 1: item p is tokens item_t0[p] .. item_t0[p + 1] - 1 */
    int64_t rows;           /* query rows an item takes at most (1, or PAGED_ROWS) */
    int64_t T, B, H, KVH, D, BS, MB, rot, win, qstride, kstride, koff, voff, row, ld;
    int64_t run; /* most slots per scores / p.V call: about 16 KiB of slot rows, 16 to 64 */
    bool bhsd;   /* tandem_kv_layout "BHSD": blocks [KVH, BS, D] (else ORT's [BS, KVH, D]) */
    int64_t hstride; /* floats between one head's rows of consecutive slots: row, or D */
    bool half;       /* float16 caches: stretches widened into scratch by kv head */
    /* tandem's 8-bit (int8) or 4-bit (uint8, q4) rows, BHSD only: rb bytes a row; decode
     * gathers an item's rows and runs the integer routines (fi), a prompt chunk widens its
     * stretches (fi->dequantize_rows) into float32 like float16 */
    bool quant, q4;
    const tdm_llm_i8_fns *fi;
    bool blk_forms; /* fi has block-list scores and p.V: the rows are read where they lie */
    int64_t rb; /* bytes of one kv head's row of a slot: D * 4, D * 2 or the quantised row's */
    tdm_llm_widen_fn widen;
    tdm_llm_narrow_fn narrow; /* float16 caches: the new rows rounded in */
    bool rotary, interleaved, causal;
    float scale, softcap;
    const tdm_llm_fns *f;
    const tdm_cpu_simd *simd;
    float *scratch; /* per slot: per_task floats */
    int64_t per_task, items, slots;
    int64_t parts;  /* few items for the threads: each item's positions split in parts */
    /* one sequence's decode on a quantised cache in row spans (tdm_llm_span_cuts; items =
     * slots): the groups' positions (span_n each) end to end, item k takes [cut[k], cut[k + 1]),
     * a group's part i its piece in the i-th span its positions fall in; parts their most */
    bool spans;
    int64_t cut[TDM_LLM_MAX_SPANS + 1], span_n;
    float *partial; /* per (token, head, part): D partial outputs, max logit, 1 + sum */
} paged_job;


/* The cache slot of position pos of sequence b. */
static inline int64_t slot_of(const paged_job *j, int64_t b, int64_t pos) {
    return (int64_t)j->bt[b * j->MB + pos / j->BS] * j->BS + pos % j->BS;
}

/* The index of kv head g's row of cache slot `slot` among the cache's rows (of j->rb bytes
 * each); rows of one head in a stretch are consecutive (BHSD) or KVH apart. */
static inline int64_t row_at(const paged_job *j, int64_t slot, int64_t g) {
    if (!j->bhsd) return slot * j->KVH + g;
    int64_t blk = slot / j->BS, off = slot % j->BS;
    return (blk * j->KVH + g) * j->BS + off;
}

/* ... its element offset (float and float16 caches) */
static inline int64_t head_at(const paged_job *j, int64_t slot, int64_t g) {
    return row_at(j, slot, g) * j->D;
}

/* ... its bytes (quantised caches) */
static inline int8_t *qrow(const paged_job *j, const float *c, int64_t slot, int64_t g) {
    return (int8_t *)c + row_at(j, slot, g) * j->rb;
}

/* ... as a pointer into cache c (float caches). */
static inline float *head_row(const paged_job *j, const float *c, int64_t slot, int64_t g) {
    return (float *)c + head_at(j, slot, g);
}

/* Pass 1: tokens t0..t1: their K (rotated) and V rows into their slots. */
static void paged_cache(void *arg, int64_t t0, int64_t t1) {
    const paged_job *j = arg;
    size_t bytes = (size_t)j->D * sizeof(float);
    for (int64_t t = t0; t < t1; t++) {
        int64_t b = j->seq_of[t], pos = j->past[b] + t - j->cu[b];
        int64_t slot = slot_of(j, b, pos);
        for (int64_t g = 0; g < j->KVH; g++) {
            const float *ks = j->k + t * j->kstride + j->koff + g * j->D;
            const float *vs = j->v + t * j->kstride + j->voff + g * j->D;
            if (j->half || j->quant) { /* the key rotated in float32, then rounded into the cache
                                          (float16) or quantised (4-bit: the rows' own rotation
                                          inside) */
                _Static_assert(TDM_LLM_KV_I8_MAX_D <= 1024, "the run's head size bound");
                float buf[1024]; /* D <= 1024: checked by the run */
                memcpy(buf, ks, bytes);
                if (j->rotary)
                    tdm_llm_rotate(buf, j->cos + pos * (j->rot / 2), j->sin + pos * (j->rot / 2),
                                   j->rot, j->interleaved);
                if (j->quant) {
                    j->fi->quantize_row(buf, j->D, qrow(j, j->kc, slot, g));
                    j->fi->quantize_row(vs, j->D, qrow(j, j->vc, slot, g));
                } else {
                    j->narrow(buf, j->D, (uint16_t *)j->kc + head_at(j, slot, g));
                    j->narrow(vs, j->D, (uint16_t *)j->vc + head_at(j, slot, g));
                }
                continue;
            }
            float *kd = head_row(j, j->kc, slot, g), *vd = head_row(j, j->vc, slot, g);
            memcpy(kd, ks, bytes);
            memcpy(vd, vs, bytes);
            if (j->rotary)
                tdm_llm_rotate(kd, j->cos + pos * (j->rot / 2), j->sin + pos * (j->rot / 2), j->rot,
                               j->interleaved);
        }
    }
}

/* The next stretch of contiguous slots of sequence b from position p (< e): up to the end of
 * a run of consecutive block ids, j->run slots and e. Returns its length; *slot its first. */
static int64_t stretch(const paged_job *j, int64_t b, int64_t p, int64_t e, int64_t *slot) {
    *slot = slot_of(j, b, p);
    int64_t end = (p / j->BS + 1) * j->BS; /* end of p's block */
    const int32_t *bt = j->bt + b * j->MB;
    while (!j->bhsd && end < e && end - p < j->run && bt[end / j->BS] == bt[end / j->BS - 1] + 1)
        end += j->BS; /* BHSD: a head's rows are contiguous within a block only */
    if (end > e) end = e;
    if (end - p > j->run) end = p + j->run;
    return end - p;
}

/* Software prefetch of a cache's slots ahead of their use, PAGED_AHEAD slots in front of the
 * reads: the slots of a stretch are read head by head (a strided pattern) and the blocks
 * jump, which the hardware prefetchers follow less well than the GQA kernel's contiguous
 * rows. The lines go to L2 (prefetcht1), not L1: a prefetch to L1 holds one of the core's
 * few L1 fill buffers until its line arrives, so fewer lines are in flight. A decode item's
 * scores also ask for the value rows of the same positions (all_scores), so that they arrive
 * while the scores compute and p.V finds them in L2. Measured on the AVX-512 Zen 5
 * (bench_paged BHSD, 8 sequences, float32, wall us a call of 30 layers' caches in turn,
 * 3 alternating rounds): 2 threads, context 128 base 130-179 / t1 121-126 / t1 + the values
 * 107-136, context 256 244-267 / 219-248 / 193-206; 1 thread, context 128 186-235 against
 * 155-162; float16 pool 2 threads 166-170 against 129-152; one sequence (the parts) 20-24
 * against 20-28 (context 128) and 125-155 against 119-149 (1024). Distances of 32 and 96
 * slots were no better than 48. all_pv still asks for the same value lines ahead of its reads:
 * without that, 8 sequences at context 512 took 400-418 us against 358-394 (the lines asked for
 * during the scores do not all stay in L2 until p.V reaches them). */
enum { PAGED_AHEAD = 48 };

typedef struct prefetcher {
    const float *c;
    int64_t b, pos, e; /* next position to ask for, end */
} prefetcher;

/* Asks for every line of positions [pf->pos, upto) (clamped to the end). */
static void prefetch_to(const paged_job *j, prefetcher *pf, int64_t upto) {
    if (upto > pf->e) upto = pf->e;
    while (pf->pos < upto) {
        int64_t slot, cnt = stretch(j, pf->b, pf->pos, upto, &slot);
        for (int64_t g = 0; g < (j->bhsd ? j->KVH : 1); g++) {
            const char *p = (const char *)pf->c + row_at(j, slot, g) * j->rb;
            const char *end = p + cnt * (j->bhsd ? 1 : j->KVH) * j->rb;
            for (; p < end; p += 64) __builtin_prefetch(p, 0, 2); /* prefetcht1 */
        }
        pf->pos += cnt;
    }
}

/* Logits of every head over positions [a, e) of sequence b: q + h * D against the slots' key
 * rows of kv head h / group, into scores + h * ld + (position - a). A stretch of slots is read
 * for all heads while it is in L1. */
/* Float16 and quantised caches: the stretch's rows of every kv head widened into buf
 * [KVH][cnt][D] (quantised: the codes times their scales; 4-bit rows stay rotated). */
static const float *widen_stretch(const paged_job *j, const float *c, int64_t slot, int64_t cnt,
                                  float *buf) {
    const uint16_t *h = (const uint16_t *)c;
    for (int64_t g = 0; g < j->KVH; g++) {
        if (j->quant) { /* BHSD: a head's rows of a block are contiguous */
            j->fi->dequantize_rows(qrow(j, c, slot, g), j->rb, cnt, j->D, buf + g * cnt * j->D);
            continue;
        }
        if (j->bhsd) { /* a head's rows of a block are contiguous */
            j->widen(h + head_at(j, slot, g), cnt * j->D, buf + g * cnt * j->D);
            continue;
        }
        for (int64_t r = 0; r < cnt; r++)
            j->widen(h + head_at(j, slot + r, g), j->D, buf + (g * cnt + r) * j->D);
    }
    return buf;
}

static void all_scores(const paged_job *j, int64_t b, int64_t a, int64_t e, const float *q,
                       float *scores, float *buf) {
    int64_t group = j->H / j->KVH;
    prefetcher pf = {j->kc, b, a, e}, pv = {j->vc, b, a, e}; /* keys, and the values p.V reads next */
    for (int64_t s = a, cnt, slot; s < e; s += cnt) {
        prefetch_to(j, &pf, s + PAGED_AHEAD);
        prefetch_to(j, &pv, s + PAGED_AHEAD);
        cnt = stretch(j, b, s, e, &slot);
        const float *w = j->half ? widen_stretch(j, j->kc, slot, cnt, buf) : NULL;
        int64_t ks = w ? j->D : j->hstride;
        for (int64_t g = 0; g < j->KVH; g++) {
            const float *k = w ? w + g * cnt * j->D : head_row(j, j->kc, slot, g);
            float *sg = scores + g * group * j->ld + (s - a);
            if (group <= 64) { /* each key row once for the group's heads */
                const float *qg[64];
                for (int64_t i = 0; i < group; i++) qg[i] = q + (g * group + i) * j->D;
                j->f->scores_g(qg, group, k, ks, cnt, j->D, j->scale, sg, j->ld);
            } else {
                for (int64_t i = 0; i < group; i++)
                    j->f->scores(q + (g * group + i) * j->D, k, ks, cnt, j->D, j->scale, sg + i * j->ld);
            }
        }
    }
}

/* out + h * ostride += p_h . V over positions [a, e), for the heads with live[h] != 0. */
static void all_pv(const paged_job *j, int64_t b, int64_t a, int64_t e, const float *live,
                   const float *scores, float *out, int64_t ostride, float *buf) {
    int64_t group = j->H / j->KVH;
    prefetcher pf = {j->vc, b, a, e};
    for (int64_t s = a, cnt, slot; s < e; s += cnt) {
        prefetch_to(j, &pf, s + PAGED_AHEAD);
        cnt = stretch(j, b, s, e, &slot);
        const float *w = j->half ? widen_stretch(j, j->vc, slot, cnt, buf) : NULL;
        int64_t vs = w ? j->D : j->hstride;
        for (int64_t g = 0; g < j->KVH; g++) {
            const float *v = w ? w + g * cnt * j->D : head_row(j, j->vc, slot, g);
            const float *pg = scores + g * group * j->ld + (s - a);
            float *og = out + g * group * ostride;
            bool all = true;
            for (int64_t i = 0; i < group && all; i++) all = live[g * group + i] != 0.0f;
            if (all) { /* each value row once for the group's heads */
                j->f->pv_g(pg, j->ld, group, v, vs, cnt, j->D, og, ostride);
                continue;
            }
            for (int64_t i = 0; i < group; i++)
                if (live[g * group + i] != 0.0f)
                    j->f->pv(pg + i * j->ld, v, vs, cnt, j->D, og + i * ostride);
        }
    }
}

/* Item p of pass 2: token t (and with parts > 1, part k of its positions), every head.
 * Scratch: H * ld logits, H * D query rows, H live flags. */
/* Decode with parts: part k of a row's positions [lo, n) is [*a, *e) (empty when *a >= *e);
 * `whole` rounds the parts up to whole blocks. */
static void part_range(const paged_job *j, int64_t k, int64_t lo, int64_t n, bool whole,
                       int64_t *a, int64_t *e) {
    int64_t chunk = (n - lo + j->parts - 1) / j->parts;
    if (whole) chunk = (chunk + j->BS - 1) / j->BS * j->BS;
    *a = lo + k * chunk;
    *e = *a + chunk < n ? *a + chunk : n;
}

/* Part k of token t's partials (head h at the result + h * *ostride): each head's D outputs
 * zeroed and its max logit -inf (an empty part until shown otherwise). */
static float *part_slots(const paged_job *j, int64_t t, int64_t k, int64_t *ostride) {
    int64_t slot = j->D + 2;
    float *o = j->partial + (t * j->H * j->parts + k) * slot;
    *ostride = j->parts * slot;
    for (int64_t h = 0; h < j->H; h++) {
        memset(o + h * *ostride, 0, (size_t)j->D * sizeof(float));
        o[h * *ostride + j->D] = -INFINITY;
    }
    return o;
}

/* A part's softmax of one head over sc[0..cnt) (tdm_llm_part_softmax after the soft-cap): m
 * and 1 + sum to oh[D], oh[D + 1] for paged_merge, *scale for the head's output after p.V. */
static bool part_softmax(const paged_job *j, float *sc, int64_t cnt, float *oh, float *scale) {
    if (j->softcap > 0.0f)
        for (int64_t x = 0; x < cnt; x++) sc[x] = j->softcap * tanhf(sc[x] / j->softcap);
    return tdm_llm_part_softmax(j->simd, sc, cnt, oh, j->D, scale);
}

static void paged_item(const paged_job *j, int64_t p, float *scratch) {
    int64_t t = p / j->parts, k = p % j->parts;
    int64_t b = j->seq_of[t], pos = j->past[b] + t - j->cu[b];
    int64_t n = j->causal ? pos + 1 : j->past[b] + (j->cu[b + 1] - j->cu[b]);
    int64_t lo = j->win > 0 && n > j->win ? n - j->win : 0;
    float *scores = scratch, *q = scratch + j->H * j->ld, *live = q + j->H * j->D;
    float *buf = live + j->H; /* float16 caches: a stretch widened, KVH * run * D */
    const float *src = j->q + t * j->qstride; /* the token's heads are contiguous */
    memcpy(q, src, (size_t)(j->H * j->D) * sizeof(float));
    if (j->rotary)
        for (int64_t h = 0; h < j->H; h++)
            tdm_llm_rotate(q + h * j->D, j->cos + pos * (j->rot / 2), j->sin + pos * (j->rot / 2),
                           j->rot, j->interleaved);
    if (j->parts == 1) {
        float *y = j->y + t * j->H * j->D;
        all_scores(j, b, lo, n, q, scores, buf);
        memset(y, 0, (size_t)(j->H * j->D) * sizeof(float));
        for (int64_t h = 0; h < j->H; h++)
            live[h] = tdm_llm_softmax(j->simd, scores + h * j->ld, n - lo, j->softcap, NULL,
                                      j->sink != NULL, j->sink ? j->sink[h] : 0.0f);
        all_pv(j, b, lo, n, live, scores, y, j->D, buf);
        return;
    }
    /* part k: positions [a, e), each head's partial by part_softmax; paged_merge combines */
    int64_t a, e, ostride;
    part_range(j, k, lo, n, false, &a, &e);
    float *o = part_slots(j, t, k, &ostride);
    if (a >= e) return;
    all_scores(j, b, a, e, q, scores, buf);
    for (int64_t h = 0; h < j->H; h++) { /* live: the head's output scale, 0 if none */
        float scale;
        bool on = part_softmax(j, scores + h * j->ld, e - a, o + h * ostride, &scale);
        live[h] = on ? scale : 0.0f;
    }
    all_pv(j, b, a, e, live, scores, o, ostride, buf);
    for (int64_t h = 0; h < j->H; h++) /* a dead head's output is zero: any scale leaves it */
        tdm_llm_scale_rows(o + h * ostride, 1, 0, j->D, &live[h]);
}

/* kv head g's key and value rows of sequence b's positions [a, e) copied into kb / vb (rb
 * bytes a row, in order), the rows PAGED_AHEAD slots ahead asked for into L2 as prefetch_to
 * does for all heads */
static void gather_head(const paged_job *j, int64_t b, int64_t a, int64_t e, int64_t g, int8_t *kb,
                        int8_t *vb) {
    int64_t pf = a;
    for (int64_t s = a, c, sl; s < e; s += c) {
        for (int64_t pc, ps; pf < e && pf < s + PAGED_AHEAD; pf += pc) {
            pc = stretch(j, b, pf, e, &ps);
            const char *kp = (const char *)qrow(j, j->kc, ps, g);
            const char *vp = (const char *)qrow(j, j->vc, ps, g);
            for (int64_t at = 0; at < pc * j->rb; at += 64) {
                __builtin_prefetch(kp + at, 0, 2);
                __builtin_prefetch(vp + at, 0, 2);
            }
        }
        c = stretch(j, b, s, e, &sl);
        size_t at = (size_t)((s - a) * j->rb), bytes = (size_t)(c * j->rb);
        memcpy(kb + at, qrow(j, j->kc, sl, g), bytes);
        memcpy(vb + at, qrow(j, j->vc, sl, g), bytes);
    }
}

/* kv head g's piece [a, e) of sequence b's positions for its decode token t at position pos:
 * the group's query heads (copied into q, rotated), scores, softmax and p.V into o (head h's
 * output at o + h * ostride; part: softmax partials for paged_merge, else the outputs);
 * in_place: the level's block-list routines read the rows where they are (a starts a block). */
static void paged_group_q(const paged_job *j, int64_t t, int64_t b, int64_t pos, int64_t g,
                          int64_t a, int64_t e, bool in_place, bool part, float *o,
                          int64_t ostride, float *scratch) {
    int64_t group = j->H / j->KVH, cnt = e - a;
    float *scores = scratch, *q = scratch + j->H * j->ld;
    /* 64-byte aligned: in place it holds the two block lists (pointers) */
    int8_t *kb = (int8_t *)(((uintptr_t)(q + j->H * j->D) + 63) & ~(uintptr_t)63);
    int8_t *vb = kb + j->ld * j->rb;
    const float *qg[64]; /* group <= 64: checked by the run */
    for (int64_t i = 0; i < group; i++) {
        int64_t h = g * group + i;
        float *qh = q + h * j->D;
        memcpy(qh, j->q + t * j->qstride + h * j->D, (size_t)j->D * sizeof(float));
        if (j->rotary)
            tdm_llm_rotate(qh, j->cos + pos * (j->rot / 2), j->sin + pos * (j->rot / 2), j->rot,
                           j->interleaved);
        if (j->q4) j->fi->rotate(qh, j->D); /* as the cache's rows */
        qg[i] = qh;
    }
    const int8_t **kl = (const int8_t **)(void *)kb; /* in place: the blocks' rows of head g */
    const int8_t **vl = kl + (cnt + j->BS - 1) / j->BS;
    float *sg = scores + g * group * j->ld;
    bool blk = false;
    if (in_place) {
        for (int64_t s = a, x = 0; s < e; s += j->BS, x++) {
            int64_t sl = slot_of(j, b, s);
            kl[x] = qrow(j, j->kc, sl, g);
            vl[x] = qrow(j, j->vc, sl, g);
        }
        blk = j->fi->scores_blk(qg, group, kl, j->BS, j->rb, cnt, j->D, j->scale, sg, j->ld);
    }
    if (!blk) {
        gather_head(j, b, a, e, g, kb, vb);
        j->fi->scores(qg, group, kb, j->rb, cnt, j->D, j->scale, sg, j->ld, NULL);
    }
    float scale[64]; /* each head's output times it after p.V (group <= 64) */
    for (int64_t i = 0; i < group; i++) {
        int64_t h = g * group + i;
        float *sc = sg + i * j->ld;
        bool live = part ? part_softmax(j, sc, cnt, o + h * ostride, &scale[i])
                         : tdm_llm_softmax_scaled(j->simd, sc, cnt, j->softcap, NULL,
                                                  j->sink != NULL, j->sink ? j->sink[h] : 0.0f,
                                                  &scale[i]);
        if (!live) memset(sc, 0, (size_t)cnt * sizeof(float)); /* p.V takes every head */
    }
    float *og = o + g * group * ostride;
    if (blk) j->fi->pv_blk(sg, j->ld, group, vl, j->BS, j->rb, cnt, j->D, og, ostride);
    else j->fi->pv(sg, j->ld, group, vb, j->rb, cnt, j->D, og, ostride);
    tdm_llm_scale_rows(og, group, ostride, j->D, scale);
    for (int64_t i = 0; j->q4 && i < group; i++) j->fi->rotate(og + i * ostride, j->D); /* back */
}

/* Item p of pass 2 on a quantised cache (one row: decode): token t, and with parts > 1 part
 * k of its positions [a, e); in row spans (one sequence) the pieces of span p. The integer
 * routines run once over a group's range, kv head by kv head, as on the generator's cache
 * (the query quantised once, k_llm_gqa_i8.c), not once a block:
 *   - where the level has block-list forms (scores_blk / pv_blk: AVX-512 VNNI, block sizes of
 *     16 rows or a multiple; AVX2, also the 4-bit cache's AVX-512 level without VNNI, 8 rows
 *     or a multiple and head sizes a multiple of 32) and the range starts at a block's start
 *     (parts and spans are whole blocks then), they read the rows in place from the list of
 *     the range's blocks;
 *   - else each head's rows are gathered from their blocks into scratch first, one head at a
 *     time so that they stay in L2 (gathering every head's first, 442 KB at 2,048 positions,
 *     was 1.32-1.52x GQA's time against 1.10-1.43x, int4).
 * bench_paged 8 sequences, 2 threads, AMX Xeon, 3 alternating rounds, in place against
 * gathered: int4 at 1,024 / 2,048 positions 240-257 / 415-440 against 267-281 / 458-494 us,
 * int8 305-332 / 524-575 against 341-356 / 631-659; equal to 10% less at 128-512. The AVX2
 * forms (TANDEM_CPU_ISA=avx2, same machine, 4 alternating rounds): int4 at 1,024 / 2,048
 * 241-261 / 428-452 against 246-269 / 440-474 us, int8 307-341 / 564-583 against 351-369 /
 * 659-683 (the GQA column's contiguous cache: 207-228 / 377-405 and 326-342 / 586-626).
 * Scratch: H * ld logits, H * D query rows, then ld key rows and as many value rows of rb
 * bytes (in place: the two block lists). */
static void paged_item_q(const paged_job *j, int64_t p, float *scratch) {
    int64_t t = j->spans ? 0 : p / j->parts, k = j->spans ? p : p % j->parts;
    int64_t b = j->seq_of[t], pos = j->past[b] + t - j->cu[b];
    int64_t n = j->causal ? pos + 1 : j->past[b] + (j->cu[b + 1] - j->cu[b]);
    int64_t lo = j->win > 0 && n > j->win ? n - j->win : 0;
    /* the level's block-list routines read the rows where they are, from a block's start */
    bool in_place = j->blk_forms && lo % j->BS == 0;
    int64_t slot = j->D + 2, group = j->H / j->KVH;
    if (j->spans) { /* span k: [cut[k], cut[k + 1]) of the groups' positions end to end */
        int64_t N = n - lo, ostride = j->parts * slot;
        for (int64_t r = j->cut[k]; r < j->cut[k + 1];) {
            int64_t g = r / N, end = (g + 1) * N < j->cut[k + 1] ? (g + 1) * N : j->cut[k + 1];
            int64_t part = k - tdm_llm_span_of(j->cut, g * N);
            float *o = j->partial + (t * j->H * j->parts + part) * slot;
            for (int64_t h = g * group; h < (g + 1) * group; h++) { /* empty until it is not */
                memset(o + h * ostride, 0, (size_t)j->D * sizeof(float));
                o[h * ostride + j->D] = -INFINITY;
            }
            int64_t a = lo + r - g * N;
            bool here = j->blk_forms && a % j->BS == 0; /* the rows read in place */
            paged_group_q(j, t, b, pos, g, a, lo + end - g * N, here, true, o, ostride, scratch);
            r = end;
        }
        return;
    }
    int64_t a = lo, e = n;
    float *o = j->y + t * j->H * j->D; /* parts: this part's slots of the partials */
    int64_t ostride = j->D;
    if (j->parts > 1) {
        part_range(j, k, lo, n, in_place, &a, &e); /* in place: parts of whole blocks */
        o = part_slots(j, t, k, &ostride);
    } else {
        memset(o, 0, (size_t)(j->H * j->D) * sizeof(float));
    }
    for (int64_t g = 0; a < e && g < j->KVH; g++)
        paged_group_q(j, t, b, pos, g, a, e, in_place, j->parts > 1, o, ostride, scratch);
}

/* An item of rows > 1 (a prefill chunk: causal, no window, one part, BHSD): tokens
 * item_t0[p] .. item_t0[p + 1] - 1 of one sequence, at consecutive positions. Every stretch
 * of the last row's positions serves all the rows while it is in L1 (row r uses the
 * positions it sees, up to its own), where the one-row path reads the sequence's cache once
 * a row; a float16 stretch is widened once for all the rows instead of once a row. Each row
 * gets the one-row path's calls on the same stretches (a stretch ends at its block's end,
 * the run or the row's last position), so the same values. Scratch: per row H * ld logits,
 * H * D query values, H live flags; then the widened stretch. */
enum { PAGED_ROWS = 16 };

/* kv head g's rows of a stretch of cnt slots: in the widened stretch w (float16 caches, rows
 * D apart) or in the float32 cache c (rows j->hstride apart) */
static inline const float *head_rows(const paged_job *j, const float *w, const float *c,
                                     int64_t slot, int64_t cnt, int64_t g) {
    return w ? w + g * cnt * j->D : head_row(j, c, slot, g);
}

static void paged_rows(const paged_job *j, int64_t p, float *scratch) {
    int64_t t0 = j->item_t0[p], R = j->item_t0[p + 1] - t0;
    int64_t b = j->seq_of[t0], pos0 = j->past[b] + t0 - j->cu[b], e = pos0 + R;
    int64_t group = j->H / j->KVH, per_row = j->H * j->ld + j->H * j->D + j->H;
    float *buf = scratch + j->rows * per_row;
    for (int64_t r = 0; r < R; r++) {
        float *q = scratch + r * per_row + j->H * j->ld;
        memcpy(q, j->q + (t0 + r) * j->qstride, (size_t)(j->H * j->D) * sizeof(float));
        if (j->rotary)
            for (int64_t h = 0; h < j->H; h++)
                tdm_llm_rotate(q + h * j->D, j->cos + (pos0 + r) * (j->rot / 2),
                               j->sin + (pos0 + r) * (j->rot / 2), j->rot, j->interleaved);
        for (int64_t h = 0; j->quant && h < j->H; h++) { /* as the decode path's query */
            if (j->q4) j->fi->rotate(q + h * j->D, j->D);
            tdm_llm_q8_round(q + h * j->D, j->D);
        }
    }
    prefetcher pk = {j->kc, b, 0, e};
    for (int64_t s = 0, cnt, slot; s < e; s += cnt) {
        prefetch_to(j, &pk, s + PAGED_AHEAD);
        cnt = stretch(j, b, s, e, &slot);
        const float *w = j->half || j->quant ? widen_stretch(j, j->kc, slot, cnt, buf) : NULL;
        for (int64_t r = s > pos0 ? s - pos0 : 0; r < R; r++) { /* rows that see position s */
            float *sc = scratch + r * per_row, *q = sc + j->H * j->ld;
            int64_t c = pos0 + r + 1 - s < cnt ? pos0 + r + 1 - s : cnt;
            for (int64_t h = 0; h < j->H; h++)
                j->f->scores(q + h * j->D, head_rows(j, w, j->kc, slot, cnt, h / group),
                             w ? j->D : j->hstride, c, j->D, j->scale, sc + h * j->ld + s);
        }
    }
    for (int64_t r = 0; r < R; r++) {
        float *sc = scratch + r * per_row, *live = sc + j->H * j->ld + j->H * j->D;
        for (int64_t h = 0; h < j->H; h++)
            live[h] = tdm_llm_softmax(j->simd, sc + h * j->ld, pos0 + r + 1, j->softcap, NULL,
                                      j->sink != NULL, j->sink ? j->sink[h] : 0.0f);
        memset(j->y + (t0 + r) * j->H * j->D, 0, (size_t)(j->H * j->D) * sizeof(float));
    }
    prefetcher pv = {j->vc, b, 0, e};
    for (int64_t s = 0, cnt, slot; s < e; s += cnt) {
        prefetch_to(j, &pv, s + PAGED_AHEAD);
        cnt = stretch(j, b, s, e, &slot);
        const float *w = j->half || j->quant ? widen_stretch(j, j->vc, slot, cnt, buf) : NULL;
        for (int64_t r = s > pos0 ? s - pos0 : 0; r < R; r++) {
            const float *sc = scratch + r * per_row, *live = sc + j->H * j->ld + j->H * j->D;
            float *y = j->y + (t0 + r) * j->H * j->D;
            int64_t c = pos0 + r + 1 - s < cnt ? pos0 + r + 1 - s : cnt;
            for (int64_t h = 0; h < j->H; h++)
                if (live[h] != 0.0f)
                    j->f->pv(sc + h * j->ld + s, head_rows(j, w, j->vc, slot, cnt, h / group),
                             w ? j->D : j->hstride, c, j->D, y + h * j->D);
        }
    }
    for (int64_t r = 0; j->q4 && r < R; r++) /* back from the 4-bit rows' rotation */
        for (int64_t h = 0; h < j->H; h++) j->fi->rotate(j->y + ((t0 + r) * j->H + h) * j->D, j->D);
}

/* After the parts: each (token, head)'s parts merged (tdm_llm_merge_parts). */
static void paged_merge(const paged_job *j) {
    int64_t slot = j->D + 2, group = j->H / j->KVH;
    for (int64_t t = 0; t < j->T; t++)
        for (int64_t h = 0; h < j->H; h++)
            tdm_llm_merge_parts(j->partial + (t * j->H + h) * j->parts * slot,
                                j->spans ? tdm_llm_span_parts(j->cut, h / group, j->span_n)
                                         : j->parts,
                                j->D,
                                j->sink != NULL, j->sink ? j->sink[h] : 0.0f,
                                j->y + (t * j->H + h) * j->D);
}

/* Pass 2's driver: slot k (one per thread) runs items k, k + slots, ... with its scratch. */
static void paged_slots(void *arg, int64_t k0, int64_t k1) {
    const paged_job *j = arg;
    unsigned csr = tdm_cpu_flush_subnormals(); /* tiny attention weights: see cpu_simd.h */
    /* one row an item: slot k's items consecutive (see the top); rows > 1: dealt in turn, for
     * the balance of prompt chunks of different lengths */
    bool runs = j->rows == 1;
    int64_t step = runs ? 1 : j->slots;
    for (int64_t k = k0; k < k1; k++) {
        int64_t p0 = runs ? k * j->items / j->slots : k;
        int64_t e = runs ? (k + 1) * j->items / j->slots : j->items;
        for (int64_t p = p0; p < e; p += step) {
            if (j->rows > 1) paged_rows(j, p, j->scratch + k * j->per_task);
            else if (j->quant) paged_item_q(j, p, j->scratch + k * j->per_task);
            else paged_item(j, p, j->scratch + k * j->per_task);
        }
    }
    tdm_cpu_subnormals_restore(csr);
}

#define BAD(...) tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, __VA_ARGS__)

/* A cache: float32 [NB, BS, KVH, D] or [NB, BS, KVH*D]; with the BHSD layout [NB, KVH, BS, D],
 * or tandem's 8-bit (int8) / 4-bit (uint8) rows [NB, KVH, BS, row bytes]. */
static tdm_status *check_cache(const tdm_node *node, const tdm_tensor *t, const char *what,
                               int64_t KVH, int64_t D, bool bhsd) {
    if (t->dtype == TDM_INT8 || t->dtype == TDM_UINT8) {
        bool q4 = t->dtype == TDM_UINT8;
        int64_t rb = q4 ? TDM_KV_I4_ROW(D) : TDM_LLM_KV_I8_ROW(D);
        if (bhsd && t->rank == 4 && t->dims[1] == KVH && t->dims[2] > 0 && t->dims[3] == rb)
            return NULL;
        char buf[96];
        return BAD("%s has shape %s, expected %s [num_blocks, %lld, block_size, %lld] (tandem's "
                   "%s rows, tandem_kv_layout BHSD)",
                   what, tdm_shape_str(t->rank, t->dims, buf, sizeof buf), q4 ? "uint8" : "int8",
                   (long long)KVH, (long long)rb, q4 ? "4-bit" : "8-bit");
    }
    if (bhsd) {
        if ((t->dtype == TDM_FLOAT || t->dtype == TDM_FLOAT16) && t->rank == 4 && t->dims[1] == KVH && t->dims[2] > 0 &&
            t->dims[3] == D)
            return NULL;
        char buf[96];
        return BAD("%s has shape %s, expected float32 [num_blocks, %lld, block_size, %lld] "
                   "(tandem_kv_layout BHSD)",
                   what, tdm_shape_str(t->rank, t->dims, buf, sizeof buf), (long long)KVH, (long long)D);
    }
    bool ok = (t->dtype == TDM_FLOAT || t->dtype == TDM_FLOAT16) && t->dims[1] > 0 &&
              ((t->rank == 4 && t->dims[2] == KVH && t->dims[3] == D) ||
               (t->rank == 3 && t->dims[2] == KVH * D));
    if (!ok) {
        char buf[96];
        return BAD("%s has shape %s, expected float32 [num_blocks, block_size, %lld, %lld] (or "
                   "[num_blocks, block_size, %lld])",
                   what, tdm_shape_str(t->rank, t->dims, buf, sizeof buf), (long long)KVH,
                   (long long)D, (long long)(KVH * D));
    }
    return NULL;
}

/* The tables: cumulative lengths monotone from 0 to T, every sequence within its table's
 * capacity, the blocks it uses in range, its positions within the rotary caches. Fills
 * seq_of (per token). */
static tdm_status *check_tables(const tdm_node *node, const paged_job *j, int64_t NB,
                                int64_t maxpos, int32_t *seq_of) {
    if (j->cu[0] != 0) return BAD("cumulative_sequence_length[0] is %d, must be 0", (int)j->cu[0]);
    for (int64_t b = 0; b < j->B; b++) {
        int64_t c0 = j->cu[b], c1 = j->cu[b + 1], past = j->past[b];
        if (c1 < c0 || c1 > j->T)
            return BAD("cumulative_sequence_length is not non-decreasing within the %lld tokens "
                       "(entry %lld: %lld after %lld)",
                       (long long)j->T, (long long)(b + 1), (long long)c1, (long long)c0);
        if (past < 0) return BAD("past_seqlens[%lld] is negative (%lld)", (long long)b, (long long)past);
        int64_t len = past + c1 - c0;
        if (len > j->MB * j->BS)
            return BAD("sequence %lld needs %lld positions (past %lld + %lld new); its block_table "
                       "row holds %lld blocks of %lld",
                       (long long)b, (long long)len, (long long)past, (long long)(c1 - c0),
                       (long long)j->MB, (long long)j->BS);
        if (j->rotary && c1 > c0 && len > maxpos)
            return BAD("sequence %lld reaches position %lld, past the rotary caches' %lld rows",
                       (long long)b, (long long)(len - 1), (long long)maxpos);
        for (int64_t k = 0; k * j->BS < len; k++) {
            int64_t id = j->bt[b * j->MB + k];
            if (id < 0 || id >= NB)
                return BAD("block_table[%lld][%lld] = %lld is not a block of the cache (%lld blocks)",
                           (long long)b, (long long)k, (long long)id, (long long)NB);
        }
        for (int64_t t = c0; t < c1; t++) seq_of[t] = (int32_t)b;
    }
    if (j->cu[j->B] != j->T)
        return BAD("cumulative_sequence_length ends at %lld, the query has %lld tokens",
                   (long long)j->cu[j->B], (long long)j->T);
    return NULL;
}

static const tdm_tensor *opt_in(const tdm_kernel_ctx *ctx, int i) {
    return ctx->n_in > i ? ctx->in[i] : NULL;
}

tdm_status *tdm_llm_run_paged(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *q = ctx->in[0], *k = opt_in(ctx, 1), *v = opt_in(ctx, 2);
    const tdm_tensor *kc = opt_in(ctx, 3), *vc = opt_in(ctx, 4), *cu = opt_in(ctx, 5);
    const tdm_tensor *past = opt_in(ctx, 6), *bt = opt_in(ctx, 7);
    const tdm_tensor *cosc = opt_in(ctx, 8), *sinc = opt_in(ctx, 9), *sink = opt_in(ctx, 11);
    if (!kc || !vc || !cu || !past || !bt)
        return BAD("key_cache, value_cache, cumulative_sequence_length, past_seqlens and "
                   "block_table are required");
    paged_job j;
    memset(&j, 0, sizeof j);
    tdm_llm_attn_attrs la;
    const tdm_llm_attn_attrs *at = tdm_llm_attn_attrs_of(ctx, &la);
    j.H = at->H;
    j.KVH = at->KVH;
    if (j.H <= 0 || j.KVH <= 0 || j.H % j.KVH) return BAD("bad num_heads / kv_num_heads");
    if (q->dtype != TDM_FLOAT || (q->rank != 2 && !(q->rank == 3 && q->dims[0] == 1)))
        return BAD("query must be float32 [num_tokens, hidden] (or [1, num_tokens, hidden])");
    j.T = q->dims[q->rank - 2];
    bool packed = !k;
    if (packed != !v) return BAD("key and value must both be given or both omitted");
    int64_t parts = packed ? j.H + 2 * j.KVH : j.H, last = q->dims[q->rank - 1];
    if (last % parts)
        return BAD("query's last dim %lld is not a multiple of %lld heads", (long long)last,
                   (long long)parts);
    j.D = last / parts;
    if (j.D <= 0) return BAD("head size is 0");
    if (!packed) {
        const tdm_tensor *kv[2] = {k, v};
        for (int i = 0; i < 2; i++)
            if (kv[i]->dtype != TDM_FLOAT || kv[i]->rank != q->rank ||
                kv[i]->dims[q->rank - 2] != j.T || kv[i]->dims[q->rank - 1] != j.KVH * j.D ||
                (q->rank == 3 && kv[i]->dims[0] != 1))
                return BAD("%s must be float32 [%s%lld, %lld] (kv_num_heads * head size)",
                           i ? "value" : "key", q->rank == 3 ? "1, " : "", (long long)j.T,
                           (long long)(j.KVH * j.D));
    }
    j.bhsd = at->bhsd;
    TDM_TRY(check_cache(node, kc, "key_cache", j.KVH, j.D, j.bhsd));
    TDM_TRY(check_cache(node, vc, "value_cache", j.KVH, j.D, j.bhsd));
    if (kc->dims[0] != vc->dims[0] || kc->dims[1] != vc->dims[1] || kc->dims[2] != vc->dims[2] ||
        kc->dtype != vc->dtype)
        return BAD("key_cache and value_cache have different shapes or types");
    j.half = kc->dtype == TDM_FLOAT16;
    if (j.half && j.D > 1024)
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED, "float16 caches with a head size over 1024");
    j.q4 = kc->dtype == TDM_UINT8;
    j.quant = j.q4 || kc->dtype == TDM_INT8;
    if (j.quant && j.D > TDM_LLM_KV_I8_MAX_D)
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED, "8- and 4-bit caches with a head size over %d",
                              TDM_LLM_KV_I8_MAX_D);
    if (j.quant && j.H / j.KVH > 64)
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED,
                              "8- and 4-bit caches with more than 64 query heads a kv head");
    j.rb = j.quant ? kc->dims[3] : j.D * (j.half ? 2 : 4);
    int64_t NB = kc->dims[0];
    j.BS = kc->dims[j.bhsd ? 2 : 1];
    j.row = j.KVH * j.D;
    j.hstride = j.bhsd ? j.D : j.row;
    if (past->dtype != TDM_INT32 || past->rank != 1) return BAD("past_seqlens must be int32 [batch]");
    j.B = past->dims[0];
    if (cu->dtype != TDM_INT32 || cu->rank != 1 || cu->dims[0] != j.B + 1)
        return BAD("cumulative_sequence_length must be int32 [%lld] (batch + 1)", (long long)(j.B + 1));
    if (bt->dtype != TDM_INT32 || bt->rank != 2 || bt->dims[0] != j.B)
        return BAD("block_table must be int32 [%lld, max_blocks_per_sequence]", (long long)j.B);
    j.MB = bt->dims[1];
    j.rotary = at->rotary;
    j.interleaved = at->interleaved;
    int64_t maxpos = 0;
    if (j.rotary) {
        if (!cosc || !sinc || cosc->dtype != TDM_FLOAT || sinc->dtype != TDM_FLOAT ||
            cosc->rank != 2 || sinc->rank != 2 || sinc->dims[0] != cosc->dims[0] ||
            sinc->dims[1] != cosc->dims[1] || cosc->dims[1] <= 0 || 2 * cosc->dims[1] > j.D)
            return BAD("cos_cache and sin_cache must be float32 [max_length, n] with "
                       "1 <= n <= head_size / 2 (%lld)", (long long)(j.D / 2));
        j.rot = 2 * cosc->dims[1];
        maxpos = cosc->dims[0];
        j.cos = cosc->data;
        j.sin = sinc->data;
    }
    if (sink) {
        if (sink->dtype != TDM_FLOAT || sink->count != j.H)
            return BAD("head_sink must be float32 [%lld]", (long long)j.H);
        j.sink = sink->data;
    }
    j.causal = at->causal;
    j.win = at->win;
    j.softcap = at->softcap;
    j.scale = tdm_llm_attn_scale(at, j.D);
    j.cu = cu->data;
    j.past = past->data;
    j.bt = bt->data;

    /* scratch: the token -> sequence map, then per slot the group's logits and rotated
     * queries; a copy of a cache whose output is not asked for */
    int64_t longest = 0;
    for (int64_t b = 0; b < j.B; b++) {
        int64_t len = (int64_t)j.past[b] + ((int64_t)j.cu[b + 1] - j.cu[b]);
        longest = len > longest ? len : longest;
    }
    if (longest > j.MB * j.BS) longest = j.MB * j.BS; /* larger is refused by check_tables */
    if (longest < 0) longest = 0;
    j.ld = longest + 16;
    j.run = (4096 / j.row) & ~(int64_t)15; /* whole steps of the AVX-512 scores (16 rows) */
    j.run = j.run < 16 || j.bhsd ? (j.bhsd ? 64 : 16) : j.run > 64 ? 64 : j.run;
    j.items = j.T;
    j.simd = tdm_cpu_simd_of(ctx);
    j.f = tdm_llm_fns_for(j.simd->level);
    j.widen = tdm_llm_widen_for(j.simd->level);
    j.narrow = tdm_llm_narrow_for(j.simd->level);
    j.fi = j.quant ? (j.q4 ? tdm_llm_i4_fns_for : tdm_llm_i8_fns_for)(j.simd->level) : NULL;
    j.blk_forms = j.fi && j.fi->scores_blk && j.fi->pv_blk;
    /* a decode step with little to read stays on the caller (TDM_LLM_ATTN_SERIAL_WORK) */
    tdm_threadpool *pool = tdm_llm_attn_pool(ctx->pool, j.T == j.B, j.B * j.H * longest);
    int threads = tdm_threadpool_size(pool);
    j.parts = 1;
    j.spans = false;
    /* one sequence's decode token (cu = [0, 1], checked below): its positions [lo, longest) */
    int64_t span_lo = j.win > 0 && longest > j.win ? longest - j.win : 0;
    j.span_n = longest - span_lo;
    if (threads > 1 && j.T == 1 && j.B == 1 && j.quant && j.KVH * j.span_n >= 64 * threads) {
        /* in row spans, as GroupQueryAttention's one sequence (k_llm_gqa.c): parts of the
         * token's positions gave every part every kv head (2 threads, 3 kv heads: 6 pieces,
         * each with its query set-up, softmax and partial outputs), the spans 4. Cuts inside a
         * group at a block's start where the level reads the rows in place. */
        bool blocks = j.blk_forms && span_lo % j.BS == 0;
        j.spans = true;
        j.items = tdm_llm_span_cuts(j.KVH, j.span_n, span_lo, blocks ? j.BS : 1, threads, j.cut);
        for (int64_t g = 0; g < j.KVH; g++) {
            int64_t np = tdm_llm_span_parts(j.cut, g, j.span_n);
            j.parts = np > j.parts ? np : j.parts;
        }
    } else if (threads > 1 && j.items > 0 && j.items < 2 * threads) {
        /* a decode step of few sequences: split each item's positions so every thread has
         * as much work */
        j.parts = tdm_llm_decode_parts(threads, longest / 64);
        j.items *= j.parts;
    }
    /* a step with a chunk of prompt rows in it (more rows than sequences): items of up to
     * PAGED_ROWS rows (paged_rows); a decode step keeps one row an item */
    j.rows = j.parts == 1 && j.causal && j.win <= 0 && j.bhsd && j.T > j.B ? PAGED_ROWS : 1;
    j.per_task = j.rows * (j.H * j.ld + j.H * j.D + j.H) +
                 (j.half || j.quant ? j.KVH * j.run * j.D : 0) + 16; /* + a widened stretch */
    if (j.quant && j.rows == 1) /* paged_item_q: the gathered key and value rows, aligned */
        j.per_task += (2 * j.ld * j.rb + 3) / 4 + 16;
    j.slots = j.items < threads ? j.items : threads; /* rows > 1: at most; set again below */
    if (j.slots < 1) j.slots = 1;
    tdm_tensor *ko = ctx->n_out > 1 ? ctx->out[1] : NULL, *vo = ctx->n_out > 2 ? ctx->out[2] : NULL;
    size_t cache = (kc->nbytes + sizeof(float) - 1) / sizeof(float); /* floats of a copy */
    size_t own_cache = (ko ? 0 : cache) + (vo ? 0 : cache);
    size_t part_need = j.parts > 1 || j.spans ? (size_t)(j.T * j.H * j.parts * (j.D + 2)) : 0;
    size_t need = 2 * ((size_t)j.T + 16) + (size_t)(j.slots * j.per_task) + part_need + own_cache;
    float *own = NULL, *mem = tdm_llm_gqa_scratch(ctx, need, &own);
    if (!mem) return tdm_node_error(node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    int32_t *seq_of = (int32_t *)mem;
    j.seq_of = seq_of;
    int32_t *item_t0 = (int32_t *)(mem + j.T + 16);
    j.item_t0 = item_t0;
    j.scratch = mem + 2 * (j.T + 16);
    tdm_status *st = check_tables(node, &j, NB, maxpos, seq_of);
    if (!st && j.rows > 1) { /* each sequence's rows in items of up to j.rows */
        int64_t n = 0;
        for (int64_t b = 0; b < j.B; b++)
            for (int64_t t = j.cu[b]; t < j.cu[b + 1]; t += j.rows) item_t0[n++] = (int32_t)t;
        item_t0[n] = (int32_t)j.T;
        j.items = n;
        if (j.slots > n) j.slots = n > 0 ? n : 1;
    }
    if (!st) {
        float *extra = j.scratch + j.slots * j.per_task;
        j.partial = part_need ? extra : NULL;
        extra += part_need;
        j.kc = ko ? ko->data : extra;
        j.vc = vo ? vo->data : extra + (ko ? 0 : cache);
        if (j.kc != kc->data) memcpy(j.kc, kc->data, kc->nbytes);
        if (j.vc != vc->data) memcpy(j.vc, vc->data, vc->nbytes);
        j.q = q->data;
        j.qstride = last;
        if (packed) {
            j.k = j.v = q->data;
            j.kstride = last;
            j.koff = j.H * j.D;
            j.voff = (j.H + j.KVH) * j.D;
        } else {
            j.k = k->data;
            j.v = v->data;
            j.kstride = j.KVH * j.D;
        }
        j.y = ctx->out[0]->data;
        /* row spans: a group's parts are the spans from its first to its last; one that cuts
         * moved down to blocks' starts left empty (spans shorter than a block) stays empty */
        for (int64_t i = 0; j.spans && i < j.H * j.parts; i++)
            j.partial[i * (j.D + 2) + j.D] = -INFINITY;
        if (j.T > 0) {
            tdm_parallel_for(pool, j.T, (j.T + threads - 1) / threads, paged_cache, &j);
            tdm_parallel_for(pool, j.slots, 1, paged_slots, &j);
            if (j.parts > 1 || j.spans) paged_merge(&j);
        }
    }
    tdm_llm_gqa_scratch_done(ctx, own);
    return st;
}

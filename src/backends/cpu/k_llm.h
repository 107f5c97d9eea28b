/* CPU kernels of the llm family (k_llm_*.c): shared pieces.
 *
 * The attention row routines come in variants (portable C, AVX2 + FMA, AVX-512) picked from
 * the running device's SIMD level (tdm_cpu_simd.level, which honours TANDEM_CPU_ISA caps):
 *   const tdm_llm_fns *f = tdm_llm_fns_for(tdm_cpu_simd_of(ctx)->level);
 *   f->scores(q, K, D, n, D, scale, s);     s[t] = scale * q . K[t]
 *   f->pv(p, V, D, n, D, y);                y += sum_t p[t] * V[t]
 */
#ifndef TDM_CPU_K_LLM_H
#define TDM_CPU_K_LLM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/cpu_simd.h"
#include "backends/kernel.h"
#include "core/half.h"
#include "ops/kv_int8.h"

typedef struct tdm_llm_fns {
    /* out[t] = scale * sum_i q[i] * k[t * ks + i] for t < n (n >= 0, d >= 1) */
    void (*scores)(const float *restrict q, const float *restrict k, int64_t ks, int64_t n,
                   int64_t d, float scale, float *restrict out);
    /* out[i] += sum_t p[t] * v[t * vs + i] for i < d (n >= 0) */
    void (*pv)(const float *restrict p, const float *restrict v, int64_t vs, int64_t n, int64_t d,
               float *restrict out);
    tdm_cpu_isa isa; /* the variant's level */
    /* The same for the G heads of a kv group at once (AVX2: its own routines; the other
     * levels call scores / pv per head):
     * out[h * ld + t] = scale * q[h] . k[t], and out[h * ys + i] += sum_t p[h * ld + t] v[t][i];
     * each key and value row is read once for all the heads, and each head's numbers are its
     * own scores / pv call's to the bit. */
    void (*scores_g)(const float *const *q, int64_t G, const float *restrict k, int64_t ks,
                     int64_t n, int64_t d, float scale, float *restrict out, int64_t ld);
    void (*pv_g)(const float *restrict p, int64_t ld, int64_t G, const float *restrict v,
                 int64_t vs, int64_t n, int64_t d, float *restrict out, int64_t ys);
} tdm_llm_fns;

/* The best variant at or below level. Never NULL. */
const tdm_llm_fns *tdm_llm_fns_for(tdm_cpu_isa level);

/* The 8-bit KV cache (k_llm_gqa_i8.c; the row format in ops/kv_int8.h: codes, then one
 * bfloat16 scale per 32 codes). */
#define TDM_LLM_KV_I8_ROW(d) TDM_KV_I8_ROW(d)
#define TDM_LLM_KV_I8_MAX_D TDM_KV_I8_MAX_HEAD_DIM /* head sizes the 8- and 4-bit caches take */
typedef struct tdm_llm_i8_fns {
    /* out[h * ld + t] = scale * sum_i q'[h][i] * x_t[i] for h < G, t < n (rows k + t * rs,
     * x = the row's codes times their group's scale; q' = q[h] quantised by
     * tdm_llm_q8_query: the sums are exact integer sums per group). vnext: NULL, or rows at
     * the same stride the caller reads next (the p.V's value rows): their lines are fetched
     * into L2 along the way, so that their memory time overlaps the scores' arithmetic */
    void (*scores)(const float *const *q, int64_t G, const int8_t *k, int64_t rs, int64_t n,
                   int64_t d, float scale, float *out, int64_t ld, const int8_t *vnext);
    /* y[h * ys + i] += sum_t p[h * ld + t] * x_t[i] for h < G, i < d (rows v + t * rs) */
    void (*pv)(const float *p, int64_t ld, int64_t G, const int8_t *v, int64_t rs, int64_t n,
               int64_t d, float *y, int64_t ys);
    /* the 4-bit cache's rotation (tdm_llm_kv4_rotate, the same result); NULL for int8 */
    void (*rotate)(float *x, int64_t d);
    /* the form's row quantiser and widener (tdm_llm_kv_quantize_row / _dequantize_rows, or
     * the kv4 ones) */
    void (*quantize_row)(const float *x, int64_t d, int8_t *row);
    void (*dequantize_rows)(const int8_t *rows, int64_t rs, int64_t n, int64_t d, float *out);
    tdm_cpu_isa isa;
    /* scores and pv over rows in blocks (a paged cache): row t at blk[t / bs] + (t % bs) * rs,
     * the same sums as the contiguous forms. scores_blk returns false (nothing done) for what
     * the level does not take; pv_blk takes whatever (bs, d, rs) scores_blk took. NULL where a
     * level has none (the caller gathers the rows and calls the above). */
    bool (*scores_blk)(const float *const *q, int64_t G, const int8_t *const *blk, int64_t bs,
                       int64_t rs, int64_t n, int64_t d, float scale, float *out, int64_t ld);
    void (*pv_blk)(const float *p, int64_t ld, int64_t G, const int8_t *const *blk, int64_t bs,
                   int64_t rs, int64_t n, int64_t d, float *y, int64_t ys);
} tdm_llm_i8_fns;
/* The best variant at or below level. Never NULL. */
const tdm_llm_i8_fns *tdm_llm_i8_fns_for(tdm_cpu_isa level);
/* ... over the 4-bit cache's rows (ops/kv_int8.h TDM_KV_I4_ROW: groups of 16 bytes of
 * nibbles, then the scales; x = scale * (code - 8)), the same contract: AVX-512 VNNI, AVX2
 * (also the AVX-512 level without VNNI), portable. */
const tdm_llm_i8_fns *tdm_llm_i4_fns_for(tdm_cpu_isa level);
/* row = the 4-bit codes and scales of y = x[0..d) rotated (tdm_llm_kv4_rotate): per group of
 * 32, m = the value of largest magnitude, s = m / -8 with |s| rounded up to a bfloat16,
 * c = round(y / s) + 8 (nearest even) in [0, 15]; s = 0 and codes 8 when the group is all 0
 * (d <= TDM_LLM_KV_I8_MAX_D) */
void tdm_llm_kv4_quantize_row(const float *x, int64_t d, int8_t *row);
/* x[0..d): each whole group of 32 values times H / sqrt(32) (Walsh-Hadamard, natural order;
 * its own inverse). The 4-bit cache holds rotated rows: its scores take the query rotated
 * so, its p.V sums come out rotated and are rotated back. */
void tdm_llm_kv4_rotate(float *x, int64_t d);
/* The AVX2 forms of both (k_llm_kv4_avx2.c; x86 only): the same bytes and sums bit for bit */
void tdm_llm_kv4_rotate_avx2(float *x, int64_t d);
void tdm_llm_kv4_quantize_row_avx2(const float *x, int64_t d, int8_t *row);
/* A cache scale as bfloat16 rounded up in magnitude where bits are cut, so that no code
 * passes the format's largest (read back with tdm_bf16_to_f32, core/half.h) */
static inline uint16_t tdm_llm_bf16_up(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (u & 0xffffu) u += 0x10000u;
    return (uint16_t)(u >> 16);
}
/* The 8-bit cache's scale of a group whose largest magnitude is mx: *sb = max / 127 as
 * bfloat16 rounded up; returns 1 / s (0 for an all-zero group). Every quantiser's choice. */
static inline float tdm_llm_kv_scale8(float mx, uint16_t *sb) {
    *sb = tdm_llm_bf16_up(mx / 127.0f);
    float s = tdm_bf16_to_f32(*sb);
    return s > 0.0f ? 1.0f / s : 0.0f;
}
/* The 4-bit cache's: m is the group's first value of largest magnitude (mx = |m|), which gets
 * code 0 (-8 s): s = m / -8, its magnitude rounded up; returns 1 / s (0 if s is 0). */
static inline float tdm_llm_kv_scale4(float mx, float m, uint16_t *sb) {
    *sb = tdm_llm_bf16_up(mx / 8.0f);
    if (m > 0.0f) *sb |= 0x8000u;
    float s = tdm_bf16_to_f32(*sb);
    return s != 0.0f ? 1.0f / s : 0.0f;
}
/* out[t * d + i] = y_t[i] for t < n (4-bit rows, stride rs bytes: the rotated values) */
void tdm_llm_kv4_dequantize_rows(const int8_t *rows, int64_t rs, int64_t n, int64_t d, float *out);
/* row = the codes and scales of x[0..d): per group of 32, s = max|x| / 127 rounded up to a
 * bfloat16, c = round(x / s) (nearest even) */
void tdm_llm_kv_quantize_row(const float *x, int64_t d, int8_t *row);
/* The query of one head as the int8 scores use it (k_llm_gqa_i8.c: integer dot products with
 * the cache's codes): per group of 32, s[g] = max|q| / 127 and c = round(q / s[g]) (nearest
 * even; s = 0: all 0). */
void tdm_llm_q8_query(const float *q, int64_t d, int8_t *c, float *s);
/* q[0..d) = its quantisation by tdm_llm_q8_query, as float (d <= TDM_LLM_KV_I8_MAX_D): the
 * query the block GEMMs of the int8 cache use, so that a prefill computes what as many decode
 * steps do */
void tdm_llm_q8_round(float *q, int64_t d);
/* out[t * d + i] = x_t[i] for t < n (rows stride rs bytes) */
void tdm_llm_kv_dequantize_rows(const int8_t *rows, int64_t rs, int64_t n, int64_t d, float *out);

/* One query row of attention over keys/values rows [0, n) (row strides ks, vs): softmax of
 * scale * q.K^T (tanh soft-capped when softcap > 0; plus bias[t] when bias is not NULL;
 * with an extra logit `sink` in the denominator when has_sink) applied to V; y[0..dv).
 * scratch holds n + 1 floats. A row whose every logit is -inf gives zeros. */
void tdm_llm_attn_row(const tdm_llm_fns *f, const tdm_cpu_simd *simd, const float *q,
                      const float *k, int64_t ks, const float *v, int64_t vs, int64_t n, int64_t d,
                      int64_t dv, float scale, float softcap, const float *bias, bool has_sink,
                      float sink, float *scratch, float *y);

/* max(x[0..n)), -inf for n = 0. */
float tdm_llm_row_max(const float *x, int64_t n);
/* The softmax step of a row of n logits s (n + 1 floats of room): soft-cap, + bias, the
 * extra `sink` logit in the denominator when has_sink, then s[0..n) = probabilities. False
 * (s undefined) when every logit is -inf: the row attends to nothing. */
/* The same for a p.V that runs on what it leaves, then scales the row's output by *scale:
 * with no softcap, bias or sink, s[0..n) becomes the numerators exp(s - max) and *scale = 1 /
 * their sum (cpu_simd's exp_sum_row: a pass over the weights fewer); otherwise, or when the
 * maximum is not finite, tdm_llm_softmax's probabilities and *scale = 1. */
bool tdm_llm_softmax_scaled(const tdm_cpu_simd *simd, float *s, int64_t n, float softcap,
                            const float *bias, bool has_sink, float sink, float *scale);
/* A part's softmax (flash-decoding) of logits sc[0..cnt) (cnt + 1 floats of room; softcap and
 * bias already applied): as if over the logits plus one equal to their max m; sc becomes the
 * numerators exp(sc - m) with *scale = 1 / (1 + sum) for the part's output after p.V (the
 * probabilities with *scale = 1 where the maximum is +inf or the sum NaN); o[D] = m,
 * o[D + 1] = 1 + sum for tdm_llm_merge_parts. False (sc, o untouched) when every logit is
 * -inf. */
bool tdm_llm_part_softmax(const tdm_cpu_simd *simd, float *sc, int64_t cnt, float *o, int64_t D,
                          float *scale);
/* y[h * stride + d] *= scale[h] for h < heads, d < D (scale 1: left alone). */
void tdm_llm_scale_rows(float *y, int64_t heads, int64_t stride, int64_t D, const float *scale);
bool tdm_llm_softmax(const tdm_cpu_simd *simd, float *s, int64_t n, float softcap,
                     const float *bias, bool has_sink, float sink);

/* Rotates one head vector x[0..rot) in place with cos/sin rows c, s (rot / 2 values each):
 * interleaved pairs (x[2i], x[2i+1]) or halves (x[i], x[i + rot/2]). */
/* Merges the parts of a split softmax (flash-decoding) of one row and head (k_llm_gqa.c). */
void tdm_llm_merge_parts(const float *part, int64_t parts, int64_t D, bool has_sink, float sink,
                         float *y);

/* One sequence's decode in row spans (GroupQueryAttention, PagedAttention; k_llm_gqa.c): the
 * kv groups' positions [lo, lo + N) laid end to end (group g's position lo + r at g N + r) and
 * cut in T = min(threads, TDM_LLM_MAX_SPANS) spans, span k = [cut[k], cut[k + 1]), one a pool
 * slot, so that a slot sets up a piece (its query, softmax and partial outputs) only where its
 * span meets a group. A cut within 64 rows (or a quarter of a span if less) of a group's edge
 * moves to it; with align > 1 a cut inside a group moves down to a position that is a multiple
 * of align (whole blocks of a paged cache: lo a multiple of align too). Returns T. */
enum { TDM_LLM_MAX_SPANS = 64 };
int64_t tdm_llm_span_cuts(int64_t groups, int64_t N, int64_t lo, int64_t align, int64_t threads,
                          int64_t *cut);
/* The span that holds row r (of the rows laid end to end). */
static inline int64_t tdm_llm_span_of(const int64_t *cut, int64_t r) {
    int64_t k = 0;
    while (cut[k + 1] <= r) k++;
    return k;
}
/* The spans group g's rows fall in: its parts, part i in span tdm_llm_span_of(cut, g N) + i.
 * With align > 1 a span between two others may be empty (spans shorter than align): its part
 * must read as empty. With align 1 and spans of 64 rows or more none is (the moves to an edge
 * are under a quarter of a span). */
static inline int64_t tdm_llm_span_parts(const int64_t *cut, int64_t g, int64_t N) {
    return tdm_llm_span_of(cut, (g + 1) * N - 1) - tdm_llm_span_of(cut, g * N) + 1;
}
void tdm_llm_rotate(float *x, const float *c, const float *s, int64_t rot, bool interleaved);

/* The attributes GroupQueryAttention (float32 and float16) and PagedAttention read every run,
 * read by name once by tdm_llm_gqa_prepare into the node's state instead of ~9 lookups by name
 * per node and run (SmolLM2 decode, 1 thread, AMX Xeon: strcmp and tdm_attr_* 0.46-0.52% ->
 * 0.37-0.38% of the step; what is left is the shape inference, infer_gqa, run every step). */
typedef struct tdm_llm_attn_attrs {
    int64_t H, KVH; /* num_heads, kv_num_heads */
    int64_t win;    /* local_window_size */
    float softcap;
    float scale;    /* the attribute; 0: 1 / sqrt(head size) */
    bool rotary, interleaved, smooth;
    bool causal;    /* GroupQueryAttention's "causal", PagedAttention's "is_causal" */
    bool bhsd;      /* PagedAttention's tandem_kv_layout is "BHSD" */
} tdm_llm_attn_attrs;
/* ctx's node's attributes: the prepared state's, or read into *local when the run has none. */
const tdm_llm_attn_attrs *tdm_llm_attn_attrs_of(const tdm_kernel_ctx *ctx,
                                                tdm_llm_attn_attrs *local);
/* The softmax scale for head size D: the attribute, or 1 / sqrt(D) where it is 0. */
static inline float tdm_llm_attn_scale(const tdm_llm_attn_attrs *at, int64_t D) {
    return at->scale != 0.0f ? at->scale : 1.0f / sqrtf((float)D);
}

/* GroupQueryAttention (float32 and float16) and PagedAttention: a decode call (one new row a
 * sequence) whose sequences x heads x longest cache (query-head rows) is below this runs on
 * the calling thread. Measured on the AMX Xeon (2 threads, SmolLM2: 9 heads, 3 kv heads, int4
 * cache; `tandem bench --llm --depth 10,1000 --threads 2 --profile`, 3 alternating rounds):
 * the GroupQueryAttention nodes of a step at positions 1-64 0.129-0.136 ms against 0.145-0.162
 * with the pool, at 11-74 0.134-0.163 against 0.152-0.172 (at 1,000 rows the pool's split
 * stays). 1024 = 9 heads x 113 rows; the float16 kernel takes the same rule, not measured.
 * PagedAttention, 2 sequences of 32 positions (bench_paged with a context of 32, int4 BHSD, 2
 * threads, wall, a pool that sleeps between calls): 3.9-4.1 us a call against 8.2-8.5 (one
 * sequence under 128 positions already took one slot). The unit tests' split decode steps stay
 * above it. */
enum { TDM_LLM_ATTN_SERIAL_WORK = 1024 };

/* The pool an attention call runs on: none (the caller) for a decode call (one new row a
 * sequence) of fewer than TDM_LLM_ATTN_SERIAL_WORK query-head rows, else the node's. */
static inline tdm_threadpool *tdm_llm_attn_pool(tdm_threadpool *pool, bool decode,
                                                int64_t query_head_rows) {
    return decode && query_head_rows < TDM_LLM_ATTN_SERIAL_WORK ? NULL : pool;
}
/* A decode step with fewer items than twice the threads splits each item's positions in parts
 * (flash-decoding): as many as threads, at most cap (parts of at least 64 positions), at least
 * 1. The pool's slots take pieces k, k + slots, ..., so with as many parts as slots slot k takes
 * part k of every item: each thread as much of every item, whatever the items' lengths. (Twice
 * the threads before, for one item: each piece's set-up twice as often. PagedAttention, one
 * sequence, 1,024 positions, 2 threads: 15.3-19.4 us a call with 2 parts, 17.4-23.8 with 4.) */
static inline int64_t tdm_llm_decode_parts(int64_t threads, int64_t cap) {
    int64_t parts = threads < cap ? threads : cap;
    return parts < 1 ? 1 : parts;
}
/* GroupQueryAttention's kernel (k_llm_gqa.c): also called directly by the unit test that
 * aliases present with past. */
tdm_status *tdm_llm_run_gqa(tdm_kernel_ctx *ctx);
tdm_status *tdm_llm_gqa_prepare(const tdm_node *node, int opset, int n_in,
                                const tdm_tensor *const *in, const tdm_allocator *a, void **state);
void tdm_llm_gqa_release(void *state, const tdm_allocator *a);
/* The node's scratch (kept by the state of tdm_llm_gqa_prepare, grown by half again at
 * least; taken with an atomic flag, so a concurrent run of the same plan gets its own
 * allocation, returned in *own): `need` floats. NULL when out of memory. Give it back with
 * tdm_llm_gqa_scratch_done(ctx, *own). */
float *tdm_llm_gqa_scratch(tdm_kernel_ctx *ctx, size_t need, float **own);
void tdm_llm_gqa_scratch_done(tdm_kernel_ctx *ctx, float *own);
/* ... and its float16 form (k_llm_gqa_f16.c: T = float16, float16 KV cache), with the same
 * state (tdm_llm_gqa_prepare / tdm_llm_gqa_release). */
tdm_status *tdm_llm_run_gqa_f16(tdm_kernel_ctx *ctx);

/* out[i] = float(h[i]) for i < n (float16 bits h): the widening of the float16 GQA kernel
 * (k_llm_gqa_f16.c: portable, F16C, AVX-512 variants), the best at or below level. */
typedef void (*tdm_llm_widen_fn)(const uint16_t *restrict h, int64_t n, float *restrict out);
tdm_llm_widen_fn tdm_llm_widen_for(tdm_cpu_isa level);
/* h[i] = float16(x[i]) for i < n, round to nearest even (as core/half.h): the float16 GQA
 * kernel's rounding of new rows into the cache (portable, F16C, AVX-512), the best at or
 * below level. */
typedef void (*tdm_llm_narrow_fn)(const float *restrict x, int64_t n, uint16_t *restrict h);
tdm_llm_narrow_fn tdm_llm_narrow_for(tdm_cpu_isa level);

/* PagedAttention's kernel (k_llm_paged.c: float32, caches float32, float16 or tandem's 8- / 4-bit
 * rows; the node state
 * and scratch of tdm_llm_gqa_prepare / tdm_llm_gqa_release); also called directly by its unit
 * test. */
tdm_status *tdm_llm_run_paged(tdm_kernel_ctx *ctx);

/* the other family members' run functions */
tdm_status *tdm_llm_run_rotary(tdm_kernel_ctx *ctx);
tdm_status *tdm_llm_run_simplified_ln(tdm_kernel_ctx *ctx);
tdm_status *tdm_llm_run_skip_simplified_ln(tdm_kernel_ctx *ctx);
tdm_status *tdm_llm_run_rms_norm(tdm_kernel_ctx *ctx);
tdm_status *tdm_llm_run_attention23(tdm_kernel_ctx *ctx);

#endif

/* CPU kernels, nbits family: com.microsoft MatMulNBits (the products, k_nbits.h, with the
 * decode loops in k_nbits_simd.c) and GatherBlockQuantized (k_nbits_gather.c).
 *
 * Decode (M <= TDM_NBITS_DECODE_ROWS rows of A): A is prepared once per call in the order the
 * variant reads it (int8 codes per block for accuracy_level 4, or floats), then the rows of B
 * are shared out over the thread pool; each row of B is read from memory once for all rows of
 * A. Prefill (more rows): B is dequantized in chunks of rows into a float panel (at most
 * PANEL_BYTES) that oneDNN's sgemm multiplies, blocks of A's rows shared out over the pool
 * (each serial, as the dnnl family runs oneDNN), so a long prompt runs at float GEMM speed
 * (measured at M = 512, K x N 576 x 1536, 1 thread: dnnl_sgemm 97 GFLOP/s, tdm_sgemm 78).
 * accuracy_level 4 on a CPU with AVX512_BF16 (and a level that allows it) takes the same
 * structure in bf16 instead (k_nbits_bf16.c: A converted once per call, bf16 panels, oneDNN's
 * matmul primitive): 6.1 ms instead of 9.6 for that shape, ~150 GFLOP/s; the float path
 * remains the fallback when oneDNN cannot.
 *
 * Memory: a decode call allocates nothing in steady state. The node's state keeps one decode
 * scratch block (grown to the largest decode call seen) taken with an atomic flag; a run that
 * finds it taken (the same plan run from two threads at once) allocates its own for that call.
 * A prefill call allocates its panel per call: kept per node it would pin up to 4 MB for each
 * of a model's hundreds of MatMulNBits (SmolLM2: ~280 MB of peak RSS). Packed
 * uint8 zero points of a constant input are unpacked to floats once, at plan time.
 *
 * MatMulNBitsPacked (domain "tandem", ops/nbits_pack.h), which graph/fuse_nbits.c makes from a
 * MatMulNBits with constant weights in CPU-only sessions, runs through the same product with
 * tdm_nbits_w.pk set: decode by the panel loops of k_nbits_pack*.c (A prepared as for 8 bits, in
 * natural order), prefill by dequantising rows of the packed form into the same panels — except
 * with int8 activations (any number of rows) and floats on AVX-512 (up to FLOAT_ROWS_MAX),
 * whose panel loops take them (tdm_nbits_rows_path): each row then equals the row alone, and
 * no panel is dequantised (int8 pp128 ~2x faster; floats 1.2-1.75x at M = 64-128). */
#include "backends/cpu/k_nbits.h"

#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_unary.h"
#include "core/alloc.h"
#include "ops/fused.h"

#ifdef TDM_SIMD_X86
#include <immintrin.h>
#endif

#define PANEL_BYTES ((size_t)4 << 20)

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

/* ---- the product ---- */

typedef struct decode_layout {
    const tdm_nbits_variant *v;
    int64_t kq, sal_stride;
    int64_t arows; /* rows of A in the scratch (>= M) */
    size_t a_bytes, sal_off, sql_off, sa_off, sum_off, tmp_off, total;
    bool lean; /* the packed form: A's codes, sa and sum only (no per-lane sal / sql) */
} decode_layout;

static int simd_level(const tdm_cpu_simd *simd) { return simd ? (int)simd->level : 0; }

static decode_layout layout_of(const tdm_cpu_simd *simd, const tdm_nbits_w *w, bool int8,
                               int64_t M) {
    decode_layout L;
    L.v = tdm_nbits_pick(simd_level(simd), w->bits, int8, w->bs);
    int64_t unit = 1;
    if (L.v->half) unit = 2 * L.v->half;
    if (L.v->span > unit) unit = L.v->span;
    L.kq = round_up(w->nb * w->bs, unit);
    L.sal_stride = L.v->span ? L.kq / L.v->span * L.v->lanes : w->nb;
    /* the packed form's loops may read rows of A past M (zeroed by decode_packed) */
    L.arows = w->pk ? tdm_nbits_pk_arows(simd_level(simd), w->pk, int8, M) : M;
    L.a_bytes = align64((size_t)(L.arows * L.kq) * (L.v->int8 ? 1 : sizeof(float)));
    L.sal_off = L.a_bytes;
    L.sql_off = L.sal_off + align64((size_t)(M * L.sal_stride) * sizeof(float));
    L.sa_off = L.sql_off + align64((size_t)(M * L.sal_stride) * sizeof(float));
    L.sum_off = L.sa_off + align64((size_t)(M * w->nb) * sizeof(float));
    L.tmp_off = L.sum_off + align64((size_t)(M * w->nb) * sizeof(float));
    L.total = L.tmp_off + align64((size_t)(M * L.kq)); /* a row's tmp each: rows in parallel */
    L.lean = false;
    return L;
}

static int64_t panel_rows(const tdm_nbits_w *w) {
    int64_t r = (int64_t)(PANEL_BYTES / sizeof(float)) / w->K;
    if (r < 16) r = 16;
    if (w->pk) r -= r % TDM_NBP_ROWS; /* whole panels of the packed form (deq_panels) */
    return r < w->N ? r : w->N;
}

/* rows of B in a bf16 panel: twice the float panel's (the same bytes), at most N */
static int64_t bf16_rows(const tdm_nbits_w *w) {
    int64_t r = 2 * panel_rows(w);
    return r < w->N ? r : w->N;
}

/* The packed form's A: natural order, as the 8-bit variants prepare it. */
static tdm_nbits_w a_view(const tdm_nbits_w *w) {
    tdm_nbits_w w8 = *w;
    if (w->pk) w8.bits = 8;
    return w8;
}

/* The decode loops for these M rows: up to TDM_NBITS_DECODE_ROWS, and on the packed form any
 * M with int8 activations (accuracy_level 4), up to FLOAT_ROWS_MAX with floats on AVX-512
 * (tdm_nbits_pk_any_rows): its panel loops run every row as a single row would
 * (test_rows_invariant), so a step of several prompts' prefills gives each prompt the numbers
 * it gets alone, and no panel is dequantised. Past FLOAT_ROWS_MAX float rows, sgemm on the
 * dequantised panels is ahead (bench_nbits 1 thread Zen 5, us, panels / rows: 576 x 1536
 * M = 128 2566 / 2188, 256 4490 / 4463, 384 6648 / 6678, 1024 17272 / 18117, 2000 32976 /
 * 35727; 3072 x 576 M = 384 13799 / 13525, 1024 34015 / 35939). */
#define FLOAT_ROWS_MAX 384
bool tdm_nbits_rows_path(const tdm_cpu_simd *simd, const tdm_nbits_w *w, bool int8,
                         int64_t M) {
    if (M <= TDM_NBITS_DECODE_ROWS) return true;
    if (!w->pk || !tdm_nbits_pk_any_rows(simd_level(simd), w->pk, int8)) return false;
    return int8 || M <= FLOAT_ROWS_MAX;
}

size_t tdm_nbits_scratch_bytes(const tdm_cpu_simd *simd, const tdm_nbits_w *w, bool int8,
                               int64_t M) {
    if (tdm_nbits_rows_path(simd, w, int8, M)) {
        tdm_nbits_w w8 = a_view(w);
        return layout_of(simd, &w8, int8, M).total;
    }
    /* the float panel, or (bf16 path) the bf16 panel of up to twice its rows and A in bf16
     * after it: no more bytes than the float panel for SmolLM2's shapes at M = 512 */
    size_t f = align64((size_t)(panel_rows(w) * w->K) * sizeof(float));
    size_t b = align64((size_t)(bf16_rows(w) * w->K) * sizeof(uint16_t)) +
               align64((size_t)(M * w->K) * sizeof(uint16_t));
    return f > b ? f : b;
}

/* Position of element k of a row in the variant's order (4-bit: evens then odds per span). */
static inline int64_t a_pos(int hshift, int64_t k) {
    if (hshift < 0) return k;
    int64_t h = (int64_t)1 << hshift, r = k & (2 * h - 1);
    return (k - r) + (r & 1) * h + (r >> 1);
}

/* A's rows m0..m1 prepared (rows are independent: prep_a shares them out over the pool). */
static void prep_rows(const decode_layout *L, const tdm_nbits_w *w, int64_t m0, int64_t m1,
                      const float *A, char *scr) {
    const tdm_nbits_variant *v = L->v;
    int64_t K = w->K, bs = w->bs, nb = w->nb;
    int hs = v->half ? __builtin_ctz((unsigned)v->half) : -1;
    int es = v->span ? __builtin_ctz((unsigned)(v->span / v->lanes)) : 0; /* log2 elements/lane */
    float *sal = (float *)(scr + L->sal_off), *sa_all = (float *)(scr + L->sa_off);
    float *sql = (float *)(scr + L->sql_off);
    float *sum_all = (float *)(scr + L->sum_off);
    for (int64_t m = m0; m < m1; m++) {
        const float *a = A + m * K;
        float *sum = sum_all + m * nb, *sa = sa_all + m * nb;
        if (!v->int8) {
            float *f = (float *)scr + m * L->kq;
            memset(f, 0, (size_t)L->kq * sizeof(float));
            for (int64_t k = 0; k < K; k++) f[a_pos(hs, k)] = a[k];
            for (int64_t b = 0; b < nb; b++) {
                int64_t k1 = (b + 1) * bs < K ? (b + 1) * bs : K;
                float t = 0.0f;
                for (int64_t k = b * bs; k < k1; k++) t += a[k];
                sum[b] = t;
            }
            continue;
        }
        int8_t *q = (int8_t *)scr + m * L->kq;
        float *sl = L->lean ? NULL : sal + m * L->sal_stride;
        float *ql = L->lean ? NULL : sql + m * L->sal_stride;
        if (v->quant) {
            int8_t *tmp = (int8_t *)(scr + L->tmp_off) + m * L->kq;
            v->quant(w, a, L->kq, q, sl, ql, L->sal_stride, sa, sum, tmp);
            continue;
        }
        memset(q, 0, (size_t)L->kq);
        if (v->span && sl) {
            memset(sl, 0, (size_t)L->sal_stride * sizeof(float));
            memset(ql, 0, (size_t)L->sal_stride * sizeof(float));
        }
        for (int64_t b = 0; b < nb; b++) {
            int64_t k1 = (b + 1) * bs < K ? (b + 1) * bs : K;
            float amax = 0.0f;
            for (int64_t k = b * bs; k < k1; k++) {
                float x = fabsf(a[k]);
                amax = x > amax ? x : amax;
            }
            float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
            int32_t qsum = 0;
            sa[b] = amax / 127.0f;
            for (int64_t k0 = b * bs; k0 < k1; k0 += (int64_t)1 << es) {
                int64_t e1 = k0 + ((int64_t)1 << es) < k1 ? k0 + ((int64_t)1 << es) : k1;
                int cs = 0;
                for (int64_t k = k0; k < e1; k++) {
                    float x = a[k] * inv; /* |x| <= 127: round half away from zero */
                    int c = (int)(x + (x >= 0.0f ? 0.5f : -0.5f));
                    q[a_pos(hs, k)] = (int8_t)c;
                    cs += c;
                }
                qsum += cs;
                if (v->span && ql) ql[k0 >> es] = (float)cs; /* a lane: consecutive elements */
            }
            if (v->span && sl) /* A's scale for each int32 lane of the block */
                for (int64_t l = (b * bs) >> es; l < ((b * bs + bs) >> es) && l < L->sal_stride; l++)
                    sl[l] = sa[b];
            /* the zero-point term from the quantized A as well: A's rounding then meets the
             * centred weights (q - zp) only, not the raw codes (measured on the test models:
             * several times less error than with A's float sums) */
            sum[b] = sa[b] * (float)qsum;
        }
        if (!v->span && sl) memcpy(sl, sa, (size_t)nb * sizeof(float));
    }
}

typedef struct prep_job {
    const decode_layout *L;
    const tdm_nbits_w *w;
    const float *A;
    char *scr;
} prep_job;

static void prep_task(void *arg, int64_t m0, int64_t m1) {
    const prep_job *p = arg;
    prep_rows(p->L, p->w, m0, m1, p->A, p->scr);
}

/* All M rows of A, shared out over the pool in runs of about 1024 elements (an 8-row decode
 * step's quantisation was ~5% of its work, on one thread). */
static void prep_a(tdm_threadpool *pool, const decode_layout *L, const tdm_nbits_w *w, int64_t M,
                   const float *A, char *scr) {
    prep_job p = {L, w, A, scr};
    tdm_parallel_for(pool, M, 1024 / w->K + 1, prep_task, &p);
}

typedef struct decode_task {
    const tdm_nbits_variant *v;
    tdm_nbits_job j;
} decode_task;

static void decode_rows(void *arg, int64_t n0, int64_t n1) {
    const decode_task *t = arg;
    t->v->rows(&t->j, n0, n1);
}

static void decode_panels(void *arg, int64_t p0, int64_t p1) {
    const tdm_nbits_pjob *j = arg;
    j->rows_fn(j, p0, p1);
}

/* The packed form: A prepared in natural order (the 8-bit variants' preparation), then the
 * panels of 16 rows shared out. */
static void decode_packed(const tdm_cpu_simd *simd, tdm_threadpool *pool, const tdm_nbits_w *w,
                          bool int8, int64_t M, const float *A, const float *bias, float *Y,
                          char *scr) {
    tdm_nbits_w w8 = a_view(w);
    decode_layout L = layout_of(simd, &w8, int8, M);
    L.lean = true;
    prep_a(pool, &L, &w8, M, A, scr);
    if (L.arows > M) memset(scr + M * L.kq, 0, (size_t)((L.arows - M) * L.kq));
    tdm_nbits_pjob j = {w->pk, w->P, M, int8, scr, L.kq, (const float *)(scr + L.sa_off),
                        (const float *)(scr + L.sum_off), bias, Y,
                        tdm_nbits_pk_pick(simd_level(simd), w->pk, int8)};
    /* Float rows in slices whose A stays in L2 (512 KiB, whole 16s): every panel reads all of
     * its slice's rows, which otherwise came from L3 once per panel (bench_nbits 576 x 1536,
     * M = 512: 9187 -> 8964 us, M = 2000: 37239 -> 35693). Each row's numbers are the same in
     * any slice. int8 rows: one pass, as measured (and the AMX loops' padding). */
    int64_t slice = M;
    if (!int8) {
        slice = (int64_t)(512 << 10) / (L.kq * (int64_t)sizeof(float));
        slice -= slice % 16;
        if (slice < 16) slice = 16;
    }
    for (int64_t m0 = 0; m0 < M; m0 += slice) {
        tdm_nbits_pjob js = j;
        js.M = M - m0 < slice ? M - m0 : slice;
        js.a = scr + m0 * L.kq * (int8 ? 1 : (int64_t)sizeof(float));
        js.sa = j.sa + m0 * w->pk->nb;
        js.asum = j.asum + m0 * w->pk->nb;
        js.Y = Y + m0 * w->pk->N;
        /* A decode step's rows (M <= 16, one AMX tile of rows): one task per thread (at least
         * about 32 KiB of the stream each), so that each thread reads one contiguous run of
         * panels and pays a call's set-up once. Four tasks a thread, claimed in turn, cost
         * SmolLM2's 8-stream decode step 0.57 against 0.51 us a panel of its QKV product at 2
         * threads (a thread's first task 0.72): steady 8-stream decode 1216-1344 against
         * 1219-1268 tok/s, one stream 396-436 against 375-413 (AMX Xeon, 4 alternating rounds,
         * bench/llm/results-2026-12-06-s40-amx.md). Longer calls (prefill) keep four tasks a
         * thread for the balance. A long call of 4 rows or more (8 MiB of weights or more:
         * SmolLM2's head in a batched step) takes four tasks a thread, claimed in turn: the
         * two vCPUs of a VM ran at different speeds, and halves of a call of milliseconds
         * waited for the slower (bench_nbits 49152 x 576 8-bit M = 8, 2 threads, AVX2 Zen 3:
         * 3.06-3.85 -> 2.41-3.21 ms; the engine's 8-stream steps, the head's calls alternating
         * the two splits: 0.886, 0.938, 0.984 of the time; one row level, 0.99-1.00). */
        int64_t grain = 32768 / (w->pk->pstride * js.M) + 1;
        int64_t th = tdm_threadpool_size(pool), even = (w->pk->panels + th - 1) / th;
        if (js.M <= 16 && grain < even) grain = even;
        if (js.M >= 4 && js.M <= 16 && w->pk->panels * w->pk->pstride >= ((int64_t)8 << 20))
            grain = (w->pk->panels + 4 * th - 1) / (4 * th);
        tdm_parallel_for(pool, w->pk->panels, grain, decode_panels, &js);
    }
}

static void decode(const tdm_cpu_simd *simd, tdm_threadpool *pool, const tdm_nbits_w *w,
                   bool int8, int64_t M, const float *A, const float *bias, float *Y,
                   char *scr) {
    if (w->pk) {
        decode_packed(simd, pool, w, int8, M, A, bias, Y, scr);
        return;
    }
    decode_layout L = layout_of(simd, w, int8, M);
    prep_a(pool, &L, w, M, A, scr);
    decode_task t = {L.v,
                     {w, M, scr, L.kq, (const float *)(scr + L.sal_off), L.sal_stride,
                      (const float *)(scr + L.sum_off), (const float *)(scr + L.sql_off), bias,
                      Y, {0}}};
    if (L.v->span) {
        int64_t epl = L.v->span / L.v->lanes;
        for (int l = 0; l < L.v->lanes; l++) t.j.lane_block[l] = (int32_t)(l * epl / w->bs);
    }
    /* about 32 KiB of B per task */
    int64_t rowb = w->nb * w->bs * w->bits / 8;
    int64_t grain = 32768 / (rowb * M) + 1;
    tdm_parallel_for(pool, w->N, grain, decode_rows, &t);
}

typedef struct deq_task {
    const tdm_nbits_w *w;
    int64_t n0; /* the packed form: a multiple of TDM_NBP_ROWS */
    float *panel;
    int level;
} deq_task;

#ifdef TDM_SIMD_X86
/* Whole blocks of panel p (all its 16 rows, each below N) into out (row stride K, row 0 = the
 * panel's first): per two rows and 64-byte group, their 8 code bytes widened at once, the
 * same products and differences as tdm_nbits_pk_row (q * s, then - mz: no fused rounding).
 * Returns the blocks done (a partial last block is left to the caller). */
TDM_TARGET_AVX2 static int64_t deq_panel_avx2(const tdm_nbits_pk *pk, const uint8_t *P, int64_t p,
                                              float *out) {
    const int64_t K = pk->K, bs = pk->bs, half = bs / 2;
    const int64_t whole = K / bs;
    const __m256i nib = _mm256_set1_epi32(15);
    for (int64_t b = 0; b < whole; b++) {
        const uint8_t *rec = P + p * pk->pstride + b * pk->bstride;
        float s[TDM_NBP_ROWS], mz[TDM_NBP_ROWS];
        for (int r = 0; r < TDM_NBP_ROWS; r++)
            tdm_nbits_pk_sz(pk, P, p * TDM_NBP_ROWS + r, b, &s[r], &mz[r]);
        for (int r = 0; r < TDM_NBP_ROWS; r += 2) {
            __m256 sv = _mm256_setr_m128(_mm_set1_ps(s[r]), _mm_set1_ps(s[r + 1]));
            __m256 mv = _mm256_setr_m128(_mm_set1_ps(mz[r]), _mm_set1_ps(mz[r + 1]));
            float *o0 = out + r * K + b * bs, *o1 = o0 + K;
            for (int64_t g = 0; g < pk->groups; g++) {
                __m256i x = _mm256_cvtepu8_epi32(
                    _mm_loadl_epi64((const __m128i *)(const void *)(rec + g * 64 + 4 * r)));
                if (pk->bits == 8) {
                    __m256 f = _mm256_sub_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(x), sv), mv);
                    _mm_storeu_ps(o0 + 4 * g, _mm256_castps256_ps128(f));
                    _mm_storeu_ps(o1 + 4 * g, _mm256_extractf128_ps(f, 1));
                    continue;
                }
                __m256 lo = _mm256_sub_ps(
                    _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(x, nib)), sv), mv);
                __m256 hi = _mm256_sub_ps(
                    _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(x, 4)), sv), mv);
                _mm_storeu_ps(o0 + 4 * g, _mm256_castps256_ps128(lo));
                _mm_storeu_ps(o1 + 4 * g, _mm256_extractf128_ps(lo, 1));
                _mm_storeu_ps(o0 + half + 4 * g, _mm256_castps256_ps128(hi));
                _mm_storeu_ps(o1 + half + 4 * g, _mm256_extractf128_ps(hi, 1));
            }
        }
    }
    return whole;
}
#endif

/* The packed form, panels q0..q1 of the chunk (rows n0 + 16 q ...): the AVX2 form for whole
 * panels, tdm_nbits_pk_row for the rest (a partial last block, rows of the last panel). A row
 * at a time cost ~1 ns a weight (bench_nbits 1536 x 576, M = 17: 884 us of which ~620
 * dequantising, TANDEM_CPU_ISA=avx2 on Zen 5), paid by every call of more than
 * TDM_NBITS_DECODE_ROWS rows where the panel loops do not take them. */
static void deq_panels(void *arg, int64_t q0, int64_t q1) {
    const deq_task *t = arg;
    const tdm_nbits_w *w = t->w;
    const int64_t K = w->K;
    for (int64_t q = q0; q < q1; q++) {
        int64_t n = t->n0 + q * TDM_NBP_ROWS, rows = w->N - n;
        if (rows > TDM_NBP_ROWS) rows = TDM_NBP_ROWS;
        float *out = t->panel + q * TDM_NBP_ROWS * K;
        int64_t k0 = 0;
#ifdef TDM_SIMD_X86
        if (rows == TDM_NBP_ROWS && t->level >= (int)TDM_ISA_AVX2)
            k0 = deq_panel_avx2(w->pk, w->P, n / TDM_NBP_ROWS, out) * w->bs;
#endif
        if (k0 < K)
            for (int64_t r = 0; r < rows; r++)
                tdm_nbits_pk_row(w->pk, w->P, n + r, k0, K, out + r * K + k0);
    }
}

/* panel[(n - n0) * K + k] = (q[n, k] - zp) * s for the rows of this range */
static void deq_rows(void *arg, int64_t r0, int64_t r1) {
    const deq_task *t = arg;
    const tdm_nbits_w *w = t->w;
    int64_t rowb = w->nb * w->bs * w->bits / 8, K = w->K, bs = w->bs;
    float zdef = (float)(1 << (w->bits - 1));
    for (int64_t r = r0; r < r1; r++) {
        int64_t n = t->n0 + r;
        const uint8_t *row = w->b + n * rowb;
        const float *s = w->scales + n * w->nb;
        float *out = t->panel + r * K;
        for (int64_t b = 0; b < w->nb; b++) {
            float sc = s[b], z = w->zp ? w->zp[n * w->nb + b] : zdef;
            int64_t k0 = b * bs, k1 = k0 + bs < K ? k0 + bs : K;
            if (w->bits == 8) {
                for (int64_t k = k0; k < k1; k++) out[k] = ((float)row[k] - z) * sc;
            } else if (w->bits == 4 && k1 - k0 == bs) { /* a whole block: two codes a byte */
                const uint8_t *rb = row + k0 / 2;
                float zs = z * sc, *o = out + k0;
                for (int64_t i = 0; i < bs / 2; i++) {
                    o[2 * i] = (float)(rb[i] & 15) * sc - zs;
                    o[2 * i + 1] = (float)(rb[i] >> 4) * sc - zs;
                }
            } else {
                for (int64_t k = k0; k < k1; k++) {
                    int64_t bit = k * w->bits;
                    int q = (row[bit >> 3] >> (bit & 7)) & ((1 << w->bits) - 1);
                    out[k] = ((float)q - z) * sc;
                }
            }
        }
    }
}

typedef struct gemm_task {
    const float *A, *panel;
    int64_t M, K, N, nr, rows_per_task;
    float *Y; /* Y + n0 */
} gemm_task;

/* Y[m0..m1, n0 .. n0 + nr) = A[m0..m1] . panel^T with oneDNN's sgemm on this thread alone
 * (as the dnnl family runs it: tandem's workers split the work, OpenMP stays serial). */
static void gemm_rows(void *arg, int64_t t0, int64_t t1) {
    const gemm_task *g = arg;
    if (omp_get_max_threads() != 1) omp_set_num_threads(1);
    for (int64_t t = t0; t < t1; t++) {
        int64_t m0 = t * g->rows_per_task;
        int64_t m1 = m0 + g->rows_per_task < g->M ? m0 + g->rows_per_task : g->M;
        dnnl_sgemm('N', 'T', m1 - m0, g->nr, g->K, 1.0f, g->A + m0 * g->K, g->K, g->panel, g->K,
                   0.0f, g->Y + m0 * g->N, g->N);
    }
}

/* ---- the bf16 prefill (accuracy_level 4 on AVX512_BF16: k_nbits_bf16.c) ---- */

typedef struct bf_task {
    const tdm_nbits_w *w;
    const float *A;
    uint16_t *a16, *panel;
    int64_t M, n0, nr, rows_per_task;
    float *Y; /* Y + n0 */
    atomic_int failed;
} bf_task;

static void bf_convert_a(void *arg, int64_t m0, int64_t m1) {
    const bf_task *t = arg;
    tdm_nbits_to_bf16(t->A + m0 * t->w->K, (m1 - m0) * t->w->K, t->a16 + m0 * t->w->K);
}

static void bf_deq_rows(void *arg, int64_t r0, int64_t r1) {
    const bf_task *t = arg;
    tdm_nbits_deq_bf16(t->w, t->n0, r0, r1, t->panel);
}

static void bf_gemm_rows(void *arg, int64_t t0, int64_t t1) {
    bf_task *t = arg;
    int64_t K = t->w->K;
    for (int64_t i = t0; i < t1; i++) {
        int64_t m0 = i * t->rows_per_task;
        int64_t m1 = m0 + t->rows_per_task < t->M ? m0 + t->rows_per_task : t->M;
        if (!tdm_nbits_gemm_bf16(t->a16 + m0 * K, K, t->panel, m1 - m0, t->nr, K,
                                 t->Y + m0 * t->w->N, t->w->N))
            atomic_store(&t->failed, 1);
    }
}

/* false: oneDNN could not (nothing usable written; the caller takes the float path) */
static bool prefill_bf16(tdm_threadpool *pool, const tdm_nbits_w *w, int64_t M, const float *A,
                         float *Y, char *scr) {
    int64_t rows = bf16_rows(w);
    int64_t threads = tdm_threadpool_size(pool);
    int64_t rpt = (M + threads - 1) / threads;
    if (rpt < 16) rpt = 16;
    bf_task t = {w, A, (uint16_t *)(scr + align64((size_t)(rows * w->K) * sizeof(uint16_t))),
                 (uint16_t *)scr, M, 0, 0, rpt, Y, 0};
    atomic_init(&t.failed, 0);
    tdm_parallel_for(pool, M, 16, bf_convert_a, &t);
    for (int64_t n0 = 0; n0 < w->N; n0 += rows) {
        t.n0 = n0;
        t.nr = w->N - n0 < rows ? w->N - n0 : rows;
        t.Y = Y + n0;
        tdm_parallel_for(pool, t.nr, 8, bf_deq_rows, &t);
        tdm_parallel_for(pool, (M + rpt - 1) / rpt, 1, bf_gemm_rows, &t);
        if (atomic_load(&t.failed)) return false;
    }
    return true;
}

static void prefill(const tdm_cpu_simd *simd, tdm_threadpool *pool, const tdm_nbits_w *w,
                    bool int8, int64_t M, const float *A, const float *bias, float *Y,
                    float *panel) {
    int64_t rows = panel_rows(w);
    int64_t threads = tdm_threadpool_size(pool);
    /* one block of A's rows per thread (each call packs the panel again), at least 16 rows */
    int64_t rpt = (M + threads - 1) / threads;
    if (rpt < 16) rpt = 16;
    bool done = int8 && simd_level(simd) >= (int)TDM_ISA_AVX512_CORE_BF16 &&
                tdm_nbits_bf16_usable() && prefill_bf16(pool, w, M, A, Y, (char *)panel);
    for (int64_t n0 = 0; !done && n0 < w->N; n0 += rows) {
        int64_t nr = w->N - n0 < rows ? w->N - n0 : rows;
        deq_task t = {w, n0, panel, simd_level(simd)};
        if (w->pk)
            tdm_parallel_for(pool, (nr + TDM_NBP_ROWS - 1) / TDM_NBP_ROWS, 1, deq_panels, &t);
        else
            tdm_parallel_for(pool, nr, 8, deq_rows, &t);
        gemm_task g = {A, panel, M, w->K, w->N, nr, rpt, Y + n0};
        tdm_parallel_for(pool, (M + rpt - 1) / rpt, 1, gemm_rows, &g);
    }
    if (bias)
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < w->N; n++) Y[m * w->N + n] += bias[n];
}

void tdm_nbits_matmul(const tdm_cpu_simd *simd, tdm_threadpool *pool, const tdm_nbits_w *w,
                      bool int8, int64_t M, const float *A, const float *bias, float *Y,
                      void *scratch) {
    if (M < 1) return;
    if (tdm_nbits_rows_path(simd, w, int8, M))
        decode(simd, pool, w, int8, M, A, bias, Y, scratch);
    else
        prefill(simd, pool, w, int8, M, A, bias, Y, scratch);
}

/* ---- the MatMulNBits kernel ---- */

typedef struct nb_state {
    const tdm_allocator *alloc;
    tdm_nbits_pk pk; /* MatMulNBitsPacked: the layout, from the attributes at plan time */
    bool pk_ok, int8, glu;
    const void *zp_src; /* the constant zero points zpf was unpacked from */
    float *zpf;
    bool zp_default; /* the constant zero points are all 2^(bits - 1): run as without them */
    atomic_int busy; /* the scratch is in use */
    void *scr;
    size_t scr_cap;
} nb_state;

typedef struct nb_attrs {
    int64_t K, N, bits, bs, nb, blob;
    bool int8;
} nb_attrs;

static nb_attrs attrs_of(const tdm_node *node) {
    nb_attrs a;
    a.K = tdm_attr_int(node, "K", 0);
    a.N = tdm_attr_int(node, "N", 0);
    a.bits = tdm_attr_int(node, "bits", 4);
    a.bs = tdm_attr_int(node, "block_size", 0);
    a.int8 = tdm_attr_int(node, "accuracy_level", 0) == 4;
    a.nb = a.bs > 0 ? (a.K + a.bs - 1) / a.bs : 0;
    a.blob = a.bs * a.bits / 8;
    return a;
}

/* Packed uint8 zero points [N, ceil(nb * bits / 8)] -> floats [N * nb]. */
static void unpack_zp(const nb_attrs *at, const uint8_t *z, float *out) {
    int64_t zrow = (at->nb * at->bits + 7) / 8;
    for (int64_t n = 0; n < at->N; n++)
        for (int64_t b = 0; b < at->nb; b++) {
            int64_t bit = b * at->bits;
            out[n * at->nb + b] =
                (float)((z[n * zrow + (bit >> 3)] >> (bit & 7)) & ((1 << at->bits) - 1));
        }
}

static bool zp_packed_ok(const nb_attrs *at, const tdm_tensor *z) {
    return z->dtype == TDM_UINT8 && z->count == at->N * ((at->nb * at->bits + 7) / 8);
}

/* All N * nb zero points equal the default 2^(bits - 1) (the 8-bit LM head of ORT's builder:
 * 128 everywhere): the product is the same without them, and the decode loops then read
 * neither the zero points nor do their per-block work. */
static bool all_default_zp(const nb_attrs *at, const float *zp) {
    float d = (float)(1 << (at->bits - 1));
    for (int64_t i = 0; i < at->N * at->nb; i++)
        if (zp[i] != d) return false;
    return true;
}

static tdm_status *nbits_prepare(const tdm_node *node, int opset, int n_in,
                                 const tdm_tensor *const *in, const tdm_allocator *a,
                                 void **state) {
    (void)opset;
    nb_state *s = tdm_calloc(a, 1, sizeof *s);
    if (!s) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory preparing MatMulNBits");
    s->alloc = a;
    atomic_init(&s->busy, 0);
    nb_attrs at = attrs_of(node);
    const tdm_tensor *z = n_in > 3 ? in[3] : NULL;
    if (z && z->data && !z->device && at.nb > 0 && zp_packed_ok(&at, z)) {
        s->zpf = tdm_alloc(a, (size_t)(at.N * at.nb) * sizeof(float));
        if (!s->zpf) {
            tdm_free(a, s);
            return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory unpacking zero points");
        }
        unpack_zp(&at, z->data, s->zpf);
        s->zp_src = z->data;
        s->zp_default = all_default_zp(&at, s->zpf);
    } else if (z && z->data && !z->device && at.nb > 0 && z->dtype == TDM_FLOAT &&
               z->count == at.N * at.nb && all_default_zp(&at, z->data)) {
        s->zp_src = z->data;
        s->zp_default = true;
    }
    *state = s;
    return NULL;
}

static void nbits_release(void *state, const tdm_allocator *a) {
    nb_state *s = state;
    (void)a;
    if (!s) return;
    tdm_free(s->alloc, s->zpf);
    tdm_free(s->alloc, s->scr);
    tdm_free(s->alloc, s);
}

static tdm_status *check_inputs(tdm_kernel_ctx *ctx, const nb_attrs *at) {
    const tdm_node *n = ctx->node;
    const tdm_tensor *A = ctx->in[0], *B = ctx->in[1], *S = ctx->in[2];
    if (at->K < 1 || at->N < 1 || at->nb < 1 || (at->bits != 2 && at->bits != 4 && at->bits != 8))
        return tdm_node_error(n, TDM_ERR_INVALID_MODEL, "bad K, N, bits or block_size");
    if (A->rank < 1 || A->dims[A->rank - 1] != at->K)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "A's last dim is not K = %lld",
                              (long long)at->K);
    if (B->dtype != TDM_UINT8 || (int64_t)B->nbytes != at->N * at->nb * at->blob)
        return tdm_node_error(n, TDM_ERR_INVALID_MODEL, "B is not uint8 [%lld, %lld, %lld]",
                              (long long)at->N, (long long)at->nb, (long long)at->blob);
    if (S->dtype != TDM_FLOAT || S->count != at->N * at->nb)
        return tdm_node_error(n, TDM_ERR_UNSUPPORTED,
                              "scales must be float32 with N * k_blocks = %lld values",
                              (long long)(at->N * at->nb));
    const tdm_tensor *Z = ctx->n_in > 3 ? ctx->in[3] : NULL;
    if (Z && !(zp_packed_ok(at, Z) || (Z->dtype == TDM_FLOAT && Z->count == at->N * at->nb)))
        return tdm_node_error(n, TDM_ERR_INVALID_MODEL,
                              "zero_points must be packed uint8 [%lld, %lld] or float [%lld, %lld]",
                              (long long)at->N, (long long)((at->nb * at->bits + 7) / 8),
                              (long long)at->N, (long long)at->nb);
    const tdm_tensor *G = ctx->n_in > 4 ? ctx->in[4] : NULL;
    if (G) { /* only the trivial order (k / block_size) is the same product */
        if (G->dtype != TDM_INT32 || G->count != at->K)
            return tdm_node_error(n, TDM_ERR_INVALID_MODEL, "g_idx must be int32 [K]");
        const int32_t *g = G->data;
        for (int64_t k = 0; k < at->K; k++)
            if (g[k] != k / at->bs)
                return tdm_node_error(n, TDM_ERR_UNSUPPORTED,
                                      "g_idx with an order other than k / block_size is not "
                                      "supported (deprecated input)");
    }
    const tdm_tensor *bias = ctx->n_in > 5 ? ctx->in[5] : NULL;
    if (bias && (bias->dtype != TDM_FLOAT || bias->count != at->N))
        return tdm_node_error(n, TDM_ERR_INVALID_MODEL, "bias must be float32 [N = %lld]",
                              (long long)at->N);
    return NULL;
}

/* The state's scratch, unless another run holds it; only for decode (M <= the decode rows:
 * a few KB): a prefill's panel (up to 4 MB) kept by each of a model's hundreds of nodes
 * would pin hundreds of MB, so it is allocated per call (its run takes ms). *own: give it
 * back with tdm_free. NULL: out of memory. */
static char *scratch_take(tdm_kernel_ctx *ctx, nb_state *st, int64_t M, size_t bytes,
                          bool *own) {
    *own = true;
    if (st && M <= TDM_NBITS_DECODE_ROWS && !atomic_exchange(&st->busy, 1)) {
        if (st->scr_cap < bytes) {
            tdm_free(st->alloc, st->scr);
            st->scr = tdm_alloc(st->alloc, bytes);
            st->scr_cap = st->scr ? bytes : 0;
        }
        if (st->scr) {
            *own = false;
            return st->scr;
        }
        atomic_store(&st->busy, 0);
    }
    return tdm_alloc(ctx->alloc, bytes);
}

static void scratch_give(tdm_kernel_ctx *ctx, nb_state *st, char *scr, bool own) {
    if (own) tdm_free(ctx->alloc, scr);
    else atomic_store(&st->busy, 0);
}

static tdm_status *run_matmul_nbits(tdm_kernel_ctx *ctx) {
    nb_attrs at = attrs_of(ctx->node);
    const tdm_tensor *A = ctx->in[0], *B = ctx->in[1];
    const tdm_tensor *Z = ctx->n_in > 3 ? ctx->in[3] : NULL;
    const tdm_tensor *bias_t = ctx->n_in > 5 ? ctx->in[5] : NULL;
    float *Y = ctx->out[0]->data;
    const float *bias = bias_t ? bias_t->data : NULL;
    if (B && B->count == 0) { /* an omitted projection: the bias, or zeros */
        if (bias_t && bias_t->count != at.N)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_MODEL, "bias must have N values");
        int64_t M = at.N > 0 ? ctx->out[0]->count / at.N : 0;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < at.N; n++) Y[m * at.N + n] = bias ? bias[n] : 0.0f;
        return NULL;
    }
    TDM_TRY(check_inputs(ctx, &at));
    nb_state *st = ctx->state;
    const tdm_cpu_simd *simd = tdm_cpu_simd_of(ctx);
    tdm_nbits_w w = {at.N, at.K, at.nb, at.bs, (int)at.bits, B->data, ctx->in[2]->data, NULL};
    int64_t M = A->count / at.K;
    if (M == 0) return NULL;
    size_t need = tdm_nbits_scratch_bytes(simd, &w, at.int8, M), zbytes = 0;
    if (Z && st && st->zp_default && st->zp_src == Z->data) w.zp = NULL;
    else if (Z && Z->dtype == TDM_FLOAT) w.zp = Z->data;
    else if (Z && st && st->zpf && st->zp_src == Z->data) w.zp = st->zpf;
    else if (Z) zbytes = align64((size_t)(at.N * at.nb) * sizeof(float));
    bool own;
    char *scr = scratch_take(ctx, st, M, need + zbytes, &own);
    if (!scr)
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "MatMulNBits node '%s': out of memory (%zu bytes)",
                       ctx->node->name, need + zbytes);
    if (zbytes) {
        float *zf = (float *)(scr + need);
        unpack_zp(&at, Z->data, zf);
        w.zp = zf;
    }
    tdm_nbits_matmul(simd, ctx->pool, &w, at.int8, M, A->data, bias, Y, scr);
    scratch_give(ctx, st, scr, own);
    return NULL;
}

/* MatMulNBitsPacked(A, P, bias?): the packed form (ops/nbits_pack.h) that graph/fuse_nbits.c
 * made from a MatMulNBits' constant weights. */
static tdm_status *packed_prepare(const tdm_node *node, int opset, int n_in,
                                  const tdm_tensor *const *in, const tdm_allocator *a,
                                  void **state) {
    (void)opset, (void)n_in, (void)in;
    nb_state *s = tdm_calloc(a, 1, sizeof *s);
    if (!s) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory preparing MatMulNBitsPacked");
    s->alloc = a;
    atomic_init(&s->busy, 0);
    nb_attrs at = attrs_of(node);
    s->int8 = at.int8;
    s->pk_ok = tdm_nbits_pk_layout(at.N, at.K, (int)at.bits, at.bs,
                                   (unsigned)tdm_attr_int(node, "packed_form", 0), &s->pk);
    s->glu = tdm_attr_int(node, "glu", 0) != 0;
    *state = s;
    return NULL;
}

/* out[m, n] = (g * Sigmoid(g)) * u, g = Y[m, n], u = Y[m, H + n]: the values of the graph's
 * Sigmoid and two Muls (the Sigmoid node's loop, the same rounding), in items of GLU_COLS
 * columns of a row shared out over the pool (an 8-row decode step's were ~4% of the step, run
 * by one thread while the other waited). The items start at multiples of GLU_COLS from a
 * row's start, so the unary loop meets every element in the same place of its vectors as it
 * does for the whole row. */
enum { GLU_COLS = 256 };

typedef struct glu_job {
    const tdm_cpu_simd *simd;
    int64_t H, per_row; /* items per row */
    const float *Y;
    float *out;
} glu_job;

static void glu_items(void *arg, int64_t i0, int64_t i1) {
    const glu_job *j = arg;
    tdm_uparams p = {.op = TDM_U_SIGMOID};
    for (int64_t i = i0; i < i1; i++) {
        int64_t m = i / j->per_row, n0 = i % j->per_row * GLU_COLS;
        int64_t n1 = n0 + GLU_COLS < j->H ? n0 + GLU_COLS : j->H;
        const float *g = j->Y + m * 2 * j->H, *u = g + j->H;
        float *o = j->out + m * j->H;
        j->simd->unary_f32(&p, g + n0, o + n0, n1 - n0);
        for (int64_t n = n0; n < n1; n++) o[n] = (g[n] * o[n]) * u[n];
    }
}

static void glu_rows(const tdm_cpu_simd *simd, tdm_threadpool *pool, int64_t M, int64_t H,
                     const float *Y, float *out) {
    glu_job j = {simd, H, (H + GLU_COLS - 1) / GLU_COLS, Y, out};
    /* about 2048 elements a task: one row of SmolLM2's 1536 runs on the caller */
    tdm_parallel_for(pool, M * j.per_row, 2048 / GLU_COLS, glu_items, &j);
}

static tdm_status *run_matmul_nbits_packed(tdm_kernel_ctx *ctx) {
    nb_state *st = ctx->state;
    const tdm_tensor *A = ctx->in[0], *P = ctx->in[1];
    const tdm_tensor *bias_t = ctx->n_in > 2 ? ctx->in[2] : NULL;
    /* the layout from the attributes: read once at plan time (the state), else now */
    tdm_nbits_pk pk;
    bool int8, ok, glu;
    if (st) {
        pk = st->pk;
        int8 = st->int8;
        ok = st->pk_ok;
        glu = st->glu;
    } else {
        nb_attrs at = attrs_of(ctx->node);
        int8 = at.int8;
        ok = tdm_nbits_pk_layout(at.N, at.K, (int)at.bits, at.bs,
                                 (unsigned)tdm_attr_int(ctx->node, "packed_form", 0), &pk);
        glu = tdm_attr_int(ctx->node, "glu", 0) != 0;
    }
    if (!ok || P->dtype != TDM_UINT8 || P->nbytes != tdm_nbits_pk_bytes(&pk))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_MODEL, "packed weights do not match");
    if (glu && (pk.N % 2 != 0 || bias_t))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_MODEL, "glu needs an even N, no bias");
    if (A->rank < 1 || A->dims[A->rank - 1] != pk.K)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "A's last dim is not K = %lld",
                              (long long)pk.K);
    if (bias_t && (bias_t->dtype != TDM_FLOAT || bias_t->count != pk.N))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_MODEL, "bias must be float32 [N]");
    int64_t M = A->count / pk.K;
    if (M == 0) return NULL;
    const tdm_cpu_simd *simd = tdm_cpu_simd_of(ctx);
    tdm_nbits_w w = {pk.N, pk.K, pk.nb, pk.bs, pk.bits, NULL, NULL, NULL, &pk, P->data};
    size_t need = align64(tdm_nbits_scratch_bytes(simd, &w, int8, M));
    size_t ybytes = glu ? (size_t)(M * pk.N) * sizeof(float) : 0; /* G and U before the product */
    bool own;
    char *scr = scratch_take(ctx, st, M, need + ybytes, &own);
    if (!scr)
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY,
                       "MatMulNBitsPacked node '%s': out of memory (%zu bytes)", ctx->node->name,
                       need + ybytes);
    float *Y = glu ? (float *)(scr + need) : ctx->out[0]->data;
    tdm_nbits_matmul(simd, ctx->pool, &w, int8, M, A->data, bias_t ? bias_t->data : NULL, Y, scr);
    if (glu) glu_rows(simd, ctx->pool, M, pk.N / 2, Y, ctx->out[0]->data);
    scratch_give(ctx, st, scr, own);
    return NULL;
}

tdm_status *tdm_cpu_run_gather_bq(tdm_kernel_ctx *ctx); /* k_nbits_gather.c */

#define MS "com.microsoft"
const tdm_kernel_def tdm_cpu_kernels_nbits[] = {
    {MS, "MatMulNBits", 1, 0, 0, TDM_T(TDM_FLOAT), run_matmul_nbits, nbits_prepare, nbits_release,
     TDM_KF_WRITES_ALL},
    {MS, "GatherBlockQuantized", 1, 0, 2, TDM_T(TDM_FLOAT), tdm_cpu_run_gather_bq, NULL, NULL,
     TDM_KF_WRITES_ALL},
    {TDM_FUSED_DOMAIN, "MatMulNBitsPacked", 1, 0, 0, TDM_T(TDM_FLOAT), run_matmul_nbits_packed,
     packed_prepare, nbits_release, TDM_KF_WRITES_ALL},
};
const int tdm_cpu_kernels_nbits_count =
    (int)(sizeof tdm_cpu_kernels_nbits / sizeof tdm_cpu_kernels_nbits[0]);

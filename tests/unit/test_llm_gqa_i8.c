/* GroupQueryAttention's 8-bit KV cache (backends/cpu/k_llm_gqa.c with int8 past / present,
 * ops/kv_int8.h's rows: head_dim codes, then one bfloat16 scale per 32 codes), and its 4-bit
 * cache (uint8 past / present, TDM_KV_I4_ROW: Q4_0's groups of 16 bytes of nibbles, then the
 * scales): every test below runs for both forms (g_q4), the 4-bit one against a reference
 * of its own (each whole group of 32 values rotated by the Walsh-Hadamard matrix / sqrt(32),
 * (checked against the matrix written out here in double); per group, s = the value of largest magnitude / -8 with |s|
 * rounded up to a bfloat16, c = round(y / s) + 8 in [0, 15]; dequantised values within |s| / 2
 * of the rotated ones, or |s| where a value of the other sign clips at code 15), the kernel's
 * attention against one over the dequantised rows rotated back; test_nibbles checks the
 * nibble order on a row whose codes are known and each level's rotation.
 *   - quantisation: the codes and scales of a row equal a reference computed here (per group
 *     s = max|x| / 127 rounded up to a bfloat16, c = round(x / s) in double); dequantised
 *     values are within s / 2;
 *   - the query's quantisation (per 32: max|q| / 127, codes rounded) against one in double;
 *   - the row routines (scores, p.V over int8 rows, several heads at once) of every SIMD level
 *     of this CPU equal a double-precision reference for odd head sizes, head counts and rows
 *     (scores: over the quantised query; the VNNI p.V within its int16 weights' rounding);
 *   - the kernel, cache shared in place (past of max length, as the generator binds it), for
 *     decode (1 and 3 threads: whole groups and groups split in parts; a short cache on 3
 *     threads, which runs on the caller: TDM_LLM_ATTN_SERIAL_WORK), a chunk of 5 rows after
 *     a past (the widened block GEMM) and a first prompt: the new cache rows are the
 *     quantised new key (rotated) / value rows, rows past each item's length are untouched,
 *     the output equals attention computed here in double precision over the dequantised cache
 *     and quantised query (tight), and is close to the float32 kernel's over the unquantised
 *     values (loose: the quantisation error);
 *   - a repeated decode step allocates nothing. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_llm.h"
#include "core/alloc.h"
#include "core/threadpool.h"
#include "counting_alloc.h"

enum { NB = 2, H = 6, KVH = 2, D = 40, RS_MAX = TDM_KV_I8_ROW(D), L = 200, MAXPOS = 256 };

static bool g_q4; /* the tests run on the 4-bit cache's rows */
#define RS ((int)row_bytes(D))
/* a row's bytes for d values, where its scales start, code i (signed) */
static int64_t row_bytes(int64_t d) { return g_q4 ? TDM_KV_I4_ROW(d) : TDM_KV_I8_ROW(d); }
static int64_t scales_at(int64_t d) { return g_q4 ? 16 * ((d + 31) / 32) : d; }
static int code_of(const int8_t *r, int64_t i) {
    if (!g_q4) return r[i];
    uint8_t b = (uint8_t)r[(i / 32) * 16 + i % 16];
    return (int)((i % 32 < 16 ? b : b >> 4) & 15) - 8;
}
static void set_code(int8_t *r, int64_t i, int c) { /* c in the form's range */
    if (!g_q4) {
        r[i] = (int8_t)c;
        return;
    }
    uint8_t *b = (uint8_t *)r + (i / 32) * 16 + i % 16;
    unsigned u = (unsigned)(c + 8);
    *b = (uint8_t)(i % 32 < 16 ? (*b & 0xf0u) | u : (*b & 0x0fu) | (u << 4));
}
static const tdm_llm_i8_fns *fns_for(tdm_cpu_isa l) {
    return g_q4 ? tdm_llm_i4_fns_for(l) : tdm_llm_i8_fns_for(l);
}
static void dequantize_rows(const int8_t *rows, int64_t rs, int64_t n, int64_t d, float *out) {
    (g_q4 ? tdm_llm_kv4_dequantize_rows : tdm_llm_kv_dequantize_rows)(rows, rs, n, d, out);
}
/* x = H x / sqrt(32) per whole group of 32 (4-bit cache only), H[i][k] = (-1)^popcount(i & k),
 * in double precision */
static void rotate_ref(float *x, int64_t d) {
    if (!g_q4) return;
    for (int64_t g0 = 0; g0 + 32 <= d; g0 += 32) {
        double y[32];
        for (int i = 0; i < 32; i++) {
            y[i] = 0;
            for (int k = 0; k < 32; k++)
                y[i] += (__builtin_popcount((unsigned)(i & k)) & 1 ? -1.0 : 1.0) * x[g0 + k];
        }
        for (int i = 0; i < 32; i++) x[g0 + i] = (float)(y[i] / sqrt(32.0));
    }
}
/* the cache's rotation as the kernel does it (float sums; its values are checked against
 * rotate_ref by test_nibbles): the references below rotate with it, so that a query code at a
 * rounding tie rounds as the kernel's */
static void rotate_cache(float *x, int64_t d) {
    if (g_q4) tdm_llm_kv4_rotate(x, d);
}
static void quantize_row(const float *x, int64_t d, int8_t *row) {
    (g_q4 ? tdm_llm_kv4_quantize_row : tdm_llm_kv_quantize_row)(x, d, row);
}

static counter g_count;
static const tdm_allocator g_alloc = {c_alloc, c_free, &g_count};

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float frand(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) & 0xffff) / 32768.0f - 1.0f;
}

static tdm_tensor *tensor(tdm_dtype dt, int rank, const int64_t *dims, bool random) {
    tdm_tensor *t = NULL;
    assert_null(tdm_tensor_new(&g_alloc, dt, rank, dims, &t));
    if (random && dt == TDM_FLOAT)
        for (int64_t i = 0; i < t->count; i++) ((float *)t->data)[i] = frand();
    return t;
}

static tdm_tensor *view(tdm_tensor *of) {
    tdm_tensor *t = NULL;
    assert_null(tdm_tensor_new_view(&g_alloc, of->dtype, of->rank, of->dims, of->data, &t));
    return t;
}

/* the scale of group g (bfloat16 after the d codes) */
static float scale_of(const int8_t *row, int64_t d, int64_t g) {
    uint16_t h;
    memcpy(&h, row + scales_at(d) + 2 * g, 2);
    uint32_t u = (uint32_t)h << 16;
    float s;
    memcpy(&s, &u, 4);
    return s;
}

static void set_scale(int8_t *row, int64_t d, int64_t g, float s) { /* s a bfloat16 value */
    uint32_t u;
    memcpy(&u, &s, 4);
    uint16_t h = (uint16_t)(u >> 16);
    memcpy(row + scales_at(d) + 2 * g, &h, 2);
}

/* reference quantisation of one row: per group of 32, the scale max|x| / 127 rounded up to
 * the next bfloat16 (nextafter steps), codes rounded in double precision (ties to even) */
static void ref_quantize(const float *x0, int64_t d, int8_t *row) {
    float x[1024];
    memcpy(x, x0, sizeof(float) * (size_t)d);
    rotate_cache(x, d);
    if (g_q4) memset(row, 0x88, (size_t)scales_at(d)); /* code 8 past d */
    for (int64_t g0 = 0; g0 < d; g0 += 32) {
        int64_t g1 = g0 + 32 < d ? g0 + 32 : d;
        float mx = 0, m = 0; /* the largest magnitude, the (first) value that has it */
        for (int64_t i = g0; i < g1; i++)
            if (fabsf(x[i]) > mx) mx = fabsf(x[i]), m = x[i];
        float want = mx / (g_q4 ? 8.0f : 127.0f), s = want;
        for (;;) { /* the smallest bfloat16 >= want */
            uint32_t u;
            memcpy(&u, &s, 4);
            if (!(u & 0xffffu)) break;
            s = nextafterf(s, INFINITY);
        }
        if (g_q4 && m > 0) s = -s; /* s = m / -8: m gets code 0 */
        int lo = g_q4 ? -8 : -127, hi = g_q4 ? 7 : 127;
        for (int64_t i = g0; i < g1; i++) {
            double c = s != 0 ? nearbyint((double)x[i] / s) : 0;
            set_code(row, i, (int)(c > hi ? hi : c < lo ? lo : c));
        }
        set_scale(row, d, g0 / 32, s);
    }
}

static void test_quantize(void **state) {
    (void)state;
    float x[67];
    int8_t got[TDM_KV_I8_ROW(67)], want[TDM_KV_I8_ROW(67)];
    float clip = g_q4 ? 1.0f : 0.5f; /* 4-bit: +8 s clips to code 15 */
    for (int r = 0; r < 200; r++) {
        int64_t d = 1 + r % 67;
        float amp = r % 7 == 0 ? 0.0f : powf(10.0f, (float)(r % 9) - 4.0f);
        for (int64_t i = 0; i < d; i++) x[i] = amp * frand();
        quantize_row(x, d, got);
        ref_quantize(x, d, want);
        rotate_cache(x, d); /* the values the codes stand for */
        if (memcmp(got, want, (size_t)scales_at(d)) && g_q4) /* every nibble, the padding too */
            for (int64_t i = 0; i < 32 * ((d + 31) / 32); i++)
                if (abs(code_of(got, i) - code_of(want, i)) > (i < d))
                    fail_msg("row %d code %lld: %d, want %d", r, (long long)i, code_of(got, i),
                             code_of(want, i));
        for (int64_t i = 0; i < d; i++) {
            float s = scale_of(got, d, i / 32);
            if (s != scale_of(want, d, i / 32))
                fail_msg("row %d group %lld: scale %g, want %g", r, (long long)(i / 32), s,
                         scale_of(want, d, i / 32));
            int c = code_of(got, i);
            if (abs(c - code_of(want, i)) > 1) /* float vs double x / s at a tie */
                fail_msg("row %d code %lld: %d, want %d", r, (long long)i, c, code_of(want, i));
            if (fabsf(s * c - x[i]) > clip * fabsf(s) * 1.0001f + 1e-30f)
                fail_msg("row %d value %lld: %g decodes to %g (scale %g)", r, (long long)i, x[i],
                         s * c, s);
        }
        float deq[67];
        dequantize_rows(got, row_bytes(d), 1, d, deq);
        for (int64_t i = 0; i < d; i++) assert_true(deq[i] == scale_of(got, d, i / 32) * (float)code_of(got, i));
    }
}

/* a random row (codes and bfloat16 scales: positive for int8, either sign for 4-bit; the
 * 4-bit padding nibbles random too: no routine may read them into a result) */
static void fill_row(int8_t *r, int64_t d) {
    if (g_q4)
        for (int64_t i = 0; i < scales_at(d); i++) r[i] = (int8_t)(rand() & 255);
    else
        for (int64_t i = 0; i < d; i++) r[i] = (int8_t)(127.0f * frand());
    for (int64_t g = 0; g * 32 < d; g++) {
        float s = 0.01f + 0.02f * (frand() + 1.0f);
        if (g_q4 && frand() < 0) s = -16.0f * s;
        uint32_t u;
        memcpy(&u, &s, 4);
        u &= 0xffff0000u;
        memcpy(&s, &u, 4);
        set_scale(r, d, g, s);
    }
}

/* x -> the query the int8 scores use: tdm_llm_q8_query's codes times their group's scale */
static void dequant_query(const float *x, int64_t d, float *out) {
    int8_t c[1024];
    float s[32];
    tdm_llm_q8_query(x, d, c, s);
    for (int64_t i = 0; i < d; i++) out[i] = s[i / 32] * (float)c[i];
}

/* the query's quantisation against one in double precision: per group of 32, s = max|x| /
 * 127, codes within one of round(x / s) (float vs double at a tie), values within s / 2 */
/* The 4-bit row of a group whose values are known integers (scale 1: the largest magnitude is
 * -8), byte by byte: byte j holds value j's code in its low nibble and value j + 16's in its
 * high one, codes past d are 8; the routines read it back as those values. */
static void test_nibbles(void **state) {
    (void)state;
    enum { ND = 40 };
    float x[ND];
    int8_t row[TDM_KV_I4_ROW(ND)];
    /* codes c(i) = 7 i mod 16 written byte by byte (byte j of a group: value j in the low
     * nibble, j + 16 in the high one; 8 past d), scale 1.0: the row's values are c - 8 */
    uint8_t *u = (uint8_t *)row;
    for (int j = 0; j < 16; j++) {
        u[j] = (uint8_t)((j * 7) % 16 | ((j + 16) * 7) % 16 << 4);
        u[16 + j] = (uint8_t)((j + 32 < ND ? ((j + 32) * 7) % 16 : 8) | 8 << 4);
    }
    const uint16_t one = 0x3f80; /* bfloat16 1.0 */
    memcpy(row + 32, &one, 2);
    memcpy(row + 34, &one, 2);
    for (int i = 0; i < ND; i++) x[i] = (float)((i * 7) % 16 - 8);
    float y[ND];
    tdm_llm_kv4_dequantize_rows(row, TDM_KV_I4_ROW(ND), 1, ND, y);
    for (int i = 0; i < ND; i++)
        if (y[i] != x[i]) fail_msg("value %d: %g, want %g", i, y[i], x[i]);
    /* the row routines: p.V with one weight of 1 gives the row back at every level */
    tdm_cpu_isa top = tdm_cpu_isa_detect();
    for (int l = TDM_ISA_PORTABLE; l <= (int)top; l++) {
        float p[1] = {1.0f}, out[ND] = {0};
        tdm_llm_i4_fns_for((tdm_cpu_isa)l)->pv(p, 1, 1, row, TDM_KV_I4_ROW(ND), 1, ND, out, ND);
        for (int i = 0; i < ND; i++)
            if (fabsf(out[i] - x[i]) > 1e-3f)
                fail_msg("%s p.V value %d: %g, want %g", tdm_cpu_isa_name((tdm_cpu_isa)l), i, out[i], x[i]);
        /* each level's rotation is tdm_llm_kv4_rotate's, bit for bit, and rotate_ref's */
        for (int d = 40; d <= 96; d += 56) {
            float a[96], b[96], c[96];
            for (int i = 0; i < d; i++) a[i] = b[i] = c[i] = frand();
            tdm_llm_kv4_rotate(a, d);
            tdm_llm_i4_fns_for((tdm_cpu_isa)l)->rotate(b, d);
            if (memcmp(a, b, sizeof(float) * (size_t)d))
                fail_msg("%s rotation differs at d=%d", tdm_cpu_isa_name((tdm_cpu_isa)l), d);
            g_q4 = true;
            rotate_ref(c, d);
            g_q4 = false;
            for (int i = 0; i < d; i++)
                if (fabsf(a[i] - c[i]) > 1e-5f) fail_msg("rotation value %d: %g, want %g", i, a[i], c[i]);
        }
        /* scores against unit queries pick single values */
        for (int i = 0; i < ND; i += 5) {
            float q[ND] = {0}, sc[1];
            q[i] = 1.0f;
            const float *qp[1] = {q};
            tdm_llm_i4_fns_for((tdm_cpu_isa)l)->scores(qp, 1, row, TDM_KV_I4_ROW(ND), 1, ND, 1.0f, sc, 1, NULL);
            if (fabsf(sc[0] - x[i]) > 1e-3f)
                fail_msg("%s score of value %d: %g, want %g", tdm_cpu_isa_name((tdm_cpu_isa)l), i, sc[0], x[i]);
        }
    }
}

/* Every level's row quantiser (the cache's writer) gives the portable one's bytes: head sizes
 * of whole groups and not, magnitudes from tiny to large, ties of magnitude, NaN and inf. */
static void test_quantize_levels(void **state) {
    (void)state;
    static const int ds[] = {1, 31, 32, 33, 64, 96, 128, 130, 256};
    float x[256];
    for (int l = TDM_ISA_PORTABLE; l <= (int)tdm_cpu_isa_detect(); l++) {
        const tdm_llm_i8_fns *f = fns_for((tdm_cpu_isa)l);
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
            for (int r = 0; r < 40; r++) {
                int d = ds[di];
                float amp = r % 7 == 0 ? 0.0f : powf(10.0f, (float)(r % 9) - 4.0f);
                for (int i = 0; i < d; i++) x[i] = amp * frand();
                if (r % 5 == 1) x[r % d] = -x[(r + 3) % d]; /* a tie of magnitude, signs apart */
                if (r == 11) x[d / 2] = NAN;
                if (r == 13) x[d - 1] = INFINITY;
                int8_t got[TDM_KV_I8_ROW(256)], want[TDM_KV_I8_ROW(256)];
                memset(got, 0x5a, sizeof got);
                memset(want, 0x5a, sizeof want);
                f->quantize_row(x, d, got);
                quantize_row(x, d, want);
                if (memcmp(got, want, (size_t)row_bytes(d)))
                    fail_msg("%s d=%d row %d: the bytes differ from the portable quantiser",
                             tdm_cpu_isa_name((tdm_cpu_isa)l), d, r);
                if (r == 11 && !g_q4 && want[d / 2] != 0) /* NaN: code 0 (C leaves its conversion undefined) */
                    fail_msg("d=%d: a NaN value has 8-bit code %d, not 0", d, want[d / 2]);
            }
    }
}

static void test_query_quantize(void **state) {
    (void)state;
    float x[200], s[7];
    int8_t c[200];
    for (int r = 0; r < 300; r++) {
        int64_t d = 1 + r % 200;
        float amp = r % 11 == 0 ? 0.0f : powf(10.0f, (float)(r % 9) - 4.0f);
        for (int64_t i = 0; i < d; i++) x[i] = amp * frand();
        tdm_llm_q8_query(x, d, c, s);
        for (int64_t g0 = 0; g0 < d; g0 += 32) {
            double mx = 0;
            for (int64_t i = g0; i < d && i < g0 + 32; i++) mx = fabs(x[i]) > mx ? fabs(x[i]) : mx;
            float sg = s[g0 / 32];
            if (fabs(sg - mx / 127.0) > 1e-6 * mx / 127.0)
                fail_msg("row %d group %lld: scale %g, want %g", r, (long long)(g0 / 32), sg, mx / 127.0);
            for (int64_t i = g0; i < d && i < g0 + 32; i++) {
                double want = mx > 0 ? nearbyint(x[i] / (mx / 127.0)) : 0;
                if (fabs(c[i] - want) > 1)
                    fail_msg("row %d code %lld: %d, want %g", r, (long long)i, c[i], want);
                if (fabsf(sg * c[i] - x[i]) > 0.5f * sg * 1.0001f + 1e-30f)
                    fail_msg("row %d value %lld: %g decodes to %g", r, (long long)i, x[i], sg * c[i]);
            }
        }
    }
}

/* Whether a level's p.V rounds the weights to int16 per block (pv_vnni: every column; the
 * AVX2 form, also the 4-bit cache's at the AVX-512 level without VNNI: the columns of whole
 * groups of 32) or sums in float32 */
static bool pv_rounds(tdm_cpu_isa l, int d, int column) {
    if (l >= TDM_ISA_AVX512_CORE_VNNI) return true;
    return (l == TDM_ISA_AVX2 || (g_q4 && l == TDM_ISA_AVX512_CORE)) && column < d / 32 * 32;
}

static void test_row_variants(void **state) {
    (void)state;
    tdm_cpu_isa top = tdm_cpu_isa_detect();
    static const int ds[] = {1, 7, 16, 33, 40, 64, 71, 96, 128, 130, 200, 320, 512, 600};
    static const int ns[] = {1, 8, 15, 17, 64, 100, 301}; /* 301: blocks of 64 rows, a short last one */
    static const int gs[] = {1, 3, 4, 5, 9};
    for (int l = TDM_ISA_PORTABLE; l <= (int)top; l++) {
        const tdm_llm_i8_fns *f = fns_for((tdm_cpu_isa)l);
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                for (size_t gi = 0; gi < sizeof gs / sizeof gs[0]; gi++) {
                    int d = ds[di], n = ns[ni], G = gs[gi], rs = (int)row_bytes(d) + (int)(ni & 1) * 3;
                    int ld = n + 5, ys = d + 2;
                    int8_t *rows = calloc((size_t)(n * rs), 1);
                    float *q = malloc(sizeof(float) * (size_t)(G * d)), *sc = calloc((size_t)(G * ld), 4);
                    float *p = malloc(sizeof(float) * (size_t)(G * ld)), *y = malloc(sizeof(float) * (size_t)(G * ys));
                    for (int t = 0; t < n; t++) fill_row(rows + t * rs, d);
                    for (int i = 0; i < G * d; i++) q[i] = frand();
                    for (int i = 0; i < G * ld; i++) p[i] = frand();
                    if (G == 3) /* a softmax's shape: one weight per 128 rows 1000x the others,
                                   among 64 rows of zero codes (they add nothing, and a block of
                                   64 rows rounds the next 64 against their own largest) */
                        for (int t = 0; t < n; t++) {
                            if (t % 128 == 5)
                                for (int h = 0; h < G; h++) p[h * ld + t] = 1000.0f;
                            for (int i = 0; t % 128 < 64 && i < d; i++) set_code(rows + t * rs, i, 0);
                        }
                    for (int i = 0; i < G * ys; i++) y[i] = frand();
                    const float *qp[9];
                    for (int h = 0; h < G; h++) qp[h] = q + h * d;
                    f->scores(qp, G, rows, rs, n, d, 0.125f, sc, ld, (ni & 2) ? rows : NULL);
                    /* the scores take the query quantised (as tdm_llm_q8_query does, checked
                     * by test_query_quantize) */
                    float *qd = malloc(sizeof(float) * (size_t)(G * d));
                    for (int h = 0; h < G; h++) dequant_query(q + h * d, d, qd + h * d);
                    for (int h = 0; h < G; h++)
                        for (int t = 0; t < n; t++) {
                            double want = 0;
                            const int8_t *r = rows + t * rs;
                            for (int i = 0; i < d; i++)
                                want += (double)qd[h * d + i] * code_of(r, i) * scale_of(r, d, i / 32);
                            want *= 0.125;
                            if (fabs(sc[h * ld + t] - want) > 1e-5 + 1e-5 * fabs(want))
                                fail_msg("%s scores d=%d n=%d G=%d head %d row %d: %g, want %g",
                                         tdm_cpu_isa_name((tdm_cpu_isa)l), d, n, G, h, t,
                                         sc[h * ld + t], want);
                        }
                    float *y0 = malloc(sizeof(float) * (size_t)(G * ys));
                    memcpy(y0, y, sizeof(float) * (size_t)(G * ys));
                    f->pv(p, ld, G, rows, rs, n, d, y, ys);
                    for (int h = 0; h < G; h++)
                        for (int i = 0; i < ys; i++) {
                            double want = y0[h * ys + i], mag = fabs(want), wmax = 0, csum = 0, wtol = 0;
                            if (i < d)
                                for (int t = 0; t < n; t++) {
                                    double wt = (double)p[h * ld + t] * scale_of(rows + t * rs, d, i / 32);
                                    double term = wt * code_of(rows + t * rs, i);
                                    want += term;
                                    mag += fabs(term);
                                    wmax = fabs(wt) > wmax ? fabs(wt) : wmax;
                                    csum += abs(code_of(rows + t * rs, i));
                                    if (t % 64 == 63 || t == n - 1) { /* a block's share */
                                        wtol += wmax / 65534.0 * csum;
                                        wmax = csum = 0;
                                    }
                                }
                            /* float sums of n terms: relative to the terms' magnitude; the
                             * integer forms round the weights to 16 bits per 64 rows (each
                             * within 2^-16 of its block's largest: blocks of 128 rows fail
                             * this on the softmax-shaped weights) */
                            double tol = 1e-5 + 1e-6 * mag;
                            if (pv_rounds((tdm_cpu_isa)l, d, i)) tol += 1.01 * wtol;
                            if (fabs(y[h * ys + i] - want) > tol)
                                fail_msg("%s pv d=%d n=%d G=%d head %d column %d: %g, want %g (terms %g)",
                                         tdm_cpu_isa_name((tdm_cpu_isa)l), d, n, G, h, i,
                                         y[h * ys + i], want, mag);
                        }
                    free(rows), free(q), free(qd), free(sc), free(p), free(y), free(y0);
                }
    }
}

/* The AVX2 p.V makes the VNNI form's integer sums and float steps, so the two give the same
 * numbers to the bit on the columns of whole groups (the 8-bit AVX2 form takes a last
 * group shorter than 32 in float32): head counts 1..5 (passes of 3 and of 4 heads), blocks
 * of 64 rows with a short last one, peaked and zero weights, padded rows. Where the CPU has
 * no AVX-512 VNNI there is nothing to compare, and the test says so. */
static void test_pv_levels_agree(void **state) {
    (void)state;
    if (tdm_cpu_isa_detect() < TDM_ISA_AVX512_CORE_VNNI) {
        printf("    (no AVX-512 VNNI here: the AVX2 and VNNI p.V not compared)\n");
        return;
    }
    const tdm_llm_i8_fns *a = fns_for(TDM_ISA_AVX2), *b = fns_for(TDM_ISA_AVX512_CORE_VNNI);
    static const int ds[] = {32, 40, 64, 96, 128, 200};
    static const int ns[] = {1, 2, 63, 64, 65, 301};
    for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (int G = 1; G <= 5; G++) {
                int d = ds[di], n = ns[ni], rs = (int)row_bytes(d) + (int)(ni & 1) * 3, ld = n + 7, ys = d + 1;
                int8_t *rows = calloc((size_t)(n * rs), 1);
                float *p = malloc(sizeof(float) * (size_t)(G * ld));
                float *ya = calloc((size_t)(G * ys), 4), *yb = calloc((size_t)(G * ys), 4);
                assert_non_null(rows), assert_non_null(p), assert_non_null(ya), assert_non_null(yb);
                for (int t = 0; t < n; t++) fill_row(rows + t * rs, d);
                for (int i = 0; i < G * ld; i++) p[i] = fabsf(frand());
                for (int t = 0; t < n; t += 37) p[t] = 500.0f; /* head 0 peaked */
                for (int t = 0; G > 1 && t < n; t++) p[ld + t] = 0.0f; /* head 1 all zero */
                a->pv(p, ld, G, rows, rs, n, d, ya, ys);
                b->pv(p, ld, G, rows, rs, n, d, yb, ys);
                for (int h = 0; h < G; h++)
                    for (int i = 0; i < d / 32 * 32; i++)
                        if (memcmp(ya + h * ys + i, yb + h * ys + i, sizeof(float)) != 0)
                            fail_msg("p.V d=%d n=%d G=%d head %d column %d: AVX2 %.9g, VNNI %.9g", d, n,
                                     G, h, i, ya[h * ys + i], yb[h * ys + i]);
                free(rows), free(p), free(ya), free(yb);
            }
}

/* A row's score does not depend on how many rows one call takes (the AVX2 / VNNI forms take
 * rows in blocks, a short last block through zero padding or masks): the scores of the first
 * n rows, n = 1 .. 24, are bitwise those of a call over all 25, at every SIMD level here. */
static void test_scores_rows_invariant(void **state) {
    (void)state;
    tdm_cpu_isa top = tdm_cpu_isa_detect();
    static const int ds[] = {32, 40, 64, 96, 128};
    enum { NMAX = 25, GMAX = 5 };
    for (int l = TDM_ISA_PORTABLE; l <= (int)top; l++) {
        const tdm_llm_i8_fns *f = fns_for((tdm_cpu_isa)l);
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
            for (int G = 3; G <= GMAX; G += 2) {
                int d = ds[di], rs = (int)row_bytes(d) + (int)(di & 1) * 3, ld = NMAX + 3;
                int8_t *rows = calloc((size_t)(NMAX * rs), 1);
                float *q = malloc(sizeof(float) * (size_t)(G * d));
                float *all = calloc((size_t)(G * ld), 4), *part = calloc((size_t)(G * ld), 4);
                assert_non_null(rows), assert_non_null(q);
                assert_non_null(all), assert_non_null(part);
                for (int t = 0; t < NMAX; t++) fill_row(rows + t * rs, d);
                for (int i = 0; i < G * d; i++) q[i] = frand();
                const float *qp[GMAX];
                for (int h = 0; h < G; h++) qp[h] = q + h * d;
                f->scores(qp, G, rows, rs, NMAX, d, 0.125f, all, ld, NULL);
                for (int n = 1; n < NMAX; n++) {
                    f->scores(qp, G, rows, rs, n, d, 0.125f, part, ld, rows);
                    for (int h = 0; h < G; h++)
                        if (memcmp(part + h * ld, all + h * ld, sizeof(float) * (size_t)n) != 0)
                            fail_msg("%s scores d=%d G=%d: head %d differs over %d rows from %d",
                                     tdm_cpu_isa_name((tdm_cpu_isa)l), d, G, h, n, NMAX);
                }
                free(rows), free(q), free(all), free(part);
            }
    }
}

/* Each level's widener (the block GEMMs' key / value ranges) is the scalar one bit for bit,
 * on odd head sizes (a last group shorter than 32), padded row strides and random padding
 * nibbles, and every value is its group's scale times its code. */
static void test_dequantize_levels(void **state) {
    (void)state;
    tdm_cpu_isa top = tdm_cpu_isa_detect();
    static const int ds[] = {1, 7, 31, 32, 33, 64, 71, 96, 130, 600};
    enum { N = 5 };
    for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++) {
        int d = ds[di], rs = (int)row_bytes(d) + (int)(di & 1) * 5;
        int8_t *rows = calloc((size_t)(N * rs), 1);
        float *want = malloc(sizeof(float) * (size_t)(N * d) + 4), *got = malloc(sizeof(float) * (size_t)(N * d) + 4);
        assert_non_null(rows), assert_non_null(want), assert_non_null(got);
        for (int t = 0; t < N; t++) fill_row(rows + t * rs, d);
        dequantize_rows(rows, rs, N, d, want);
        for (int t = 0; t < N; t++)
            for (int i = 0; i < d; i++)
                assert_true(want[t * d + i] == scale_of(rows + t * rs, d, i / 32) * (float)code_of(rows + t * rs, i));
        for (int l = TDM_ISA_PORTABLE; l <= (int)top; l++) {
            memset(got, 0xff, sizeof(float) * (size_t)(N * d) + 4); /* NaNs, and a guard */
            fns_for((tdm_cpu_isa)l)->dequantize_rows(rows, rs, N, d, got);
            if (memcmp(got, want, sizeof(float) * (size_t)(N * d)) != 0)
                fail_msg("%s dequantize d=%d differs from the scalar form", tdm_cpu_isa_name((tdm_cpu_isa)l), d);
            uint32_t guard;
            memcpy(&guard, got + N * d, 4);
            assert_int_equal(guard, 0xffffffffu); /* nothing written past n rows */
        }
        free(rows), free(want), free(got);
    }
}

typedef struct gqa_case {
    tdm_node node;
    tdm_attr attrs[4];
    void *state;
    tdm_cpu_simd simd;
    tdm_threadpool *pool;
} gqa_case;

static void case_init(gqa_case *c, tdm_cpu_isa isa, int threads, bool rotary) {
    memset(c, 0, sizeof *c);
    static const char *const names[] = {"num_heads", "kv_num_heads", "do_rotary", "rotary_interleaved"};
    const int64_t vals[] = {H, KVH, rotary, 0};
    for (int i = 0; i < 4; i++) {
        c->attrs[i].name = (char *)names[i];
        c->attrs[i].type = TDM_ATTR_INT;
        c->attrs[i].i = vals[i];
    }
    c->node.name = "gqa";
    c->node.op_type = "GroupQueryAttention";
    c->node.domain = "com.microsoft";
    c->node.opset = 1;
    c->node.n_attrs = 4;
    c->node.attrs = c->attrs;
    tdm_cpu_simd_init(&c->simd, isa);
    assert_null(tdm_llm_gqa_prepare(&c->node, 1, 9, NULL, &g_alloc, &c->state));
    if (threads > 1) assert_null(tdm_threadpool_create(threads, 0, &c->pool));
}

static void case_free(gqa_case *c) {
    tdm_llm_gqa_release(c->state, &g_alloc);
    tdm_threadpool_free(c->pool);
}

static tdm_status *run(gqa_case *c, const tdm_tensor *const *in, tdm_tensor *y, tdm_tensor *pk,
                       tdm_tensor *pv) {
    tdm_tensor *out[3] = {y, pk, pv};
    tdm_kernel_ctx ctx = {.node = &c->node, .opset = 1, .n_in = 9, .in = in, .n_out = 3,
                          .out = out, .pool = c->pool, .alloc = &g_alloc, .state = c->state,
                          .cpu_simd = &c->simd};
    return tdm_llm_run_gqa(&ctx);
}

/* One step of S new rows per item after past_len[b] cached rows (first: a first prompt), on
 * the int8 cache in place, checked as the header says. */
/* B: the batch (NB at most) */
static void step(tdm_cpu_isa isa, int threads, bool rotary, int S, const int *past_len, bool first,
                 int B) {
    gqa_case c;
    case_init(&c, isa, threads, rotary);
    int64_t qd[3] = {B, S, H * D}, kd[3] = {B, S, KVH * D}, cd[4] = {B, KVH, L, D};
    int64_t qcd[4] = {B, KVH, L, RS}, bd[1] = {B}, cosd[2] = {MAXPOS, D / 2};
    tdm_tensor *q = tensor(TDM_FLOAT, 3, qd, true), *k = tensor(TDM_FLOAT, 3, kd, true);
    tdm_tensor *v = tensor(TDM_FLOAT, 3, kd, true);
    for (int64_t i = 0; i < q->count; i++) ((float *)q->data)[i] *= 3.0f; /* peakier softmax */
    /* float cache: random rows; the int8 cache: their quantisation (garbage past the lengths) */
    tdm_tensor *fk = tensor(TDM_FLOAT, 4, cd, true), *fv = tensor(TDM_FLOAT, 4, cd, true);
    tdm_dtype cdt = g_q4 ? TDM_UINT8 : TDM_INT8;
    tdm_tensor *qk = tensor(cdt, 4, qcd, false), *qv = tensor(cdt, 4, qcd, false);
    for (int64_t r = 0; r < B * KVH * L; r++) {
        ref_quantize((float *)fk->data + r * D, D, (int8_t *)qk->data + r * RS);
        ref_quantize((float *)fv->data + r * D, D, (int8_t *)qv->data + r * RS);
    }
    /* the float reference sees what the int8 cache holds for the past (4-bit: rotated back) */
    for (int64_t r = 0; r < B * KVH * L; r++) {
        dequantize_rows((int8_t *)qk->data + r * RS, RS, 1, D, (float *)fk->data + r * D);
        dequantize_rows((int8_t *)qv->data + r * RS, RS, 1, D, (float *)fv->data + r * D);
        rotate_ref((float *)fk->data + r * D, D);
        rotate_ref((float *)fv->data + r * D, D);
    }
    tdm_tensor *qk0 = NULL, *qv0 = NULL;
    assert_null(tdm_tensor_clone(&g_alloc, qk, &qk0));
    assert_null(tdm_tensor_clone(&g_alloc, qv, &qv0));
    tdm_tensor *sl = tensor(TDM_INT32, 1, bd, false), *tl = tensor(TDM_INT32, 0, NULL, false);
    tdm_tensor *cosc = tensor(TDM_FLOAT, 2, cosd, false), *sinc = tensor(TDM_FLOAT, 2, cosd, false);
    for (int64_t i = 0; i < cosc->count; i++) {
        float a = (float)(i / (D / 2)) * powf(10000.0f, -(float)(i % (D / 2)) / (D / 2));
        ((float *)cosc->data)[i] = cosf(a);
        ((float *)sinc->data)[i] = sinf(a);
    }
    int32_t total = 0;
    for (int b = 0; b < B; b++) {
        int len = first ? S - b * 2 : past_len[b] + S; /* a first prompt: item 1 right-padded */
        ((int32_t *)sl->data)[b] = len - 1;
        if (len > total) total = len;
    }
    if (first) total = S;
    ((int32_t *)tl->data)[0] = total;

    /* float32 kernel, in place on the float cache */
    const tdm_tensor *fin[9] = {q, k, v, fk, fv, sl, tl, cosc, sinc};
    tdm_tensor *yf = tensor(TDM_FLOAT, 3, qd, false), *fpk = view(fk), *fpv = view(fv);
    assert_null(run(&c, fin, yf, fpk, fpv));
    /* int8 kernel, in place */
    const tdm_tensor *in[9] = {q, k, v, qk, qv, sl, tl, cosc, sinc};
    tdm_tensor *y = tensor(TDM_FLOAT, 3, qd, false), *pk = view(qk), *pv = view(qv);
    assert_null(run(&c, in, y, pk, pv));

    double err2 = 0, ref2 = 0;
    for (int b = 0; b < B; b++) {
        int len = (int)((const int32_t *)sl->data)[b] + 1, p0 = first ? 0 : past_len[b];
        for (int g = 0; g < KVH; g++)
            for (int r = 0; r < L; r++) {
                size_t o8 = (size_t)(((b * KVH + g) * L + r) * RS);
                const float *fr[2] = {(float *)fk->data + ((b * KVH + g) * L + r) * D,
                                      (float *)fv->data + ((b * KVH + g) * L + r) * D};
                const tdm_tensor *got[2] = {qk, qv}, *old[2] = {qk0, qv0};
                for (int kv = 0; kv < 2; kv++) {
                    const int8_t *row = (const int8_t *)got[kv]->data + o8;
                    if (r < p0 || r >= p0 + S || (first && r >= len)) {
                        if (!(first && r >= p0 && r < p0 + S) &&
                            memcmp(row, (const int8_t *)old[kv]->data + o8, RS))
                            fail_msg("item %d head %d row %d: a row not written was changed", b, g, r);
                        continue;
                    }
                    int8_t want[RS_MAX];
                    ref_quantize(fr[kv], D, want); /* the float kernel's new (rotated) row */
                    for (int i = 0; i < D; i++)
                        if (abs(code_of(row, i) - code_of(want, i)) > 1)
                            fail_msg("item %d head %d row %d %s code %d: %d, want %d", b, g, r,
                                     kv ? "value" : "key", i, code_of(row, i), code_of(want, i));
                    for (int gi = 0; gi * 32 < D; gi++)
                        if (scale_of(row, D, gi) != scale_of(want, D, gi))
                            fail_msg("item %d row %d group %d: scale differs", b, r, gi);
                }
            }
        /* attention over the dequantised int8 cache, double precision */
        for (int s = 0; s < S; s++) {
            int n = first ? (s + 1 < len ? s + 1 : len) : p0 + s + 1;
            if (first && s >= len) n = len;
            for (int h = 0; h < H; h++) {
                int g = h / (H / KVH);
                float qr[D];
                memcpy(qr, (float *)q->data + ((b * S + s) * H + h) * D, sizeof qr);
                if (rotary) {
                    int pos = (first ? 0 : p0) + s;
                    tdm_llm_rotate(qr, (float *)cosc->data + pos * (D / 2),
                                   (float *)sinc->data + pos * (D / 2), D, false);
                }
                rotate_cache(qr, D);      /* 4-bit: as the cache's rows */
                dequant_query(qr, D, qr); /* the int8 cache's attention: the quantised query */
                double lg[L], mx = -1e300, sum = 0;
                float kr[D], vr[D];
                for (int t = 0; t < n; t++) {
                    dequantize_rows((int8_t *)qk->data + ((b * KVH + g) * L + t) * RS, RS, 1, D, kr);
                    double a = 0;
                    for (int i = 0; i < D; i++) a += (double)qr[i] * kr[i];
                    lg[t] = a / sqrt((double)D);
                    mx = lg[t] > mx ? lg[t] : mx;
                }
                for (int t = 0; t < n; t++) sum += (lg[t] = exp(lg[t] - mx));
                double out[D] = {0}, wmax[(D + 31) / 32] = {0}, csum[D] = {0}, pvtol[D] = {0};
                for (int t = 0; t < n; t++) {
                    const int8_t *vrow = (int8_t *)qv->data + ((b * KVH + g) * L + t) * RS;
                    dequantize_rows(vrow, RS, 1, D, vr);
                    for (int i = 0; i < D; i++) out[i] += lg[t] / sum * vr[i];
                    for (int gi = 0; gi < (D + 31) / 32; gi++) {
                        double wt = lg[t] / sum * fabs(scale_of(vrow, D, gi));
                        wmax[gi] = wt > wmax[gi] ? wt : wmax[gi];
                    }
                    for (int i = 0; i < D; i++) csum[i] += abs(code_of(vrow, i));
                }
                /* the VNNI p.V rounds each weight p * s to 16 bits of its block's largest (as
                 * test_row_variants bounds it); the 4-bit rows' rotation back mixes a group's
                 * 32 columns with weights of magnitude 1 / sqrt(32), a short last group stays as it is) */
                if (isa >= TDM_ISA_AVX512_CORE_VNNI)
                    for (int i = 0; i < D; i++) {
                        int g0 = i / 32 * 32;
                        if (!g_q4 || g0 + 32 > D) { /* a last short group is not rotated */
                            pvtol[i] = 1.01 * wmax[i / 32] / 65534.0 * csum[i];
                            continue;
                        }
                        for (int j = g0; j < g0 + 32; j++)
                            pvtol[i] += 1.01 * wmax[j / 32] / 65534.0 * csum[j] / sqrt(32.0);
                    }
                if (g_q4) { /* back from the rows' rotation */
                    float o32[D];
                    for (int i = 0; i < D; i++) o32[i] = (float)out[i];
                    rotate_ref(o32, D);
                    for (int i = 0; i < D; i++) out[i] = o32[i];
                }
                const float *got = (float *)y->data + ((b * S + s) * H + h) * D;
                const float *fl = (float *)yf->data + ((b * S + s) * H + h) * D;
                for (int i = 0; i < D; i++) {
                    if (fabs(got[i] - out[i]) > 2e-5 + 2e-4 * fabs(out[i]) + pvtol[i])
                        fail_msg("%s threads %d S %d item %d row %d head %d column %d: %g, want %g",
                                 tdm_cpu_isa_name(isa), threads, S, b, s, h, i, got[i], out[i]);
                    err2 += (double)(got[i] - fl[i]) * (got[i] - fl[i]);
                    ref2 += (double)fl[i] * fl[i];
                }
            }
        }
    }
    /* against the float32 cache: the new rows' quantisation error only (4-bit: steps of
     * max / 8 rather than max / 127) */
    if (!(sqrt(err2 / ref2) < (g_q4 ? 0.2 : 0.03)))
        fail_msg("relative error against the float32 cache %g", sqrt(err2 / ref2));

    /* the same step again allocates nothing */
    long before = atomic_load(&g_count.total);
    assert_null(run(&c, in, y, pk, pv));
    assert_int_equal(atomic_load(&g_count.total), before);

    tdm_tensor *all[] = {q, k, v, fk, fv, qk, qv, qk0, qv0, sl, tl, cosc, sinc, yf, fpk, fpv, y, pk, pv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tdm_tensor_destroy(all[i]);
    case_free(&c);
}

static void test_kernel(void **state) {
    (void)state;
    tdm_cpu_isa top = tdm_cpu_isa_detect();
    const tdm_cpu_isa isas[] = {TDM_ISA_PORTABLE, TDM_ISA_AVX2, top};
    const int past[NB] = {140, 77};
    const int past_short[NB] = {3, 0};
    /* the split decode has enough rows to go to the pool; the short one stays on the caller */
    assert_true(NB * H * (past[0] + 1) >= TDM_LLM_ATTN_SERIAL_WORK);
    assert_true(NB * H * (past_short[0] + 1) < TDM_LLM_ATTN_SERIAL_WORK);
    const int past_one[NB] = {180, 0};
    assert_true(H * (past_one[0] + 1) >= TDM_LLM_ATTN_SERIAL_WORK); /* one item alone too */
    for (int i = 0; i < 3; i++) {
        if (isas[i] > top) continue;
        step(isas[i], 1, true, 1, past, false, NB);    /* decode */
        step(isas[i], 3, true, 1, past, false, NB);    /* decode, groups split in parts */
        step(isas[i], 1, false, 1, past_short, false, NB);
        step(isas[i], 3, false, 1, past_short, false, NB); /* a pool, the call on its caller */
        step(isas[i], 2, true, 5, past, false, NB);    /* a chunk after a past */
        step(isas[i], 1, true, 9, past_short, true, NB); /* a first prompt */
        /* one sequence's decode in row spans (181 rows a group, 2 groups end to end): 2
         * threads, the cut at the groups' edge (one part each); 3, cuts at 120 and 241 (each
         * group in 2 pieces, the middle span across the edge); 4, cuts at 90, 181, 271 */
        for (int t = 2; t <= 4; t++) step(isas[i], t, true, 1, past_one, false, 1);
    }
}

/* Query values whose product with their group's inverse scale rounds to a tie in float32 (k +
 * 0.5, k even) but lies above it exactly: tdm_llm_q8_query rounds the float product to even
 * (code k); a multiply fused with the rounding's add would round the exact one (k + 1). The
 * scores of every level, on rows whose only nonzero code meets that value, take the scalar
 * codes (8 rows: whole blocks of the transposed forms; 3: a padded last block). */
static void test_query_ties(void **state) {
    (void)state;
    enum { D = 64, N = 8 };
    int found = 0;
    for (int mi = 0; mi < 40; mi++) {
        float M = 37.0f + 1.37f * (float)mi, inv = 127.0f / M;
        for (int k = 0; k < 40; k += 2) {
            float tie = (float)k + 0.5f, x = tie / inv, hit = 0.0f;
            for (int j = -8; j <= 8 && hit == 0.0f; j++) {
                float c = x;
                for (int u = 0; u < (j < 0 ? -j : j); u++) c = nextafterf(c, j < 0 ? 0.0f : 1e9f);
                double prod = (double)c * (double)inv; /* exact: 24 + 24 bits */
                if ((float)prod == tie && prod > (double)tie && c < M) hit = c;
            }
            if (hit == 0.0f) continue;
            found++;
            float q[D] = {0};
            q[0] = M, q[1] = hit, q[40] = -0.3f * M; /* the tie in group 0, group 1 its own */
            float qd[D];
            dequant_query(q, D, qd);
            int64_t rs = row_bytes(D), ld = N + 16;
            int8_t *rows = calloc((size_t)(N * rs), 1);
            for (int t = 0; t < N; t++) {
                int8_t *r = rows + t * rs;
                fill_row(r, D);
                for (int i = 0; i < D; i++) set_code(r, i, 0);
                set_code(r, 1, 7 - (t & 1)); /* the tie's product alone in group 0 */
                set_code(r, 40, -3);
            }
            const float *qp[1] = {q};
            float sc[N + 16];
            for (int l = TDM_ISA_PORTABLE; l <= (int)tdm_cpu_isa_detect(); l++)
                for (int n = 3; n <= N; n += N - 3) {
                    fns_for((tdm_cpu_isa)l)->scores(qp, 1, rows, rs, n, D, 0.125f, sc, ld, NULL);
                    for (int t = 0; t < n; t++) {
                        const int8_t *r = rows + t * rs;
                        double want = 0, mag = 0; /* mag: the terms' sizes (float sums) */
                        for (int i = 0; i < D; i++) {
                            double term = (double)qd[i] * code_of(r, i) * scale_of(r, D, i / 32);
                            want += term;
                            mag += fabs(term);
                        }
                        want *= 0.125;
                        if (fabs(sc[t] - want) > 1e-5 * 0.125 * mag)
                            fail_msg("%s n=%d M=%g tie %g (x %a) row %d: %g, want %g",
                                     tdm_cpu_isa_name((tdm_cpu_isa)l), n, M, tie, hit, t, sc[t], want);
                    }
                }
            free(rows);
        }
    }
    assert_true(found >= 10); /* the case is met, not skipped */
}

/* the same tests on the 4-bit cache */
#define Q4_TEST(name)                                                                          \
    static void name##4(void **state) {                                                          \
        g_q4 = true;                                                                             \
        name(state);                                                                             \
        g_q4 = false;                                                                            \
    }
static void test_bad_cache(void **state);
Q4_TEST(test_quantize)
Q4_TEST(test_quantize_levels)
Q4_TEST(test_row_variants)
Q4_TEST(test_pv_levels_agree)
Q4_TEST(test_scores_rows_invariant)
Q4_TEST(test_kernel)
Q4_TEST(test_bad_cache)
Q4_TEST(test_dequantize_levels)
Q4_TEST(test_query_ties)

static void test_bad_cache(void **state) {
    (void)state;
    gqa_case c;
    case_init(&c, TDM_ISA_PORTABLE, 1, false);
    int64_t qd[3] = {NB, 1, H * D}, kd[3] = {NB, 1, KVH * D}, cd[4] = {NB, KVH, L, D}, bd[1] = {NB};
    tdm_tensor *q = tensor(TDM_FLOAT, 3, qd, true), *k = tensor(TDM_FLOAT, 3, kd, true);
    tdm_tensor *v = tensor(TDM_FLOAT, 3, kd, true);
    tdm_dtype cdt = g_q4 ? TDM_UINT8 : TDM_INT8;
    tdm_tensor *qk = tensor(cdt, 4, cd, false), *qv = tensor(cdt, 4, cd, false);
    tdm_tensor *sl = tensor(TDM_INT32, 1, bd, false), *tl = tensor(TDM_INT32, 0, NULL, false);
    ((int32_t *)sl->data)[0] = 5;
    ((int32_t *)sl->data)[1] = 5;
    ((int32_t *)tl->data)[0] = 6;
    const tdm_tensor *in[9] = {q, k, v, qk, qv, sl, tl, NULL, NULL};
    tdm_tensor *y = tensor(TDM_FLOAT, 3, qd, false), *pk = view(qk), *pv = view(qv);
    tdm_status *st = run(&c, in, y, pk, pv); /* int8 rows lack their scales: D, not TDM_KV_I8_ROW(D) */
    assert_non_null(st);
    assert_non_null(strstr(tdm_status_message(st), g_q4 ? "uint8" : "int8"));
    tdm_status_free(st);
    tdm_tensor *all[] = {q, k, v, qk, qv, sl, tl, y, pk, pv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tdm_tensor_destroy(all[i]);
    case_free(&c);
}

/* BENCH_I8=POSITION (not part of the test): one decode step at that position on 30 layers'
 * caches (SmolLM2-135M's sizes: 9 heads, 3 kv heads, head 64, rotary; 30 x 2 x 3 x 2048 rows,
 * out of the CPU caches), float32 against int8, alternating; CPU time per token (30 layers). */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bench_i8(int pos) {
    enum { LAYERS = 30, BH = 9, BKV = 3, BD = 64, BL = 2048 };
    gqa_case c;
    memset(&c, 0, sizeof c);
    static const char *const names[] = {"num_heads", "kv_num_heads", "do_rotary", "rotary_interleaved"};
    const int64_t vals[] = {BH, BKV, 1, 1};
    for (int i = 0; i < 4; i++) {
        c.attrs[i].name = (char *)names[i];
        c.attrs[i].type = TDM_ATTR_INT;
        c.attrs[i].i = vals[i];
    }
    c.node.name = "gqa", c.node.op_type = "GroupQueryAttention", c.node.domain = "com.microsoft";
    c.node.opset = 1, c.node.n_attrs = 4, c.node.attrs = c.attrs;
    tdm_cpu_simd_init(&c.simd, tdm_cpu_isa_detect());
    assert_null(tdm_llm_gqa_prepare(&c.node, 1, 9, NULL, &g_alloc, &c.state));
    int64_t qd[3] = {1, 1, BH * BD}, kd[3] = {1, 1, BKV * BD}, fd[4] = {1, BKV, BL, BD};
    int64_t id[4] = {1, BKV, BL, TDM_KV_I8_ROW(BD)}, bd[1] = {1}, cosd[2] = {BL, BD / 2};
    tdm_tensor *q = tensor(TDM_FLOAT, 3, qd, true), *k = tensor(TDM_FLOAT, 3, kd, true);
    tdm_tensor *v = tensor(TDM_FLOAT, 3, kd, true), *y = tensor(TDM_FLOAT, 3, qd, false);
    tdm_tensor *sl = tensor(TDM_INT32, 1, bd, false), *tl = tensor(TDM_INT32, 0, NULL, false);
    tdm_tensor *cosc = tensor(TDM_FLOAT, 2, cosd, true), *sinc = tensor(TDM_FLOAT, 2, cosd, true);
    ((int32_t *)sl->data)[0] = pos;
    ((int32_t *)tl->data)[0] = BL;
    tdm_tensor *cache[2][LAYERS][2], *view_[2][LAYERS][2];
    for (int f = 0; f < 2; f++)
        for (int l = 0; l < LAYERS; l++)
            for (int kv = 0; kv < 2; kv++) {
                cache[f][l][kv] = tensor(f ? TDM_INT8 : TDM_FLOAT, 4, f ? id : fd, true);
                if (f)
                    for (int64_t r = 0; r < BKV * BL; r++) {
                        float x[BD];
                        for (int i = 0; i < BD; i++) x[i] = frand();
                        tdm_llm_kv_quantize_row(x, BD, (int8_t *)cache[f][l][kv]->data + r * TDM_KV_I8_ROW(BD));
                    }
                view_[f][l][kv] = view(cache[f][l][kv]);
            }
    double best[2] = {1e9, 1e9};
    for (int round = 0; round < 7; round++)
        for (int f = 0; f < 2; f++) {
            double t0 = cpu_now();
            for (int l = 0; l < LAYERS; l++) {
                const tdm_tensor *in[9] = {q, k, v, cache[f][l][0], cache[f][l][1], sl, tl, cosc, sinc};
                assert_null(run(&c, in, y, view_[f][l][0], view_[f][l][1]));
            }
            double dt = cpu_now() - t0;
            best[f] = dt < best[f] ? dt : best[f];
        }
    printf("attention at position %d, 30 layers, CPU time per token (best of 7): float32 %.3f ms, "
           "int8 %.3f ms\n", pos, best[0] * 1e3, best[1] * 1e3);
    for (int f = 0; f < 2; f++)
        for (int l = 0; l < LAYERS; l++)
            for (int kv = 0; kv < 2; kv++) {
                tdm_tensor_destroy(view_[f][l][kv]);
                tdm_tensor_destroy(cache[f][l][kv]);
            }
    tdm_tensor *all[] = {q, k, v, y, sl, tl, cosc, sinc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tdm_tensor_destroy(all[i]);
    tdm_llm_gqa_release(c.state, &g_alloc);
}

int main(void) {
    if (getenv("BENCH_I8")) {
        bench_i8(atoi(getenv("BENCH_I8")));
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantize),
        cmocka_unit_test(test_quantize_levels),
        cmocka_unit_test(test_query_quantize),
        cmocka_unit_test(test_row_variants),
        cmocka_unit_test(test_pv_levels_agree),
        cmocka_unit_test(test_scores_rows_invariant),
        cmocka_unit_test(test_kernel),
        cmocka_unit_test(test_bad_cache),
        cmocka_unit_test(test_nibbles),
        cmocka_unit_test(test_quantize4),
        cmocka_unit_test(test_quantize_levels4),
        cmocka_unit_test(test_row_variants4),
        cmocka_unit_test(test_pv_levels_agree4),
        cmocka_unit_test(test_scores_rows_invariant4),
        cmocka_unit_test(test_kernel4),
        cmocka_unit_test(test_bad_cache4),
        cmocka_unit_test(test_dequantize_levels),
        cmocka_unit_test(test_dequantize_levels4),
        cmocka_unit_test(test_query_ties),
        cmocka_unit_test(test_query_ties4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

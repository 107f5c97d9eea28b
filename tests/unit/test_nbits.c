/* MatMulNBits' products (src/backends/cpu/k_nbits*.c) under every ISA level this machine
 * has (portable, avx2, avx512_core, avx512_core_vnni, avx512_core_bf16), against a
 * double-precision reference computed here, on awkward sizes: K not a multiple of the block
 * (padding) nor of the SIMD spans, odd N, bits 2 / 4 / 8, block sizes 16 .. 256, zero points
 * absent / given, bias,
 * M = 1, 3, 8, 13, 16 (decode) and 19-23 (the dequantised-panel prefill; on the packed form
 * with int8 activations, and with floats on AVX-512, the decode loops), serial and on 2
 * threads.
 *   - float path (accuracy_level 0, and prefill): sum_k a_k (q - zp) s;
 *   - int8 path (accuracy_level 4, decode): the same with A replaced by its int8 model, which
 *     the reference makes the way the kernel does (per block: scale amax / 127, codes rounded
 *     half away from zero; the zero-point term with the quantized A).
 * Tolerance: |got - want| <= 1e-5 S + 1e-6, S = sum of |terms| (float accumulation order);
 * the accuracy_level 4 prefill at avx512_core_bf16 (bf16 A and weights): S / 128 + 1e-6.
 * A run with the zero points dropped must fail the comparison (the check can fail).
 * Bits 4 and 8 also run on the packed form (MatMulNBitsPacked, ops/nbits_pack.h) of the same
 * weights: with float32 scales and s * zp, and with weights whose scales and s * zp are
 * float16 values (as GGUF's Q4_1 gives them: the float16 form). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_nbits.h"
#include "core/half.h"
#include "core/threadpool.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)(next() & 0xffffff) / 16777216.0f; }

typedef struct nb_case {
    int bits;
    int64_t bs, K, N, M;
    int zp;    /* 0 none, 1 given */
    bool bias;
} nb_case;

static const nb_case cases[] = {
    {4, 32, 576, 67, 1, 1, false},  {4, 32, 100, 37, 3, 1, true},  {4, 16, 88, 19, 2, 1, false},
    {4, 64, 200, 33, 5, 0, true},   {4, 128, 300, 23, 8, 1, false}, {4, 256, 520, 9, 1, 0, false},
    {4, 32, 17, 5, 1, 0, true},     {4, 32, 1536, 41, 1, 1, false}, {4, 32, 96, 40, 13, 1, true},
    {8, 32, 576, 53, 1, 1, false},  {8, 16, 72, 21, 3, 0, true},   {8, 64, 200, 27, 8, 0, false},
    {8, 32, 33, 7, 2, 1, false},    {8, 128, 130, 11, 13, 1, true}, {2, 32, 70, 15, 2, 1, true},
    {2, 16, 48, 6, 13, 0, false},
    /* the widest decode (TDM_NBITS_DECODE_ROWS 16: the LLM engine's batches) and prefills
     * past it */
    {4, 32, 576, 37, 16, 1, true},  {8, 32, 200, 21, 16, 0, false}, {4, 32, 96, 40, 19, 1, true},
    {8, 128, 130, 11, 23, 1, true},
    /* prefills over whole panels of the packed form (16 rows: k_nbits.c deq_panels) with a
     * partial last block and a partial last panel */
    {8, 32, 200, 37, 20, 1, false}, {4, 32, 100, 37, 21, 0, true},
    /* float rows past a slice of A (k_nbits.c decode_packed: 512 KiB of A, 32 rows at K 4096) */
    {4, 32, 4096, 19, 37, 1, true},
};

typedef struct nb_data {
    tdm_nbits_w w;
    uint8_t *b;
    float *s, *zp, *bias, *A;
    int *codes; /* [N][K] */
    tdm_nbits_pk pk;
    uint8_t *P; /* the packed form, or NULL */
} nb_data;

static float f16r(float x) { return tdm_f16_to_f32(tdm_f32_to_f16(x)); }

/* f16: scales and -m (m = -s * zp) float16 values, zp = -m / s in float32 (GGUF Q4_1). */
static void make(const nb_case *c, nb_data *d, bool f16) {
    int64_t nb = (c->K + c->bs - 1) / c->bs, rowb = nb * c->bs * c->bits / 8;
    d->b = calloc((size_t)(c->N * rowb), 1);
    d->codes = calloc((size_t)(c->N * c->K), sizeof(int));
    d->s = malloc((size_t)(c->N * nb) * sizeof(float));
    d->zp = malloc((size_t)(c->N * nb) * sizeof(float));
    d->bias = malloc((size_t)c->N * sizeof(float));
    d->A = malloc((size_t)(c->M * c->K) * sizeof(float));
    int maxq = (1 << c->bits) - 1;
    for (int64_t n = 0; n < c->N; n++) {
        for (int64_t k = 0; k < nb * c->bs; k++) { /* padding codes too: must not matter */
            int q = (int)(next() % (uint32_t)(maxq + 1));
            int64_t bit = k * c->bits;
            d->b[n * rowb + (bit >> 3)] |= (uint8_t)(q << (bit & 7));
            if (k < c->K) d->codes[n * c->K + k] = q;
        }
        for (int64_t b = 0; b < nb; b++) {
            d->s[n * nb + b] = frand(0.01f, 0.08f);
            d->zp[n * nb + b] = frand(0.3f, 0.7f) * (float)maxq;
            if (f16) {
                float sc = f16r(d->s[n * nb + b]), mm = f16r(-sc * d->zp[n * nb + b]);
                d->s[n * nb + b] = sc;
                d->zp[n * nb + b] = -mm / sc;
            }
        }
        d->bias[n] = frand(-1, 1);
    }
    for (int64_t i = 0; i < c->M * c->K; i++) d->A[i] = frand(-2, 2);
    tdm_nbits_w w = {c->N, c->K, nb, c->bs, c->bits, d->b, d->s, c->zp ? d->zp : NULL};
    d->w = w;
    d->P = NULL;
}

/* The packed form of d's weights in d->w (false: the form does not apply). */
static bool pack(nb_data *d, unsigned *form) {
    *form = tdm_nbits_pk_form(d->w.N, d->w.nb, d->w.bits, d->s, d->w.zp);
    if (!tdm_nbits_pk_layout(d->w.N, d->w.K, d->w.bits, d->w.bs, *form, &d->pk)) return false;
    d->P = malloc(tdm_nbits_pk_bytes(&d->pk));
    tdm_nbits_pk_pack(&d->pk, d->b, d->s, d->w.zp, d->P);
    d->w.pk = &d->pk;
    d->w.P = d->P;
    return true;
}

static void unmake(nb_data *d) {
    free(d->b), free(d->codes), free(d->s), free(d->zp), free(d->bias), free(d->A), free(d->P);
}

/* Case base with M rows made into d and packed (f16: the float16 form) as c; false when the
 * packed form does not apply (d freed). */
static bool make_packed(const nb_case *base, int64_t M, bool f16, nb_case *c, nb_data *d) {
    unsigned form = 0;
    *c = *base;
    c->M = M;
    make(c, d, f16);
    if (pack(d, &form)) return true;
    unmake(d);
    return false;
}

/* want[m][n] and S[m][n] (sum of |terms|) */
static void reference(const nb_case *c, const nb_data *d, bool int8, double *want, double *S) {
    int64_t nb = d->w.nb, bs = c->bs, K = c->K;
    float *qa = malloc((size_t)K * sizeof(float));
    for (int64_t m = 0; m < c->M; m++) {
        const float *a = d->A + m * K;
        for (int64_t b = 0; b < nb; b++) { /* A as the product sees it */
            int64_t k1 = (b + 1) * bs < K ? (b + 1) * bs : K;
            float amax = 0;
            for (int64_t k = b * bs; k < k1; k++) amax = fmaxf(amax, fabsf(a[k]));
            float inv = amax > 0 ? 127.0f / amax : 0, sa = amax / 127.0f;
            for (int64_t k = b * bs; k < k1; k++) {
                float x = a[k] * inv;
                float r = (float)(int)(x + (x >= 0.0f ? 0.5f : -0.5f));
                qa[k] = int8 ? r * sa : a[k];
            }
        }
        for (int64_t n = 0; n < c->N; n++) {
            double y = c->bias ? d->bias[n] : 0, sabs = fabs(y);
            for (int64_t k = 0; k < K; k++) {
                double z = d->w.zp ? d->w.zp[n * nb + k / bs] : (double)(1 << (c->bits - 1));
                double t = (double)qa[k] * (d->codes[n * K + k] - z) * d->s[n * nb + k / bs];
                y += t;
                sabs += fabs((double)qa[k] * d->codes[n * K + k] * d->s[n * nb + k / bs]) +
                        fabs((double)qa[k] * z * d->s[n * nb + k / bs]);
            }
            want[m * c->N + n] = y;
            S[m * c->N + n] = sabs;
        }
    }
    free(qa);
}

/* Runs case c at level with int8 and pool; returns the number of elements out of tolerance. */
static int run_case(const nb_case *c, nb_data *d, tdm_cpu_isa level, bool int8,
                    tdm_threadpool *pool) {
    tdm_cpu_simd simd;
    tdm_cpu_simd_init(&simd, level);
    /* the prefill of the unpacked form computes in float; the packed form's int8 path runs its
     * decode loops for any M */
    bool i8 = int8 && (c->M <= TDM_NBITS_DECODE_ROWS || d->w.pk);
    size_t need = tdm_nbits_scratch_bytes(&simd, &d->w, int8, c->M);
    void *scr = aligned_alloc(64, (need + 63) / 64 * 64);
    float *y = malloc((size_t)(c->M * c->N) * sizeof(float));
    double *want = malloc((size_t)(c->M * c->N) * sizeof(double));
    double *S = malloc((size_t)(c->M * c->N) * sizeof(double));
    reference(c, d, i8, want, S);
    tdm_nbits_matmul(&simd, pool, &d->w, int8, c->M, d->A, c->bias ? d->bias : NULL, y, scr);
    /* accuracy_level 4 prefill on AVX512_BF16: A and the weights rounded to bf16 (relative
     * error 2^-9 each, k_nbits_bf16.c) */
    double rel = !i8 && int8 && level >= TDM_ISA_AVX512_CORE_BF16 &&
                         tdm_nbits_bf16_usable()
                     ? 1.0 / 128
                     : 1e-5;
    int bad = 0;
    for (int64_t i = 0; i < c->M * c->N; i++)
        if (!(fabs(y[i] - want[i]) <= rel * S[i] + 1e-6)) {
            if (!bad)
                print_message("  bits %d bs %lld K %lld N %lld M %lld int8 %d level %s: [%lld] "
                              "got %.7g want %.7g\n",
                              c->bits, (long long)c->bs, (long long)c->K, (long long)c->N,
                              (long long)c->M, int8, tdm_cpu_isa_name(level), (long long)i, y[i],
                              want[i]);
            bad++;
        }
    free(scr), free(y), free(want), free(S);
    return bad;
}

static void test_levels(void **state) {
    (void)state;
    static const tdm_cpu_isa levels[] = {TDM_ISA_PORTABLE, TDM_ISA_AVX2, TDM_ISA_AVX512_CORE,
                                         TDM_ISA_AVX512_CORE_VNNI, TDM_ISA_AVX512_CORE_BF16,
                                         TDM_ISA_AVX512_CORE_AMX};
    tdm_cpu_isa have = tdm_cpu_isa_detect();
    tdm_threadpool *pool = NULL;
    assert_null(tdm_threadpool_create(2, 0, &pool));
    int bad = 0, runs = 0;
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        if (levels[l] > have) {
            print_message("level %s: not on this machine, skipped\n", tdm_cpu_isa_name(levels[l]));
            continue;
        }
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            for (int packed = 0; packed < 3; packed++) { /* no, float32 form, float16 form */
                nb_data d;
                make(&cases[i], &d, packed == 2);
                unsigned form = 0;
                if (packed && !pack(&d, &form)) {
                    unmake(&d);
                    continue;
                }
                if (packed == 2 && !(form & TDM_NBP_S16)) bad++; /* the float16 form applies */
                if (packed == 2 && cases[i].zp && !(form & TDM_NBP_MZ16)) bad++;
                if (packed == 1 && (form & (TDM_NBP_S16 | TDM_NBP_MZ16))) bad++;
                for (int int8 = 0; int8 < 2; int8++) {
                    bad += run_case(&cases[i], &d, levels[l], int8, NULL);
                    bad += run_case(&cases[i], &d, levels[l], int8, pool);
                    runs += 2;
                }
                unmake(&d);
            }
    }
    print_message("%d runs\n", runs);
    assert_int_equal(bad, 0);
    tdm_threadpool_free(pool);
}

/* The comparison can fail: the same product without its zero points is far off. */
static void test_can_fail(void **state) {
    (void)state;
    nb_case c = cases[0];
    nb_data d;
    make(&c, &d, false);
    tdm_cpu_simd simd;
    tdm_cpu_simd_init(&simd, tdm_cpu_isa_detect());
    size_t need = tdm_nbits_scratch_bytes(&simd, &d.w, true, c.M);
    void *scr = aligned_alloc(64, (need + 63) / 64 * 64);
    float *y = malloc((size_t)(c.M * c.N) * sizeof(float));
    double *want = malloc((size_t)(c.M * c.N) * sizeof(double));
    double *S = malloc((size_t)(c.M * c.N) * sizeof(double));
    reference(&c, &d, true, want, S);
    d.w.zp = NULL;
    tdm_nbits_matmul(&simd, NULL, &d.w, true, c.M, d.A, NULL, y, scr);
    int bad = 0;
    for (int64_t i = 0; i < c.M * c.N; i++) bad += !(fabs(y[i] - want[i]) <= 1e-5 * S[i] + 1e-6);
    assert_true(bad > c.N / 2);
    /* the packed form without its zero points: as far off */
    unsigned form;
    assert_true(pack(&d, &form));
    free(scr);
    need = tdm_nbits_scratch_bytes(&simd, &d.w, true, c.M);
    scr = aligned_alloc(64, (need + 63) / 64 * 64);
    tdm_nbits_matmul(&simd, NULL, &d.w, true, c.M, d.A, NULL, y, scr);
    bad = 0;
    for (int64_t i = 0; i < c.M * c.N; i++) bad += !(fabs(y[i] - want[i]) <= 1e-5 * S[i] + 1e-6);
    assert_true(bad > c.N / 2);
    free(scr), free(y), free(want), free(S);
    unmake(&d);
}

/* Batch invariance (the LLM engine's batched decode equals one sequence alone): each row of
 * an M-row decode call equals, bit for bit, the same row computed alone (M = 1), on the
 * packed form at every level this machine has, serial and on 2 threads; with int8
 * activations also past TDM_NBITS_DECODE_ROWS (a step holding several prompts' prefills). */
static void test_rows_invariant(void **state) {
    (void)state;
    static const tdm_cpu_isa levels[] = {TDM_ISA_PORTABLE, TDM_ISA_AVX2, TDM_ISA_AVX512_CORE,
                                         TDM_ISA_AVX512_CORE_VNNI, TDM_ISA_AVX512_CORE_BF16,
                                         TDM_ISA_AVX512_CORE_AMX};
    static const nb_case rc[] = {
        {4, 32, 576, 67, 16, 0, false}, {4, 32, 200, 37, 11, 1, true},
        {4, 64, 256, 33, 7, 0, false},  {8, 32, 576, 53, 9, 1, true},
        {8, 32, 96, 40, 6, 0, false},   {4, 16, 88, 19, 5, 1, false},
        {4, 32, 576, 67, 37, 1, false}, {8, 32, 200, 21, 23, 0, true},
        /* 8 rows (one run of 8 in the VNNI loops) over several panels (prefetch ahead) */
        {4, 32, 576, 100, 8, 1, true},  {8, 32, 200, 70, 8, 0, false},
        {4, 64, 256, 90, 8, 1, false},
        /* float rows in slices of A (32 rows at K 4096: two and a part) */
        {4, 32, 4096, 20, 70, 1, false}, {8, 32, 4096, 17, 35, 0, true},
    };
    tdm_cpu_isa have = tdm_cpu_isa_detect();
    tdm_threadpool *pool = NULL;
    assert_null(tdm_threadpool_create(2, 0, &pool));
    int bad = 0;
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        if (levels[l] > have) continue;
        tdm_cpu_simd simd;
        tdm_cpu_simd_init(&simd, levels[l]);
        for (size_t i = 0; i < sizeof rc / sizeof rc[0]; i++)
            for (int packed = 1; packed < 3; packed++) {
                nb_data d;
                unsigned form = 0;
                make(&rc[i], &d, packed == 2);
                if (!pack(&d, &form)) {
                    unmake(&d);
                    continue;
                }
                const nb_case *c = &rc[i];
                float *y = malloc((size_t)(c->M * c->N) * sizeof(float));
                float *y1 = malloc((size_t)c->N * sizeof(float));
                /* past the decode rows: int8 always, floats where the AVX-512 loop runs */
                bool f_rows = tdm_nbits_rows_path(&simd, &d.w, false, c->M);
                for (int int8 = !f_rows; int8 < 2; int8++)
                    for (int t = 0; t < 2; t++) {
                        tdm_threadpool *p = t ? pool : NULL;
                        size_t need = tdm_nbits_scratch_bytes(&simd, &d.w, int8, c->M);
                        void *scr = aligned_alloc(64, (need + 63) / 64 * 64);
                        const float *bias = c->bias ? d.bias : NULL;
                        tdm_nbits_matmul(&simd, p, &d.w, int8, c->M, d.A, bias, y, scr);
                        for (int64_t m = 0; m < c->M; m++) {
                            tdm_nbits_matmul(&simd, p, &d.w, int8, 1, d.A + m * c->K, bias, y1,
                                             scr);
                            if (memcmp(y1, y + m * c->N, (size_t)c->N * sizeof(float))) {
                                print_message("  rows differ: bits %d bs %lld M %lld row %lld "
                                              "int8 %d level %s\n",
                                              c->bits, (long long)c->bs, (long long)c->M,
                                              (long long)m, int8, tdm_cpu_isa_name(levels[l]));
                                bad++;
                            }
                        }
                        free(scr);
                    }
                free(y), free(y1);
                unmake(&d);
            }
    }
    assert_int_equal(bad, 0);
    tdm_threadpool_free(pool);
}

/* 1 when y (M x N of case c) strays from the portable loop's yp by more than 1e-5 S + 1e-6
 * (the first such element printed), else 0. */
static int off_portable(const nb_case *c, bool int8, tdm_cpu_isa level, const float *y,
                        const float *yp, const double *S) {
    for (size_t k = 0; k < (size_t)(c->M * c->N); k++)
        if (!(fabs((double)y[k] - yp[k]) <= 1e-5 * S[k] + 1e-6)) {
            print_message("  vs portable: bits %d bs %lld K %lld N %lld M %lld int8 %d level %s "
                          "[%zu] got %.7g portable %.7g\n",
                          c->bits, (long long)c->bs, (long long)c->K, (long long)c->N,
                          (long long)c->M, int8, tdm_cpu_isa_name(level), k, y[k], yp[k]);
            return 1;
        }
    return 0;
}

/* The packed decode loops that serve several rows of A per pass over a panel (AVX2: the int8
 * runs of 4 rows, the float runs of 4 and 2 rows; AVX-512: pairs and runs of 8) on every row
 * count 1 .. 9 (runs plus rows left over) with K tails (K not a multiple of the block): each
 * level's Y against the portable loop's (1e-5 S + 1e-6, S the sum of |terms|), and each row
 * bit for bit the row computed alone. */
static void test_rows_1_to_9(void **state) {
    (void)state;
    static const tdm_cpu_isa levels[] = {TDM_ISA_AVX2, TDM_ISA_AVX512_CORE,
                                         TDM_ISA_AVX512_CORE_VNNI, TDM_ISA_AVX512_CORE_AMX};
    static const nb_case shapes[] = {
        {4, 32, 200, 37, 1, 1, true}, {8, 32, 72, 21, 1, 0, false},
        {4, 16, 88, 19, 1, 0, false}, {8, 64, 130, 35, 1, 1, true},
    };
    tdm_cpu_isa have = tdm_cpu_isa_detect();
    tdm_cpu_simd ps;
    tdm_cpu_simd_init(&ps, TDM_ISA_PORTABLE);
    int bad = 0, runs = 0;
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        if (levels[l] > have) continue;
        tdm_cpu_simd simd;
        tdm_cpu_simd_init(&simd, levels[l]);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            for (int64_t M = 1; M <= 9; M++)
                for (int packed = 1; packed < 3; packed++) {
                    nb_case c;
                    nb_data d;
                    if (!make_packed(&shapes[i], M, packed == 2, &c, &d)) continue;
                    size_t n = (size_t)(M * c.N);
                    float *y = malloc(n * sizeof(float)), *yp = malloc(n * sizeof(float));
                    float *y1 = malloc((size_t)c.N * sizeof(float));
                    double *want = malloc(n * sizeof(double)), *S = malloc(n * sizeof(double));
                    const float *bias = c.bias ? d.bias : NULL;
                    for (int int8 = 0; int8 < 2; int8++) {
                        reference(&c, &d, int8, want, S);
                        size_t need = tdm_nbits_scratch_bytes(&simd, &d.w, int8, M);
                        size_t needp = tdm_nbits_scratch_bytes(&ps, &d.w, int8, M);
                        need = need > needp ? need : needp;
                        void *scr = aligned_alloc(64, (need + 63) / 64 * 64);
                        tdm_nbits_matmul(&ps, NULL, &d.w, int8, M, d.A, bias, yp, scr);
                        tdm_nbits_matmul(&simd, NULL, &d.w, int8, M, d.A, bias, y, scr);
                        runs++;
                        bad += off_portable(&c, int8, levels[l], y, yp, S);
                        for (int64_t m = 0; m < M; m++) {
                            tdm_nbits_matmul(&simd, NULL, &d.w, int8, 1, d.A + m * c.K, bias, y1,
                                             scr);
                            if (memcmp(y1, y + m * c.N, (size_t)c.N * sizeof(float))) {
                                print_message("  row %lld of %lld differs from alone: bits %d "
                                              "int8 %d level %s\n",
                                              (long long)m, (long long)M, c.bits, int8,
                                              tdm_cpu_isa_name(levels[l]));
                                bad++;
                            }
                        }
                        free(scr);
                    }
                    free(y), free(yp), free(y1), free(want), free(S);
                    unmake(&d);
                }
    }
    print_message("%d runs\n", runs);
    assert_int_equal(bad, 0);
}

/* The AMX loops (avx512_core_amx: int8 activations on the packed form from 6 rows of A, in
 * tiles of 8 or 16 rows) on row counts around and past the tiles (6 .. 64: one tile, padded
 * ones, several with the last overlapping), odd N (a padded panel), K tails, bits 4 and 8,
 * blocks of 16 .. 512 (4 bits past 256: the VNNI loops; 4-bit blocks of 32 at 8 rows: by pairs
 * of blocks, odd counts and the most pairs too), both forms, serial and on 2
 * threads: every level's Y within 1e-5 S + 1e-6 of the portable loop's, and bit for bit the
 * avx512_core_vnni level's (the integer sums are exact and the float steps the same), which
 * also makes each row the row alone. Levels the machine lacks are skipped. */
static void test_amx_rows(void **state) {
    (void)state;
    static const tdm_cpu_isa levels[] = {TDM_ISA_AVX512_CORE_BF16, TDM_ISA_AVX512_CORE_AMX};
    static const nb_case shapes[] = {
        {4, 32, 576, 67, 1, 1, true},  {8, 32, 200, 37, 1, 0, false},
        {4, 16, 88, 19, 1, 0, false},  {4, 64, 300, 35, 1, 1, true},
        {8, 128, 260, 21, 1, 1, false}, {4, 256, 520, 17, 1, 0, true},
        {4, 512, 600, 9, 1, 1, false}, {8, 16, 40, 33, 1, 1, true},
        {4, 32, 200, 29, 1, 0, false}, {4, 32, 96, 21, 1, 1, true}, /* odd block counts */
        {4, 32, 4096, 18, 1, 1, false}, {4, 32, 4128, 18, 1, 0, false},
    };
    static const int64_t rows[] = {6, 7, 8, 9, 12, 16, 17, 24, 33, 64};
    tdm_cpu_isa have = tdm_cpu_isa_detect();
    if (have < TDM_ISA_AVX512_CORE_VNNI) {
        print_message("no avx512_core_vnni here: skipped\n");
        return;
    }
    tdm_threadpool *pool = NULL;
    assert_null(tdm_threadpool_create(2, 0, &pool));
    tdm_cpu_simd ps, vs;
    tdm_cpu_simd_init(&ps, TDM_ISA_PORTABLE);
    tdm_cpu_simd_init(&vs, TDM_ISA_AVX512_CORE_VNNI);
    int bad = 0, runs = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
            for (int packed = 1; packed < 3; packed++) {
                nb_case c;
                nb_data d;
                if (!make_packed(&shapes[i], rows[ri], packed == 2, &c, &d)) continue;
                size_t n = (size_t)(c.M * c.N);
                float *y = malloc(n * sizeof(float)), *yp = malloc(n * sizeof(float));
                float *yv = malloc(n * sizeof(float));
                double *want = malloc(n * sizeof(double)), *S = malloc(n * sizeof(double));
                const float *bias = c.bias ? d.bias : NULL;
                reference(&c, &d, true, want, S);
                for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
                    if (levels[l] > have) continue;
                    tdm_cpu_simd simd;
                    tdm_cpu_simd_init(&simd, levels[l]);
                    size_t need = 0;
                    const tdm_cpu_simd *all[] = {&ps, &vs, &simd};
                    for (int k = 0; k < 3; k++) {
                        size_t nk = tdm_nbits_scratch_bytes(all[k], &d.w, true, c.M);
                        need = nk > need ? nk : need;
                    }
                    void *scr = aligned_alloc(64, (need + 63) / 64 * 64);
                    tdm_nbits_matmul(&ps, NULL, &d.w, true, c.M, d.A, bias, yp, scr);
                    tdm_nbits_matmul(&vs, NULL, &d.w, true, c.M, d.A, bias, yv, scr);
                    for (int t = 0; t < 2; t++) {
                        memset(y, 0, n * sizeof(float));
                        tdm_nbits_matmul(&simd, t ? pool : NULL, &d.w, true, c.M, d.A, bias, y,
                                         scr);
                        runs++;
                        bad += off_portable(&c, true, levels[l], y, yp, S);
                        if (memcmp(y, yv, n * sizeof(float))) {
                            print_message("  not the vnni level's: bits %d bs %lld K %lld M %lld "
                                          "level %s threads %d\n",
                                          c.bits, (long long)c.bs, (long long)c.K,
                                          (long long)c.M, tdm_cpu_isa_name(levels[l]), t + 1);
                            bad++;
                        }
                    }
                    free(scr);
                }
                free(y), free(yp), free(yv), free(want), free(S);
                unmake(&d);
            }
    print_message("%d runs\n", runs);
    assert_int_equal(bad, 0);
    tdm_threadpool_free(pool);
}

/* A's int8 preparation of each SIMD variant (tdm_nbits_variant.quant: blocks reduced 16 or 8
 * at a time) against the generic rule, bit for bit: per block sa = amax / 127, codes
 * round(a * 127 / amax) half away from zero (0 for an all-zero block), sum = sa * sum of the
 * codes; in natural order (8 bits, the packed form's lean call without per-lane values; 4
 * bits: the natural codes in tmp, before the split). Block counts below, at and past the
 * 16-block group, K tails, an all-zero block and exact halves. */
static void test_quant(void **state) {
    (void)state;
    static const tdm_cpu_isa levels[] = {TDM_ISA_AVX2, TDM_ISA_AVX512_CORE_VNNI};
    static const struct { int64_t bs, K; } qc[] = {
        {32, 576}, {32, 1536}, {16, 88}, {32, 33}, {64, 200}, {128, 300}, {256, 520},
        {32, 512}, {16, 250}, {32, 17},
    };
    tdm_cpu_isa have = tdm_cpu_isa_detect();
    int bad = 0, runs = 0;
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        if (levels[l] > have) continue;
        for (size_t i = 0; i < sizeof qc / sizeof qc[0]; i++)
            for (int bits = 4; bits <= 8; bits += 4) {
                const tdm_nbits_variant *v = tdm_nbits_pick(levels[l], bits, true, qc[i].bs);
                if (!v->quant) continue;
                int64_t K = qc[i].K, bs = qc[i].bs, nb = (K + bs - 1) / bs;
                int64_t kq = (K + 255) / 256 * 256, stride = kq;
                tdm_nbits_w w = {1, K, nb, bs, bits, NULL, NULL, NULL};
                float *a = malloc((size_t)K * sizeof *a), *sa = malloc((size_t)nb * sizeof *sa);
                float *sum = malloc((size_t)nb * sizeof *sum), *sal = malloc((size_t)stride * 4);
                float *sql = malloc((size_t)stride * 4);
                int8_t *q = malloc((size_t)kq), *tmp = malloc((size_t)kq);
                for (int64_t k = 0; k < K; k++) a[k] = frand(-3.0f, 3.0f);
                for (int64_t k = bs; k < 2 * bs && k < K; k++) a[k] = 0.0f; /* block 1: zeros */
                if (K >= 3 * bs) { /* block 2: amax 127, so halves stay halves */
                    a[2 * bs] = 127.0f, a[2 * bs + 1] = 2.5f, a[2 * bs + 2] = -3.5f;
                    a[2 * bs + 3] = -0.5f;
                }
                bool lean = bits == 8;
                v->quant(&w, a, kq, q, lean ? NULL : sal, lean ? NULL : sql, stride, sa, sum, tmp);
                const int8_t *nat = lean ? q : tmp;
                for (int64_t b = 0; b < nb; b++) {
                    int64_t k0 = b * bs, k1 = k0 + bs < K ? k0 + bs : K;
                    float amax = 0.0f;
                    for (int64_t k = k0; k < k1; k++) amax = fabsf(a[k]) > amax ? fabsf(a[k]) : amax;
                    float inv = amax > 0.0f ? 127.0f / amax : 0.0f, s = amax / 127.0f;
                    int32_t qs = 0;
                    for (int64_t k = k0; k < k1; k++) {
                        float x = a[k] * inv;
                        int c = (int)(x + (x >= 0.0f ? 0.5f : -0.5f));
                        qs += c;
                        if (nat[k] != c) {
                            print_message("  quant %s bits %d bs %lld K %lld: code %lld is %d, "
                                          "want %d\n", tdm_cpu_isa_name(levels[l]), bits,
                                          (long long)bs, (long long)K, (long long)k, nat[k], c);
                            bad++;
                            break;
                        }
                    }
                    if (memcmp(&sa[b], &s, sizeof s) || sum[b] != s * (float)qs) {
                        print_message("  quant %s bits %d bs %lld K %lld block %lld: sa %.9g sum "
                                      "%.9g, want %.9g %.9g\n", tdm_cpu_isa_name(levels[l]),
                                      bits, (long long)bs, (long long)K, (long long)b,
                                      (double)sa[b], (double)sum[b], (double)s,
                                      (double)(s * (float)qs));
                        bad++;
                    }
                }
                for (int64_t k = K; k < kq && lean; k++)
                    if (q[k] != 0) bad++; /* zeros past K */
                runs++;
                free(a), free(sa), free(sum), free(sal), free(sql), free(q), free(tmp);
            }
    }
    print_message("%d runs\n", runs);
    assert_int_equal(bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels),
        cmocka_unit_test(test_can_fail),
        cmocka_unit_test(test_rows_invariant),
        cmocka_unit_test(test_rows_1_to_9),
        cmocka_unit_test(test_amx_rows),
        cmocka_unit_test(test_quant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The sampler's row functions over a row of logits, once per token and stream over the whole
 * vocabulary (49,152 for SmolLM2): the exp row (sampler.h: tdm_sampler_exp_row and its
 * variants), e^((x - mx) * inv) and the sum, for the sampler's probabilities and the engine's
 * log-probabilities; and the max row (tdm_sampler_max and its variants), the largest value and
 * where it first is, for greedy picks and the log-probabilities' offset.
 *
 * The exp is Cephes' expf for x <= 0: x = n ln2 + r, |r| <= ln2 / 2, a degree-6 polynomial for
 * e^r, 2^n from the exponent bits; within 2 ulp of expf; below -87 (and NaN) e^-87. Three
 * variants, portable (four-wide GCC vectors: SSE2 at x86-64's baseline), AVX2 (8 lanes) and
 * AVX-512 (16), are one body (EXP_ROW) over GCC vectors of 4, 8 and 16 floats: the same
 * operations in the same order on the same sixteen accumulator lanes by construction, and this
 * file is compiled with -ffp-contract=off (no multiply-add fused in one variant and not in
 * another), so every variant gives the same values and sums to the bit and a sampled token does
 * not depend on the CPU (test_exp_row still compares them bitwise). */
#include <stdbool.h>
#include <string.h>

#include "llm/sampler.h"

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

#define EXP_LOG2E 1.44269504088896341f
#define EXP_ROUND 12582912.0f /* 1.5 * 2^23: adding and taking it off rounds to the nearest */
#define EXP_LN2_HI 0.693359375f
#define EXP_LN2_LO -2.12194440e-4f
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f

/* NAME##_exp: e^x for x <= 0 on one vector (VF floats, VI their int32 lanes); NAME##_body: the
 * row's whole sixteens, sixteen values at a time in 16 / W vectors, float lanes per stretch of
 * 4096 summed in double, lane 0 first; NAME: the body, then the last n % 16 values through
 * exp_tail (every variant's). The tail is called from NAME, which is compiled for the baseline,
 * not from the body: GCC's AVX-512 body had passed mx to exp_tail by a zmm copy after its
 * vzeroupper, so the tail and every scalar SSE instruction after it ran with the upper halves
 * dirty, each waiting on its register's previous value (on Zen 4 the top-p buckets' scalar
 * loop after an exp row took 5x its time). */
#define EXP_ROW(NAME, VF, VI, W, TARGET)                                                       \
    TARGET static inline VF NAME##_exp(VF x) {                                                 \
        const VF lo = (VF){0} - 87.0f;                                                         \
        VI c = ~(x >= lo); /* below -87, or NaN */                                             \
        x = (VF)((c & (VI)lo) | (~c & (VI)x));                                                 \
        VF n = (x * EXP_LOG2E + EXP_ROUND) - EXP_ROUND;                                        \
        VF r = x - n * EXP_LN2_HI;                                                             \
        r = r - n * EXP_LN2_LO;                                                                \
        VF p = r * EXP_P0 + EXP_P1;                                                            \
        p = p * r + EXP_P2;                                                                    \
        p = p * r + EXP_P3;                                                                    \
        p = p * r + EXP_P4;                                                                    \
        p = p * r + EXP_P5;                                                                    \
        p = p * r * r + r + 1.0f;                                                              \
        VI e = (__builtin_convertvector(n, VI) + 127) << 23;                                   \
        return p * (VF)e;                                                                      \
    }                                                                                          \
    TARGET static double NAME##_body(const float *x, size_t n, float mx, float inv,           \
                                     float *out) {                                             \
        double sum = 0;                                                                        \
        size_t i = 0;                                                                          \
        while (i + 16 <= n) {                                                                  \
            VF acc[16 / W];                                                                    \
            for (int q = 0; q < 16 / W; q++) acc[q] = (VF){0};                                 \
            for (size_t e = i + 4096 < n ? i + 4096 : n; i + 16 <= e; i += 16)                 \
                for (int q = 0; q < 16 / W; q++) {                                             \
                    VF v;                                                                      \
                    memcpy(&v, x + i + W * q, sizeof v);                                       \
                    VF y = NAME##_exp((v - mx) * inv);                                         \
                    acc[q] += y;                                                               \
                    if (out) memcpy(out + i + W * q, &y, sizeof y);                            \
                }                                                                              \
            for (int q = 0; q < 16 / W; q++)                                                   \
                for (int l = 0; l < W; l++) sum += acc[q][l];                                  \
        }                                                                                      \
        return sum;                                                                            \
    }                                                                                          \
    static double NAME(const float *x, size_t n, float mx, float inv, float *out) {            \
        size_t w = n - n % 16;                                                                 \
        double sum = NAME##_body(x, w, mx, inv, out);                                          \
        return w < n ? sum + exp_tail(x + w, n - w, mx, inv, out ? out + w : NULL) : sum;      \
    }

static double exp_tail(const float *x, size_t n, float mx, float inv, float *out);

EXP_ROW(exp_row4, v4f, v4i, 4, )

/* The last n < 16 values (every variant's): zero-padded through the four-wide lanes, their sums
 * added one by one. */
static double exp_tail(const float *x, size_t n, float mx, float inv, float *out) {
    _Alignas(16) float t[16] = {0};
    double sum = 0;
    memcpy(t, x, n * sizeof *t);
    for (int q = 0; q < 4; q++) {
        v4f y;
        memcpy(&y, t + 4 * q, sizeof y);
        y = exp_row4_exp((y - mx) * inv);
        memcpy(t + 4 * q, &y, sizeof y);
    }
    for (size_t j = 0; j < n; j++) sum += t[j];
    if (out) memcpy(out, t, n * sizeof *out);
    return sum;
}

double tdm_sampler_exp_row(const float *x, size_t n, float mx, float inv, float *out) {
    return exp_row4(x, n, mx, inv, out);
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
EXP_ROW(exp_row_avx2, v8f, v8i, 8, __attribute__((target("avx2"))))
EXP_ROW(exp_row_avx512, v16f, v16i, 16, __attribute__((target("avx512f"))))
#endif

/* The portable max row (sampler.h: tdm_sampler_max_row): the largest of x[0..n) that is not
 * NaN (-inf when none is) and, when at != NULL, the first index holding it (0 when every value
 * is NaN): sixteen values at a time in four four-wide vectors whose lanes start at -inf and
 * take a value only when it is greater (a NaN never is), then the first sixteen holding the
 * largest; the last n % 16 one by one. A maximum is the same in any order, so every variant
 * (MAX_ROW_X86 below) gives the same value and index. (A row of 49,152 at 8 streams: this
 * form's two passes, the greedy pick's and the log-probabilities', were 0.8% of the server's
 * samples on the Zen 4 guest of session 45.) */
float tdm_sampler_max_row(const float *x, size_t n, size_t *at) {
    float best = -__builtin_inff();
    size_t i = 0;
    if (n >= 16) {
        v4f m[4];
        for (int q = 0; q < 4; q++) m[q] = (v4f){0} - __builtin_inff();
        for (; i + 16 <= n; i += 16)
            for (int q = 0; q < 4; q++) {
                v4f v;
                memcpy(&v, x + i + 4 * q, sizeof v);
                v4i c = v > m[q];
                m[q] = (v4f)((c & (v4i)v) | (~c & (v4i)m[q]));
            }
        for (int q = 0; q < 4; q++)
            for (int l = 0; l < 4; l++) best = m[q][l] > best ? m[q][l] : best;
    }
    for (; i < n; i++) best = x[i] > best ? x[i] : best;
    if (!at) return best;
    for (i = 0; i + 16 <= n; i += 16) {
        v4i any = {0, 0, 0, 0};
        for (int q = 0; q < 4; q++) {
            v4f v;
            memcpy(&v, x + i + 4 * q, sizeof v);
            any |= v == best;
        }
        if (any[0] | any[1] | any[2] | any[3]) break;
    }
    while (i < n && !(x[i] == best)) i++;
    *at = i < n ? i : 0; /* every value NaN */
    return best;
}

float tdm_sampler_max(const float *x, size_t n) { return tdm_sampler_max_row(x, n, NULL); }

/* Whether every one of x[0..16) is at most thr (a NaN is not): four four-wide compares. */
static bool none_above16(const float *x, float thr) {
    const v4f t = {thr, thr, thr, thr};
    v4i all = {-1, -1, -1, -1};
    for (int q = 0; q < 4; q++) {
        v4f v;
        memcpy(&v, x + 4 * q, sizeof v);
        all &= v <= t;
    }
    return (all[0] & all[1] & all[2] & all[3]) != 0;
}

/* sampler.h: a value at a time, each inserted behind those it does not beat; once k are held,
 * sixteen values none of which beats the k-th are passed over at a time (judged as one at a
 * time would be: v <= the k-th is passed). The scan one value at a time took ~27-31 us for the top
 * 5 of SmolLM2's 49,152 on Zen 4 (bench/llm/logprobs_scan.c). */
int tdm_sampler_top_values(const float *x, size_t n, int k, int32_t *ids, float *vals) {
    int m = 0;
    for (size_t i = 0; i < n && k > 0; i++) {
        if (m == k && i % 16 == 0 && i + 16 <= n && none_above16(x + i, vals[m - 1])) {
            i += 15;
            continue;
        }
        float v = x[i];
        if (m == k && v <= vals[m - 1]) continue;
        int j = m < k ? m++ : m - 1;
        for (; j > 0 && vals[j - 1] < v; j--) {
            ids[j] = ids[j - 1];
            vals[j] = vals[j - 1];
        }
        ids[j] = (int32_t)i;
        vals[j] = v;
    }
    return m;
}

/* The portable near row (sampler.h: tdm_sampler_near_row): sixteen values a step in four
 * four-wide vectors, z = (mx - x) * k as the sampler's buckets compute it (a subtraction, then
 * a product: nothing to fuse), the ids of the lanes below lim written one by one; most steps of
 * a peaked row have none. */
size_t tdm_sampler_near_row(const float *x, size_t n, float mx, float k, float lim, int32_t *ids) {
    size_t m = 0, i = 0;
    for (; i + 16 <= n; i += 16) {
        v4i any = {0, 0, 0, 0}, c[4];
        for (int q = 0; q < 4; q++) {
            v4f v;
            memcpy(&v, x + i + 4 * q, sizeof v);
            c[q] = (mx - v) * k < lim;
            any |= c[q];
        }
        if (!(any[0] | any[1] | any[2] | any[3])) continue;
        for (int q = 0; q < 4; q++)
            for (int l = 0; l < 4; l++)
                if (c[q][l]) ids[m++] = (int32_t)(i + 4 * (size_t)q + (size_t)l);
    }
    for (; i < n; i++)
        if ((mx - x[i]) * k < lim) ids[m++] = (int32_t)i;
    return m;
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>

/* tdm_sampler_max_row's passes in intrinsics, W floats a vector VF (GCC's vector compare and
 * select became several instructions a vector at these widths: a greedy pick of 49,152 took
 * 15.8 us through them at AVX-512 against the four-wide form's 8.8, Zen 4). (v > m ? v : m) is
 * MAX(v, m), maxps: the second operand when either is NaN, and m never is. */
#define MAX_ROW_X86(NAME, VF, W, LOAD, MAX, SET1, CMPEQ_ANY, HMAX, TARGET)                     \
    TARGET static float NAME(const float *x, size_t n, size_t *at) {                           \
        float best = -__builtin_inff();                                                        \
        size_t i = 0;                                                                          \
        if (n >= 16) {                                                                         \
            VF m[16 / W];                                                                      \
            for (int q = 0; q < 16 / W; q++) m[q] = SET1(-__builtin_inff());                   \
            for (; i + 16 <= n; i += 16)                                                       \
                for (int q = 0; q < 16 / W; q++) m[q] = MAX(LOAD(x + i + W * q), m[q]);        \
            for (int q = 1; q < 16 / W; q++) m[0] = MAX(m[q], m[0]);                           \
            best = HMAX(m[0]);                                                                 \
        }                                                                                      \
        for (; i < n; i++) best = x[i] > best ? x[i] : best;                                   \
        if (!at) return best;                                                                  \
        const VF b = SET1(best);                                                               \
        for (i = 0; i + 16 <= n; i += 16) {                                                    \
            int hit = 0;                                                                       \
            for (int q = 0; q < 16 / W; q++) hit |= CMPEQ_ANY(LOAD(x + i + W * q), b);         \
            if (hit) break;                                                                    \
        }                                                                                      \
        for (; i < n && !(x[i] == best); i++) {                                                \
        }                                                                                      \
        *at = i < n ? i : 0; /* every value NaN */                                             \
        return best;                                                                           \
    }

__attribute__((target("avx2"))) static inline float hmax8(__m256 v) {
    __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_max_ps(a, _mm_movehl_ps(a, a));
    a = _mm_max_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}
#define EQ_ANY8(v, b) _mm256_movemask_ps(_mm256_cmp_ps((v), (b), _CMP_EQ_OQ))
#define EQ_ANY16(v, b) (int)_mm512_cmp_ps_mask((v), (b), _CMP_EQ_OQ)
MAX_ROW_X86(max_row_avx2, __m256, 8, _mm256_loadu_ps, _mm256_max_ps, _mm256_set1_ps, EQ_ANY8, hmax8,
            __attribute__((target("avx2"))))
MAX_ROW_X86(max_row_avx512, __m512, 16, _mm512_loadu_ps, _mm512_max_ps, _mm512_set1_ps, EQ_ANY16,
            _mm512_reduce_max_ps, __attribute__((target("avx512f"))))

/* The near row's variants: a compare mask a vector; AVX-512 packs the lanes' ids with
 * vpcompressd into a register and stores all sixteen (ids has 16 entries of slack), AVX2 walks
 * the mask's bits. The same z and comparison as the portable row: the same ids. */
__attribute__((target("avx512f"))) static size_t near_row_avx512(const float *x, size_t n, float mx,
                                                                 float k, float lim, int32_t *ids) {
    const __m512 vm = _mm512_set1_ps(mx), vk = _mm512_set1_ps(k), vl = _mm512_set1_ps(lim);
    const __m512i step = _mm512_set1_epi32(16);
    __m512i id = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    size_t m = 0, i = 0;
    for (; i + 16 <= n; i += 16, id = _mm512_add_epi32(id, step)) {
        __m512 z = _mm512_mul_ps(_mm512_sub_ps(vm, _mm512_loadu_ps(x + i)), vk);
        __mmask16 c = _mm512_cmp_ps_mask(z, vl, _CMP_LT_OQ);
        if (!c) continue;
        _mm512_storeu_si512(ids + m, _mm512_maskz_compress_epi32(c, id));
        m += (size_t)__builtin_popcount(c);
    }
    for (; i < n; i++)
        if ((mx - x[i]) * k < lim) ids[m++] = (int32_t)i;
    return m;
}

__attribute__((target("avx2"))) static size_t near_row_avx2(const float *x, size_t n, float mx,
                                                            float k, float lim, int32_t *ids) {
    const __m256 vm = _mm256_set1_ps(mx), vk = _mm256_set1_ps(k), vl = _mm256_set1_ps(lim);
    size_t m = 0, i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 z0 = _mm256_mul_ps(_mm256_sub_ps(vm, _mm256_loadu_ps(x + i)), vk);
        __m256 z1 = _mm256_mul_ps(_mm256_sub_ps(vm, _mm256_loadu_ps(x + i + 8)), vk);
        unsigned c = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(z0, vl, _CMP_LT_OQ)) |
                     (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(z1, vl, _CMP_LT_OQ)) << 8;
        for (; c; c &= c - 1) ids[m++] = (int32_t)(i + (size_t)__builtin_ctz(c));
    }
    for (; i < n; i++)
        if ((mx - x[i]) * k < lim) ids[m++] = (int32_t)i;
    return m;
}
#endif


/* The row variant for a level named as tdm_env_device_isa names them: 2 AVX-512, 1 AVX2, 0
 * portable (NULL, another name, or a CPU without it). */
static int row_level(const char *isa) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    bool a512 = isa && !strncmp(isa, "avx512", 6);
    if (a512 && __builtin_cpu_supports("avx512f")) return 2;
    if (isa && (a512 || !strcmp(isa, "avx2")) && __builtin_cpu_supports("avx2")) return 1;
#endif
    (void)isa;
    return 0;
}

tdm_exp_row_fn tdm_sampler_exp_row_for(const char *isa) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    static const tdm_exp_row_fn by_level[] = {tdm_sampler_exp_row, exp_row_avx2, exp_row_avx512};
    return by_level[row_level(isa)];
#else
    return tdm_sampler_exp_row;
#endif
}

tdm_max_row_fn tdm_sampler_max_row_for(const char *isa) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    static const tdm_max_row_fn by_level[] = {tdm_sampler_max_row, max_row_avx2, max_row_avx512};
    return by_level[row_level(isa)];
#else
    return tdm_sampler_max_row;
#endif
}

tdm_near_row_fn tdm_sampler_near_row_for(const char *isa) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    static const tdm_near_row_fn by_level[] = {tdm_sampler_near_row, near_row_avx2,
                                               near_row_avx512};
    return by_level[row_level(isa)];
#else
    return tdm_sampler_near_row;
#endif
}

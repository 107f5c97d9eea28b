/* The sampler's exp row (sampler.h: tdm_sampler_exp_row and its variants): e^((x - mx) * inv)
 * over a row of logits and the sum, for the sampler's probabilities and the engine's
 * log-probabilities, once per token and stream over the whole vocabulary (49,152 for SmolLM2).
 *
 * The exp is Cephes' expf for x <= 0: x = n ln2 + r, |r| <= ln2 / 2, a degree-6 polynomial for
 * e^r, 2^n from the exponent bits; within 2 ulp of expf; below -87 (and NaN) e^-87. Three
 * variants, portable (four-wide GCC vectors: SSE2 at x86-64's baseline), AVX2 (8 lanes) and
 * AVX-512 (16), are one body (EXP_ROW) over GCC vectors of 4, 8 and 16 floats: the same
 * operations in the same order on the same sixteen accumulator lanes by construction, and this
 * file is compiled with -ffp-contract=off (no multiply-add fused in one variant and not in
 * another), so every variant gives the same values and sums to the bit and a sampled token does
 * not depend on the CPU (test_exp_row still compares them bitwise). */
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

/* NAME##_exp: e^x for x <= 0 on one vector (VF floats, VI their int32 lanes); NAME: the row,
 * sixteen values at a time in 16 / W vectors, float lanes per stretch of 4096 summed in double,
 * lane 0 first; the last n < 16 values through exp_tail (every variant's). */
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
    TARGET static double NAME(const float *x, size_t n, float mx, float inv, float *out) {     \
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
        return i < n ? sum + exp_tail(x + i, n - i, mx, inv, out ? out + i : NULL) : sum;      \
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

tdm_exp_row_fn tdm_sampler_exp_row_for(const char *isa) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    if (isa && !strncmp(isa, "avx512", 6) && __builtin_cpu_supports("avx512f")) return exp_row_avx512;
    if (isa && (!strcmp(isa, "avx2") || !strncmp(isa, "avx512", 6)) && __builtin_cpu_supports("avx2"))
        return exp_row_avx2;
#endif
    (void)isa;
    return tdm_sampler_exp_row;
}

/* CPU kernels, unary family: the float32 element loops. float16 and bfloat16 go through
 * these too (converted in blocks by k_unary.c).
 *
 * The hot activations (Exp, Sigmoid, Tanh, Erf, Gelu, Relu, Clip) use branch-free inline
 * approximations built from +, *, / and bit operations only, so that plain loops vectorize
 * without -ffast-math; they are within a few ulp of the correctly rounded result. The rest
 * call libm per element.
 *
 * The loops (k_unary_f32_tmpl.h) are compiled three times (cpu_simd.h): for the build's
 * baseline, for AVX2 + FMA (about 3x the SSE2 baseline) and for AVX-512 (16 lanes, masked
 * tails); the device picks one at start-up. */

/* Selects like `v < 0 ? v * a : v` only become vector blends when the compiler may evaluate
 * both arms, i.e. when it need not preserve floating-point traps (never enabled here). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_unary.h"


static inline float u_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t u_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* e^x. Range reduction x = n ln2 + r, |r| <= ln2/2 (Cody-Waite split of ln2), degree-7
 * Taylor polynomial for e^r (truncation error < 6e-9), then scaling by 2^n done as two
 * factors so that results near overflow and gradual underflow come out right. NaN
 * propagates; large x gives inf, very negative x gives 0. */
static inline float v_exp(float x) {
    float xc = x > 89.0f ? 89.0f : x;
    xc = xc < -104.0f ? -104.0f : xc;
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float t = xc * 1.44269504088896341f + shifter;
    float n = t - shifter;
    int32_t ni = (int32_t)(u_to_bits(t) - u_to_bits(shifter));
    float r = xc - n * 0.693359375f;    /* ln2 high part, exact product */
    r = r - n * -2.12194440054690583e-4f; /* ln2 - high part */
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t n1 = ni >> 1;
    int32_t n2 = ni - n1;
    float s1 = u_from_bits((uint32_t)(n1 + 127) << 23);
    float s2 = u_from_bits((uint32_t)(n2 + 127) << 23);
    return p * s1 * s2;
}

static inline float v_sigmoid(float x) { return 1.0f / (1.0f + v_exp(-x)); }

/* tanh: odd Taylor series for |x| < 0.3 (error < 1e-10), 1 - 2/(e^2|x| + 1) above. */
static inline float v_tanh(float x) {
    float a = fabsf(x);
    float z = x * x;
    float p = 21844.0f / 6081075.0f;
    p = p * z - 1382.0f / 155925.0f;
    p = p * z + 62.0f / 2835.0f;
    p = p * z - 17.0f / 315.0f;
    p = p * z + 2.0f / 15.0f;
    p = p * z - 1.0f / 3.0f;
    float small = x + x * z * p;
    float big = 1.0f - 2.0f / (v_exp(2.0f * a) + 1.0f);
    return copysignf(a < 0.3f ? small : big, x);
}

/* Pieces of erf for a = |x| (NaN passes through both):
 *   erf_small(a): erf(a) for a < 0.5, Taylor series of erf(a)/a in a^2 (error < 1e-9);
 *   erfc_big(a):  erfc(a) for a >= 0.5, as e^-a^2 * g(1/(1 + a/2)) where g is a degree-9
 *                 weighted least-squares fit of erfc(a) e^(a^2) on [0.5, 10.5] (relative
 *                 error < 4e-9 in exact arithmetic, ~3e-7 evaluated in float); a is clamped
 *                 to 10.5, where erfc is below the smallest float anyway. */
static inline float erf_small(float a) {
    const float k = 1.12837916709551257f; /* 2/sqrt(pi) */
    float z = a * a;
    float p = -1.0f / (5040.0f * 15.0f);
    p = p * z + 1.0f / (720.0f * 13.0f);
    p = p * z - 1.0f / (120.0f * 11.0f);
    p = p * z + 1.0f / (24.0f * 9.0f);
    p = p * z - 1.0f / (6.0f * 7.0f);
    p = p * z + 1.0f / (2.0f * 5.0f);
    p = p * z - 1.0f / 3.0f;
    p = p * z + 1.0f;
    return k * a * p;
}

static inline float erfc_big(float a) {
    a = a > 10.5f ? 10.5f : a;
    float t = 1.0f / (1.0f + 0.5f * a);
    float g = -0.07369048148393631f;
    g = g * t + 0.3482906222343445f;
    g = g * t - 0.6057771444320679f;
    g = g * t + 0.4012507200241089f;
    g = g * t - 0.10500194877386093f;
    g = g * t + 0.23421767354011536f;
    g = g * t + 0.23511816561222076f;
    g = g * t + 0.2835982143878937f;
    g = g * t + 0.28198400139808655f;
    g = g * t + 3.5650923564389814e-06f;
    return v_exp(-a * a) * g;
}

static inline float v_erf(float x) {
    float a = fabsf(x);
    float r = a < 0.5f ? erf_small(a) : 1.0f - erfc_big(a);
    return copysignf(r, x);
}

/* 1 + erf(x), without cancellation for negative x. */
static inline float v_one_plus_erf(float x) {
    float a = fabsf(x);
    float s = erf_small(a);
    float c = erfc_big(a);
    float pos = a < 0.5f ? 1.0f + s : 2.0f - c;
    float neg = a < 0.5f ? 1.0f - s : c;
    return x < 0.0f ? neg : pos;
}

/* -1, 0 or 1 (NaN stays NaN). */
static inline float v_sign(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x); }

/* min(max(v, 0), 1), NaN stays NaN. */
static inline float clamp01(float v) {
    v = v < 0.0f ? 0.0f : v;
    return v > 1.0f ? 1.0f : v;
}

/* ---- the variants ---- */

#define UNARY_FN tdm_unary_f32_portable
#define UNARY_ATTR
#include "backends/cpu/k_unary_f32_tmpl.h"

#ifdef TDM_SIMD_X86
#define UNARY_FN tdm_unary_f32_avx2
#define UNARY_ATTR TDM_TARGET_AVX2
#include "backends/cpu/k_unary_f32_tmpl.h"

#define UNARY_FN tdm_unary_f32_avx512
#define UNARY_ATTR TDM_TARGET_AVX512
#include "backends/cpu/k_unary_f32_tmpl.h"
#endif

/* The llm family's attention row routines (k_llm.h): scores = scale * q . K^T over rows of K,
 * and y = p . V, in portable C, AVX2 + FMA and AVX-512 variants. The SIMD scores take 8 (AVX2)
 * or 16 (AVX-512) key rows at a time, one accumulator per row, and fold the accumulators into
 * one vector of row sums with a shuffle tree (about three instructions per row instead of a
 * horizontal sum each); p . V broadcasts p[t] against up to 64 columns of V row t at once.
 * The AVX2 group routines (scores_g, pv_g) take up to three heads of a kv group per key or
 * value row, so that a float32 cache streams from memory once per group, not once per head
 * (attn_depth f32 at depth 1000, Zen 3: 4.1-4.6 -> 2.8-3.1 ms a step), with each head's numbers
 * those of its own call. */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_llm.h"

static void scores_portable(const float *restrict q, const float *restrict k, int64_t ks, int64_t n,
                            int64_t d, float scale, float *restrict out) {
    for (int64_t t = 0; t < n; t++) {
        const float *r = k + t * ks;
        float acc[8] = {0};
        int64_t i = 0;
        for (; i + 8 <= d; i += 8)
            for (int u = 0; u < 8; u++) acc[u] += q[i + u] * r[i + u];
        float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        for (; i < d; i++) s += q[i] * r[i];
        out[t] = scale * s;
    }
}

static void pv_portable(const float *restrict p, const float *restrict v, int64_t vs, int64_t n,
                        int64_t d, float *restrict out) {
    for (int64_t t = 0; t < n; t++) {
        const float *r = v + t * vs;
        float w = p[t];
        for (int64_t i = 0; i < d; i++) out[i] += w * r[i];
    }
}

/* A level's group routines made of its per-head calls (the levels without their own). */
#define GROUP_BY_HEAD(name, scores, pv, target)                                                  \
    target static void name##_scores_g(const float *const *q, int64_t G, const float *restrict k, \
                                       int64_t ks, int64_t n, int64_t d, float scale,            \
                                       float *restrict out, int64_t ld) {                        \
        for (int64_t h = 0; h < G; h++) scores(q[h], k, ks, n, d, scale, out + h * ld);          \
    }                                                                                             \
    target static void name##_pv_g(const float *restrict p, int64_t ld, int64_t G,               \
                                   const float *restrict v, int64_t vs, int64_t n, int64_t d,    \
                                   float *restrict out, int64_t ys) {                            \
        for (int64_t h = 0; h < G; h++) pv(p + h * ld, v, vs, n, d, out + h * ys);               \
    }

GROUP_BY_HEAD(portable, scores_portable, pv_portable, )
static const tdm_llm_fns fns_portable = {scores_portable, pv_portable, TDM_ISA_PORTABLE,
                                         portable_scores_g, portable_pv_g};

#ifdef TDM_SIMD_X86
#include <immintrin.h>

/* ---- AVX2 ---- */

TDM_TARGET_AVX2 static __m256i tail_mask8(int64_t left) {
    const int32_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    __m256i i = _mm256_loadu_si256((const __m256i *)idx);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left > 8 ? 8 : left)), i);
}

TDM_TARGET_AVX2 static void scores_avx2(const float *restrict q, const float *restrict k, int64_t ks,
                                        int64_t n, int64_t d, float scale, float *restrict out) {
    int64_t dfull = d & ~(int64_t)7;
    __m256i tm = tail_mask8(d - dfull);
    for (int64_t t0 = 0; t0 < n; t0 += 8) {
        int rows = n - t0 < 8 ? (int)(n - t0) : 8;
        __m256 acc[8];
        for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
        const float *kb = k + t0 * ks;
        for (int64_t i = 0; i < dfull; i += 8) {
            __m256 qv = _mm256_loadu_ps(q + i);
            for (int r = 0; r < rows; r++)
                acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(kb + r * ks + i), qv, acc[r]);
        }
        if (dfull < d) {
            __m256 qv = _mm256_maskload_ps(q + dfull, tm);
            for (int r = 0; r < rows; r++)
                acc[r] = _mm256_fmadd_ps(_mm256_maskload_ps(kb + r * ks + dfull, tm), qv, acc[r]);
        }
        __m256 h01 = _mm256_hadd_ps(acc[0], acc[1]), h23 = _mm256_hadd_ps(acc[2], acc[3]);
        __m256 h45 = _mm256_hadd_ps(acc[4], acc[5]), h67 = _mm256_hadd_ps(acc[6], acc[7]);
        __m256 a = _mm256_hadd_ps(h01, h23), b = _mm256_hadd_ps(h45, h67);
        __m256 s = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
        s = _mm256_mul_ps(s, _mm256_set1_ps(scale));
        if (rows == 8) _mm256_storeu_ps(out + t0, s);
        else _mm256_maskstore_ps(out + t0, tail_mask8(rows), s);
    }
}

TDM_TARGET_AVX2 static void pv_avx2(const float *restrict p, const float *restrict v, int64_t vs,
                                    int64_t n, int64_t d, float *restrict out) {
    for (int64_t i0 = 0; i0 < d; i0 += 32) {
        __m256i m[4];
        for (int c = 0; c < 4; c++) m[c] = tail_mask8(d - i0 - 8 * c);
        __m256 acc[4];
        if (d - i0 >= 32) {
            for (int c = 0; c < 4; c++) acc[c] = _mm256_loadu_ps(out + i0 + 8 * c);
            for (int64_t t = 0; t < n; t++) {
                __m256 w = _mm256_broadcast_ss(p + t);
                const float *r = v + t * vs + i0;
                for (int c = 0; c < 4; c++) acc[c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(r + 8 * c), acc[c]);
            }
            for (int c = 0; c < 4; c++) _mm256_storeu_ps(out + i0 + 8 * c, acc[c]);
        } else {
            for (int c = 0; c < 4; c++) acc[c] = _mm256_maskload_ps(out + i0 + 8 * c, m[c]);
            for (int64_t t = 0; t < n; t++) {
                __m256 w = _mm256_broadcast_ss(p + t);
                const float *r = v + t * vs + i0;
                for (int c = 0; c < 4; c++)
                    acc[c] = _mm256_fmadd_ps(w, _mm256_maskload_ps(r + 8 * c, m[c]), acc[c]);
            }
            for (int c = 0; c < 4; c++) _mm256_maskstore_ps(out + i0 + 8 * c, m[c], acc[c]);
        }
    }
}

/* G <= 3 heads, 4 key rows at a time (12 accumulators): per row the same FMAs in the same
 * order as scores_avx2, and the same sum tree (its 8-row tree's lanes 0-3 are this one's), so
 * each head's scores are scores_avx2's to the bit; the rows past a multiple of 4 go through
 * scores_avx2. */
TDM_TARGET_AVX2 static inline __attribute__((always_inline)) void
scores_g_avx2_f(const float *const *q, const int G, const float *k, int64_t ks, int64_t n,
                int64_t d, float scale, float *out, int64_t ld) {
    const __m128 sc = _mm_set1_ps(scale);
    int64_t t0 = 0;
    for (; t0 + 4 <= n; t0 += 4) {
        __m256 acc[3][4];
        for (int h = 0; h < G; h++)
            for (int r = 0; r < 4; r++) acc[h][r] = _mm256_setzero_ps();
        const float *kb = k + t0 * ks;
        for (int64_t i = 0; i < d; i += 8)
            for (int r = 0; r < 4; r++) {
                __m256 kv = _mm256_loadu_ps(kb + r * ks + i);
                for (int h = 0; h < G; h++)
                    acc[h][r] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q[h] + i), acc[h][r]);
            }
        for (int h = 0; h < G; h++) {
            __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(acc[h][0], acc[h][1]),
                                      _mm256_hadd_ps(acc[h][2], acc[h][3]));
            __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
            _mm_storeu_ps(out + h * ld + t0, _mm_mul_ps(s, sc));
        }
    }
    if (t0 < n)
        for (int h = 0; h < G; h++) scores_avx2(q[h], k + t0 * ks, ks, n - t0, d, scale, out + h * ld + t0);
}

TDM_TARGET_AVX2 static void scores_g_avx2(const float *const *q, int64_t G, const float *restrict k,
                                          int64_t ks, int64_t n, int64_t d, float scale,
                                          float *restrict out, int64_t ld) {
    for (int64_t h0 = 0; h0 < G; h0 += 3) {
        int64_t hn = G - h0 < 3 ? G - h0 : 3;
        if (d % 8) /* the masked tail: per head */
            for (int64_t h = h0; h < h0 + hn; h++) scores_avx2(q[h], k, ks, n, d, scale, out + h * ld);
        else if (hn == 3) scores_g_avx2_f(q + h0, 3, k, ks, n, d, scale, out + h0 * ld, ld);
        else if (hn == 2) scores_g_avx2_f(q + h0, 2, k, ks, n, d, scale, out + h0 * ld, ld);
        else scores_g_avx2_f(q + h0, 1, k, ks, n, d, scale, out + h0 * ld, ld);
    }
}

/* G <= 3 heads, 32 columns a pass (12 accumulators): per head the same FMAs in the same order
 * as pv_avx2, so the same sums to the bit. */
TDM_TARGET_AVX2 static inline __attribute__((always_inline)) void
pv_g_avx2_f(const float *p, int64_t ld, const int G, const float *v, int64_t vs, int64_t n,
            int64_t d, float *out, int64_t ys) {
    for (int64_t i0 = 0; i0 < d; i0 += 32) {
        __m256 acc[3][4];
        for (int h = 0; h < G; h++)
            for (int c = 0; c < 4; c++) acc[h][c] = _mm256_loadu_ps(out + h * ys + i0 + 8 * c);
        for (int64_t t = 0; t < n; t++) {
            const float *r = v + t * vs + i0;
            for (int h = 0; h < G; h++) {
                __m256 w = _mm256_broadcast_ss(p + h * ld + t);
                for (int c = 0; c < 4; c++) acc[h][c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(r + 8 * c), acc[h][c]);
            }
        }
        for (int h = 0; h < G; h++)
            for (int c = 0; c < 4; c++) _mm256_storeu_ps(out + h * ys + i0 + 8 * c, acc[h][c]);
    }
}

TDM_TARGET_AVX2 static void pv_g_avx2(const float *restrict p, int64_t ld, int64_t G,
                                      const float *restrict v, int64_t vs, int64_t n, int64_t d,
                                      float *restrict out, int64_t ys) {
    for (int64_t h0 = 0; h0 < G; h0 += 3) {
        int64_t hn = G - h0 < 3 ? G - h0 : 3;
        if (d % 32) /* partial column passes: per head */
            for (int64_t h = h0; h < h0 + hn; h++) pv_avx2(p + h * ld, v, vs, n, d, out + h * ys);
        else if (hn == 3) pv_g_avx2_f(p + h0 * ld, ld, 3, v, vs, n, d, out + h0 * ys, ys);
        else if (hn == 2) pv_g_avx2_f(p + h0 * ld, ld, 2, v, vs, n, d, out + h0 * ys, ys);
        else pv_g_avx2_f(p + h0 * ld, ld, 1, v, vs, n, d, out + h0 * ys, ys);
    }
}

static const tdm_llm_fns fns_avx2 = {scores_avx2, pv_avx2, TDM_ISA_AVX2, scores_g_avx2, pv_g_avx2};

/* ---- AVX-512 ---- */

TDM_TARGET_AVX512 static __mmask16 mask16(int64_t left) {
    return left >= 16 ? (__mmask16)0xffff : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1u);
}

/* r[i] = the sum of v[i]'s 16 lanes, i < 16 */
TDM_TARGET_AVX512 static inline __attribute__((always_inline)) __m512 fold16(__m512 *v) {
    __m512 s[8], u[4], w[2];
    for (int i = 0; i < 8; i++)
        s[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++) {
        __m512d x = _mm512_castps_pd(s[2 * i]), y = _mm512_castps_pd(s[2 * i + 1]);
        u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    for (int j = 0; j < 2; j++)
        w[j] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * j], u[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(u[2 * j], u[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* Head size 64 (the common one) with rows packed (ks == 64): q in 4 registers, each of 16
 * rows at a fixed offset from the block's base. */
TDM_TARGET_AVX512 static void scores64_avx512(const float *restrict q, const float *restrict k,
                                              int64_t n, float scale, float *restrict out) {
    __m512 q0 = _mm512_loadu_ps(q), q1 = _mm512_loadu_ps(q + 16), q2 = _mm512_loadu_ps(q + 32),
           q3 = _mm512_loadu_ps(q + 48), sc = _mm512_set1_ps(scale);
    int64_t t0 = 0;
    for (; t0 + 16 <= n; t0 += 16) {
        const float *kb = k + t0 * 64;
        __m512 acc[16];
        for (int r = 0; r < 16; r++) {
            __m512 a = _mm512_mul_ps(_mm512_loadu_ps(kb + r * 64), q0);
            __m512 b = _mm512_mul_ps(_mm512_loadu_ps(kb + r * 64 + 16), q1);
            a = _mm512_fmadd_ps(_mm512_loadu_ps(kb + r * 64 + 32), q2, a);
            b = _mm512_fmadd_ps(_mm512_loadu_ps(kb + r * 64 + 48), q3, b);
            acc[r] = _mm512_add_ps(a, b);
        }
        _mm512_storeu_ps(out + t0, _mm512_mul_ps(fold16(acc), sc));
    }
    if (t0 < n) {
        const float *kb = k + t0 * 64;
        int rows = (int)(n - t0);
        __m512 acc[16];
        for (int r = 0; r < 16; r++) acc[r] = _mm512_setzero_ps();
        for (int r = 0; r < rows; r++) {
            __m512 a = _mm512_mul_ps(_mm512_loadu_ps(kb + r * 64), q0);
            __m512 b = _mm512_mul_ps(_mm512_loadu_ps(kb + r * 64 + 16), q1);
            a = _mm512_fmadd_ps(_mm512_loadu_ps(kb + r * 64 + 32), q2, a);
            b = _mm512_fmadd_ps(_mm512_loadu_ps(kb + r * 64 + 48), q3, b);
            acc[r] = _mm512_add_ps(a, b);
        }
        _mm512_mask_storeu_ps(out + t0, mask16(rows), _mm512_mul_ps(fold16(acc), sc));
    }
}

TDM_TARGET_AVX512 static void scores_avx512(const float *restrict q, const float *restrict k,
                                            int64_t ks, int64_t n, int64_t d, float scale,
                                            float *restrict out) {
    if (d == 64 && ks == 64) {
        scores64_avx512(q, k, n, scale, out);
        return;
    }
    int64_t dfull = d & ~(int64_t)15;
    __mmask16 tm = mask16(d - dfull);
    __m512 sc = _mm512_set1_ps(scale);
    for (int64_t t0 = 0; t0 < n; t0 += 16) {
        int rows = n - t0 < 16 ? (int)(n - t0) : 16;
        __m512 acc[16];
        for (int r = 0; r < 16; r++) acc[r] = _mm512_setzero_ps();
        const float *kb = k + t0 * ks;
        if (rows == 16) {
            for (int64_t i = 0; i < dfull; i += 16) {
                __m512 qv = _mm512_loadu_ps(q + i);
                for (int r = 0; r < 16; r++)
                    acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(kb + r * ks + i), qv, acc[r]);
            }
        } else {
            for (int64_t i = 0; i < dfull; i += 16) {
                __m512 qv = _mm512_loadu_ps(q + i);
                for (int r = 0; r < rows; r++)
                    acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(kb + r * ks + i), qv, acc[r]);
            }
        }
        if (dfull < d) {
            __m512 qv = _mm512_maskz_loadu_ps(tm, q + dfull);
            for (int r = 0; r < rows; r++)
                acc[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tm, kb + r * ks + dfull), qv, acc[r]);
        }
        _mm512_mask_storeu_ps(out + t0, mask16(rows), _mm512_mul_ps(fold16(acc), sc));
    }
}

TDM_TARGET_AVX512 static void pv_avx512(const float *restrict p, const float *restrict v, int64_t vs,
                                        int64_t n, int64_t d, float *restrict out) {
    /* 4 x 16 columns; even and odd rows in separate accumulators (8 FMA chains) */
    for (int64_t i0 = 0; i0 < d; i0 += 64) {
        __mmask16 m[4];
        for (int c = 0; c < 4; c++) m[c] = mask16(d - i0 - 16 * c);
        __m512 a[4], b[4];
        for (int c = 0; c < 4; c++) {
            a[c] = _mm512_maskz_loadu_ps(m[c], out + i0 + 16 * c);
            b[c] = _mm512_setzero_ps();
        }
        int64_t t = 0;
        if (d - i0 >= 64) {
            for (; t + 2 <= n; t += 2) {
                __m512 w0 = _mm512_set1_ps(p[t]), w1 = _mm512_set1_ps(p[t + 1]);
                const float *r0 = v + t * vs + i0, *r1 = r0 + vs;
                for (int c = 0; c < 4; c++) {
                    a[c] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(r0 + 16 * c), a[c]);
                    b[c] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(r1 + 16 * c), b[c]);
                }
            }
        }
        for (; t < n; t++) {
            __m512 w = _mm512_set1_ps(p[t]);
            const float *r = v + t * vs + i0;
            for (int c = 0; c < 4; c++) a[c] = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m[c], r + 16 * c), a[c]);
        }
        for (int c = 0; c < 4; c++) _mm512_mask_storeu_ps(out + i0 + 16 * c, m[c], _mm512_add_ps(a[c], b[c]));
    }
}

GROUP_BY_HEAD(avx512, scores_avx512, pv_avx512, TDM_TARGET_AVX512)
static const tdm_llm_fns fns_avx512 = {scores_avx512, pv_avx512, TDM_ISA_AVX512_CORE,
                                       avx512_scores_g, avx512_pv_g};
#endif

const tdm_llm_fns *tdm_llm_fns_for(tdm_cpu_isa level) {
#ifdef TDM_SIMD_X86
    if (level >= TDM_ISA_AVX512_CORE) return &fns_avx512;
    if (level >= TDM_ISA_AVX2) return &fns_avx2;
#endif
    (void)level;
    return &fns_portable;
}

float tdm_llm_row_max(const float *x, int64_t n) {
    /* eight running maxima: independent chains (and a shape the vectoriser takes) instead of
     * one compare waiting on the last; the same maximum as the plain loop (NaN-free scores) */
    float m[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int64_t t = 0;
    for (; t + 8 <= n; t += 8)
        for (int i = 0; i < 8; i++) m[i] = x[t + i] > m[i] ? x[t + i] : m[i];
    for (; t < n; t++) m[0] = x[t] > m[0] ? x[t] : m[0];
    for (int i = 1; i < 8; i++) m[0] = m[i] > m[0] ? m[i] : m[0];
    return m[0];
}

bool tdm_llm_softmax(const tdm_cpu_simd *simd, float *s, int64_t n, float softcap,
                     const float *bias, bool has_sink, float sink) {
    if (softcap > 0.0f)
        for (int64_t t = 0; t < n; t++) s[t] = softcap * tanhf(s[t] / softcap);
    if (bias)
        for (int64_t t = 0; t < n; t++) s[t] += bias[t];
    if (n == 0 && !has_sink) return false;
    if (bias) { /* only a bias makes -inf logits (finite inputs give finite scores) */
        bool any = false;
        for (int64_t t = 0; t < n && !any; t++) any = s[t] != -INFINITY;
        if (!any) return false; /* nothing to attend to */
    }
    int64_t m = n;
    if (has_sink) s[m++] = sink;
    simd->softmax_row(s, NULL, NULL, false, m);
    return true;
}

bool tdm_llm_softmax_scaled(const tdm_cpu_simd *simd, float *s, int64_t n, float softcap,
                            const float *bias, bool has_sink, float sink, float *scale) {
    float mx, sum;
    *scale = 1.0f;
    if (softcap <= 0.0f && !bias && !has_sink && n > 0 &&
        (sum = simd->exp_sum_row(s, n, &mx)) > 0.0f) {
        *scale = 1.0f / sum;
        return true;
    }
    return tdm_llm_softmax(simd, s, n, softcap, bias, has_sink, sink);
}

bool tdm_llm_part_softmax(const tdm_cpu_simd *simd, float *sc, int64_t cnt, float *o, int64_t D,
                          float *scale) {
    float mx, sum = simd->exp_sum_row(sc, cnt, &mx);
    *scale = 1.0f;
    if (mx == -INFINITY) return false;
    if (mx == INFINITY || sum != sum) { /* the scalar formula (softmax_row's) */
        sc[cnt] = mx;
        simd->softmax_row(sc, NULL, NULL, false, cnt + 1);
        sum = 1.0f / sc[cnt] - 1.0f;
    } else {
        *scale = 1.0f / (1.0f + sum);
    }
    o[D] = mx;
    o[D + 1] = 1.0f + sum;
    return true;
}

/* The scale read once a head: tested in the loop, GCC read it again after every store to y
 * (which may alias it) and ran one element a pass (bench_paged int4 8 sequences, 1 thread,
 * AVX2 Zen 3: 2.3% of the samples against scores' 10%) */
void tdm_llm_scale_rows(float *y, int64_t heads, int64_t stride, int64_t D, const float *scale) {
    for (int64_t h = 0; h < heads; h++) {
        const float s = scale[h];
        if (s == 1.0f) continue;
        float *yh = y + h * stride;
        for (int64_t d = 0; d < D; d++) yh[d] *= s;
    }
}

void tdm_llm_attn_row(const tdm_llm_fns *f, const tdm_cpu_simd *simd, const float *q,
                      const float *k, int64_t ks, const float *v, int64_t vs, int64_t n, int64_t d,
                      int64_t dv, float scale, float softcap, const float *bias, bool has_sink,
                      float sink, float *s, float *y) {
    memset(y, 0, (size_t)dv * sizeof(float));
    if (n > 0) f->scores(q, k, ks, n, d, scale, s);
    if (tdm_llm_softmax(simd, s, n, softcap, bias, has_sink, sink)) f->pv(s, v, vs, n, dv, y);
}

void tdm_llm_rotate(float *x, const float *c, const float *s, int64_t rot, bool interleaved) {
    int64_t half = rot / 2;
    if (interleaved) {
        for (int64_t i = 0; i < half; i++) {
            float a = x[2 * i], b = x[2 * i + 1];
            x[2 * i] = a * c[i] - b * s[i];
            x[2 * i + 1] = a * s[i] + b * c[i];
        }
    } else {
        for (int64_t i = 0; i < half; i++) {
            float a = x[i], b = x[i + half];
            x[i] = a * c[i] - b * s[i];
            x[i + half] = a * s[i] + b * c[i];
        }
    }
}

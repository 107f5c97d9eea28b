/* MatMulNBits prefill in bfloat16 (k_nbits.h): for accuracy_level 4 (A may be computed at
 * reduced precision) on a CPU with AVX512_BF16, the float products of the prefill are done by
 * oneDNN's matmul primitive on bf16 A and bf16 dequantized weights, accumulating in float
 * (vdpbf16ps: twice the float FMA rate; measured at M = 512, K x N 576 x 1536, 1 thread:
 * ~95 GFLOP/s with sgemm, see bench/llm/nbits_results.md for this path's figure).
 *
 * Precision: A and the dequantized weights are rounded to bf16 (8-bit significand, relative
 * error <= 2^-9 each); ORT's accuracy_level 4 rounds A to int8 per block of 32 (error up to
 * 1/254 of the block's largest |a|), so this is no less accurate for A; the weights gain the
 * rounding of (q - zp) * scale to bf16 (q - zp itself is exact in bf16 for 4- and 8-bit
 * codes with integer zero points).
 *
 * oneDNN runs serially on each pool worker, as the dnnl family does; its primitive cache
 * makes the per-call creation cheap. One engine for the process (made on first use). */
#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <string.h>

#include "backends/cpu/k_nbits.h"

static dnnl_engine_t g_eng;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_ok; /* the engine exists and its bf16 matmul is not a reference implementation */

static void engine_init(void) {
    if (dnnl_engine_create(&g_eng, dnnl_cpu, 0) != dnnl_success) {
        g_eng = NULL;
        return;
    }
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    g_ok = ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) ==
           (unsigned)dnnl_cpu_isa_avx512_core_bf16;
}

/* Float to bf16, round to nearest even (finite inputs; NaN stays NaN). */
static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) return (uint16_t)((u >> 16) | ((u & 0xffff) ? 0x40 : 0));
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

bool tdm_nbits_bf16_usable(void) {
    pthread_once(&g_once, engine_init);
    return g_eng && g_ok;
}

void tdm_nbits_to_bf16(const float *x, int64_t n, uint16_t *y) {
    for (int64_t i = 0; i < n; i++) y[i] = to_bf16(x[i]);
}

/* panel[(n - n0) * K + k] = bf16((q[n, k] - zp) * s) for rows r0..r1 of the panel */
void tdm_nbits_deq_bf16(const tdm_nbits_w *w, int64_t n0, int64_t r0, int64_t r1,
                        uint16_t *panel) {
    int64_t rowb = w->nb * w->bs * w->bits / 8, K = w->K, bs = w->bs;
    float zdef = (float)(1 << (w->bits - 1));
    if (w->pk) { /* the packed form: q * s - s * zp in float, in chunks */
        float tmp[256];
        for (int64_t r = r0; r < r1; r++)
            for (int64_t k0 = 0; k0 < K; k0 += 256) {
                int64_t k1 = k0 + 256 < K ? k0 + 256 : K;
                tdm_nbits_pk_row(w->pk, w->P, n0 + r, k0, k1, tmp);
                for (int64_t k = k0; k < k1; k++) panel[r * K + k] = to_bf16(tmp[k - k0]);
            }
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        int64_t n = n0 + r;
        const uint8_t *row = w->b + n * rowb;
        const float *s = w->scales + n * w->nb;
        uint16_t *out = panel + r * K;
        for (int64_t b = 0; b < w->nb; b++) {
            float sc = s[b], z = w->zp ? w->zp[n * w->nb + b] : zdef;
            int64_t k0 = b * bs, k1 = k0 + bs < K ? k0 + bs : K;
            if (w->bits == 8) {
                for (int64_t k = k0; k < k1; k++) out[k] = to_bf16(((float)row[k] - z) * sc);
            } else if (w->bits == 4 && k1 - k0 == bs) {
                const uint8_t *p = row + k0 / 2;
                uint16_t *o = out + k0;
                for (int64_t i = 0; i < bs / 2; i++) {
                    o[2 * i] = to_bf16(((float)(p[i] & 15) - z) * sc);
                    o[2 * i + 1] = to_bf16(((float)(p[i] >> 4) - z) * sc);
                }
            } else {
                for (int64_t k = k0; k < k1; k++) {
                    int64_t bit = k * w->bits;
                    int q = (row[bit >> 3] >> (bit & 7)) & ((1 << w->bits) - 1);
                    out[k] = to_bf16(((float)q - z) * sc);
                }
            }
        }
    }
}

/* Y[M, N] (row stride ldy) = A[M, K] (bf16, row stride lda) . B[N, K]^T (bf16, rows of K)
 * on this thread. false: oneDNN refused or offers only a reference implementation (the
 * caller then uses the float path). */
bool tdm_nbits_gemm_bf16(const uint16_t *A, int64_t lda, const uint16_t *B, int64_t M, int64_t N,
                         int64_t K, float *Y, int64_t ldy) {
    if (!tdm_nbits_bf16_usable()) return false;
    if (omp_get_max_threads() != 1) omp_set_num_threads(1);
    dnnl_memory_desc_t a_md, b_md, c_md;
    dnnl_dims_t ad = {M, K}, as = {lda, 1}, bd = {K, N}, bst = {1, K}, cd = {M, N}, cs = {ldy, 1};
    if (dnnl_memory_desc_init_by_strides(&a_md, 2, ad, dnnl_bf16, as) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&b_md, 2, bd, dnnl_bf16, bst) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&c_md, 2, cd, dnnl_f32, cs) != dnnl_success)
        return false;
    dnnl_matmul_desc_t d;
    if (dnnl_matmul_desc_init(&d, &a_md, &b_md, NULL, &c_md) != dnnl_success) return false;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_primitive_desc_create(&pd, &d, NULL, g_eng, NULL) != dnnl_success) return false;
    const char *impl = NULL;
    bool ok = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
              impl && strncmp(impl, "ref", 3) != 0;
    dnnl_primitive_t p = NULL;
    dnnl_memory_t am = NULL, bm = NULL, cm = NULL;
    dnnl_stream_t s = NULL;
    ok = ok && dnnl_primitive_create(&p, pd) == dnnl_success;
    ok = ok && dnnl_memory_create(&am, &a_md, g_eng, (void *)A) == dnnl_success;
    ok = ok && dnnl_memory_create(&bm, &b_md, g_eng, (void *)B) == dnnl_success;
    ok = ok && dnnl_memory_create(&cm, &c_md, g_eng, Y) == dnnl_success;
    ok = ok && dnnl_stream_create(&s, g_eng, dnnl_stream_default_flags) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
        ok = dnnl_primitive_execute(p, s, 3, args) == dnnl_success &&
             dnnl_stream_wait(s) == dnnl_success;
    }
    if (s) dnnl_stream_destroy(s);
    if (cm) dnnl_memory_destroy(cm);
    if (bm) dnnl_memory_destroy(bm);
    if (am) dnnl_memory_destroy(am);
    if (p) dnnl_primitive_destroy(p);
    dnnl_primitive_desc_destroy(pd);
    return ok;
}

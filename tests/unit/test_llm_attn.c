/* GroupQueryAttention's KV cache written in place (backends/cpu/k_llm_gqa.c).
 *
 * The executor's I/O binding gives present_key / present_value the memory of past_key /
 * past_value (past of max length). The kernel is run directly here with such aliased
 * tensors and compared with a run on separate present buffers:
 *   - the output is identical (bit for bit: same arithmetic);
 *   - the cache rows up to each item's length equal the separate run's present rows;
 *   - rows past each item's length are untouched (the kernel writes only the new rows);
 *   - a repeated decode step allocates nothing (kernel-kept scratch), with and without a
 *     thread pool;
 *   - the same holds for a chunk (S > 1) after a past, for every SIMD level of this CPU;
 *   - a decode step with more threads than kv groups (each group's rows split in parts, then
 *     merged) equals the one-thread result.
 * Plus: shapes that do not fit (seqlens_k past the buffer) fail with a clear status, and the
 * SIMD row routines (scores, p.V) of every level of this CPU equal the portable ones for odd
 * head sizes and row counts (ONNX Runtime's GQA takes head sizes that are multiples of 8 only,
 * so the model tests do not reach every tail), and the group routines (all heads of a kv group
 * per cache row) equal their level's per-head ones to the bit. The RMS normalisations
 * (SkipSimplifiedLayerNormalization, k_llm.c: their rows' loops compiled per level) give every
 * level's outputs to the bit of the baseline's, which are within 1e-6 relative of a double
 * reference. */
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
#include "backends/cpu/k_llm.h"
#include "core/alloc.h"
#include "core/threadpool.h"
#include "counting_alloc.h"

enum { B = 2, H = 6, KVH = 2, D = 64, L = 200, MAXPOS = 256 };

static counter g_count;
static const tdm_allocator g_alloc = {c_alloc, c_free, &g_count};

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
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

typedef struct gqa_case {
    tdm_node node;
    tdm_attr attrs[4];
    void *state;
    tdm_cpu_simd simd;
    tdm_threadpool *pool;
} gqa_case;

static void case_init(gqa_case *c, tdm_cpu_isa isa, int threads) {
    memset(c, 0, sizeof *c);
    static const char *const names[] = {"num_heads", "kv_num_heads", "do_rotary", "rotary_interleaved"};
    const int64_t vals[] = {H, KVH, 1, 1};
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

/* Runs the kernel on in[0..9) with outputs y, pk, pv. */
static tdm_status *run(gqa_case *c, const tdm_tensor *const *in, tdm_tensor *y, tdm_tensor *pk,
                       tdm_tensor *pv) {
    tdm_tensor *out[3] = {y, pk, pv};
    tdm_kernel_ctx ctx = {.node = &c->node, .opset = 1, .n_in = 9, .in = in, .n_out = 3,
                          .out = out, .pool = c->pool, .alloc = &g_alloc, .state = c->state,
                          .cpu_simd = &c->simd};
    return tdm_llm_run_gqa(&ctx);
}

/* One step of S new tokens per item on top of lengths past_len[b] (seqlens_k = past + S - 1),
 * run on separate present buffers and in place; compares as the header says. */
static void step(gqa_case *c, int S, const int *past_len) {
    int64_t qd[3] = {B, S, H * D}, kd[3] = {B, S, KVH * D}, cd[4] = {B, KVH, L, D};
    int64_t bd[1] = {B}, cosd[2] = {MAXPOS, D / 2};
    tdm_tensor *q = tensor(TDM_FLOAT, 3, qd, true), *k = tensor(TDM_FLOAT, 3, kd, true);
    tdm_tensor *v = tensor(TDM_FLOAT, 3, kd, true);
    tdm_tensor *kc = tensor(TDM_FLOAT, 4, cd, true), *vc = tensor(TDM_FLOAT, 4, cd, true);
    tdm_tensor *sl = tensor(TDM_INT32, 1, bd, false), *tl = tensor(TDM_INT32, 0, NULL, false);
    tdm_tensor *cosc = tensor(TDM_FLOAT, 2, cosd, false), *sinc = tensor(TDM_FLOAT, 2, cosd, false);
    for (int64_t i = 0; i < cosc->count; i++) {
        float a = (float)(i / (D / 2)) * powf(10000.0f, -(float)(i % (D / 2)) / (D / 2));
        ((float *)cosc->data)[i] = cosf(a);
        ((float *)sinc->data)[i] = sinf(a);
    }
    int32_t total = 0;
    for (int b = 0; b < B; b++) {
        ((int32_t *)sl->data)[b] = past_len[b] + S - 1;
        if (past_len[b] + S > total) total = past_len[b] + S;
    }
    ((int32_t *)tl->data)[0] = total;
    const tdm_tensor *in[9] = {q, k, v, kc, vc, sl, tl, cosc, sinc};

    /* reference: separate present buffers */
    tdm_tensor *y_ref = tensor(TDM_FLOAT, 3, qd, false);
    tdm_tensor *pk_ref = tensor(TDM_FLOAT, 4, cd, false), *pv_ref = tensor(TDM_FLOAT, 4, cd, false);
    assert_null(run(c, in, y_ref, pk_ref, pv_ref));

    /* in place: present is past's memory */
    tdm_tensor *kc0 = NULL, *vc0 = NULL;
    assert_null(tdm_tensor_clone(&g_alloc, kc, &kc0));
    assert_null(tdm_tensor_clone(&g_alloc, vc, &vc0));
    tdm_tensor *y = tensor(TDM_FLOAT, 3, qd, false), *pk = view(kc), *pv = view(vc);
    assert_null(run(c, in, y, pk, pv));
    assert_memory_equal(y->data, y_ref->data, y->nbytes);
    for (int b = 0; b < B; b++)
        for (int g = 0; g < KVH; g++)
            for (int r = 0; r < L; r++) {
                size_t off = (size_t)(((b * KVH + g) * L + r) * D) * sizeof(float);
                bool valid = r < past_len[b] + S;
                const tdm_tensor *want_k = valid ? pk_ref : kc0, *want_v = valid ? pv_ref : vc0;
                if (memcmp((char *)kc->data + off, (char *)want_k->data + off, D * sizeof(float)) ||
                    memcmp((char *)vc->data + off, (char *)want_v->data + off, D * sizeof(float)))
                    fail_msg("S=%d item %d kv head %d row %d: %s row differs", S, b, g, r,
                             valid ? "a valid" : "an untouched");
            }

    /* the same step again allocates nothing (the scratch is the node's) */
    long before = atomic_load(&g_count.total);
    assert_null(run(c, in, y, pk, pv));
    assert_int_equal(atomic_load(&g_count.total), before);

    tdm_tensor *all[] = {q, k, v, kc, vc, sl, tl, cosc, sinc, y_ref, pk_ref, pv_ref, kc0, vc0, y, pk, pv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tdm_tensor_destroy(all[i]);
}

static void test_inplace_decode_and_chunk(void **state) {
    (void)state;
    tdm_cpu_isa host = tdm_cpu_isa_detect();
    for (int l = 0; l <= (int)host; l++) {
        if (l != TDM_ISA_PORTABLE && l != TDM_ISA_AVX2 && l != TDM_ISA_AVX512_CORE) continue;
        for (int threads = 1; threads <= 2; threads++) {
            gqa_case c;
            case_init(&c, (tdm_cpu_isa)l, threads);
            const int decode[B] = {21, 13}, chunk[B] = {9, 30}, first[B] = {0, 0};
            const int longer[B] = {180, 131};
            step(&c, 1, decode);
            step(&c, 1, longer);
            step(&c, 3, chunk);
            step(&c, 1, first);
            case_free(&c);
        }
    }
    assert_int_equal(atomic_load(&g_count.live), 0);
}

/* Decode at lengths {180, 131} on 1 and 3 threads (3 threads > 2 kv groups x 2 items / 2:
 * the cache rows split in parts) with a head sink: the outputs agree. */
static void test_decode_split(void **state) {
    (void)state;
    int64_t qd[3] = {B, 1, H * D}, kd[3] = {B, 1, KVH * D}, cd[4] = {B, KVH, L, D};
    int64_t bd[1] = {B}, cosd[2] = {MAXPOS, D / 2}, hd[1] = {H};
    tdm_tensor *q = tensor(TDM_FLOAT, 3, qd, true), *k = tensor(TDM_FLOAT, 3, kd, true);
    tdm_tensor *v = tensor(TDM_FLOAT, 3, kd, true);
    tdm_tensor *kc = tensor(TDM_FLOAT, 4, cd, true), *vc = tensor(TDM_FLOAT, 4, cd, true);
    tdm_tensor *sl = tensor(TDM_INT32, 1, bd, false), *tl = tensor(TDM_INT32, 0, NULL, false);
    tdm_tensor *cosc = tensor(TDM_FLOAT, 2, cosd, true), *sinc = tensor(TDM_FLOAT, 2, cosd, true);
    tdm_tensor *sink = tensor(TDM_FLOAT, 1, hd, true);
    ((int32_t *)sl->data)[0] = 180;
    ((int32_t *)sl->data)[1] = 131;
    ((int32_t *)tl->data)[0] = 181;
    assert_true(B * H * 181 >= TDM_LLM_ATTN_SERIAL_WORK); /* enough rows to use the pool */
    for (int64_t i = 0; i < q->count; i++) ((float *)q->data)[i] *= 4.0f; /* peakier softmax */
    const tdm_tensor *in[12] = {q, k, v, kc, vc, sl, tl, cosc, sinc, NULL, NULL, sink};
    tdm_tensor *y[2];
    for (int r = 0; r < 2; r++) {
        gqa_case c;
        case_init(&c, tdm_cpu_isa_detect(), r ? 3 : 1);
        tdm_tensor *pk = tensor(TDM_FLOAT, 4, cd, false), *pv = tensor(TDM_FLOAT, 4, cd, false);
        y[r] = tensor(TDM_FLOAT, 3, qd, false);
        tdm_tensor *out[3] = {y[r], pk, pv};
        tdm_kernel_ctx ctx = {.node = &c.node, .opset = 1, .n_in = 12, .in = in, .n_out = 3,
                              .out = out, .pool = c.pool, .alloc = &g_alloc, .state = c.state,
                              .cpu_simd = &c.simd};
        assert_null(tdm_llm_run_gqa(&ctx));
        tdm_tensor_destroy(pk);
        tdm_tensor_destroy(pv);
        case_free(&c);
    }
    const float *a = y[0]->data, *b = y[1]->data;
    for (int64_t i = 0; i < y[0]->count; i++)
        if (fabsf(a[i] - b[i]) > 1e-5f + 1e-4f * fabsf(a[i]))
            fail_msg("output %lld: 1 thread %g, 3 threads %g", (long long)i, a[i], b[i]);
    tdm_tensor *all[] = {q, k, v, kc, vc, sl, tl, cosc, sinc, sink, y[0], y[1]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tdm_tensor_destroy(all[i]);
}

static void test_bad_lengths(void **state) {
    (void)state;
    gqa_case c;
    case_init(&c, TDM_ISA_PORTABLE, 1);
    int64_t qd[3] = {B, 1, H * D}, kd[3] = {B, 1, KVH * D}, cd[4] = {B, KVH, L, D};
    int64_t bd[1] = {B}, cosd[2] = {MAXPOS, D / 2};
    tdm_tensor *q = tensor(TDM_FLOAT, 3, qd, true), *k = tensor(TDM_FLOAT, 3, kd, true);
    tdm_tensor *v = tensor(TDM_FLOAT, 3, kd, true);
    tdm_tensor *kc = tensor(TDM_FLOAT, 4, cd, true), *vc = tensor(TDM_FLOAT, 4, cd, true);
    tdm_tensor *sl = tensor(TDM_INT32, 1, bd, false), *tl = tensor(TDM_INT32, 0, NULL, false);
    tdm_tensor *cosc = tensor(TDM_FLOAT, 2, cosd, false), *sinc = tensor(TDM_FLOAT, 2, cosd, false);
    tdm_tensor *y = tensor(TDM_FLOAT, 3, qd, false), *pk = view(kc), *pv = view(vc);
    ((int32_t *)sl->data)[0] = L; /* one past the buffer */
    ((int32_t *)sl->data)[1] = 3;
    ((int32_t *)tl->data)[0] = L;
    const tdm_tensor *in[9] = {q, k, v, kc, vc, sl, tl, cosc, sinc};
    tdm_status *st = run(&c, in, y, pk, pv);
    assert_non_null(st);
    assert_non_null(strstr(tdm_status_message(st), "seqlens_k[0]"));
    tdm_status_free(st);
    tdm_tensor *all[] = {q, k, v, kc, vc, sl, tl, cosc, sinc, y, pk, pv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tdm_tensor_destroy(all[i]);
    case_free(&c);
}

static void test_row_variants(void **state) {
    (void)state;
    enum { MAXN = 41, MAXD = 133, KS = 140 };
    static float q[MAXD], k[MAXN * KS], p[MAXN], want[MAXN > MAXD ? MAXN : MAXD],
        got[MAXN > MAXD ? MAXN : MAXD];
    for (int i = 0; i < MAXD; i++) q[i] = frand();
    for (int i = 0; i < MAXN * KS; i++) k[i] = frand();
    for (int i = 0; i < MAXN; i++) p[i] = frand();
    const tdm_llm_fns *ref = tdm_llm_fns_for(TDM_ISA_PORTABLE);
    tdm_cpu_isa host = tdm_cpu_isa_detect();
    for (int l = TDM_ISA_AVX2; l <= (int)host; l++) {
        const tdm_llm_fns *f = tdm_llm_fns_for((tdm_cpu_isa)l);
        if (f == ref) continue;
        for (int d = 1; d <= MAXD; d += (d < 70 ? 1 : 21))
            for (int ks = d; ks <= d + 7 && ks <= KS; ks += 7)
                for (int n = 0; n <= MAXN; n += (n < 20 ? 1 : 7)) {
                    ref->scores(q, k, ks, n, d, 0.37f, want);
                    f->scores(q, k, ks, n, d, 0.37f, got);
                    for (int t = 0; t < n; t++)
                        if (fabsf(got[t] - want[t]) > 1e-5f + 1e-5f * fabsf(want[t]))
                            fail_msg("%s scores d=%d ks=%d n=%d row %d: %g, want %g",
                                     tdm_cpu_isa_name((tdm_cpu_isa)l), d, ks, n, t, got[t], want[t]);
                    for (int i = 0; i < d; i++) want[i] = got[i] = 0.25f * (float)i;
                    ref->pv(p, k, ks, n, d, want);
                    f->pv(p, k, ks, n, d, got);
                    for (int i = 0; i < d; i++)
                        if (fabsf(got[i] - want[i]) > 1e-5f + 1e-5f * fabsf(want[i]))
                            fail_msg("%s pv d=%d ks=%d n=%d column %d: %g, want %g",
                                     tdm_cpu_isa_name((tdm_cpu_isa)l), d, ks, n, i, got[i], want[i]);
                }
    }
}

/* The group routines (scores_g, pv_g: all heads of a kv group per cache row) equal, to the
 * bit, their level's own per-head scores / pv, for 1-5 heads (past the 3 a pass), head sizes
 * with and without whole vectors, row counts with and without a whole last block. */
static void test_group_variants(void **state) {
    (void)state;
    enum { MAXN = 41, MAXD = 133, KS = 140, G = 5, LD = 48, YS = 136 };
    static float q[G][MAXD], k[MAXN * KS], p[G * LD], want[G * YS], got[G * YS];
    const float *qp[G];
    for (int h = 0; h < G; h++) {
        qp[h] = q[h];
        for (int i = 0; i < MAXD; i++) q[h][i] = frand();
    }
    for (int i = 0; i < MAXN * KS; i++) k[i] = frand();
    for (int i = 0; i < G * LD; i++) p[i] = frand();
    tdm_cpu_isa host = tdm_cpu_isa_detect();
    int checked = 0;
    for (int l = TDM_ISA_PORTABLE; l <= (int)host; l++) {
        const tdm_llm_fns *f = tdm_llm_fns_for((tdm_cpu_isa)l);
        if (!f->scores_g || !f->pv_g) continue;
        for (int g = 1; g <= G; g++)
            for (int d = 1; d <= MAXD; d += (d < 70 ? 1 : 21))
                for (int n = 0; n <= MAXN; n += (n < 20 ? 1 : 7)) {
                    int ks = d + 3;
                    memset(want, 0, sizeof want);
                    memset(got, 0, sizeof got);
                    for (int h = 0; h < g; h++) f->scores(qp[h], k, ks, n, d, 0.37f, want + h * LD);
                    f->scores_g(qp, g, k, ks, n, d, 0.37f, got, LD);
                    if (memcmp(want, got, sizeof want))
                        fail_msg("%s scores_g G=%d d=%d n=%d differs from scores",
                                 tdm_cpu_isa_name((tdm_cpu_isa)l), g, d, n);
                    for (int i = 0; i < G * YS; i++) want[i] = got[i] = 0.25f * (float)(i % 97);
                    for (int h = 0; h < g; h++) f->pv(p + h * LD, k, ks, n, d, want + h * YS);
                    f->pv_g(p, LD, g, k, ks, n, d, got, YS);
                    if (memcmp(want, got, sizeof want))
                        fail_msg("%s pv_g G=%d d=%d n=%d differs from pv",
                                 tdm_cpu_isa_name((tdm_cpu_isa)l), g, d, n);
                    checked++;
                }
    }
    if (host >= TDM_ISA_AVX2) assert_true(checked > 0); /* the AVX2 level has them */
}

/* SkipSimplifiedLayerNormalization on rows of 576 and 107 values (vector tails), with and
 * without bias, serial and on 2 threads: output and sum at every level of this CPU equal the
 * baseline's bit for bit; the baseline within 1e-6 relative of a double reference. */
static void test_rms_levels(void **state) {
    (void)state;
    static const tdm_cpu_isa levels[] = {TDM_ISA_PORTABLE, TDM_ISA_AVX2, TDM_ISA_AVX512_CORE};
    static const int64_t colsv[] = {576, 107};
    tdm_cpu_isa have = tdm_cpu_isa_detect();
    tdm_attr eps = {.name = (char *)"epsilon", .type = TDM_ATTR_FLOAT, .f = 1e-6f};
    tdm_node node = {.name = "ln", .op_type = "SkipSimplifiedLayerNormalization",
                     .domain = "com.microsoft", .opset = 1, .n_attrs = 1, .attrs = &eps};
    tdm_threadpool *pool = NULL;
    assert_null(tdm_threadpool_create(2, 0, &pool));
    int compared = 0;
    for (size_t ci = 0; ci < 2; ci++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            int64_t C = colsv[ci], R = 9, xd[2] = {R, C}, gd[1] = {C};
            tdm_tensor *x = tensor(TDM_FLOAT, 2, xd, true), *sk = tensor(TDM_FLOAT, 2, xd, true);
            tdm_tensor *g = tensor(TDM_FLOAT, 1, gd, true), *bias = tensor(TDM_FLOAT, 1, gd, true);
            tdm_tensor *y0 = tensor(TDM_FLOAT, 2, xd, false), *s0 = tensor(TDM_FLOAT, 2, xd, false);
            tdm_tensor *y = tensor(TDM_FLOAT, 2, xd, false), *sm = tensor(TDM_FLOAT, 2, xd, false);
            const float *xf = x->data, *kf = sk->data, *gf = g->data, *bf = bias->data;
            for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
                if (levels[l] > have) continue;
                tdm_cpu_simd simd;
                tdm_cpu_simd_init(&simd, levels[l]);
                for (int t = 0; t < 2; t++) {
                    const tdm_tensor *in[4] = {x, sk, g, bias};
                    bool base = l == 0 && t == 0;
                    tdm_tensor *out[4] = {base ? y0 : y, NULL, NULL, base ? s0 : sm};
                    tdm_kernel_ctx ctx = {.node = &node, .opset = 1, .n_in = 3 + with_bias, .in = in,
                                          .n_out = 4, .out = out, .pool = t ? pool : NULL,
                                          .alloc = &g_alloc, .cpu_simd = &simd};
                    assert_null(tdm_llm_run_skip_simplified_ln(&ctx));
                    if (base) { /* against double sums */
                        for (int64_t r = 0; r < R; r++) {
                            double ss = 0, sum[576];
                            for (int64_t c = 0; c < C; c++) {
                                sum[c] = (double)xf[r * C + c] + kf[r * C + c] + (with_bias ? bf[c] : 0);
                                ss += sum[c] * sum[c];
                            }
                            double inv = 1.0 / sqrt(ss / (double)C + 1e-6);
                            for (int64_t c = 0; c < C; c++) {
                                double want = sum[c] * inv * gf[c];
                                float got = ((const float *)y0->data)[r * C + c];
                                assert_true(fabs(got - want) <= 1e-6 * (fabs(want) + 1.0));
                                assert_true(fabs(((const float *)s0->data)[r * C + c] - sum[c]) <= 1e-6);
                            }
                        }
                        continue;
                    }
                    assert_memory_equal(y->data, y0->data, y->nbytes);
                    assert_memory_equal(sm->data, s0->data, sm->nbytes);
                    compared++;
                }
            }
            tdm_tensor *all[] = {x, sk, g, bias, y0, s0, y, sm};
            for (size_t i = 0; i < 8; i++) tdm_tensor_free(all[i]);
        }
    assert_true(compared >= 4);
    tdm_threadpool_free(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inplace_decode_and_chunk),
        cmocka_unit_test(test_decode_split),
        cmocka_unit_test(test_bad_lengths),
        cmocka_unit_test(test_row_variants),
        cmocka_unit_test(test_group_variants),
        cmocka_unit_test(test_rms_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* PagedAttention (backends/cpu/k_llm_paged.c) against GroupQueryAttention (k_llm_gqa.c, itself
 * checked against ONNX Runtime by llm_attn_op_tests; ONNX Runtime 1.32 has no CPU kernel of
 * PagedAttention, a CUDA-only float16 / bfloat16 operator, so it cannot be the reference here).
 *
 * One packed batch of several sequences with different past lengths, prefill rows and decode
 * rows mixed (and a sequence with no new token), the past K/V scattered over randomly
 * permuted cache blocks. Each sequence is also run alone through GQA on a contiguous cache
 * holding the same past; then:
 *   - every output row agrees with GQA's (1e-5 abs + 1e-4 rel);
 *   - each sequence's cache slots hold GQA's present rows (new keys rotated), bit for bit;
 *   - every other slot is untouched;
 *   - the same run with separate output caches (not aliased) gives the same output and
 *     caches, and leaves the inputs alone;
 *   - a repeated run allocates nothing (the node's scratch).
 * Over: GQA ratios 1 and 3, rotary off / on (halves and interleaved), block sizes 1, 16 and 32,
 * rank-2 and rank-3 inputs, rank-3 and rank-4 caches and the tandem_kv_layout="BHSD" caches
 * [blocks, kv heads, block size, head size], packed QKV, 1 and 3 threads, and every
 * SIMD level of this CPU among portable, AVX2 and AVX-512 (the TANDEM_CPU_ISA caps).
 * Plus: malformed tables (block ids out of range, lengths beyond a table's capacity,
 * cumulative lengths not monotone / not ending at num_tokens, positions past the rotary
 * caches) are TDM_ERR_INVALID_ARGUMENT with a message and change nothing; the shape function
 * refuses the unimplemented inputs and attributes (TDM_ERR_UNSUPPORTED) and gives the output
 * and cache shapes. float16 caches (T float32) agree with the float32 kernel on the same values,
 * and their new rows are its rows rounded. Through a session: a PagedAttention model run with I/O binding (caches bound
 * as input and output: updated in place, step after step) and with a plain run (caches as
 * new outputs, inputs unchanged) equals the kernel run directly. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_llm.h"
#include "core/alloc.h"
#include "core/half.h"
#include "core/threadpool.h"
#include "counting_alloc.h"
#include "model_builder.h"
#include "ops/op.h"
#include "tandem/tandem.h"
#include "test_ok.h"

enum { MAXPOS = 1024, NSEQ = 5 };

static counter g_count;
static const tdm_allocator g_alloc = {c_alloc, c_free, &g_count};

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t urand(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}
static float frand(void) { return (float)(urand() & 0xffff) / 32768.0f - 1.0f; }

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

static tdm_tensor *clone(const tdm_tensor *of) {
    tdm_tensor *t = NULL;
    assert_null(tdm_tensor_clone(&g_alloc, of, &t));
    return t;
}

/* a node with int attributes */
typedef struct node_case {
    tdm_node node;
    tdm_attr attrs[8];
    void *state;
    tdm_cpu_simd simd;
    tdm_threadpool *pool;
} node_case;

static void node_init(node_case *c, const char *op, int n, const char *const *names,
                      const int64_t *vals, tdm_cpu_isa isa, int threads) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < n; i++) {
        c->attrs[i].name = (char *)names[i];
        c->attrs[i].type = TDM_ATTR_INT;
        c->attrs[i].i = vals[i];
    }
    c->node.name = (char *)op;
    c->node.op_type = (char *)op;
    c->node.domain = "com.microsoft";
    c->node.opset = 1;
    c->node.n_attrs = n;
    c->node.attrs = c->attrs;
    tdm_cpu_simd_init(&c->simd, isa);
    assert_null(tdm_llm_gqa_prepare(&c->node, 1, 9, NULL, &g_alloc, &c->state));
    if (threads > 1) assert_null(tdm_threadpool_create(threads, 0, &c->pool));
}

/* Adds tandem_kv_layout to c's node and prepares its state again: a node's attributes are
 * read once by its prepare (tdm_llm_attn_attrs), as a plan's nodes are fixed once planned. */
static void node_layout(node_case *c, const char *layout) {
    c->attrs[c->node.n_attrs] = (tdm_attr){.name = "tandem_kv_layout", .type = TDM_ATTR_STRING,
                                           .s = (char *)layout, .s_len = strlen(layout)};
    c->node.n_attrs++;
    tdm_llm_gqa_release(c->state, &g_alloc);
    c->state = NULL;
    assert_null(tdm_llm_gqa_prepare(&c->node, 1, 9, NULL, &g_alloc, &c->state));
}

static void node_free(node_case *c) {
    tdm_llm_gqa_release(c->state, &g_alloc);
    tdm_threadpool_free(c->pool);
}

static tdm_status *run_node(node_case *c, bool paged, int n_in, const tdm_tensor *const *in,
                            tdm_tensor *y, tdm_tensor *ko, tdm_tensor *vo) {
    tdm_tensor *out[3] = {y, ko, vo};
    tdm_kernel_ctx ctx = {.node = &c->node, .opset = 1, .n_in = n_in, .in = in, .n_out = 3,
                          .out = out, .pool = c->pool, .alloc = &g_alloc, .state = c->state,
                          .cpu_simd = &c->simd};
    return paged ? tdm_llm_run_paged(&ctx) : tdm_llm_run_gqa(&ctx);
}

static void rotary_tables(tdm_tensor *cosc, tdm_tensor *sinc, int64_t half) {
    for (int64_t i = 0; i < cosc->count; i++) {
        float a = (float)(i / half) * powf(10000.0f, -(float)(i % half) / (float)half);
        ((float *)cosc->data)[i] = cosf(a);
        ((float *)sinc->data)[i] = sinf(a);
    }
}

/* One sequence's GroupQueryAttention inputs: its S query / key / value rows copied out of the
 * packed ones (rows qs / ks floats apart, the first at q / k / v), seqlens_k len - 1 and
 * total_sequence_length len. */
typedef struct seq_in {
    tdm_tensor *q, *k, *v, *sl, *tl;
} seq_in;

static void seq_inputs(seq_in *o, int S, int len, int qw, int kw, const float *q, int64_t qs,
                       const float *k, const float *v, int64_t ks) {
    int64_t gq[3] = {1, S, qw}, gk[3] = {1, S, kw}, one[1] = {1};
    o->q = tensor(TDM_FLOAT, 3, gq, false);
    o->k = tensor(TDM_FLOAT, 3, gk, false);
    o->v = tensor(TDM_FLOAT, 3, gk, false);
    o->sl = tensor(TDM_INT32, 1, one, false);
    o->tl = tensor(TDM_INT32, 0, NULL, false);
    ((int32_t *)o->sl->data)[0] = len - 1;
    ((int32_t *)o->tl->data)[0] = len;
    for (int s = 0; s < S; s++) {
        memcpy((float *)o->q->data + s * qw, q + s * qs, (size_t)qw * sizeof(float));
        memcpy((float *)o->k->data + s * kw, k + s * ks, (size_t)kw * sizeof(float));
        memcpy((float *)o->v->data + s * kw, v + s * ks, (size_t)kw * sizeof(float));
    }
}

typedef struct config {
    int H, KVH, D, BS;
    int rotary, interleaved; /* rotary: 0 off, 1 full head, 2 half the head */
    int qrank, crank;        /* inputs rank 2 or 3; caches rank 3 or 4, or 5: the BHSD layout */
    bool packed;
    tdm_cpu_isa isa;
    int threads;
    int nseq; /* 0: the batch below; else past / new_tokens */
    const int *past, *new_tokens;
} config;

/* The batch: past lengths and new tokens per sequence (prefill, decode, a chunk, none). */
static const int k_past0[NSEQ] = {0, 37, 5, 20, 100};
static const int k_new0[NSEQ] = {13, 1, 1, 0, 7};

static void check_config(const config *cf) {
    const int H = cf->H, KVH = cf->KVH, D = cf->D, BS = cf->BS, row = KVH * D;
    const int nseq = cf->nseq ? cf->nseq : NSEQ;
    const int *k_past = cf->nseq ? cf->past : k_past0, *k_new = cf->nseq ? cf->new_tokens : k_new0;
    int T = 0, cu[NSEQ + 1] = {0}, nblk[NSEQ], MB = 0, NB = 3; /* 3 spare blocks */
    for (int b = 0; b < nseq; b++) {
        T += k_new[b];
        cu[b + 1] = T;
        nblk[b] = (k_past[b] + k_new[b] + BS - 1) / BS;
        MB = nblk[b] + 1 > MB ? nblk[b] + 1 : MB;
        NB += nblk[b];
    }
    /* the block ids: a random permutation of the cache's blocks */
    int *perm = malloc((size_t)NB * sizeof *perm);
    for (int i = 0; i < NB; i++) perm[i] = i;
    for (int i = NB - 1; i > 0; i--) {
        int r = (int)(urand() % (uint32_t)(i + 1)), t = perm[i];
        perm[i] = perm[r];
        perm[r] = t;
    }
    int64_t btd[2] = {nseq, MB}, bd[1] = {nseq}, cud[1] = {nseq + 1};
    tdm_tensor *bt = tensor(TDM_INT32, 2, btd, false), *pastt = tensor(TDM_INT32, 1, bd, false);
    tdm_tensor *cut = tensor(TDM_INT32, 1, cud, false);
    int32_t *btab = bt->data;
    for (int b = 0, next = 0; b < nseq; b++) {
        ((int32_t *)pastt->data)[b] = k_past[b];
        for (int i = 0; i < MB; i++) btab[b * MB + i] = i < nblk[b] ? perm[next++] : 99999; /* unused */
    }
    for (int b = 0; b <= nseq; b++) ((int32_t *)cut->data)[b] = cu[b];
    free(perm);
    /* inputs */
    int parts = cf->packed ? H + 2 * KVH : H;
    int64_t qd[3], kd[3], cd[4];
    if (cf->qrank == 3) {
        qd[0] = kd[0] = 1, qd[1] = kd[1] = T, qd[2] = parts * D, kd[2] = row;
    } else {
        qd[0] = kd[0] = T, qd[1] = parts * D, kd[1] = row;
    }
    cd[0] = NB, cd[1] = BS, cd[2] = cf->crank == 4 ? KVH : row, cd[3] = D;
    const bool bhsd = cf->crank == 5;
    const int crank = bhsd ? 4 : cf->crank;
    if (bhsd) cd[1] = KVH, cd[2] = BS;
#define AT(slot, g) /* float offset of kv head g's row of a cache slot */                     \
    (bhsd ? (size_t)((((slot) / BS) * KVH + (g)) * BS + (slot) % BS) * D                      \
          : (size_t)((slot) * row + (g) * D))
    tdm_tensor *q = tensor(TDM_FLOAT, cf->qrank, qd, true);
    tdm_tensor *k = cf->packed ? NULL : tensor(TDM_FLOAT, cf->qrank, kd, true);
    tdm_tensor *v = cf->packed ? NULL : tensor(TDM_FLOAT, cf->qrank, kd, true);
    tdm_tensor *kc = tensor(TDM_FLOAT, crank, cd, true), *vc = tensor(TDM_FLOAT, crank, cd, true);
    int half = cf->rotary == 2 ? D / 4 : D / 2;
    int64_t cosd[2] = {MAXPOS, half};
    tdm_tensor *cosc = tensor(TDM_FLOAT, 2, cosd, false), *sinc = tensor(TDM_FLOAT, 2, cosd, false);
    rotary_tables(cosc, sinc, half);
    const int64_t qs = parts * D, koff = cf->packed ? H * D : 0;
    const int64_t voff = cf->packed ? (H + KVH) * D : 0;
    const float *kdat = cf->packed ? q->data : k->data, *vdat = cf->packed ? q->data : v->data;
    const int64_t kstride = cf->packed ? parts * D : row;

    /* the paged run, in place */
    static const char *const names[] = {"num_heads", "kv_num_heads", "do_rotary", "rotary_interleaved"};
    const int64_t vals[] = {H, KVH, cf->rotary != 0, cf->interleaved};
    node_case pc, gc;
    node_init(&pc, "PagedAttention", 4, names, vals, cf->isa, cf->threads);
    if (bhsd) node_layout(&pc, "BHSD");
    node_init(&gc, "GroupQueryAttention", 4, names, vals, cf->isa, 1);
    int64_t yd[3] = {qd[0], qd[1], H * D};
    if (cf->qrank == 2) yd[1] = H * D;
    tdm_tensor *y = tensor(TDM_FLOAT, cf->qrank, yd, false);
    tdm_tensor *kc0 = clone(kc), *vc0 = clone(vc), *ko = view(kc), *vo = view(vc);
    const tdm_tensor *in[10] = {q, k, v, kc, vc, cut, pastt, bt, cosc, sinc};
    assert_null(run_node(&pc, true, 10, in, y, ko, vo));

    /* not aliased: separate outputs, inputs untouched */
    tdm_tensor *kc1 = clone(kc0), *vc1 = clone(vc0);
    tdm_tensor *ko2 = tensor(TDM_FLOAT, crank, cd, false), *vo2 = tensor(TDM_FLOAT, crank, cd, false);
    tdm_tensor *y2 = tensor(TDM_FLOAT, cf->qrank, yd, false);
    const tdm_tensor *in2[10] = {q, k, v, kc1, vc1, cut, pastt, bt, cosc, sinc};
    assert_null(run_node(&pc, true, 10, in2, y2, ko2, vo2));
    assert_memory_equal(y2->data, y->data, y->nbytes);
    assert_memory_equal(ko2->data, kc->data, kc->nbytes);
    assert_memory_equal(vo2->data, vc->data, vc->nbytes);
    assert_memory_equal(kc1->data, kc0->data, kc0->nbytes);
    assert_memory_equal(vc1->data, vc0->data, vc0->nbytes);

    /* GQA per sequence on a contiguous cache with the same past */
    bool *touched = calloc((size_t)NB * BS, sizeof *touched);
    for (int b = 0; b < nseq; b++) {
        int S = k_new[b], P = k_past[b], len = P + S;
        if (S == 0) continue;
        int64_t gq[3] = {1, S, H * D}, gc4[4] = {1, KVH, len, D};
        seq_in si;
        seq_inputs(&si, S, len, H * D, row, (const float *)q->data + cu[b] * qs, qs,
                   kdat + cu[b] * kstride + koff, vdat + cu[b] * kstride + voff, kstride);
        tdm_tensor *qq = si.q, *kk = si.k, *vv = si.v, *sl = si.sl, *tl = si.tl;
        tdm_tensor *pk = tensor(TDM_FLOAT, 4, gc4, false), *pv = tensor(TDM_FLOAT, 4, gc4, false);
        for (int pos = 0; pos < P; pos++) {
            int64_t slot = (int64_t)btab[b * MB + pos / BS] * BS + pos % BS;
            for (int g = 0; g < KVH; g++) {
                size_t to = (size_t)(g * len + pos) * D, from = AT(slot, g);
                memcpy((float *)pk->data + to, (const float *)kc0->data + from, (size_t)D * 4);
                memcpy((float *)pv->data + to, (const float *)vc0->data + from, (size_t)D * 4);
            }
        }
        tdm_tensor *gy = tensor(TDM_FLOAT, 3, gq, false);
        tdm_tensor *gpk = tensor(TDM_FLOAT, 4, gc4, false), *gpv = tensor(TDM_FLOAT, 4, gc4, false);
        const tdm_tensor *gin[9] = {qq, kk, vv, P ? pk : NULL, P ? pv : NULL, sl, tl, cosc, sinc};
        assert_null(run_node(&gc, false, 9, gin, gy, gpk, gpv));
        for (int s = 0; s < S; s++)
            for (int i = 0; i < H * D; i++) {
                float want = ((float *)gy->data)[s * H * D + i];
                float got = ((float *)y->data)[(cu[b] + s) * H * D + i];
                if (fabsf(got - want) > 1e-5f + 1e-4f * fabsf(want))
                    fail_msg("H=%d KVH=%d BS=%d rot=%d/%d isa=%s: seq %d row %d col %d: %g, GQA %g",
                             H, KVH, BS, cf->rotary, cf->interleaved, tdm_cpu_isa_name(cf->isa), b,
                             s, i, got, want);
            }
        for (int pos = 0; pos < len; pos++) {
            int64_t slot = (int64_t)btab[b * MB + pos / BS] * BS + pos % BS;
            touched[slot] = true;
            for (int g = 0; g < KVH; g++) {
                size_t at = AT(slot, g), want = (size_t)(g * len + pos) * D;
                if (memcmp((const float *)kc->data + at, (float *)gpk->data + want, (size_t)D * 4) ||
                    memcmp((const float *)vc->data + at, (float *)gpv->data + want, (size_t)D * 4))
                    fail_msg("seq %d position %d kv head %d: cache slot differs from GQA's present",
                             b, pos, g);
            }
        }
        tdm_tensor *all[] = {qq, kk, vv, pk, pv, sl, tl, gy, gpk, gpv};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tdm_tensor_destroy(all[i]);
    }
    for (int64_t s = 0; s < (int64_t)NB * BS; s++)
        for (int g = 0; g < KVH && !touched[s]; g++) {
            size_t at = AT(s, g), bytes = (size_t)D * sizeof(float);
            if (memcmp((const float *)kc->data + at, (const float *)kc0->data + at, bytes) ||
                memcmp((const float *)vc->data + at, (const float *)vc0->data + at, bytes))
                fail_msg("slot %lld belongs to no sequence but was written", (long long)s);
        }
#undef AT
    free(touched);

    /* again, in place: no allocation (the caches now hold the new tokens too: the output
     * changes, but not the amount of scratch) */
    long before = atomic_load(&g_count.total);
    assert_null(run_node(&pc, true, 10, in, y, ko, vo));
    assert_int_equal(atomic_load(&g_count.total), before);

    tdm_tensor *all[] = {q,   k,   v,  kc,  vc,  cut, pastt, bt,  cosc, sinc,
                         y,   kc0, vc0, ko, vo,  kc1, vc1,   ko2, vo2,  y2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tdm_tensor_destroy(all[i]);
    node_free(&pc);
    node_free(&gc);
}

static void test_against_gqa(void **state) {
    (void)state;
    tdm_cpu_isa host = tdm_cpu_isa_detect();
    static const int heads[][2] = {{4, 4}, {9, 3}};
    static const int bss[] = {1, 16, 32};
    static const int rot[][2] = {{0, 0}, {1, 0}, {1, 1}, {2, 0}, {2, 1}};
    int n = 0;
    for (int l = 0; l <= (int)host; l++) {
        if (l != TDM_ISA_PORTABLE && l != TDM_ISA_AVX2 && l != TDM_ISA_AVX512_CORE) continue;
        for (int hi = 0; hi < 2; hi++)
            for (int bi = 0; bi < 3; bi++)
                for (int ri = 0; ri < 5; ri++) {
                    config cf = {.H = heads[hi][0], .KVH = heads[hi][1], .D = 64, .BS = bss[bi],
                                 .rotary = rot[ri][0], .interleaved = rot[ri][1],
                                 .qrank = 2 + (n & 1), .crank = 3 + (n >> 1) % 3,
                                 .packed = n % 5 == 2, .isa = (tdm_cpu_isa)l,
                                 .threads = 1 + 2 * ((n >> 2) & 1)};
                    check_config(&cf);
                    n++;
                }
    }
    /* decode steps of one and two sequences with long pasts: with 4 threads, each item's
     * positions split in parts (merged after) */
    static const int past1[1] = {700}, new1[1] = {1}, past2[2] = {300, 129}, new2[2] = {1, 1};
    /* enough rows for the pool (a short decode step runs on the caller) */
    assert_true(9 * (past1[0] + 1) >= TDM_LLM_ATTN_SERIAL_WORK);
    assert_true(2 * 9 * (past2[0] + 1) >= TDM_LLM_ATTN_SERIAL_WORK);
    for (int th = 1; th <= 4; th += 3)
        for (int r = 0; r < 2; r++) {
            config dc = {.H = 9, .KVH = 3, .D = 64, .BS = 16, .rotary = 1, .interleaved = r,
                         .qrank = 3, .crank = r ? 5 : 3, .isa = host, .threads = th, .nseq = r ? 2 : 1,
                         .past = r ? past2 : past1, .new_tokens = r ? new2 : new1};
            check_config(&dc);
        }
    /* prompt chunks longer than an item's PAGED_ROWS (16) rows (BHSD caches: paged_rows):
     * 40 = 16 + 16 + 8 and 17 = 16 + 1 rows */
    static const int past3[2] = {5, 30}, new3[2] = {40, 17};
    for (int l = 0; l <= (int)host; l++) {
        if (l != TDM_ISA_PORTABLE && l != TDM_ISA_AVX2 && l != TDM_ISA_AVX512_CORE) continue;
        config cc = {.H = 9, .KVH = 3, .D = 64, .BS = 16, .rotary = 1, .qrank = 3, .crank = 5,
                     .isa = (tdm_cpu_isa)l, .threads = 3, .nseq = 2, .past = past3,
                     .new_tokens = new3};
        check_config(&cc);
    }
    /* an odd head size (SIMD tails) */
    config odd = {.H = 6, .KVH = 2, .D = 20, .BS = 16, .rotary = 1, .interleaved = 1, .qrank = 2,
                  .crank = 3, .isa = host, .threads = 3};
    check_config(&odd);
    assert_int_equal(atomic_load(&g_count.live), 0);
}

/* ---- float16 caches ---- */

/* A packed batch's tables: nseq sequences of past[b] cached and fresh[b] new tokens, blocks of
 * bs slots given from the pool's end down (not in order), two spare blocks; unused entries -1. */
typedef struct tables {
    int T, MB, NB, cuv[NSEQ + 1];
    tdm_tensor *bt, *past, *cu;
} tables;

static void make_tables(tables *tb, int nseq, const int *past, const int *fresh, int bs) {
    memset(tb, 0, sizeof *tb);
    tb->NB = 2;
    for (int b = 0; b < nseq; b++) {
        tb->T += fresh[b];
        tb->cuv[b + 1] = tb->T;
        int nb = (past[b] + fresh[b] + bs - 1) / bs;
        tb->MB = nb > tb->MB ? nb : tb->MB;
        tb->NB += nb;
    }
    int64_t btd[2] = {nseq, tb->MB}, bd[1] = {nseq}, cud[1] = {nseq + 1};
    tb->bt = tensor(TDM_INT32, 2, btd, false);
    tb->past = tensor(TDM_INT32, 1, bd, false);
    tb->cu = tensor(TDM_INT32, 1, cud, false);
    int32_t *bt = tb->bt->data;
    for (int b = 0, next = tb->NB - 1; b < nseq; b++) {
        ((int32_t *)tb->past->data)[b] = past[b];
        for (int i = 0; i < tb->MB; i++) bt[b * tb->MB + i] = i * bs < past[b] + fresh[b] ? next-- : -1;
    }
    for (int b = 0; b <= nseq; b++) ((int32_t *)tb->cu->data)[b] = tb->cuv[b];
}

/* The float16-cache kernel against the float32 one on caches holding the same (float16)
 * values: the outputs agree to float16's rounding of the new keys / values, and the new cache
 * rows are the float32 run's rounded to float16, bit for bit. */
static void check_half(bool bhsd, tdm_cpu_isa isa, int threads, int nseq, const int *past,
                       const int *fresh) {
    enum { HH = 9, HKVH = 3, HD = 64, HBS = 16 };
    const int row = HKVH * HD;
    tables tb;
    make_tables(&tb, nseq, past, fresh, HBS);
    const int T = tb.T, NB = tb.NB;
    tdm_tensor *bt = tb.bt, *pastt = tb.past, *cut = tb.cu;
    int64_t qd[2] = {T, HH * HD}, kd[2] = {T, row}, cd[4] = {NB, HBS, HKVH, HD}, cosd[2] = {MAXPOS, HD / 2};
    if (bhsd) cd[1] = HKVH, cd[2] = HBS;
    tdm_tensor *q = tensor(TDM_FLOAT, 2, qd, true), *k = tensor(TDM_FLOAT, 2, kd, true);
    tdm_tensor *v = tensor(TDM_FLOAT, 2, kd, true);
    tdm_tensor *kc = tensor(TDM_FLOAT, 4, cd, true), *vc = tensor(TDM_FLOAT, 4, cd, true);
    tdm_tensor *kh = tensor(TDM_FLOAT16, 4, cd, false), *vh = tensor(TDM_FLOAT16, 4, cd, false);
    for (int64_t i = 0; i < kc->count; i++) {
        uint16_t a = tdm_f32_to_f16(((float *)kc->data)[i]), c = tdm_f32_to_f16(((float *)vc->data)[i]);
        ((uint16_t *)kh->data)[i] = a, ((uint16_t *)vh->data)[i] = c;
        ((float *)kc->data)[i] = tdm_f16_to_f32(a), ((float *)vc->data)[i] = tdm_f16_to_f32(c);
    }
    tdm_tensor *cosc = tensor(TDM_FLOAT, 2, cosd, false), *sinc = tensor(TDM_FLOAT, 2, cosd, false);
    rotary_tables(cosc, sinc, HD / 2);
    static const char *const names[] = {"num_heads", "kv_num_heads", "do_rotary", "rotary_interleaved"};
    const int64_t vals[] = {HH, HKVH, 1, 0};
    node_case pc;
    node_init(&pc, "PagedAttention", 4, names, vals, isa, threads);
    if (bhsd) node_layout(&pc, "BHSD");
    tdm_tensor *y = tensor(TDM_FLOAT, 2, qd, false), *yh = tensor(TDM_FLOAT, 2, qd, false);
    tdm_tensor *ko = view(kc), *vo = view(vc), *kho = view(kh), *vho = view(vh);
    const tdm_tensor *in[10] = {q, k, v, kc, vc, cut, pastt, bt, cosc, sinc};
    assert_null(run_node(&pc, true, 10, in, y, ko, vo));
    const tdm_tensor *inh[10] = {q, k, v, kh, vh, cut, pastt, bt, cosc, sinc};
    assert_null(run_node(&pc, true, 10, inh, yh, kho, vho));
    for (int64_t i = 0; i < y->count; i++) {
        float want = ((float *)y->data)[i], got = ((float *)yh->data)[i];
        if (fabsf(got - want) > 2e-3f + 2e-3f * fabsf(want))
            fail_msg("float16 caches (%s, %s, %d threads): output %lld: %g, float32 caches %g",
                     bhsd ? "BHSD" : "BSHD", tdm_cpu_isa_name(isa), threads, (long long)i, got, want);
    }
    for (int64_t i = 0; i < kc->count; i++)
        if (((uint16_t *)kh->data)[i] != tdm_f32_to_f16(((float *)kc->data)[i]) ||
            ((uint16_t *)vh->data)[i] != tdm_f32_to_f16(((float *)vc->data)[i]))
            fail_msg("float16 cache element %lld is not the float32 run's rounded", (long long)i);
    tdm_tensor *all[] = {bt, pastt, cut, q, k, v, kc, vc, kh, vh, cosc, sinc, y, yh, ko, vo, kho, vho};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tdm_tensor_destroy(all[i]);
    node_free(&pc);
}

static void test_half_caches(void **state) {
    (void)state;
    tdm_cpu_isa host = tdm_cpu_isa_detect();
    static const int past1[1] = {700}, new1[1] = {1};
    /* prompt chunks longer than an item's PAGED_ROWS (16) rows: 40 = 16 + 16 + 8, 17 = 16 + 1 */
    static const int past2[2] = {5, 30}, new2[2] = {40, 17};
    for (int l = 0; l <= (int)host; l++) {
        if (l != TDM_ISA_PORTABLE && l != TDM_ISA_AVX2 && l != TDM_ISA_AVX512_CORE) continue;
        for (int bhsd = 0; bhsd < 2; bhsd++) {
            check_half(bhsd, (tdm_cpu_isa)l, 1 + 2 * bhsd, NSEQ, k_past0, k_new0);
            check_half(bhsd, (tdm_cpu_isa)l, 4, 1, past1, new1); /* decode in parts */
            check_half(bhsd, (tdm_cpu_isa)l, 3, 2, past2, new2);
        }
    }
    assert_int_equal(atomic_load(&g_count.live), 0);
}

/* ---- tandem's 8- and 4-bit caches (BHSD) ----
 *
 * The paged kernel on int8 / uint8 caches (tandem's 8- and 4-bit rows, ops/kv_int8.h) against
 * GroupQueryAttention on the same rows (k_llm_gqa_i8.c, the generator's kv_type int8 / int4,
 * itself checked against a float32 reference by test_llm_gqa_i8): each sequence alone through
 * GQA on a contiguous cache holding the same past rows (random values quantised), then
 *   - every output row agrees with GQA's (decode: the same integer routines over the same
 *     rows; a prompt chunk: the rows widened in float, as GQA's block GEMM does; parts merged:
 *     float rounding only) within 2e-5 abs + 2e-4 rel, where a wrong row, scale or rotation is
 *     off by ~0.1;
 *   - the new tokens' slots hold GQA's present rows, byte for byte, and no other slot is
 *     written;
 * and the same caches without tandem_kv_layout BHSD are refused (TDM_ERR_INVALID_ARGUMENT),
 * nothing written. */
static void check_quant_bs(bool q4, tdm_cpu_isa isa, int threads, int nseq, const int *past,
                           const int *fresh, const int QBS) {
    enum { QH = 9, QKVH = 3, QD = 64 };
    const int row = QKVH * QD, rb = q4 ? TDM_KV_I4_ROW(QD) : TDM_LLM_KV_I8_ROW(QD);
    const tdm_dtype cdt = q4 ? TDM_UINT8 : TDM_INT8;
    tables tb;
    make_tables(&tb, nseq, past, fresh, QBS);
    const int T = tb.T, MB = tb.MB, NB = tb.NB, *cu = tb.cuv;
    tdm_tensor *bt = tb.bt, *pastt = tb.past, *cut = tb.cu;
    const int32_t *btab = bt->data;
    int64_t qd[2] = {T, QH * QD}, kd[2] = {T, row}, cd[4] = {NB, QKVH, QBS, rb}, cosd[2] = {MAXPOS, QD / 2};
    tdm_tensor *q = tensor(TDM_FLOAT, 2, qd, true), *k = tensor(TDM_FLOAT, 2, kd, true);
    tdm_tensor *v = tensor(TDM_FLOAT, 2, kd, true);
    tdm_tensor *kc = tensor(cdt, 4, cd, false), *vc = tensor(cdt, 4, cd, false);
    const int64_t nrows = (int64_t)NB * QKVH * QBS; /* every slot's rows: random values quantised */
    for (int64_t r = 0; r < 2 * nrows; r++) {
        float x[QD];
        for (int i = 0; i < QD; i++) x[i] = frand();
        int8_t *dst = (int8_t *)(r < nrows ? kc->data : vc->data) + (r % nrows) * rb;
        if (q4) tdm_llm_kv4_quantize_row(x, QD, dst);
        else tdm_llm_kv_quantize_row(x, QD, dst);
    }
    tdm_tensor *kc0 = clone(kc), *vc0 = clone(vc);
    tdm_tensor *cosc = tensor(TDM_FLOAT, 2, cosd, false), *sinc = tensor(TDM_FLOAT, 2, cosd, false);
    rotary_tables(cosc, sinc, QD / 2);
    static const char *const names[] = {"num_heads", "kv_num_heads", "do_rotary", "rotary_interleaved"};
    const int64_t vals[] = {QH, QKVH, 1, 0};
    node_case pc, gc;
    node_init(&pc, "PagedAttention", 4, names, vals, isa, threads);
    tdm_tensor *y = tensor(TDM_FLOAT, 2, qd, false), *ko = view(kc), *vo = view(vc);
    const tdm_tensor *in[10] = {q, k, v, kc, vc, cut, pastt, bt, cosc, sinc};
    { /* without the BHSD layout: refused, nothing written */
        tdm_status *st = run_node(&pc, true, 10, in, y, ko, vo);
        assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
        if (!strstr(tdm_status_message(st), "BHSD")) fail_msg("message: %s", tdm_status_message(st));
        tdm_status_free(st);
        assert_memory_equal(kc->data, kc0->data, kc->nbytes);
    }
    node_layout(&pc, "BHSD");
    node_init(&gc, "GroupQueryAttention", 4, names, vals, isa, 1);
    assert_null(run_node(&pc, true, 10, in, y, ko, vo));
#define QAT(slot, g) /* byte offset of kv head g's row of a cache slot */                      \
    ((size_t)((((slot) / QBS) * QKVH + (g)) * QBS + (slot) % QBS) * (size_t)rb)
    bool *touched = calloc((size_t)NB * QBS, sizeof *touched);
    for (int b = 0; b < nseq; b++) {
        int S = fresh[b], P = past[b], len = P + S;
        if (S == 0) continue;
        int64_t gq[3] = {1, S, QH * QD}, gp[4] = {1, QKVH, P, rb}, gl[4] = {1, QKVH, len, rb};
        seq_in si;
        seq_inputs(&si, S, len, QH * QD, row, (const float *)q->data + cu[b] * QH * QD, QH * QD,
                   (const float *)k->data + cu[b] * row, (const float *)v->data + cu[b] * row, row);
        tdm_tensor *qq = si.q, *kk = si.k, *vv = si.v, *sl = si.sl, *tl = si.tl;
        tdm_tensor *pk = tensor(cdt, 4, gp, false), *pv = tensor(cdt, 4, gp, false);
        for (int pos = 0; pos < P; pos++) {
            int64_t slot = (int64_t)btab[b * MB + pos / QBS] * QBS + pos % QBS;
            for (int g = 0; g < QKVH; g++) {
                size_t to = (size_t)(g * P + pos) * (size_t)rb;
                memcpy((int8_t *)pk->data + to, (const int8_t *)kc0->data + QAT(slot, g), (size_t)rb);
                memcpy((int8_t *)pv->data + to, (const int8_t *)vc0->data + QAT(slot, g), (size_t)rb);
            }
        }
        tdm_tensor *gy = tensor(TDM_FLOAT, 3, gq, false);
        tdm_tensor *gpk = tensor(cdt, 4, gl, false), *gpv = tensor(cdt, 4, gl, false);
        const tdm_tensor *gin[9] = {qq, kk, vv, P ? pk : NULL, P ? pv : NULL, sl, tl, cosc, sinc};
        assert_null(run_node(&gc, false, 9, gin, gy, gpk, gpv));
        for (int s = 0; s < S; s++)
            for (int i = 0; i < QH * QD; i++) {
                float want = ((float *)gy->data)[s * QH * QD + i];
                float got = ((float *)y->data)[(cu[b] + s) * QH * QD + i];
                if (!(fabsf(got - want) <= 2e-5f + 2e-4f * fabsf(want)))
                    fail_msg("%s cache, %s, %d threads: seq %d row %d col %d: %g, GQA %g",
                             q4 ? "4-bit" : "8-bit", tdm_cpu_isa_name(isa), threads, b, s, i, got, want);
            }
        for (int pos = 0; pos < len; pos++) {
            int64_t slot = (int64_t)btab[b * MB + pos / QBS] * QBS + pos % QBS;
            touched[slot] = true;
            for (int g = 0; g < QKVH; g++) {
                size_t want = (size_t)(g * len + pos) * (size_t)rb;
                if (memcmp((const int8_t *)kc->data + QAT(slot, g), (int8_t *)gpk->data + want, (size_t)rb) ||
                    memcmp((const int8_t *)vc->data + QAT(slot, g), (int8_t *)gpv->data + want, (size_t)rb))
                    fail_msg("%s cache: seq %d position %d kv head %d: slot differs from GQA's present",
                             q4 ? "4-bit" : "8-bit", b, pos, g);
            }
        }
        tdm_tensor *all[] = {qq, kk, vv, pk, pv, sl, tl, gy, gpk, gpv};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tdm_tensor_destroy(all[i]);
    }
    for (int64_t s = 0; s < (int64_t)NB * QBS; s++)
        for (int g = 0; g < QKVH && !touched[s]; g++)
            if (memcmp((const int8_t *)kc->data + QAT(s, g), (const int8_t *)kc0->data + QAT(s, g), (size_t)rb) ||
                memcmp((const int8_t *)vc->data + QAT(s, g), (const int8_t *)vc0->data + QAT(s, g), (size_t)rb))
                fail_msg("slot %lld belongs to no sequence but was written", (long long)s);
#undef QAT
    free(touched);
    /* again: no allocation */
    long before = atomic_load(&g_count.total);
    assert_null(run_node(&pc, true, 10, in, y, ko, vo));
    assert_int_equal(atomic_load(&g_count.total), before);
    tdm_tensor *all[] = {bt, pastt, cut, q, k, v, kc, vc, kc0, vc0, cosc, sinc, y, ko, vo};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tdm_tensor_destroy(all[i]);
    node_free(&pc);
    node_free(&gc);
}

static void check_quant(bool q4, tdm_cpu_isa isa, int threads, int nseq, const int *past,
                        const int *fresh) {
    check_quant_bs(q4, isa, threads, nseq, past, fresh, 16);
}

static void test_quant_caches(void **state) {
    (void)state;
    tdm_cpu_isa host = tdm_cpu_isa_detect();
    static const int past1[1] = {700}, new1[1] = {1};
    static const int past2[2] = {300, 129}, new2[2] = {1, 1};
    static const int past3[3] = {37, 5, 100}, new3[3] = {1, 1, 1}; /* decode, one part */
    static const int past5[1] = {130}; /* 131 positions: 5 spans of ~79 rows, cuts inside groups */
    /* 516 positions in 8 spans of ~194 rows, blocks of 256: the middle group's parts are in
     * spans 3 and 5, span 4 is empty (its cuts moved down to one block's start) */
    static const int past6[1] = {515};
    /* prompt chunks longer than an item's PAGED_ROWS (16) rows: 40 = 16 + 16 + 8, 17 = 16 + 1 */
    static const int past4[2] = {5, 30}, new4[2] = {40, 17};
    for (int l = 0; l <= (int)host; l++) {
        if (l != TDM_ISA_PORTABLE && l != TDM_ISA_AVX2 && l != TDM_ISA_AVX512_CORE &&
            l != TDM_ISA_AVX512_CORE_VNNI && l != (int)host)
            continue;
        for (int q4 = 0; q4 < 2; q4++) {
            check_quant(q4, (tdm_cpu_isa)l, 1, NSEQ, k_past0, k_new0); /* mixed: chunks and decode */
            check_quant(q4, (tdm_cpu_isa)l, 3, 3, past3, new3);
            /* one sequence's decode in row spans (tdm_llm_span_cuts): 2 threads, a cut inside
             * the middle group at a block's start; 3, cuts at the groups' edges; 4 and 5, groups
             * in two pieces and spans across an edge */
            check_quant(q4, (tdm_cpu_isa)l, 2, 1, past1, new1);
            check_quant(q4, (tdm_cpu_isa)l, 3, 1, past1, new1);
            check_quant(q4, (tdm_cpu_isa)l, 4, 1, past1, new1);
            check_quant(q4, (tdm_cpu_isa)l, 5, 1, past5, new1);
            /* spans shorter than a block of 256: cuts moved down to blocks' starts meet, an
             * empty span between a group's parts (its slots must stay empty) */
            check_quant_bs(q4, (tdm_cpu_isa)l, 8, 1, past6, new1, 256);
            check_quant(q4, (tdm_cpu_isa)l, 4, 2, past2, new2);
            check_quant(q4, (tdm_cpu_isa)l, 3, 2, past4, new4);
        }
    }
    assert_int_equal(atomic_load(&g_count.live), 0);
}

/* ---- malformed tables ---- */

enum { EH = 4, EKVH = 2, ED = 16, EBS = 4, ENB = 6, EMB = 3 };

typedef struct err_case {
    tdm_tensor *q, *k, *v, *kc, *vc, *cu, *past, *bt, *cosc, *sinc, *y, *kc0;
} err_case;

static void err_init(err_case *e) {
    int64_t qd[2] = {3, EH * ED}, kd[2] = {3, EKVH * ED}, cd[4] = {ENB, EBS, EKVH, ED};
    int64_t cud[1] = {3}, bd[1] = {2}, btd[2] = {2, EMB}, cosd[2] = {8, ED / 2};
    e->q = tensor(TDM_FLOAT, 2, qd, true);
    e->k = tensor(TDM_FLOAT, 2, kd, true);
    e->v = tensor(TDM_FLOAT, 2, kd, true);
    e->kc = tensor(TDM_FLOAT, 4, cd, true);
    e->vc = tensor(TDM_FLOAT, 4, cd, true);
    e->cu = tensor(TDM_INT32, 1, cud, false);
    e->past = tensor(TDM_INT32, 1, bd, false);
    e->bt = tensor(TDM_INT32, 2, btd, false);
    e->cosc = tensor(TDM_FLOAT, 2, cosd, false);
    e->sinc = tensor(TDM_FLOAT, 2, cosd, false);
    rotary_tables(e->cosc, e->sinc, ED / 2);
    e->y = tensor(TDM_FLOAT, 2, qd, false);
    e->kc0 = clone(e->kc);
    int32_t *cu = e->cu->data, *past = e->past->data, *bt = e->bt->data;
    cu[0] = 0, cu[1] = 2, cu[2] = 3;   /* two new tokens, then one */
    past[0] = 3, past[1] = 6;          /* lengths 5 and 7 */
    bt[0] = 4, bt[1] = 0, bt[2] = -7;  /* seq 0: blocks 4, 0 (third unused) */
    bt[3] = 1, bt[4] = 5, bt[5] = 2;   /* seq 1: blocks 1, 5 */
}

static void err_free(err_case *e) {
    tdm_tensor *all[] = {e->q,  e->k,  e->v,    e->kc,   e->vc, e->cu,
                         e->past, e->bt, e->cosc, e->sinc, e->y,  e->kc0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tdm_tensor_destroy(all[i]);
}

static void expect_bad(node_case *c, err_case *e, const char *needle) {
    tdm_tensor *ko = view(e->kc), *vo = view(e->vc);
    const tdm_tensor *in[10] = {e->q, e->k, e->v, e->kc, e->vc, e->cu, e->past, e->bt, e->cosc, e->sinc};
    tdm_status *st = run_node(c, true, 10, in, e->y, ko, vo);
    if (!needle) {
        assert_null(st);
    } else {
        assert_non_null(st);
        assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
        if (!strstr(tdm_status_message(st), needle))
            fail_msg("message '%s' lacks '%s'", tdm_status_message(st), needle);
        assert_memory_equal(e->kc->data, e->kc0->data, e->kc->nbytes); /* nothing written */
        tdm_status_free(st);
    }
    tdm_tensor_destroy(ko);
    tdm_tensor_destroy(vo);
}

static void test_errors(void **state) {
    (void)state;
    static const char *const names[] = {"num_heads", "kv_num_heads", "do_rotary"};
    const int64_t vals[] = {EH, EKVH, 1};
    node_case c;
    node_init(&c, "PagedAttention", 3, names, vals, TDM_ISA_PORTABLE, 1);
    err_case e;
    err_init(&e);
    int32_t *cu = e.cu->data, *past = e.past->data, *bt = e.bt->data;
    expect_bad(&c, &e, NULL); /* the valid case runs */
    err_free(&e);
    struct {
        int what, index, value;
        const char *needle;
    } cases[] = {
        {2, 1, 6, "block_table[0][1] = 6"},     /* block id = num_blocks */
        {2, 3, -1, "block_table[1][0] = -1"},   /* negative block id */
        {1, 1, 12, "needs 13 positions"},       /* past + new beyond 3 blocks of 4 */
        {1, 0, -1, "past_seqlens[0] is negative"},
        {0, 1, 4, "not non-decreasing"},        /* cu = 0, 4, 3 */
        {0, 2, 2, "ends at 2"},                 /* cu = 0, 2, 2: one token left over */
        {0, 0, 1, "must be 0"},
        {1, 0, 7, "past the rotary caches"},    /* seq 0 reaches position 8, cos has 8 rows */
        {1, 0, 2147483647, "needs 2147483649 positions"}, /* no int32 overflow */
        {0, 1, 2147483647, "not non-decreasing"},
        {0, 1, -2147483647 - 1, "not non-decreasing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err_init(&e);
        int32_t *arr = cases[i].what == 0 ? e.cu->data : cases[i].what == 1 ? e.past->data : e.bt->data;
        arr[cases[i].index] = cases[i].value;
        expect_bad(&c, &e, cases[i].needle);
        err_free(&e);
    }
    (void)cu, (void)past, (void)bt;
    node_free(&c);
    assert_int_equal(atomic_load(&g_count.live), 0);
}

/* ---- the shape function ---- */

static tdm_status *infer(tdm_node *node, int n_in, tdm_value_info *in, tdm_value_info *out) {
    const tdm_op_schema *s = tdm_op_find("com.microsoft", "PagedAttention", 1);
    assert_non_null(s);
    for (int o = 0; o < 3; o++) {
        memset(&out[o], 0, sizeof out[o]);
        out[o].present = true;
        out[o].rank = -1;
    }
    tdm_infer_ctx c = {.node = node, .opset = 1, .n_in = n_in, .in = in, .n_out = 3, .out = out};
    return s->infer(&c);
}

static void info(tdm_value_info *v, tdm_dtype dt, int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    memset(v, 0, sizeof *v);
    v->present = true;
    v->dtype = dt;
    v->rank = rank;
    int64_t d[4] = {d0, d1, d2, d3};
    for (int i = 0; i < rank; i++) v->dims[i] = d[i];
}

static void test_shape_function(void **state) {
    (void)state;
    tdm_attr attrs[4] = {{.name = "num_heads", .type = TDM_ATTR_INT, .i = 9},
                         {.name = "kv_num_heads", .type = TDM_ATTR_INT, .i = 3},
                         {.name = "kv_cache_layout", .type = TDM_ATTR_STRING, .s = "SEPARATE", .s_len = 8},
                         {.name = "tandem_kv_layout", .type = TDM_ATTR_STRING, .s = "BSHD", .s_len = 4}};
    tdm_node node = {.name = "pa", .op_type = "PagedAttention", .domain = "com.microsoft", .opset = 1,
                     .n_attrs = 4, .attrs = attrs};
    tdm_value_info in[17], out[3];
    memset(in, 0, sizeof in);
    info(&in[0], TDM_FLOAT, 3, 1, 5, 9 * 64, 0);
    info(&in[1], TDM_FLOAT, 3, 1, 5, 3 * 64, 0);
    info(&in[2], TDM_FLOAT, 3, 1, 5, 3 * 64, 0);
    info(&in[3], TDM_FLOAT, 3, 10, 16, 3 * 64, 0);
    info(&in[4], TDM_FLOAT, 3, 10, 16, 3 * 64, 0);
    info(&in[5], TDM_INT32, 1, 3, 0, 0, 0);
    info(&in[6], TDM_INT32, 1, 2, 0, 0, 0);
    info(&in[7], TDM_INT32, 2, 2, 4, 0, 0);
    assert_null(infer(&node, 8, in, out));
    assert_int_equal(out[0].rank, 3);
    assert_int_equal(out[0].dims[1], 5);
    assert_int_equal(out[0].dims[2], 9 * 64);
    assert_int_equal(out[1].rank, 3);
    assert_int_equal(out[1].dims[0], 10);
    assert_int_equal(out[2].dims[2], 3 * 64);
    /* the spec's rank-2 query and rank-4 caches */
    info(&in[0], TDM_FLOAT, 2, 5, 9 * 64, 0, 0);
    info(&in[1], TDM_FLOAT, 2, 5, 3 * 64, 0, 0);
    info(&in[2], TDM_FLOAT, 2, 5, 3 * 64, 0, 0);
    info(&in[3], TDM_FLOAT, 4, 10, 16, 3, 64);
    info(&in[4], TDM_FLOAT, 4, 10, 16, 3, 64);
    assert_null(infer(&node, 8, in, out));
    assert_int_equal(out[0].rank, 2);
    assert_int_equal(out[0].dims[1], 9 * 64);
    assert_int_equal(out[1].rank, 4);
    assert_int_equal(out[1].dims[3], 64);
    /* wrong cache head count */
    info(&in[3], TDM_FLOAT, 4, 10, 16, 2, 64);
    tdm_status *st = infer(&node, 8, in, out);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    info(&in[3], TDM_FLOAT, 4, 10, 16, 3, 64);
    /* refused: slot_mapping, the LATENT layout */
    info(&in[10], TDM_INT32, 1, 5, 0, 0, 0);
    st = infer(&node, 11, in, out);
    assert_int_equal(tdm_status_code(st), TDM_ERR_UNSUPPORTED);
    assert_non_null(strstr(tdm_status_message(st), "slot_mapping"));
    tdm_status_free(st);
    attrs[2].s = "LATENT";
    attrs[2].s_len = 6;
    st = infer(&node, 8, in, out);
    assert_int_equal(tdm_status_code(st), TDM_ERR_UNSUPPORTED);
    assert_non_null(strstr(tdm_status_message(st), "kv_cache_layout"));
    tdm_status_free(st);
    attrs[2].s = "SEPARATE";
    /* the BHSD layout: [blocks, kv heads, block size, head size]; a rank-3 cache is refused */
    attrs[3].s = "BHSD";
    info(&in[3], TDM_FLOAT, 4, 10, 3, 16, 64);
    info(&in[4], TDM_FLOAT, 4, 10, 3, 16, 64);
    assert_null(infer(&node, 8, in, out));
    assert_int_equal(out[1].dims[1], 3);
    assert_int_equal(out[1].dims[2], 16);
    info(&in[4], TDM_FLOAT, 3, 10, 16, 3 * 64, 0);
    st = infer(&node, 8, in, out);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    /* tandem's 8- and 4-bit rows (BHSD): the row's bytes as the last dim; the outputs alias */
    static const struct {
        tdm_dtype dt;
        int64_t last;
        tdm_code code;
    } qc[] = {{TDM_INT8, 68, TDM_OK}, {TDM_UINT8, 36, TDM_OK}, {TDM_INT8, 64, TDM_ERR_INVALID_ARGUMENT},
              {TDM_UINT8, 68, TDM_ERR_INVALID_ARGUMENT}, {TDM_INT16, 64, TDM_ERR_UNSUPPORTED}};
    for (size_t i = 0; i < sizeof qc / sizeof qc[0]; i++) {
        info(&in[3], qc[i].dt, 4, 10, 3, 16, qc[i].last);
        info(&in[4], qc[i].dt, 4, 10, 3, 16, qc[i].last);
        st = infer(&node, 8, in, out);
        assert_int_equal(tdm_status_code(st), qc[i].code);
        if (!st) {
            assert_int_equal(out[1].dtype, qc[i].dt);
            assert_int_equal(out[2].dims[3], qc[i].last);
        }
        tdm_status_free(st);
    }
    attrs[3].s = "BSHD"; /* quantised rows need BHSD */
    info(&in[3], TDM_INT8, 4, 10, 16, 3, 68);
    info(&in[4], TDM_INT8, 4, 10, 16, 3, 68);
    st = infer(&node, 8, in, out);
    assert_int_equal(tdm_status_code(st), TDM_ERR_UNSUPPORTED);
    assert_non_null(strstr(tdm_status_message(st), "BHSD"));
    tdm_status_free(st);
    attrs[3].s = "NHWC";
    st = infer(&node, 8, in, out);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tdm_status_message(st), "tandem_kv_layout"));
    tdm_status_free(st);
    attrs[3].s = "BSHD";
    info(&in[3], TDM_FLOAT, 4, 10, 16, 3, 64);
    info(&in[4], TDM_FLOAT, 4, 10, 16, 3, 64);
    /* block_table must be int32 */
    in[7].dtype = TDM_INT64;
    st = infer(&node, 8, in, out);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
}

/* ---- through a session ---- */

enum { SH = 6, SKVH = 2, SD = 32, SBS = 4, SNB = 8, SMB = 3, SROW = SKVH * SD };

static tdm_tensor *env_tensor(tdm_env *env, tdm_dtype dt, int rank, const int64_t *dims) {
    tdm_tensor *t = NULL;
    OK(tdm_tensor_create(env, dt, rank, dims, &t));
    if (dt == TDM_FLOAT)
        for (int64_t i = 0; i < tdm_tensor_element_count(t); i++) ((float *)tdm_tensor_data(t))[i] = frand();
    return t;
}

static void test_session(void **state) {
    (void)state;
    tdm_env_options o;
    memset(&o, 0, sizeof o);
    o.api_version = TDM_API_VERSION;
    o.threads = 2;
    tdm_env *env = NULL;
    OK(tdm_env_create(&o, &env));
    mb_model m;
    mb_init(&m, 17);
    Onnx__OperatorSetIdProto ms = ONNX__OPERATOR_SET_ID_PROTO__INIT, *opsets[2] = {&m.opset, &ms};
    ms.domain = "com.microsoft";
    ms.has_version = 1;
    ms.version = 1;
    m.model.opset_import = opsets;
    m.model.n_opset_import = 2;
    int64_t qd[3] = {1, -1, SH * SD}, kd[3] = {1, -1, SROW}, cd[3] = {SNB, SBS, SROW};
    int64_t one[1] = {-1}, btd[2] = {-1, SMB}, cosd[2] = {16, SD / 2};
    mb_input(&m, "q", 3, qd);
    mb_input(&m, "k", 3, kd);
    mb_input(&m, "v", 3, kd);
    mb_input(&m, "kc", 3, cd);
    mb_input(&m, "vc", 3, cd);
    mb_input_t(&m, "cu", 6, 1, one);
    mb_input_t(&m, "past", 6, 1, one);
    mb_input_t(&m, "bt", 6, 2, btd);
    mb_input(&m, "cos", 2, cosd);
    mb_input(&m, "sin", 2, cosd);
    Onnx__NodeProto *n = mb_node(&m, "PagedAttention:q,k,v,kc,vc,cu,past,bt,cos,sin->y,kco,vco");
    n->domain = "com.microsoft";
    mb_attr_i(&m, n, "num_heads", SH);
    mb_attr_i(&m, n, "kv_num_heads", SKVH);
    mb_attr_i(&m, n, "do_rotary", 1);
    mb_output(&m, "y");
    mb_output(&m, "kco");
    mb_output(&m, "vco");
    size_t size;
    void *bytes = mb_pack(&m, &size);
    mb_free(&m);
    tdm_session *s = NULL;
    OK(tdm_session_create_from_buffer(env, bytes, size, NULL, NULL, &s));
    free(bytes);

    int64_t cdims[3] = {SNB, SBS, SROW}, c2[1] = {2}, c3[1] = {3}, bt2[2] = {2, SMB}, cs[2] = {16, SD / 2};
    tdm_tensor *kc = env_tensor(env, TDM_FLOAT, 3, cdims), *vc = env_tensor(env, TDM_FLOAT, 3, cdims);
    tdm_tensor *cosc = env_tensor(env, TDM_FLOAT, 2, cs), *sinc = env_tensor(env, TDM_FLOAT, 2, cs);
    rotary_tables(cosc, sinc, SD / 2);
    tdm_tensor *cu = env_tensor(env, TDM_INT32, 1, c3), *past = env_tensor(env, TDM_INT32, 1, c2);
    tdm_tensor *bt = env_tensor(env, TDM_INT32, 2, bt2);
    int32_t *btab = tdm_tensor_data(bt);
    const int32_t table[2 * SMB] = {6, 1, 3, 0, 7, 99};
    memcpy(btab, table, sizeof table);
    /* the reference: the kernel on copies of the caches */
    tdm_tensor *rk = clone(kc), *rv = clone(vc);
    static const char *const names[] = {"num_heads", "kv_num_heads", "do_rotary"};
    const int64_t vals[] = {SH, SKVH, 1};
    node_case c;
    node_init(&c, "PagedAttention", 3, names, vals, TDM_ISA_PORTABLE, 1);
    tdm_io_binding *b = NULL;
    OK(tdm_io_binding_create(s, &b));
    static const char *const in_names[] = {"q", "k", "v", "kc", "vc", "cu", "past", "bt", "cos", "sin"};
    const int steps[2][2] = {{5, 3}, {1, 1}}; /* prefill, then one decode step */
    for (int step = 0; step < 2; step++) {
        int T = steps[step][0] + steps[step][1];
        int32_t *cv = tdm_tensor_data(cu), *pv = tdm_tensor_data(past);
        cv[0] = 0, cv[1] = steps[step][0], cv[2] = T;
        pv[0] = step ? steps[0][0] : 0, pv[1] = step ? steps[0][1] : 0;
        int64_t tq[3] = {1, T, SH * SD}, tk[3] = {1, T, SROW};
        tdm_tensor *q = env_tensor(env, TDM_FLOAT, 3, tq), *k = env_tensor(env, TDM_FLOAT, 3, tk);
        tdm_tensor *v = env_tensor(env, TDM_FLOAT, 3, tk);
        const tdm_tensor *ins[10] = {q, k, v, kc, vc, cu, past, bt, cosc, sinc};
        for (int i = 0; i < 10; i++) OK(tdm_io_binding_bind_input(b, in_names[i], ins[i]));
        OK(tdm_io_binding_bind_output(b, "kco", kc));
        OK(tdm_io_binding_bind_output(b, "vco", vc));
        OK(tdm_io_binding_bind_output(b, "y", NULL));
        OK(tdm_session_run_bound(s, b, NULL));
        const tdm_tensor *y = tdm_io_binding_output(b, "y");
        assert_non_null(y);
        assert_int_equal(tdm_tensor_rank(y), 3);
        assert_int_equal(tdm_tensor_dims(y)[1], T);
        tdm_tensor *ry = tensor(TDM_FLOAT, 3, tq, false), *rko = view(rk), *rvo = view(rv);
        const tdm_tensor *rin[10] = {q, k, v, rk, rv, cu, past, bt, cosc, sinc};
        assert_null(run_node(&c, true, 10, rin, ry, rko, rvo));
        const float *got = tdm_tensor_data_const(y), *want = ry->data;
        for (int64_t i = 0; i < ry->count; i++)
            if (fabsf(got[i] - want[i]) > 1e-5f + 1e-4f * fabsf(want[i]))
                fail_msg("step %d output %lld: session %g, kernel %g", step, (long long)i, got[i], want[i]);
        assert_memory_equal(tdm_tensor_data(kc), rk->data, rk->nbytes);
        assert_memory_equal(tdm_tensor_data(vc), rv->data, rv->nbytes);
        tdm_tensor_destroy(ry);
        tdm_tensor_destroy(rko);
        tdm_tensor_destroy(rvo);
        if (step == 1) { /* a plain run: new caches out, the inputs as they were */
            tdm_tensor *kc0 = clone(kc), *outs[3] = {NULL, NULL, NULL};
            static const char *const out_names[] = {"y", "kco", "vco"};
            OK(tdm_session_run(s, 10, in_names, ins, 3, out_names, outs));
            assert_memory_equal(tdm_tensor_data(kc), kc0->data, kc0->nbytes);
            assert_memory_equal(tdm_tensor_data(outs[1]), kc0->data, kc0->nbytes); /* same rows rewritten */
            const float *py = tdm_tensor_data(outs[0]);
            for (int64_t i = 0; i < tdm_tensor_element_count(outs[0]); i++)
                if (fabsf(py[i] - got[i]) > 1e-5f + 1e-4f * fabsf(got[i]))
                    fail_msg("plain run output %lld: %g, bound run %g", (long long)i, py[i], got[i]);
            for (int i = 0; i < 3; i++) tdm_tensor_free(outs[i]);
            tdm_tensor_destroy(kc0);
        }
        tdm_tensor_free(q);
        tdm_tensor_free(k);
        tdm_tensor_free(v);
    }
    tdm_io_binding_free(b);
    node_free(&c);
    tdm_tensor *mine[] = {kc, vc, cosc, sinc, cu, past, bt};
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++) tdm_tensor_free(mine[i]);
    tdm_tensor_destroy(rk);
    tdm_tensor_destroy(rv);
    tdm_session_free(s);
    tdm_env_free(env);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_gqa),
        cmocka_unit_test(test_half_caches),
        cmocka_unit_test(test_quant_caches),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_shape_function),
        cmocka_unit_test(test_session),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Decode attention alone: PagedAttention (k_llm_paged.c, blocks scattered at random) against
 * GroupQueryAttention (k_llm_gqa.c, contiguous cache written in place as the generator binds
 * it) on the same data, SmolLM2-135M sizes (9 query heads, 3 kv heads, head size 64, rotary).
 * One decode token per sequence attends to a cache of `context` positions. Each call cycles
 * through LAYERS (30) copies of the caches, as a model's layers do, so the caches stream from
 * memory rather than sit in L2. Prints a markdown table: microseconds per call (median of 9
 * rounds of at least 0.2 s) and the ratio paged / GQA. The time is the process's CPU time (the
 * machine is shared: wall time mostly measures the others' load); BENCH_WALL=1 for wall time
 * (with THREADS > 1: CPU time sums the threads).
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Isrc -Iinclude -Ibuild/gen bench/llm/bench_paged.c \
 *      build/libtandem.a -ldnnl -lprotobuf-c -fopenmp -lpthread -ldl -lm -o build/bench_paged
 *   build/bench_paged THREADS [BLOCK_SIZE=16] [SEQUENCES=1]
 *
 * TANDEM_CPU_ISA caps the SIMD level as for the library; BENCH_CTX=N runs one context only,
 * BENCH_PREFILL=S times a prompt of S tokens per sequence instead (one row),
 * BENCH_HALF=1 float16 paged caches (GQA stays float32), BENCH_KV=int8|int4 tandem's 8- / 4-bit
 * rows in both GQA's cache (the generator's kv_type) and the BHSD paged one (the engine's; the
 * BSHD column is skipped: quantised rows need BHSD),
 * BENCH_ONLY=gqa|paged|bhsd one side only (for a profiler), BENCH_ADJACENT=1 each sequence's
 * blocks in order, one after another in the pool (not a random permutation: what an allocator
 * that keeps a sequence's blocks adjacent would give), BENCH_HUGE=1 every cache in
 * memory advised for transparent huge pages (2 MiB; the machine's THP setting is "madvise"). The third column set is the
 * tandem_kv_layout="BHSD" cache ([blocks, kv heads, block size, head size]). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_llm.h"
#include "core/alloc.h"
#include "core/threadpool.h"

enum { H = 9, KVH = 3, D = 64, LAYERS = 30, MAXCTX = 2048, ROUNDS = 9 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(getenv("BENCH_WALL") ? CLOCK_MONOTONIC : CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static tdm_tensor *tensor(tdm_dtype dt, int rank, const int64_t *dims) {
    tdm_tensor *t = NULL;
    tdm_status *st = tdm_tensor_new(NULL, dt, rank, dims, &t);
    if (st) {
        fprintf(stderr, "%s\n", tdm_status_message(st));
        exit(1);
    }
    if (dt == TDM_FLOAT)
        for (int64_t i = 0; i < t->count; i++) ((float *)t->data)[i] = (float)(rand() % 2001 - 1000) * 1e-3f;
    return t;
}

/* BENCH_KV: 0 float, 1 int8, 2 int4 */
static int kv_kind(void) {
    const char *k = getenv("BENCH_KV");
    return !k ? 0 : !strcmp(k, "int8") ? 1 : !strcmp(k, "int4") ? 2 : 0;
}

/* A quantised cache of `rank` dims (the last: the row's bytes): rows of random values
 * quantised, 256 distinct rows repeated */
static tdm_tensor *quant_cache(int rank, const int64_t *dims) {
    bool q4 = kv_kind() == 2;
    tdm_tensor *t = tensor(q4 ? TDM_UINT8 : TDM_INT8, rank, dims);
    int64_t rb = dims[rank - 1], rows = t->count / rb;
    static int8_t table[256][TDM_KV_I8_ROW(D)];
    static int made = -1;
    if (made != (int)q4) {
        for (int r = 0; r < 256; r++) {
            float x[D];
            for (int i = 0; i < D; i++) x[i] = (float)(rand() % 2001 - 1000) * 1e-3f;
            if (q4) tdm_llm_kv4_quantize_row(x, D, table[r]);
            else tdm_llm_kv_quantize_row(x, D, table[r]);
        }
        made = (int)q4;
    }
    for (int64_t r = 0; r < rows; r++) memcpy((int8_t *)t->data + r * rb, table[r % 256], (size_t)rb);
    return t;
}

/* A cache: with BENCH_HUGE=1 in memory of its own advised for transparent huge pages (as an
 * engine's KV pool may be), else a plain tensor. Random contents. */
static tdm_tensor *cache_tensor(int rank, const int64_t *dims, bool paged) {
    if (paged && getenv("BENCH_HALF")) { /* float16 paged caches */
        tdm_tensor *t = tensor(TDM_FLOAT16, rank, dims);
        for (int64_t i = 0; i < t->count; i++) ((uint16_t *)t->data)[i] = (uint16_t)(0x3000 + rand() % 0x800);
        return t;
    }
    if (!getenv("BENCH_HUGE")) return tensor(TDM_FLOAT, rank, dims);
    size_t n = 1;
    for (int i = 0; i < rank; i++) n *= (size_t)dims[i];
    size_t bytes = (n * sizeof(float) + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    float *mem = aligned_alloc(2u << 20, bytes);
    if (!mem) exit(1);
    madvise(mem, bytes, MADV_HUGEPAGE);
    for (size_t i = 0; i < n; i++) mem[i] = (float)(rand() % 2001 - 1000) * 1e-3f;
    tdm_tensor *t = NULL;
    if (tdm_tensor_new_view(NULL, TDM_FLOAT, rank, dims, mem, &t)) exit(1);
    return t;
}

static tdm_tensor *view(tdm_tensor *of) {
    tdm_tensor *t = NULL;
    if (tdm_tensor_new_view(NULL, of->dtype, of->rank, of->dims, of->data, &t)) exit(1);
    return t;
}

typedef struct op {
    tdm_node node;
    tdm_attr attrs[4];
    void *state;
} op;

static void op_init(op *o, const char *type, bool bhsd) {
    memset(o, 0, sizeof *o);
    static const char *const names[] = {"num_heads", "kv_num_heads", "do_rotary"};
    const int64_t vals[] = {H, KVH, 1};
    for (int i = 0; i < 3; i++) {
        o->attrs[i].name = (char *)names[i];
        o->attrs[i].type = TDM_ATTR_INT;
        o->attrs[i].i = vals[i];
    }
    o->node.name = (char *)type;
    o->node.op_type = (char *)type;
    o->node.domain = "com.microsoft";
    o->node.opset = 1;
    o->node.n_attrs = bhsd ? 4 : 3;
    o->attrs[3].name = "tandem_kv_layout";
    o->attrs[3].type = TDM_ATTR_STRING;
    o->attrs[3].s = "BHSD";
    o->attrs[3].s_len = 4;
    o->node.attrs = o->attrs;
    tdm_llm_gqa_prepare(&o->node, 1, 10, NULL, NULL, &o->state);
}

typedef struct run_set {
    op *o;
    bool paged;
    int n_in;
    const tdm_tensor *in[LAYERS][10];
    tdm_tensor *out[LAYERS][3];
    tdm_threadpool *pool;
    const tdm_cpu_simd *simd;
} run_set;

static void call(run_set *r, int layer) {
    tdm_kernel_ctx ctx = {.node = &r->o->node, .opset = 1, .n_in = r->n_in, .in = r->in[layer],
                          .n_out = 3, .out = r->out[layer], .pool = r->pool,
                          .alloc = NULL, .state = r->o->state, .cpu_simd = r->simd};
    tdm_status *st = r->paged ? tdm_llm_run_paged(&ctx) : tdm_llm_run_gqa(&ctx);
    if (st) {
        fprintf(stderr, "%s\n", tdm_status_message(st));
        exit(1);
    }
}

/* microseconds per call: median of ROUNDS rounds of >= 0.2 s */
static double time_set(run_set *r) {
    double t[ROUNDS];
    for (int l = 0; l < LAYERS; l++) call(r, l); /* warm-up */
    for (int k = 0; k < ROUNDS; k++) {
        int64_t calls = 0;
        double t0 = now_s(), el;
        do {
            for (int l = 0; l < LAYERS; l++) call(r, l);
            calls += LAYERS;
        } while ((el = now_s() - t0) < 0.2);
        t[k] = el / (double)calls * 1e6;
    }
    qsort(t, ROUNDS, sizeof t[0], cmp);
    return t[ROUNDS / 2];
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_paged THREADS [BLOCK_SIZE=16] [SEQUENCES=1]\n");
        return 2;
    }
    int threads = atoi(argv[1]);
    int64_t BS = argc > 2 ? atoll(argv[2]) : 16, NS = argc > 3 ? atoll(argv[3]) : 1;
    tdm_cpu_isa level = tdm_cpu_isa_detect(), cap;
    const char *env = getenv("TANDEM_CPU_ISA");
    if (env && tdm_cpu_isa_parse(env, &cap)) level = tdm_cpu_isa_min(level, cap);
    tdm_cpu_simd simd;
    tdm_cpu_simd_init(&simd, level);
    tdm_threadpool *pool = NULL;
    /* a session's default spin (200 us): with none, each call's two regions woke the workers
     * from sleep, which on the AMX Xeon made 2 threads (wall 33-34 us a call at context 32, 8
     * sequences, int4) slower than 1 (17-18); with the spin 11 */
    if (threads > 1 && tdm_threadpool_create(threads, 200, &pool)) return 1;
    srand(1);
    /* shared inputs: one token per sequence */
    /* BENCH_PREFILL=S: a prompt of S tokens per sequence (past 0) instead of decode steps */
    int64_t S = getenv("BENCH_PREFILL") ? atoll(getenv("BENCH_PREFILL")) : 1;
    if (S < 1 || S > MAXCTX) S = 1;
    int64_t qd[2] = {NS * S, H * D}, kd[2] = {NS * S, KVH * D}, cosd[2] = {MAXCTX, D / 2};
    tdm_tensor *q = tensor(TDM_FLOAT, 2, qd), *k = tensor(TDM_FLOAT, 2, kd), *v = tensor(TDM_FLOAT, 2, kd);
    int64_t q3[3] = {NS, S, H * D}, k3[3] = {NS, S, KVH * D};
    tdm_tensor *gq = tensor(TDM_FLOAT, 3, q3), *gk = tensor(TDM_FLOAT, 3, k3), *gv = tensor(TDM_FLOAT, 3, k3);
    memcpy(gq->data, q->data, q->nbytes);
    memcpy(gk->data, k->data, k->nbytes);
    memcpy(gv->data, v->data, v->nbytes);
    tdm_tensor *cosc = tensor(TDM_FLOAT, 2, cosd), *sinc = tensor(TDM_FLOAT, 2, cosd);
    for (int64_t i = 0; i < cosc->count; i++) {
        float a = (float)(i / (D / 2)) * powf(10000.0f, -(float)(i % (D / 2)) / (D / 2));
        ((float *)cosc->data)[i] = cosf(a);
        ((float *)sinc->data)[i] = sinf(a);
    }
    /* GQA: [NS, KVH, MAXCTX, D] caches per layer, present = past (in place) */
    int64_t gcd[4] = {NS, KVH, MAXCTX, D}, nsd[1] = {NS};
    tdm_tensor *sl = tensor(TDM_INT32, 1, nsd), *tl = tensor(TDM_INT32, 0, NULL);
    op gop, pop, hop;
    op_init(&gop, "GroupQueryAttention", false);
    op_init(&pop, "PagedAttention", false);
    op_init(&hop, "PagedAttention", true);
    run_set *g = calloc(1, sizeof *g), *p = calloc(1, sizeof *p), *ph = calloc(1, sizeof *ph);
    g->o = &gop, g->n_in = 9, g->pool = pool, g->simd = &simd;
    p->o = &pop, p->paged = true, p->n_in = 10, p->pool = pool, p->simd = &simd;
    *ph = *p;
    ph->o = &hop;
    int64_t gyd[3] = {NS, S, H * D};
    tdm_tensor *gy = tensor(TDM_FLOAT, 3, gyd), *py = tensor(TDM_FLOAT, 2, qd);
    /* paged: NS * MAXCTX / BS blocks per layer, a random permutation */
    int64_t per_seq = (MAXCTX + BS - 1) / BS, NB = NS * per_seq;
    int64_t pcd[3] = {NB, BS, KVH * D}, hcd[4] = {NB, KVH, BS, D}, btd[2] = {NS, per_seq}, cud[1] = {NS + 1};
    tdm_tensor *bt = tensor(TDM_INT32, 2, btd), *cu = tensor(TDM_INT32, 1, cud), *past = tensor(TDM_INT32, 1, nsd);
    int32_t *perm = bt->data;
    for (int64_t i = 0; i < NB; i++) perm[i] = (int32_t)i;
    for (int64_t i = getenv("BENCH_ADJACENT") ? 0 : NB - 1; i > 0; i--) {
        int64_t r = rand() % (i + 1);
        int32_t t = perm[i];
        perm[i] = perm[r];
        perm[r] = t;
    }
    for (int64_t b = 0; b <= NS; b++) ((int32_t *)cu->data)[b] = (int32_t)(b * S);
    int kvq = kv_kind();
    int64_t rb = kvq == 1 ? TDM_KV_I8_ROW(D) : kvq == 2 ? TDM_KV_I4_ROW(D) : D;
    int64_t gqd[4] = {NS, KVH, MAXCTX, rb}, hqd[4] = {NB, KVH, BS, rb};
    for (int l = 0; l < LAYERS; l++) {
        tdm_tensor *kc = kvq ? quant_cache(4, gqd) : cache_tensor(4, gcd, false);
        tdm_tensor *vc = kvq ? quant_cache(4, gqd) : cache_tensor(4, gcd, false);
        const tdm_tensor *gin[9] = {gq, gk, gv, kc, vc, sl, tl, cosc, sinc};
        memcpy(g->in[l], gin, sizeof gin);
        g->out[l][0] = gy, g->out[l][1] = view(kc), g->out[l][2] = view(vc);
        tdm_tensor *pk = cache_tensor(3, pcd, true), *pv = cache_tensor(3, pcd, true);
        const tdm_tensor *pin[10] = {q, k, v, pk, pv, cu, past, bt, cosc, sinc};
        memcpy(p->in[l], pin, sizeof pin);
        p->out[l][0] = py, p->out[l][1] = view(pk), p->out[l][2] = view(pv);
        tdm_tensor *hk = kvq ? quant_cache(4, hqd) : cache_tensor(4, hcd, true);
        tdm_tensor *hv = kvq ? quant_cache(4, hqd) : cache_tensor(4, hcd, true);
        const tdm_tensor *hin[10] = {q, k, v, hk, hv, cu, past, bt, cosc, sinc};
        memcpy(ph->in[l], hin, sizeof hin);
        ph->out[l][0] = py, ph->out[l][1] = view(hk), ph->out[l][2] = view(hv);
    }
    printf("PagedAttention vs GroupQueryAttention decode, H=%d KVH=%d D=%d, %lld sequence(s), "
           "block size %lld, %d thread(s), %s, %d layers' caches in turn, caches %s\n\n",
           H, KVH, D, (long long)NS, (long long)BS, threads, tdm_cpu_isa_name(level), LAYERS,
           kvq == 1 ? "int8" : kvq == 2 ? "int4" : getenv("BENCH_HALF") ? "float16 (paged)" : "float32");
    printf("| context | GQA us/call | paged us/call | paged / GQA | paged BHSD us/call | BHSD / GQA |\n"
           "|---:|---:|---:|---:|---:|---:|\n");
    static const int ctxs[] = {48, 128, 256, 512, 1024, 2048};
    for (size_t c = 0; c < sizeof ctxs / sizeof ctxs[0]; c++) {
        int ctxlen = S > 1 ? (int)S : ctxs[c];
        if (S > 1 && c > 0) break; /* a prompt: one row of the table */
        for (int64_t b = 0; b < NS; b++) {
            ((int32_t *)sl->data)[b] = ctxlen - 1;
            ((int32_t *)past->data)[b] = ctxlen - (int32_t)S;
        }
        ((int32_t *)tl->data)[0] = ctxlen;
        if (getenv("BENCH_CTX") && atoi(getenv("BENCH_CTX")) != ctxlen) continue;
        const char *only = getenv("BENCH_ONLY"); /* "gqa" or "paged": one side (profiling) */
        double tg = only && strcmp(only, "gqa") ? NAN : time_set(g);
        double tp = (only && strcmp(only, "paged")) || kvq ? NAN : time_set(p);
        double th = only && strcmp(only, "bhsd") ? NAN : time_set(ph);
        printf("| %d | %.1f | %.1f | %.2f | %.1f | %.2f |\n", ctxlen, tg, tp, tp / tg, th, th / tg);
        fflush(stdout);
    }
    return 0; /* the process ends: its tensors with it */
}

/* attn_depth (bench/llm/attn_depth.c) with a global phase tdm_xab_phase flipped every two steps
 * inside one process, each phase's wall time a step printed per round: an in-process A/B of a
 * GroupQueryAttention variant that reads the phase (the variable is defined by
 * s50-kv-prefetch-probes.patch). Build as attn_depth, against a library with that patch:
 *   build/attn_ab int4 1 2   (XDEPTH=10 for depth 10; the probes: XM=1, XM=3, XKPF=bytes) */
/* The decode attention alone at depth 10 and 1000: GroupQueryAttention's CPU kernel
 * (tdm_llm_run_gqa) for SmolLM2-135M's shapes (9 heads, 3 kv heads, head size 64, 30 layers,
 * each layer its own cache of 1,100 rows), one decode row per layer, timed per step of 30
 * layers (wall and process CPU time), 3 rounds. Issue 19's depth target: what the cache costs
 * a step at position 1000 next to position 10.
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -Ibuild/gen bench/llm/attn_depth.c \
 *      build/libtandem.a -ldnnl -lprotobuf-c -lOpenCL -ljansson -fopenmp -lpthread -ldl -lm \
 *      -o build/attn_depth
 *   build/attn_depth [CACHE=int8|int4|f32] [THREADS=1] [FLUSH=1] [ISA=all] [SHARED=0] [HUGE=1]
 * FLUSH=1 reads 96 MiB (SmolLM2's packed weights) before each step, so the cache comes from
 * memory; FLUSH=2 reads a layer's share of them (3.2 MiB, the next slice each time, untimed)
 * before each layer's call, as a real step's matmuls do between its attention calls (1 thread:
 * with more, the pool's workers may sleep through the untimed read, and their wake-up is
 * timed); SHARED=1 gives all layers one cache (it stays in L2: the kernels' arithmetic
 * alone). ISA caps the SIMD level (avx2, avx512_core, portable, ...). HUGE=1 puts
 * all layers' caches in one block on transparent huge pages (madvise), as the generator does;
 * HUGE=0 gives each its own allocation (4 KiB pages). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_llm.h"
#include "core/alloc.h"
#include "core/threadpool.h"

enum { H = 9, KVH = 3, D = 64, L = 1100, LAYERS = 30, STEPS = 40 };

static void *b_alloc(void *u, size_t n, size_t al) {
    (void)u, (void)al;
    return aligned_alloc(64, (n + 63) & ~(size_t)63);
}
static void b_free(void *u, void *p) {
    (void)u;
    free(p);
}
static const tdm_allocator A = {b_alloc, b_free, NULL};

/* HUGE=1: the caches carved from one block on huge pages (never freed: the bench exits) */
static char *arena;
static size_t arena_used, arena_size;
static void *h_alloc(void *u, size_t n, size_t al) {
    (void)u, (void)al;
    n = (n + 63) & ~(size_t)63;
    if (arena_used + n > arena_size) return NULL;
    void *p = arena + arena_used;
    arena_used += n;
    return p;
}
static void h_free(void *u, void *p) { (void)u, (void)p; }
static const tdm_allocator AH = {h_alloc, h_free, NULL};
static double clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float frand(void) { return (float)rand() / (float)RAND_MAX - 0.5f; }

static tdm_tensor *tensor_in(const tdm_allocator *a, tdm_dtype dt, int rank, const int64_t *dims) {
    tdm_tensor *t = NULL;
    if (tdm_tensor_new(a, dt, rank, dims, &t)) abort();
    if (dt == TDM_FLOAT)
        for (int64_t i = 0; i < t->count; i++) ((float *)t->data)[i] = frand();
    return t;
}
static tdm_tensor *tensor(tdm_dtype dt, int rank, const int64_t *dims) { return tensor_in(&A, dt, rank, dims); }

int main(int argc, char **argv) {
    bool i8 = argc <= 1 || strcmp(argv[1], "f32") != 0, q4 = argc > 1 && strcmp(argv[1], "int4") == 0;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    int flush = argc > 3 ? atoi(argv[3]) : 1;
    bool shared = argc > 5 && atoi(argv[5]) != 0;
    bool huge = argc <= 6 || atoi(argv[6]) != 0;
    tdm_cpu_isa isa = tdm_cpu_isa_detect(), cap;
    if (argc > 4 && tdm_cpu_isa_parse(argv[4], &cap)) isa = tdm_cpu_isa_min(isa, cap);
    tdm_attr at[2] = {{.name = "num_heads", .type = TDM_ATTR_INT, .i = H},
                      {.name = "kv_num_heads", .type = TDM_ATTR_INT, .i = KVH}};
    tdm_node node = {.name = "gqa", .op_type = "GroupQueryAttention", .domain = "com.microsoft",
                     .opset = 1, .n_attrs = 2, .attrs = at};
    tdm_cpu_simd simd;
    tdm_cpu_simd_init(&simd, isa);
    tdm_threadpool *pool = NULL;
    if (threads > 1 && tdm_threadpool_create(threads, 200, &pool)) return 1; /* a session's default spin */
    void *state[LAYERS];
    tdm_tensor *kc[LAYERS], *vc[LAYERS];
    int64_t rs = q4 ? TDM_KV_I4_ROW(D) : TDM_KV_I8_ROW(D), cd[4] = {1, KVH, L, i8 ? rs : D};
    tdm_dtype cdt = q4 ? TDM_UINT8 : i8 ? TDM_INT8 : TDM_FLOAT;
    void (*quantize)(const float *, int64_t, int8_t *) = q4 ? tdm_llm_kv4_quantize_row : tdm_llm_kv_quantize_row;
    const tdm_allocator *ca = &A;
    if (huge) {
        size_t hp = (size_t)2 << 20;
        arena_size = ((size_t)(2 * LAYERS) * ((size_t)(KVH * L * cd[3]) * (i8 ? 1 : 4) + 4096) + hp - 1) & ~(hp - 1);
        arena = aligned_alloc(hp, arena_size);
        if (!arena) return 1;
        (void)madvise(arena, arena_size, MADV_HUGEPAGE);
        ca = &AH;
    }
    for (int l = 0; l < LAYERS; l++) {
        if (tdm_llm_gqa_prepare(&node, 1, 7, NULL, &A, &state[l])) return 1;
        kc[l] = tensor_in(ca, cdt, 4, cd);
        vc[l] = tensor_in(ca, cdt, 4, cd);
        for (int64_t r = 0; i8 && r < KVH * L; r++) {
            float x[D];
            for (int i = 0; i < D; i++) x[i] = frand();
            quantize(x, D, (int8_t *)kc[l]->data + r * rs);
            for (int i = 0; i < D; i++) x[i] = frand();
            quantize(x, D, (int8_t *)vc[l]->data + r * rs);
        }
    }
    int64_t qd[3] = {1, 1, H * D}, kd[3] = {1, 1, KVH * D}, bd[1] = {1};
    tdm_tensor *q = tensor(TDM_FLOAT, 3, qd), *k = tensor(TDM_FLOAT, 3, kd);
    tdm_tensor *v = tensor(TDM_FLOAT, 3, kd), *y = tensor(TDM_FLOAT, 3, qd);
    tdm_tensor *sl = tensor(TDM_INT32, 1, bd), *tl = tensor(TDM_INT32, 0, NULL);
    size_t fl = flush ? (size_t)96 << 20 : 0;
    char *fb = fl ? malloc(fl) : NULL;
    if (fb) memset(fb, 1, fl);
    volatile long sink = 0;
    size_t slice = fl / LAYERS & ~(size_t)63, off = 0;
    extern int tdm_xab_phase;
    int dep = getenv("XDEPTH") ? atoi(getenv("XDEPTH")) : 1000;
    for (int round = 0; round < 8; round++) {
        ((int32_t *)sl->data)[0] = dep - 1;
        ((int32_t *)tl->data)[0] = L;
        double wall[2] = {0, 0};
        for (int s = 0; s < 2 * STEPS; s++) {
            tdm_xab_phase = (s / 2) & 1;
            double w0 = clock_s(CLOCK_MONOTONIC);
            for (int l = 0; l < LAYERS; l++) {
                if (fb && flush == 2) {
                    wall[tdm_xab_phase] += clock_s(CLOCK_MONOTONIC) - w0;
                    long a = 0;
                    for (size_t i = 0; i < slice; i += 64) a += fb[off + i];
                    sink += a;
                    off = off + 2 * slice > fl ? 0 : off + slice;
                    w0 = clock_s(CLOCK_MONOTONIC);
                }
                int c = shared ? 0 : l;
                const tdm_tensor *in[7] = {q, k, v, kc[c], vc[c], sl, tl};
                tdm_tensor *out[3] = {y, kc[c], vc[c]};
                tdm_kernel_ctx ctx = {.node = &node, .opset = 1, .n_in = 7, .in = in, .n_out = 3,
                                      .out = out, .pool = pool, .alloc = &A, .state = state[c],
                                      .cpu_simd = &simd};
                tdm_status *st = tdm_llm_run_gqa(&ctx);
                if (st) return 1;
            }
            wall[tdm_xab_phase] += clock_s(CLOCK_MONOTONIC) - w0;
        }
        printf("depth %d: phase0 %.3f phase1 %.3f ms a step, ratio 1/0 %.3f\n", dep, 1e3 * wall[0] / STEPS,
               1e3 * wall[1] / STEPS, wall[1] / wall[0]);
    }
    return 0;
}

/* MatMulNBits decode product alone (tdm_nbits_matmul, src/backends/cpu/k_nbits*.c): the time
 * of one M-row call on random weights, and the bytes of packed weights (B) read per second.
 * Built and run by run_nbits.py (side by side with ONNX Runtime):
 *   bench_nbits N K BITS BLOCK THREADS M ACC4(0|1) ZP(0 none|1 float)
 * Prints one JSON object: us per call (median of 15 rounds), GB/s of B, GB/s of B + scales +
 * zero points, the ISA variant level used. Weights are 64 MiB or less, so small shapes run
 * from the caches; each round is at least 0.2 s. Scales and zero points as GGUF's Q4_1 gives
 * them (d and m float16, zp = -m / d). BENCH_PACKED=1: the packed form (MatMulNBitsPacked,
 * ops/nbits_pack.h) of the same weights; gbps_read is then the packed bytes per second.
 * BENCH_HUGE=1 (with BENCH_PACKED): the packed weights on transparent huge pages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_nbits.h"
#include "core/threadpool.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(getenv("BENCH_WALL") ? CLOCK_MONOTONIC : CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 9) {
        fprintf(stderr, "usage: bench_nbits N K BITS BLOCK THREADS M ACC4 ZP\n");
        return 2;
    }
    int64_t N = atoll(argv[1]), K = atoll(argv[2]), bs = atoll(argv[4]), M = atoll(argv[6]);
    int bits = atoi(argv[3]), threads = atoi(argv[5]), acc4 = atoi(argv[7]), zp = atoi(argv[8]);
    int64_t nb = (K + bs - 1) / bs, rowb = nb * bs * bits / 8;
    /* BENCH_COPIES=C: C copies of the weights used in turn (C x the size beyond the caches:
     * B streams from memory as in a whole model) */
    int64_t copies = getenv("BENCH_COPIES") ? atoll(getenv("BENCH_COPIES")) : 1;
    if (copies < 1) copies = 1;
    uint8_t *b = malloc((size_t)(N * rowb * copies));
    float *s = malloc((size_t)(N * nb * copies) * sizeof(float));
    float *z = malloc((size_t)(N * nb * copies) * sizeof(float));
    float *A = malloc((size_t)(M * K) * sizeof(float)), *Y = malloc((size_t)(M * N) * sizeof(float));
    srand(1);
    for (int64_t i = 0; i < N * rowb * copies; i++) b[i] = (uint8_t)rand();
    for (int64_t i = 0; i < N * nb * copies; i++) {
        s[i] = (float)(rand() % 1000 + 100) * 0x1p-17f; /* float16 values */
        z[i] = -((float)(rand() % 1000) * 0x1p-14f) / s[i];
    }
    for (int64_t i = 0; i < M * K; i++) A[i] = (float)(rand() % 2001 - 1000) * 1e-3f;
    tdm_nbits_w wc[64];
    if (copies > 64) copies = 64;
    for (int64_t c = 0; c < copies; c++)
        wc[c] = (tdm_nbits_w){N, K, nb, bs, bits, b + c * N * rowb, s + c * N * nb,
                              zp ? z + c * N * nb : NULL};
    bool packed = getenv("BENCH_PACKED") && atoi(getenv("BENCH_PACKED"));
    tdm_nbits_pk pk;
    uint8_t *pb = NULL;
    size_t read_bytes = (size_t)(N * rowb) + (size_t)(N * nb) * sizeof(float) * (zp ? 2 : 1);
    if (packed) {
        unsigned form = tdm_nbits_pk_form(N, nb, bits, s, zp ? z : NULL);
        if (!tdm_nbits_pk_layout(N, K, bits, bs, form, &pk)) return 2;
        read_bytes = tdm_nbits_pk_bytes(&pk);
        /* BENCH_HUGE=1: the packed copies in one 2 MiB-aligned block on transparent huge
         * pages (madvise), as the generator's KV cache; otherwise malloc (4 KiB pages) */
        size_t pbytes = read_bytes * (size_t)copies, huge = (size_t)2 << 20;
        if (getenv("BENCH_HUGE") && atoi(getenv("BENCH_HUGE"))) {
            pbytes = (pbytes + huge - 1) & ~(huge - 1);
            pb = aligned_alloc(huge, pbytes);
#ifdef MADV_HUGEPAGE
            if (pb) (void)madvise(pb, pbytes, MADV_HUGEPAGE);
#endif
        } else {
            pb = malloc(pbytes);
        }
        if (!pb) return 1;
        for (int64_t c = 0; c < copies; c++) {
            tdm_nbits_pk_pack(&pk, wc[c].b, wc[c].scales, wc[c].zp, pb + c * read_bytes);
            wc[c].pk = &pk;
            wc[c].P = pb + c * read_bytes;
        }
    }
    tdm_nbits_w w = wc[0];
    int64_t cur = 0;
#define NEXT_W() (w = wc[cur = (cur + 1) % copies])
    tdm_cpu_isa level = tdm_cpu_isa_detect(), cap;
    const char *env = getenv("TANDEM_CPU_ISA");
    if (env && tdm_cpu_isa_parse(env, &cap)) level = tdm_cpu_isa_min(level, cap);
    tdm_cpu_simd simd;
    tdm_cpu_simd_init(&simd, level);
    tdm_threadpool *pool = NULL;
    if (threads > 1 && tdm_threadpool_create(threads, 100, &pool)) return 1;
    size_t need = tdm_nbits_scratch_bytes(&simd, &w, acc4, M);
    void *scr = aligned_alloc(64, (need + 63) / 64 * 64);
    for (int i = 0; i < 20; i++) tdm_nbits_matmul(&simd, pool, &w, acc4, M, A, NULL, Y, scr);
    double t0 = now_s();
    int64_t iters = 0;
    while (now_s() - t0 < 0.05)
        tdm_nbits_matmul(&simd, pool, &w, acc4, M, A, NULL, Y, scr), iters++, NEXT_W();
    iters = iters * 4 + 1; /* ~0.2 s a round */
    double r[15];
    for (int k = 0; k < 15; k++) {
        double t = now_s();
        for (int64_t i = 0; i < iters; i++, NEXT_W())
            tdm_nbits_matmul(&simd, pool, &w, acc4, M, A, NULL, Y, scr);
        r[k] = (now_s() - t) / (double)iters;
    }
    qsort(r, 15, sizeof r[0], cmp);
    double t = r[7], bbytes = (double)(N * rowb);
    double all = bbytes + (double)(N * nb) * sizeof(float) * (zp ? 2 : 1);
    printf("{\"N\": %lld, \"K\": %lld, \"bits\": %d, \"block\": %lld, \"threads\": %d, \"M\": %lld, "
           "\"acc4\": %d, \"us\": %.3f, \"gbps_b\": %.2f, \"gbps_all\": %.2f, \"isa\": \"%s\", "
           "\"check\": %g, \"packed\": %d, \"gbps_read\": %.2f}\n",
           (long long)N, (long long)K, bits, (long long)bs, threads, (long long)M, acc4, t * 1e6,
           bbytes / t * 1e-9, all / t * 1e-9, tdm_cpu_isa_name(level), (double)Y[0], packed,
           (double)read_bytes / t * 1e-9);
    free(pb);
    tdm_threadpool_free(pool);
    free(scr), free(b), free(s), free(z), free(A), free(Y);
    return 0;
}

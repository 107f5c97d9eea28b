/* Single-thread float32 FMA peak: 12 independent 8-wide accumulators (enough to hide the FMA
 * latency on two FMA pipes), timed for about 0.3 s. Built and run by run_cpu_bench.py:
 *   cc -O2 -mavx2 -mfma fma_peak.c -o fma_peak && ./fma_peak
 * Prints GFLOP/s (one FMA = 2 FLOPs). GNU C vector extensions, no intrinsics. */
#include <stdio.h>
#include <time.h>

typedef float v8 __attribute__((vector_size(32)));

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time: preemption excluded */
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define ACC(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

int main(void) {
    v8 a = {0}, b = {0};
    for (int k = 0; k < 8; k++) a[k] = 0.999999f, b[k] = 1e-7f;
#define DECL(j) v8 acc##j = a * (float)(j + 1);
    ACC(DECL)
    double best = 0;
    for (int trial = 0; trial < 5; trial++) {
        const long iters = 20000000;
        double t0 = now_s();
        for (long i = 0; i < iters; i++) {
#define STEP(j) acc##j = acc##j * a + b;
            ACC(STEP)
            __asm__ volatile("" : "+x"(a)); /* keep the loop from being folded */
        }
        double dt = now_s() - t0;
        double gflops = (double)iters * 12 * 8 * 2 / dt * 1e-9;
        if (gflops > best) best = gflops;
    }
    v8 sum = {0};
#define SUM(j) sum += acc##j;
    ACC(SUM)
    float sink = 0;
    for (int k = 0; k < 8; k++) sink += sum[k];
    printf("%.2f\n", best);
    fprintf(stderr, "(checksum %g)\n", (double)sink);
    return 0;
}

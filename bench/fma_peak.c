/* Single-thread float32 FMA peak at the widest vector the CPU runs: 12 independent accumulators
 * (enough to hide the FMA latency on two FMA pipes), timed for about 0.3 s per trial in CPU time.
 * 512-bit when the CPU and the OS have AVX-512F (__builtin_cpu_supports reads both), else 256-bit
 * (AVX2+FMA). Built and run by run_cpu_bench.py:
 *   cc -O2 -mavx2 -mfma fma_peak.c -o fma_peak && ./fma_peak
 * Prints GFLOP/s (one FMA = 2 FLOPs) on stdout, the width used and a checksum on stderr. GNU C
 * vector extensions, no intrinsics. */
#include <stdio.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time: preemption excluded */
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define ACC(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

/* One function per width: VEC lanes of float, compiled for TARGET. */
#define FMA_PEAK(NAME, VEC, TARGET)                                                              \
    typedef float NAME##_v __attribute__((vector_size(VEC * 4)));                               \
    __attribute__((target(TARGET))) static double NAME(float *sink) {                         \
        NAME##_v a, b;                                                                          \
        for (int k = 0; k < VEC; k++) a[k] = 0.999999f, b[k] = 1e-7f;                          \
        ACC(DECL)                                                                               \
        double best = 0;                                                                        \
        for (int trial = 0; trial < 5; trial++) {                                               \
            const long iters = 20000000 / (VEC / 8);                                            \
            double t0 = now_s();                                                                \
            for (long i = 0; i < iters; i++) {                                                  \
                ACC(STEP)                                                                       \
                __asm__ volatile("" : "+x"(a)); /* keep the loop from being folded */           \
            }                                                                                   \
            double dt = now_s() - t0;                                                           \
            double gflops = (double)iters * 12 * VEC * 2 / dt * 1e-9;                           \
            if (gflops > best) best = gflops;                                                   \
        }                                                                                       \
        NAME##_v sum = a - a;                                                                   \
        ACC(SUM)                                                                                \
        for (int k = 0; k < VEC; k++) *sink += sum[k];                                          \
        return best;                                                                            \
    }
#define DECL(j) __typeof__(a) acc##j = a * (float)(j + 1);
#define STEP(j) acc##j = acc##j * a + b;
#define SUM(j) sum += acc##j;

FMA_PEAK(peak256, 8, "avx2,fma")
FMA_PEAK(peak512, 16, "avx512f")

int main(void) {
    float sink = 0;
    __builtin_cpu_init();
    int wide = __builtin_cpu_supports("avx512f");
    double best = wide ? peak512(&sink) : peak256(&sink);
    printf("%.2f\n", best);
    fprintf(stderr, "(%d-bit FMA; checksum %g)\n", wide ? 512 : 256, (double)sink);
    return 0;
}

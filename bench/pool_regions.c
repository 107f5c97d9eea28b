/* The cost of one parallel region of tandem's thread pool (src/core/threadpool.c): REGIONS calls
 * of tdm_parallel_for over 2 x THREADS items, each item WORK iterations of an integer loop
 * (0 = an empty job: the publication, the claims and the waits alone), timed ROUNDS times in wall
 * time. A decode step of SmolLM2 runs ~300 regions, so 100 ns a region is ~30 us a token.
 *   cc -O2 -std=gnu11 -D_GNU_SOURCE -Isrc -Iinclude -Ibuild/gen bench/pool_regions.c \
 *      build/libtandem.a -lpthread -lm -o build/pool_regions
 *   build/pool_regions [REGIONS=200000] [WORK=0] [THREADS=2] [SPIN_US=200] [ROUNDS=5]
 * To compare two versions of the pool, build it once more with the other threadpool.c listed
 * before the archive (the linker takes the object's symbols first). Prints ns a region per
 * round. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/threadpool.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long work_per_item;
static _Thread_local volatile long sink; /* per thread: keeps the loop, races with no one */

static void job(void *arg, int64_t b, int64_t e) {
    long s = 0;
    for (long i = (long)b * work_per_item; i < (long)e * work_per_item; i++) s += i ^ (long)(intptr_t)arg;
    sink += s;
}

int main(int argc, char **argv) {
    long regions = argc > 1 ? atol(argv[1]) : 200000;
    work_per_item = argc > 2 ? atol(argv[2]) : 0;
    int threads = argc > 3 ? atoi(argv[3]) : 2;
    long spin_us = argc > 4 ? atol(argv[4]) : 200;
    int rounds = argc > 5 ? atoi(argv[5]) : 5;
    if (regions < 1 || work_per_item < 0 || threads < 1 || rounds < 1) {
        fprintf(stderr, "usage: pool_regions [REGIONS] [WORK] [THREADS] [SPIN_US] [ROUNDS]\n");
        return 2;
    }
    tdm_threadpool *p = NULL;
    tdm_status *st = tdm_threadpool_create(threads, spin_us, &p);
    if (st) {
        fprintf(stderr, "%s\n", tdm_status_message(st));
        return 1;
    }
    for (int r = 0; r < rounds; r++) {
        double t0 = now_s();
        for (long i = 0; i < regions; i++) tdm_parallel_for(p, 2 * (int64_t)threads, 1, job, (void *)(intptr_t)i);
        printf("%.0f ns a region (%d threads, work %ld)\n", (now_s() - t0) / (double)regions * 1e9, threads,
               work_per_item);
    }
    tdm_threadpool_free(p);
    return 0;
}

/* Memory read bandwidth of this machine, for bench/llm/run_llm_bench.py.
 *
 *   cc -O3 -march=native -pthread bench/llm/membw.c -o membw && ./membw [MiB=1024] [max_threads=2] [reps=5]
 *
 * Each of T threads (T = 1 .. max_threads) sums 64-bit words over its own contiguous share of one
 * buffer (first-touched by that thread) that is far larger than the caches; the best of `reps` passes is
 * reported as bytes read / second. Output: one JSON object
 *   {"isa": "...", "buffer_bytes": N, "read_gbps": {"1": x, "2": y}}
 * (GB = 1e9 bytes). The sum is printed to stderr so that the compiler keeps the loads. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  uint64_t *data;
  size_t words;
  uint64_t sum;
  pthread_barrier_t *start;
  int first_touch;
  double t0, t1; /* this thread's pass: after the barrier, after its last load */
} job_t;

static uint64_t sum_words(const uint64_t *p, size_t n) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    a0 += p[i];
    a1 += p[i + 1];
    a2 += p[i + 2];
    a3 += p[i + 3];
    a4 += p[i + 4];
    a5 += p[i + 5];
    a6 += p[i + 6];
    a7 += p[i + 7];
  }
  for (; i < n; i++) a0 += p[i];
  return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *worker(void *arg) {
  job_t *j = arg;
  if (j->first_touch) {
    for (size_t i = 0; i < j->words; i++) j->data[i] = i;
    return NULL;
  }
  pthread_barrier_wait(j->start);
  j->t0 = now();
  j->sum = sum_words(j->data, j->words);
  j->t1 = now();
  return NULL;
}

static const char *isa(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni")) return "avx512-vnni";
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2-fma";
  if (__builtin_cpu_supports("avx")) return "avx";
  return "sse/portable";
}

static int run(uint64_t *buf, size_t words, int threads, int first_touch, double *seconds, uint64_t *sum) {
  pthread_t tid[64];
  job_t jobs[64];
  pthread_barrier_t start;
  if (pthread_barrier_init(&start, NULL, (unsigned)threads + 1) != 0) return -1;
  size_t share = words / (size_t)threads;
  for (int t = 0; t < threads; t++) {
    jobs[t].data = buf + (size_t)t * share;
    jobs[t].words = t == threads - 1 ? words - (size_t)t * share : share;
    jobs[t].sum = 0;
    jobs[t].start = &start;
    jobs[t].first_touch = first_touch;
    if (pthread_create(&tid[t], NULL, worker, &jobs[t]) != 0) return -1;
  }
  if (!first_touch) pthread_barrier_wait(&start);
  for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
  pthread_barrier_destroy(&start);
  /* the pass: the first thread's start to the last one's end, as the threads clock them (the
   * caller's own clock after the barrier was late whenever the OS ran the workers first: with
   * 2 workers and the caller on 2 cores, a 64 MiB pass read 291,777 GB/s) */
  double t0 = jobs[0].t0, t1 = jobs[0].t1;
  for (int t = 1; t < threads; t++) {
    if (jobs[t].t0 < t0) t0 = jobs[t].t0;
    if (jobs[t].t1 > t1) t1 = jobs[t].t1;
  }
  *seconds = first_touch ? 0 : t1 - t0;
  for (int t = 0; t < threads; t++) *sum += jobs[t].sum;
  return 0;
}

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 1024;
  int max_threads = argc > 2 ? atoi(argv[2]) : 2;
  int reps = argc > 3 ? atoi(argv[3]) : 5;
  if (mib < 64 || max_threads < 1 || max_threads > 64 || reps < 1) {
    fprintf(stderr, "usage: membw [MiB>=64] [threads 1-64] [reps>=1]\n");
    return 2;
  }
  size_t bytes = mib << 20;
  size_t words = bytes / sizeof(uint64_t);
  uint64_t *buf = aligned_alloc(4096, bytes);
  if (!buf) {
    fprintf(stderr, "membw: cannot allocate %zu MiB\n", mib);
    return 1;
  }
  double sec;
  uint64_t sum = 0;
  printf("{\"isa\": \"%s\", \"buffer_bytes\": %zu, \"read_gbps\": {", isa(), bytes);
  for (int t = 1; t <= max_threads; t++) {
    if (run(buf, words, t, 1, &sec, &sum) != 0) return 1;
    double best = 0;
    for (int r = 0; r < reps; r++) {
      if (run(buf, words, t, 0, &sec, &sum) != 0) return 1;
      double gbps = (double)bytes / sec / 1e9;
      if (gbps > best) best = gbps;
    }
    printf("%s\"%d\": %.2f", t > 1 ? ", " : "", t, best);
  }
  printf("}}\n");
  fprintf(stderr, "checksum %llu\n", (unsigned long long)sum);
  free(buf);
  return 0;
}

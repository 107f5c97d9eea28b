/* Decode steps at a depth, alone: prefills DEPTH random tokens into a generator (untimed), then
 * times STEPS decode steps (greedy), per step in process CPU time and wall time, ROUNDS times.
 * For profiling the decode step without the prefill: with PERF_CTL (and PERF_ACK) naming the
 * fifos of `perf record --control fifo:CTL,ACK -D -1`, it writes "enable" before the steps and
 * "disable" after them, so perf samples the decode steps only.
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude bench/llm/depth_steps.c -Lbuild -ltandem \
 *      -Wl,-rpath,$PWD/build -o build/depth_steps
 *   build/depth_steps MODEL_DIR DEPTH STEPS THREADS [KV_TYPE=int8] [ROUNDS=1] [MAX_LENGTH]
 *
 *   mkfifo ctl ack; PERF_CTL=ctl PERF_ACK=ack perf record -e cpu-clock:u -D -1 \
 *      --control fifo:ctl,ack -o d1000.data build/depth_steps /work/smol_off 1000 200 1 int8 1 1212
 * MAX_LENGTH (default DEPTH + STEPS + 2) sizes the KV cache: give depth 10 and depth 1000 the
 * same one to compare them. Prints one line per round: ms per step (CPU, wall), the last token. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#include "tandem/tandem.h"
#include "tandem/generator.h"
static double cpu_s(void){struct timespec ts;clock_gettime(CLOCK_PROCESS_CPUTIME_ID,&ts);return ts.tv_sec+ts.tv_nsec*1e-9;}
static double now_s(void){struct timespec ts;clock_gettime(CLOCK_MONOTONIC,&ts);return ts.tv_sec+ts.tv_nsec*1e-9;}
static void ctl(const char *m){const char *p=getenv("PERF_CTL"); if(!p) return; int fd=open(p,O_WRONLY); if(fd<0) return; (void)!write(fd,m,strlen(m)); close(fd);
  const char *a=getenv("PERF_ACK"); if(a){int f2=open(a,O_RDONLY); char b[16]; (void)!read(f2,b,sizeof b); close(f2);} }
int main(int argc, char **argv) {
  const char *dir = argv[1]; long depth = atol(argv[2]), n = atol(argv[3]), th = atol(argv[4]);
  const char *kv = argc > 5 ? argv[5] : "int8"; long R = argc > 6 ? atol(argv[6]) : 1; long maxlen = argc > 7 ? atol(argv[7]) : depth + n + 2;
  tdm_env_options eo = {0}; eo.api_version = TDM_API_VERSION; eo.threads = (int)th;
  tdm_env *env; if (tdm_env_create(&eo, &env)) return 1;
  tdm_generator_options go; memset(&go, 0, sizeof go); go.struct_size = sizeof go; go.threads = (int)th;
  go.max_length = (int)maxlen; go.ignore_eos = true; go.kv_type = kv;
  tdm_generator *gen; tdm_status *st = tdm_generator_create(env, dir, &go, &gen);
  if (st) { fprintf(stderr, "%s\n", tdm_status_message(st)); return 1; }
  int32_t *ids = calloc(depth + 2, sizeof *ids); srand(7);
  int32_t z = 0; tdm_generator_append(gen, &z, 1); size_t vocab = tdm_generator_vocab_size(gen);
  for (long i = 0; i < depth + 1; i++) ids[i] = rand() % vocab;
  for (long r = 0; r < R; r++) {
    tdm_generator_reset(gen);
    if ((st = tdm_generator_append(gen, ids, depth))) { fprintf(stderr, "%s\n", tdm_status_message(st)); return 1; }
    int32_t t = ids[depth];
    if ((st = tdm_generator_append(gen, &t, 1))) { fprintf(stderr, "%s\n", tdm_status_message(st)); return 1; }
    ctl("enable\n");
    double c0 = cpu_s(), t0 = now_s();
    for (long i = 0; i < n; i++) if ((st = tdm_generator_next(gen, &t))) { fprintf(stderr, "%s\n", tdm_status_message(st)); return 1; }
    double c1 = cpu_s(), t1 = now_s();
    ctl("disable\n");
    printf("depth %ld steps %ld: %.3f ms/step cpu, %.3f ms/step wall, last %d\n", depth, n, (c1-c0)*1e3/n, (t1-t0)*1e3/n, t);
  }
  free(ids); tdm_generator_free(gen); tdm_env_free(env); return 0;
}

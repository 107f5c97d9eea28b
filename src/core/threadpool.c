#define _GNU_SOURCE
#include "core/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core/status.h"

/* How a region runs. The caller publishes the job and a new generation in one 64-bit ticket
 * (generation << 32 | chunk count << 16 | next chunk); every thread, the caller included,
 * claims chunks by compare-and-swap on the ticket, which fails once the generation moved on,
 * so a worker that wakes up late never touches a later job with an earlier one's state. The
 * chunk count travels in the ticket, not beside it: a worker that read the next job's count
 * (stored while its ticket was not yet published) with the finished job's ticket once claimed
 * a chunk that did not exist, ran the next job's chunk twice and counted it done for it, so
 * that job's caller could return while its last chunk still ran (a use of the caller's stack
 * after return: one SIGSEGV in CI's `tandem generate`, and 1 run in 3-5 of `tandem bench
 * --llm --streams 8 --threads 2` on AVX2, a worker reading a returned decode frame's job; ~1%
 * of regions doubled a chunk in test_core's test_threadpool_generations before this fix).
 *
 * The caller waits for the chunks to be done, not for the workers to check in: a worker that
 * the OS has not scheduled yet does not hold the region up (on a busy machine, waiting for
 * every worker cost up to milliseconds per region: a DLRM-like model's 30 us batch-1 run took
 * 0.9 ms on 2 threads while other processes were running).
 *
 * How threads wait. Between the regions of one run there are only microseconds, while a
 * futex wake-up costs tens of microseconds in a virtual machine (measured on MobileNetV2 at
 * batch 1: two threads were no faster than one). So a waiting thread first spins for a
 * bounded time (spin_ns: the creator's spin_us, the setting of that name, TANDEM_SPIN_US,
 * default 200; 0 = never spin) watching the ticket, and only then sleeps on a condition
 * variable. The bound keeps idle pools from taking the cores that other devices' host threads
 * need. Only a region that has a sleeper to wake takes the mutex (`sleepers`): the worker that
 * finished a region's last chunk used to lock it for the caller's condition variable every
 * time, so its cache line crossed between the cores twice a region (bench/pool_regions.c, 2
 * threads, Zen 3: 1.41-1.51 -> 1.07-1.14 us a region of 4 small items). */

struct tdm_threadpool {
    int n_threads; /* including the caller */
    pthread_t *workers;
    int n_workers;
    int64_t spin_ns;
    pthread_mutex_t region_lock; /* one region at a time */
    pthread_mutex_t mu;
    pthread_cond_t start_cv, done_cv;
    atomic_bool stop;
    /* Waiters that a region's start or end must wake. A waiter increments its count under mu
     * and then reads the ticket (done) again before it sleeps; the caller stores the ticket
     * (a worker counts its chunk done) and then reads the count, all sequentially consistent,
     * so at least one of the two sees the other's write: either the waiter does not sleep or
     * the waker takes mu and signals. A region whose waiters all spin takes no mu at all. */
    atomic_int sleepers;       /* workers blocked on start_cv */
    atomic_int caller_waiting; /* the caller blocked on done_cv */
    /* the current job; written before its ticket is published, read after a claim */
    atomic_uint_fast64_t ticket; /* generation << 32 | chunk count << 16 | next chunk */
    _Atomic(tdm_range_fn) fn;
    _Atomic(void *) arg;
    atomic_int_fast64_t n;
    atomic_int_fast64_t done; /* chunks finished in this generation */
};

static _Thread_local int in_region;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline uint32_t gen_of(uint64_t ticket) { return (uint32_t)(ticket >> 32); }
#define MAX_CHUNKS 0xffff /* the ticket's two 16-bit fields */
static inline int64_t chunks_of(uint64_t ticket) { return (int64_t)(ticket >> 16 & MAX_CHUNKS); }
static inline int64_t next_of(uint64_t ticket) { return (int64_t)(ticket & MAX_CHUNKS); }

/* Chunk idx of [0, n) in `parts` chunks whose sizes differ by one at most (36 panels in 8:
 * 4 and 5, not seven of 5 and one of 1, which left one of two threads waiting ~10% of the
 * region; the split as a whole unchanged). */
static inline int64_t chunk_start(int64_t n, int64_t parts, int64_t idx) {
    return n / parts * idx + (idx < n % parts ? idx : n % parts);
}

/* Claims and runs chunks of generation `gen` until none are left. */
static void work(tdm_threadpool *p, uint32_t gen) {
    for (;;) {
        uint64_t v = atomic_load_explicit(&p->ticket, memory_order_acquire);
        if (gen_of(v) != gen) return;
        int64_t idx = next_of(v), total = chunks_of(v);
        if (idx >= total) return;
        if (!atomic_compare_exchange_weak_explicit(&p->ticket, &v, v + 1, memory_order_acq_rel,
                                                   memory_order_relaxed))
            continue;
        /* chunk idx of this generation is ours: the job stays valid until it is done */
        int64_t n = atomic_load_explicit(&p->n, memory_order_relaxed);
        int64_t b = chunk_start(n, total, idx), e = chunk_start(n, total, idx + 1);
        atomic_load_explicit(&p->fn, memory_order_relaxed)(atomic_load_explicit(&p->arg, memory_order_relaxed), b, e);
        if (atomic_fetch_add(&p->done, 1) + 1 == total && atomic_load(&p->caller_waiting)) {
            pthread_mutex_lock(&p->mu); /* the caller is asleep on done_cv, or about to be */
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

/* Spins until the generation differs from `seen` or stop is set, for at most spin_ns;
 * returns the generation last read. */
static uint32_t spin_for_generation(tdm_threadpool *p, uint32_t seen) {
    uint32_t g = gen_of(atomic_load_explicit(&p->ticket, memory_order_acquire));
    if (g != seen || p->spin_ns <= 0) return g;
    int64_t deadline = now_ns() + p->spin_ns;
    for (unsigned i = 1;; i++) {
        cpu_relax();
        g = gen_of(atomic_load_explicit(&p->ticket, memory_order_acquire));
        if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed)) return g;
        if (!(i & 63) && now_ns() > deadline) return g;
    }
}

static void *worker_main(void *vp) {
    tdm_threadpool *p = vp;
    uint32_t seen = 0;
    in_region = 1;
    for (;;) {
        uint32_t g = spin_for_generation(p, seen);
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (!atomic_load(&p->stop) && (g = gen_of(atomic_load(&p->ticket))) == seen)
                pthread_cond_wait(&p->start_cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = g;
        work(p, g);
    }
    return NULL;
}

int tdm_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

tdm_status *tdm_threadpool_create(int threads, int64_t spin_us, tdm_threadpool **out) {
    if (threads < 1) threads = 1;
    tdm_threadpool *p = calloc(1, sizeof *p);
    if (!p) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a thread pool");
    p->n_threads = threads;
    p->spin_ns = spin_us > 0 && spin_us <= 1000000 ? spin_us * 1000 : 0;
    atomic_init(&p->stop, false);
    atomic_init(&p->ticket, 0);
    atomic_init(&p->fn, NULL);
    atomic_init(&p->arg, NULL);
    atomic_init(&p->n, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_waiting, 0);
    pthread_mutex_init(&p->region_lock, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    if (threads > 1) {
        p->workers = calloc((size_t)threads - 1, sizeof *p->workers);
        if (!p->workers) {
            tdm_threadpool_free(p);
            return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a thread pool");
        }
        for (int i = 0; i < threads - 1; i++) {
            if (pthread_create(&p->workers[i], NULL, worker_main, p) != 0) {
                tdm_threadpool_free(p);
                return TDM_ERR(TDM_ERR_RUNTIME, "cannot start worker thread %d", i);
            }
            p->n_workers++;
        }
    }
    *out = p;
    return NULL;
}

void tdm_threadpool_free(tdm_threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_workers; i++) pthread_join(p->workers[i], NULL);
    free(p->workers);
    pthread_mutex_destroy(&p->region_lock);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->start_cv);
    pthread_cond_destroy(&p->done_cv);
    free(p);
}

int tdm_threadpool_size(const tdm_threadpool *p) { return p ? p->n_threads : 1; }

void tdm_parallel_for(tdm_threadpool *p, int64_t n, int64_t grain, tdm_range_fn fn, void *arg) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (!p || p->n_workers == 0 || in_region || n <= grain) {
        fn(arg, 0, n);
        return;
    }
    int64_t parts = n / grain;
    int64_t maxparts = (int64_t)p->n_threads * 4;
    if (parts > maxparts) parts = maxparts;
    if (parts > MAX_CHUNKS) parts = MAX_CHUNKS;
    if (parts < 1) parts = 1;
    int64_t n_chunks = parts; /* each at least grain items (n / parts >= grain), chunk_start */

    pthread_mutex_lock(&p->region_lock);
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&p->n, n, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    uint32_t gen = gen_of(atomic_load_explicit(&p->ticket, memory_order_relaxed)) + 1;
    atomic_store(&p->ticket, (uint64_t)gen << 32 | (uint64_t)n_chunks << 16);
    if (atomic_load(&p->sleepers)) { /* see `sleepers` */
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->start_cv);
        pthread_mutex_unlock(&p->mu);
    }

    in_region = 1;
    work(p, gen);
    in_region = 0;

    if (atomic_load_explicit(&p->done, memory_order_acquire) < n_chunks && p->spin_ns > 0) {
        int64_t deadline = now_ns() + p->spin_ns;
        for (unsigned i = 1; atomic_load_explicit(&p->done, memory_order_acquire) < n_chunks; i++) {
            cpu_relax();
            if (!(i & 63) && now_ns() > deadline) break;
        }
    }
    if (atomic_load_explicit(&p->done, memory_order_acquire) < n_chunks) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_waiting, 1);
        while (atomic_load(&p->done) < n_chunks) pthread_cond_wait(&p->done_cv, &p->mu);
        atomic_store(&p->caller_waiting, 0);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_unlock(&p->region_lock);
}

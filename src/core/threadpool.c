#define _GNU_SOURCE
#include "core/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/status.h"

struct tdm_threadpool {
    int n_threads; /* including the caller */
    pthread_t *workers;
    int n_workers;
    pthread_mutex_t region_lock; /* one region at a time */
    pthread_mutex_t mu;
    pthread_cond_t start_cv, done_cv;
    uint64_t generation;
    bool stop;
    /* current job */
    tdm_range_fn fn;
    void *arg;
    int64_t n, chunk;
    atomic_int_fast64_t next;
    int active; /* workers still working on this generation */
};

static _Thread_local int in_region;

static void run_chunks(tdm_threadpool *p) {
    for (;;) {
        int64_t b = atomic_fetch_add(&p->next, p->chunk);
        if (b >= p->n) break;
        int64_t e = b + p->chunk < p->n ? b + p->chunk : p->n;
        p->fn(p->arg, b, e);
    }
}

static void *worker_main(void *vp) {
    tdm_threadpool *p = vp;
    uint64_t seen = 0;
    in_region = 1;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->start_cv, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        run_chunks(p);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0) pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int tdm_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

tdm_status *tdm_threadpool_create(int threads, tdm_threadpool **out) {
    if (threads < 1) threads = 1;
    tdm_threadpool *p = calloc(1, sizeof *p);
    if (!p) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a thread pool");
    p->n_threads = threads;
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
    p->stop = true;
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
    if (parts < 1) parts = 1;
    int64_t chunk = (n + parts - 1) / parts;

    pthread_mutex_lock(&p->region_lock);
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->chunk = chunk;
    atomic_store(&p->next, 0);
    p->active = p->n_workers;
    p->generation++;
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);

    in_region = 1;
    run_chunks(p);
    in_region = 0;

    pthread_mutex_lock(&p->mu);
    while (p->active > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&p->region_lock);
}

/* A small pool of worker threads for intra-op parallelism. The calling thread works too.
 * One parallel region runs at a time per pool; a region started while another runs on the
 * same pool (another session thread) waits for it. Nested calls from inside a region run
 * serially on the calling worker. */
#ifndef TDM_CORE_THREADPOOL_H
#define TDM_CORE_THREADPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "tandem/tandem.h"

typedef struct tdm_threadpool tdm_threadpool;

/* fn(arg, begin, end) handles items [begin, end). */
typedef void (*tdm_range_fn)(void *arg, int64_t begin, int64_t end);

/* threads >= 1 (1 = no workers, everything runs on the caller). spin_us: how long a waiting
 * thread spins before it sleeps (the environment's spin_us setting; 0 = never spin). */
tdm_status *tdm_threadpool_create(int threads, int64_t spin_us, tdm_threadpool **out);
void tdm_threadpool_free(tdm_threadpool *pool);
int tdm_threadpool_size(const tdm_threadpool *pool); /* 1 for NULL */

/* Splits [0, n) into chunks of at least `grain` items and runs them on the pool.
 * pool may be NULL (serial). */
void tdm_parallel_for(tdm_threadpool *pool, int64_t n, int64_t grain, tdm_range_fn fn, void *arg);

/* Number of online CPUs (at least 1). */
int tdm_cpu_count(void);

#endif

/* Memory plans: one arena per (plan, input shapes) holding every intermediate tensor whose
 * size is known, at offsets chosen so that tensors alive at the same time never overlap
 * (liveness-based reuse). The first run with new input shapes records sizes on the heap;
 * later runs with the same shapes take their intermediates from the arena and allocate no
 * activation memory. */
#ifndef TDM_SCHED_MEMPLAN_H
#define TDM_SCHED_MEMPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"

typedef struct tdm_memplan {
    uint64_t key;        /* hash of the input dtypes and shapes */
    size_t n_values;
    int64_t *offset;     /* per value: byte offset in the arena, -1 = heap */
    size_t *size;        /* per value: bytes planned */
    size_t arena_bytes;
    char *arena;
    tdm_tensor *headers; /* per value: reused tensor headers for arena tensors */
    bool busy;           /* a run is using the arena */
    uint64_t last_use;
} tdm_memplan;

/* Plans offsets for values with size[v] > 0 living over node intervals [first[v], last[v]].
 * Greedy: largest first, lowest offset that does not overlap a live neighbour. */
tdm_status *tdm_memplan_build(const tdm_allocator *a, size_t n_values, const size_t *size,
                              const int *first, const int *last, uint64_t key,
                              tdm_memplan **out);
void tdm_memplan_free(const tdm_allocator *a, tdm_memplan *mp);

#endif

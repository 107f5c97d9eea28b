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

#include "backends/backend.h"
#include "core/tensor.h"

typedef struct tdm_memplan {
    uint64_t key;        /* hash of the input dtypes and shapes */
    size_t n_values;
    int64_t *offset;     /* per value: byte offset in the arena, -1 = heap */
    int *alias_of;       /* per value: the value whose memory it takes (in place), -1 none */
    size_t n_inplace;    /* values that take another's memory */
    size_t *size;        /* per value: bytes planned */
    size_t arena_bytes;
    char *arena;
    tdm_tensor *headers; /* per value: reused tensor headers for arena tensors */
    bool busy;           /* a run is using the arena */
    uint64_t last_use;
    /* figures for `tandem inspect --plan`: bytes of all planned intermediates (aligned) and
     * the largest sum of them alive at one node (a lower bound on arena_bytes) */
    size_t total_bytes, peak_live_bytes;
    /* Per-run scratch of the run holding the arena, made with the plan by the executor so
     * that a run with planned shapes allocates nothing of its own (freed here): the value
     * table and ownership flags (n_values each), node input/output pointer arrays (max_io
     * each) and the inferred shapes of each node for these input shapes (executor.c). */
    const tdm_tensor **vals;
    bool *owned;
    const tdm_tensor **ins;
    tdm_tensor **outs;
    struct tdm_shape_cache *shapes;
} tdm_memplan;

/* Plans offsets for values with size[v] > 0 living over node intervals [first[v], last[v]].
 * Greedy: largest first, lowest offset that does not overlap a live neighbour.
 * alias (NULL = none): alias[v] = u >= 0 asks for v to take u's memory (an in-place
 * kernel); granted when u and v have the same size, u is planned and last[u] == first[v]
 * (v's producer is u's last reader); the two then share one block over both intervals. */
tdm_status *tdm_memplan_build(const tdm_allocator *a, size_t n_values, const size_t *size,
                              const int *first, const int *last, const int *alias, uint64_t key,
                              tdm_memplan **out);
void tdm_memplan_free(const tdm_allocator *a, tdm_memplan *mp);
/* Memory figures of a plan (`tandem inspect --plan`, tdm_session_explain JSON "memory"),
 * from its most recently used memory plan (planned = false before a first run made one):
 * arena bytes against the sum of all planned intermediates and the largest live set, and
 * the bytes of constants (weights) read by the nodes of each plan device (a constant read
 * on two devices counts on both). Defined in executor.c. */
typedef struct tdm_memory_figures {
    bool planned;
    size_t arena_bytes, intermediate_bytes, peak_live_bytes;
    size_t inplace_values; /* outputs written over an input's memory */
    size_t weights_bytes[TDM_MAX_DEVICES];
} tdm_memory_figures;
struct tdm_plan;
void tdm_plan_memory_figures(struct tdm_plan *p, tdm_memory_figures *out);

/* Frees a shape cache (defined in executor.c). NULL-safe. */
void tdm_shape_cache_free(const tdm_allocator *a, struct tdm_shape_cache *sc);

#endif

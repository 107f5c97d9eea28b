/* Execution plans: the graph after passes, a device and kernel per node, and what each run
 * needs to know about value lifetimes.
 *
 * Placement here is the first slice: each node goes to the first device in the session's
 * preference list whose kernel table has it (the scheduler issue replaces this pass with the
 * cost-model placement; the plan's shape stays). */
#ifndef TDM_SCHED_PLAN_H
#define TDM_SCHED_PLAN_H

#include "backends/backend.h"
#include "core/threadpool.h"
#include "graph/graph.h"

typedef struct tdm_plan_node {
    const tdm_kernel_def *kernel; /* resolved from static dtypes; re-resolved if they differ */
    void *state;                  /* kernel->prepare() result */
} tdm_plan_node;

typedef struct tdm_plan {
    const tdm_allocator *alloc;
    tdm_graph *graph;      /* owned */
    tdm_device **devices;  /* borrowed from the environment, preference order */
    int n_devices;
    tdm_plan_node *nodes;  /* parallel to graph->nodes */
    int *release_after;    /* per value: index of the last node reading it (-1 = never) */
    tdm_threadpool *pool;  /* borrowed */
} tdm_plan;

typedef struct tdm_plan_options {
    bool no_fallback;
    int opt_level;
} tdm_plan_options;

/* Takes ownership of `graph` (on success and on failure). */
tdm_status *tdm_plan_create(const tdm_allocator *a, tdm_graph *graph, tdm_device **devices,
                            int n_devices, tdm_threadpool *pool, const tdm_plan_options *opts,
                            tdm_plan **out);
void tdm_plan_free(tdm_plan *p);

/* Runs the plan. inputs[i] is the tensor for graph input i (NULL = use its initializer).
 * outputs[j] receives a new tensor for graph output j. */
tdm_status *tdm_plan_run(tdm_plan *p, const tdm_tensor *const *inputs, tdm_tensor **outputs);

/* Evaluates one node on the CPU device with the given inputs (constant folding). */
tdm_status *tdm_eval_node(tdm_device *cpu, const tdm_allocator *a, const tdm_node *n,
                          const tdm_tensor *const *ins, tdm_tensor **outs);

#endif

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
#include <pthread.h>

#include "graph/graph.h"
#include "sched/memplan.h"

typedef struct tdm_plan_node {
    const tdm_kernel_def *kernel; /* resolved from static dtypes; re-resolved if they differ */
    void *state;                  /* kernel->prepare() result */
    unsigned kflags;              /* the device's TDM_KF_* flags for `kernel` on this node */
    int inplace_in;               /* the input whose memory output 0 takes (in place), or -1:
                                     kflags allow it, the plan runs on one host-memory device
                                     (no other device reads the input while the node writes),
                                     and the node is the input's only and last reader */
    bool shape_only0;             /* input 0 is read for its shape only (Shape, Size:
                                     tdm_node_reads_shape_only), asked once per plan rather
                                     than by name on every run */
} tdm_plan_node;

typedef struct tdm_plan {
    const tdm_allocator *alloc;
    tdm_graph *graph;      /* owned */
    tdm_device **devices;  /* the devices (owned by the environment), preference order */
    int n_devices;
    tdm_plan_node *nodes;  /* parallel to graph->nodes */
    int *release_after;    /* per value: index of the last node reading it (-1 = never) */
    const tdm_tensor **const_vals; /* per value: its constant (values[v].data) or NULL, the
                                      table a run's value table starts as (one copy instead
                                      of a walk over every value's record) */
    tdm_threadpool *pool;  /* borrowed */
    /* memory plans per input-shape signature, most recently used kept */
#define TDM_PLAN_MEM_SLOTS 4
    pthread_mutex_t mem_mu;
    tdm_memplan *mem[TDM_PLAN_MEM_SLOTS];
    uint64_t mem_clock;
    int *first_use;        /* per value: the node that produces it (-1 = input/constant) */
    /* constants (weights) copied to devices with memory of their own: uploaded on first use,
     * kept for the plan's life. [value * n_devices + device], guarded by mem_mu */
    tdm_tensor **const_on_device;
    /* a plan of the same session made for other input shapes (the latency strategy's plans
     * per shape class) shares the device copies of the constants both graphs hold (the same
     * bytes, tdm_graph_clone_sharing): const_twin[v] is that value in const_from's graph, whose
     * const_on_device slot (under const_from's mem_mu) holds the copy; -1 = the plan's own.
     * const_from outlives the plan. NULL / NULL without one. */
    struct tdm_plan *const_from;
    int *const_twin;
    /* placement record, for explaining the plan */
    bool *supported;       /* [node * n_devices + d] */
    double *node_ms;       /* [node * n_devices + d] predicted ms (NULL without profiles) */
    unsigned char *reason; /* per node: tdm_place_reason */
    double predicted_ms, predicted_copy_ms, predicted_copy_bytes;
    double single_ms[TDM_MAX_DEVICES];
    bool has_prediction;
    /* measured per-node times (options.profile), summed over `measured_runs`; mem_mu; and
     * the FLOPs and bytes of those runs (cost.h, from each run's own shapes: the graph's may
     * be symbolic), summed alike */
    double *measured_ms, *measured_flops, *measured_bytes;
    int64_t measured_runs;
    bool multi_device; /* nodes on more than one device: devices run concurrently */
    struct tdm_trace *trace; /* recorder when tracing is on (owned by the session), or NULL */
    struct tdm_monitor *monitor; /* per-device counters (sched/monitor.h; owned by the
                                    session, shared by its plans), or NULL */
    uint64_t model_hash;
    int measured_used;       /* node times taken from stored measurements */
    /* staging host memory of asynchronous copies (sched/xfer.h), kept across runs; created
     * on the first run under mem_mu */
    struct tdm_xfer_pool *staging;
    const tdm_settings *settings; /* the environment's (borrowed; the built-in defaults when
                                     the options gave none) */
    tdm_loop_bounds loop;         /* bounds of Loop / Scan nodes in a run of this plan */
    /* control-flow bodies planned once (sched/executor_body.c), a list under mem_mu */
    struct tdm_body *bodies;
    /* memory budgets and weight residency (sched/budget.h), or NULL without budgets */
    struct tdm_budget_plan *budget;
    /* device buffers of streamed weights, kept across runs (sched/stream.c), or NULL */
    struct tdm_stream_pool *stream_pool;
    /* a generator's KV cache placement (sched/budget.h), or NULL when the graph has none */
    struct tdm_kv_plan *kv;
} tdm_plan;

/* Stored measurements (sched/measured.c): apply replaces predicted node times with what
 * `tandem profile` measured for this model (returns how many); save stores this plan's. */
int tdm_measured_apply(tdm_plan *p);
tdm_status *tdm_measured_save(tdm_plan *p);

typedef struct tdm_plan_options {
    bool no_fallback;
    int opt_level;
    const char *placement; /* NULL/"auto": cost-model placement; "first": first device in
                              preference order with a kernel; a device name: that device,
                              others only for what it cannot run */
    const char *affinity;  /* rules "PATTERN=DEVICE;..." (PATTERN: op type, /regex/ on the
                              node name, or #FIRST-LAST node positions); may be NULL */
    int threads;           /* CPU threads (for device profiles) */
    bool profile;          /* record per-node times */
    uint64_t model_hash;   /* of the model bytes: keys stored measurements (0 = none) */
    const tdm_settings *settings; /* the environment's, outliving the plan (cache folder,
                                     copies, spin); NULL = the built-in defaults */
    tdm_loop_bounds loop;  /* resolved bounds of Loop / Scan nodes (0 = none) */
    const struct tdm_budget_options *budget; /* memory budgets per plan device (sched/budget.h);
                                                NULL = none */
    bool cpu_blocks;       /* the CPU's layout pass keeps channel blocks (no channels-last):
                              the latency strategy's plan for many images per thread */
    const tdm_tensor *const *cost_inputs; /* per graph input (entries may be NULL), or NULL:
                              the placement's cost model takes the symbolic dims of the
                              inputs from these tensors' shapes (else 1) */
    struct tdm_plan *const_from; /* a plan whose device copies of shared constants this one
                                    uses (tdm_plan.const_twin), or NULL */
} tdm_plan_options;

/* The slot of constant v's copy on device di (the plan's, or its const_from's for a shared
 * constant) and the lock that guards it. */
tdm_tensor **tdm_plan_const_slot(tdm_plan *p, int v, int di, pthread_mutex_t **mu);

/* Did the CPU's layout pass put p's tensors channels-last? */
bool tdm_plan_channels_last(const tdm_plan *p);

/* Takes ownership of `graph` (on success and on failure). */
tdm_status *tdm_plan_create(const tdm_allocator *a, tdm_graph *graph, tdm_device **devices,
                            int n_devices, tdm_threadpool *pool, const tdm_plan_options *opts,
                            tdm_plan **out);
void tdm_plan_free(tdm_plan *p);
/* Frees the caches of the plan's control-flow bodies (executor_body.c; tdm_plan_free). */
void tdm_exec_bodies_free(tdm_plan *p);

/* Runs the plan. inputs[i] is the tensor for graph input i (NULL = use its initializer).
 * outputs[j] receives a new tensor for graph output j. */
tdm_status *tdm_plan_run(tdm_plan *p, const tdm_tensor *const *inputs, tdm_tensor **outputs);
/* tdm_plan_run that stops with TDM_ERR_CANCELLED between nodes (and inside Loop/Scan) once
 * `ctl` says so (backends/kernel.h); ctl may be NULL and must outlive the call. */
tdm_status *tdm_plan_run_ctl(tdm_plan *p, const tdm_tensor *const *inputs, tdm_tensor **outputs,
                             const tdm_run_ctl *ctl);

/* tdm_plan_run_ctl with I/O binding: bound[j] (may be NULL; per graph output, NULL = not
 * bound) is a host tensor that graph output j is written into: the node making it writes
 * there directly (no copy, no allocation; it may be one of the run's inputs, then the node
 * updates it in place), and outputs[j] stays NULL. Its dtype and shape must be what the run
 * produces, else TDM_ERR_INVALID_ARGUMENT naming both. bound_hdr (may be NULL): storage for
 * g->n_outputs tensor headers the run uses for the views of bound tensors (none from the
 * heap then); it must not be shared by concurrent runs. A bound tensor must be in the memory
 * of the node making the output (host memory for host-memory devices; a plan state,
 * tdm_plan_state_new, for a device with memory of its own: updated in place or written whole,
 * with bound_hdr), else TDM_ERR_UNSUPPORTED. */
tdm_status *tdm_plan_run_bound(tdm_plan *p, const tdm_tensor *const *inputs,
                               tdm_tensor *const *bound, tdm_tensor *bound_hdr,
                               tdm_tensor **outputs, const tdm_run_ctl *ctl);

/* A state of the plan kept on a device between runs (a generator's KV cache, sched/budget.h
 * TDM_KV_DEVICE): a zeroed tensor of the given dtype and shape in the memory of the device
 * that first reads graph value v (host memory when that device has none), counted by the
 * plan's monitor as held until tdm_plan_state_free (its zeros as uploaded once). Bound as a
 * run's input and as the output that updates it in place, it is read and written where it
 * is: no copies per run. */
tdm_status *tdm_plan_state_new(tdm_plan *p, int v, tdm_dtype dtype, int rank, const int64_t *dims,
                               tdm_tensor **out);
void tdm_plan_state_free(tdm_plan *p, tdm_tensor *t);

/* Bytes of the arena planned for the most recently used input shapes (0 before a run with
 * static shapes has been planned). */
size_t tdm_plan_arena_bytes(tdm_plan *p);

/* Writes the plan's explanation (format: tdm_explain_format) into a new string. */
tdm_status *tdm_plan_explain(tdm_plan *p, int format, const tdm_allocator *a, char **out);

/* Evaluates one node on the CPU device with the given inputs (constant folding). */
tdm_status *tdm_eval_node(tdm_device *cpu, const tdm_allocator *a, const tdm_node *n,
                          const tdm_tensor *const *ins, tdm_tensor **outs);

#endif

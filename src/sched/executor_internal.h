/* Internal to the executor (src/sched/executor*.c); nothing outside src/sched includes this.
 *
 * Layout of the executor:
 *   executor.c        the run loop: tdm_plan_run, one node at a time (tdm_exec_run_node:
 *                     shape inference, outputs, kernel), subgraph bodies, memory plans.
 *   executor_copy.c   values in other memories: copies between host and devices (blocking,
 *                     or asynchronous through sched/xfer.c), device memory counters.
 *   executor_multi.c  plans over several devices: one host thread per device.
 *   executor_mem.c    memory plans per input-shape signature (arena, run scratch, cached
 *                     inferred shapes) and the plan's memory figures.
 *   executor_body.c   control-flow bodies planned once: kernels, prepared states, a memory
 *                     plan with cached shapes, kept per (plan, body, device).
 *
 * Between two nodes both run loops call tdm_exec_between_nodes(): the one place where a run
 * may stop early (e.g. a per-run cancel flag) before the next node starts. */
#ifndef TDM_SCHED_EXECUTOR_INTERNAL_H
#define TDM_SCHED_EXECUTOR_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/trace.h"
#include "ops/op.h"
#include "sched/monitor.h"
#include "sched/plan.h"
#include "sched/xfer.h"

#define MAX_IO 4096

typedef struct frame frame;
typedef struct tdm_body tdm_body;
struct frame {
    const tdm_graph *g;
    const tdm_tensor **vals; /* per value: the tensor, borrowed or owned */
    bool *owned;
    const int *release_after; /* per value: last reader's node index (-1 = keep) */
    const frame *parent;
    const tdm_plan *plan;     /* main graph only: devices, kernels */
    tdm_device *dev;          /* subgraphs: the device of the control-flow node */
    const tdm_allocator *a;
    tdm_threadpool *pool;
    tdm_memplan *mp;          /* arena for this run's intermediates, or NULL */
    size_t *record;           /* first run with new shapes: bytes of each value, or NULL */
    /* copies of values in other memories: [v * (1 + TDM_MAX_DEVICES) + 0] host copy,
     * [... + 1 + i] copy on the plan's device i; owned, freed with the value */
    tdm_tensor **replicas;
    double *times;            /* per node ms of this run (profiling), or NULL */
    tdm_value *shapes;        /* with times (main graph): the graph's values with this run's
                                 shapes, for the FLOPs and bytes of each node (a shallow copy:
                                 names and data borrowed), or NULL */
    double *work;             /* with shapes: per node FLOPs and bytes of this run from its
                                 input values (tdm_node_run_cost; [2 i], [2 i + 1]), -1 where
                                 the shapes tell, or NULL */
    tdm_xfer *xfer;           /* asynchronous copies of this run (sched/xfer.h), or NULL */
    const tdm_run_ctl *ctl;   /* the run's stop request (cancel, deadline; subgraphs take
                                 their parent's), or NULL */
    const tdm_loop_bounds *loop; /* the plan's Loop / Scan bounds (subgraphs: the parent's) */
    bool scratch;             /* vals/owned belong to mp (not freed with the frame) */
    tdm_body *body;           /* subgraphs: what the body keeps between runs, or NULL */
    /* I/O binding (main graph only): per graph output, the caller's tensor the output is
     * written into (NULL = made by the run), and header storage for the views of them
     * (NULL = views from the heap) */
    tdm_tensor *const *bound;
    tdm_tensor *bound_hdr;
    struct tdm_stream_run *stream; /* streamed weights of this run (main graph), or NULL */
};

/* Profiling: the shapes of node n's outputs in this run (outs) into f->shapes; no-op without. */
/* Profiling, after node i (n) ran: its outputs' shapes into f->shapes, its FLOPs and bytes
 * from its input values into f->work (where the op's work depends on them). */
void tdm_exec_note_run(frame *f, size_t i, const tdm_node *n, const tdm_tensor *const *ins,
                       tdm_tensor *const *outs);

/* ---- executor.c ---- */
/* Runs node n on dev: infers output shapes, allocates outputs (from the frame's arena when
 * planned), executes kernel k (or finds one when k is NULL or does not take the types). */
tdm_status *tdm_exec_run_node(tdm_device *dev, const tdm_kernel_def *k, void *state,
                              const tdm_allocator *a, tdm_threadpool *pool, const tdm_node *n,
                              const tdm_tensor *const *ins, tdm_tensor **outs, frame *f);
void tdm_exec_trace_kernel(tdm_trace *tr, tdm_device *dev, const tdm_node *n, size_t i,
                           int64_t t0, int64_t t1, const uint64_t *flows, int n_flows);
/* Launch windows (backend.h version 4): the key of the segment starting at node `start`
 * (plan, node, input shapes), and whether node i of the main graph may run in one. */
uint64_t tdm_exec_segment_key(const frame *f, size_t start);
bool tdm_exec_windowed(const frame *f, size_t i);
/* Whether reading value v on dev may copy it (an upload or download, with the events that
 * go with them): a launch window ends before such a node and opens after its copies, as a
 * device cannot hold copies and their events in a graph (CUDA: "an event inside the
 * segment", seen on every segment of an H200 run before this). Conservative: true unless
 * the value is in dev's memory, in host memory for a host device, or already copied. */
bool tdm_exec_input_moves(const frame *f, int v, const tdm_device *dev);
/* Whether running node n on dev copies any of its inputs (tdm_exec_input_moves; the inputs
 * it reads only the shape of, and those its kernel reads on the host where they are, do not
 * count). */
bool tdm_exec_node_moves(const frame *f, const tdm_node *n, const tdm_device *dev);
/* Whether the plan's kernel of node n (of f's plan graph) reads input k on the host where it
 * is (TDM_KF_HOST_READS). */
bool tdm_exec_reads_on_host(const frame *f, const tdm_node *n, int k);
/* Input k of node n (of f's plan graph) for its kernel on dev: tdm_exec_input_for, except
 * that Shape / Size take the tensor where it is, and so do the inputs the kernel reads on the
 * host (a tensor in a third device's memory comes to the host). */
tdm_status *tdm_exec_input_at(frame *f, const tdm_node *n, int k, tdm_device *dev,
                              const tdm_tensor **out, uint64_t *flow);
/* Checked between two nodes of a run (before node `next` starts): NULL to go on, else the
 * status the run ends with. Hook for stopping a run early (cancellation). */
tdm_status *tdm_exec_between_nodes(const frame *f, size_t next);

/* ---- executor_mem.c ---- */
/* Hash of the input dtypes and shapes: the key of memory plans. */
uint64_t tdm_exec_shapes_key(const tdm_graph *g, const tdm_tensor *const *inputs);
/* Takes the plan's memory plan for `key` when it is free (f->mp, with its scratch), else
 * prepares to record sizes (f->record) when none exists yet. */
void tdm_exec_acquire_memplan(tdm_plan *p, uint64_t key, frame *f, size_t nv);
/* Gives f->mp back, or builds a memory plan from the sizes recorded by a successful run. */
void tdm_exec_release_memplan(tdm_plan *p, frame *f, uint64_t key, bool ok);
/* The shape cache of node n for this run (NULL when the run has none or n's shapes depend
 * on values other than constants); *node gets n's index. */
struct tdm_shape_cache *tdm_exec_shape_cache_of(const frame *f, const tdm_node *n,
                                                const tdm_tensor *const *ins, size_t *node);
/* Fills the output shapes of node i from the cache when its inputs match; true on a hit. */
bool tdm_exec_shape_cache_get(const struct tdm_shape_cache *sc, size_t i, const tdm_node *n,
                              const tdm_tensor *const *ins, tdm_value_info *out);
void tdm_exec_shape_cache_prefetch(const struct tdm_shape_cache *sc, size_t i, int stage,
                                   size_t n_sigs);
/* Stores what infer gave for node i with these inputs. */
void tdm_exec_shape_cache_put(struct tdm_shape_cache *sc, size_t i, const tdm_node *n,
                              const tdm_tensor *const *ins, const tdm_value_info *out);

/* The run scratch of a new memory plan for graph g (tdm_memplan: vals .. shapes); false
 * when out of memory. */
bool tdm_exec_memplan_scratch(const tdm_allocator *a, const tdm_graph *g, tdm_memplan *mp);

/* ---- executor_body.c ---- */
/* The plan's cache of `body` run on `dev` (made on first use), held by the caller until
 * release; NULL when another run holds it or memory is short (the body runs uncached). */
tdm_body *tdm_exec_body_acquire(tdm_plan *p, const tdm_graph *body, tdm_device *dev);
void tdm_exec_body_release(tdm_plan *p, tdm_body *b);
/* The body's last-reader table (the frame's release_after). */
const int *tdm_exec_body_release_after(const tdm_body *b);
/* Scratch of n_values pointers for the run holding the body (its inputs and outer values,
 * looked up before the memory plan is chosen). */
const tdm_tensor **tdm_exec_body_probe(tdm_body *b);
/* Fills probe[v] for each value v the body reads from enclosing frames (parent: the frame
 * of the control-flow node): from the frame of the graph that defines the name, found once
 * when the cache was made, else by name (tdm_exec_lookup_outer). */
void tdm_exec_body_outer(const tdm_body *b, const frame *parent, const tdm_tensor **probe);
/* The tensor named `name` in f or the nearest enclosing frame that holds one, or NULL. */
const tdm_tensor *tdm_exec_lookup_outer(const frame *f, const char *name);
/* Node i's kernel and prepared state, looked up and prepared on the node's first run (NULL:
 * tdm_exec_run_node finds one per run). */
void tdm_exec_body_kernel(tdm_body *b, size_t i, const tdm_tensor *const *ins,
                          const tdm_allocator *a, const tdm_kernel_def **k, void **state);
/* TDM_KF_WRITES_ALL when k is the kernel the body keeps for node n, else 0. */
unsigned tdm_exec_body_kflags(const tdm_body *b, const tdm_node *n, const tdm_kernel_def *k);
/* Key of a body run's memory plan: its inputs' and outer values' dtypes and shapes. */
uint64_t tdm_exec_body_key(const frame *f);
/* The body's memory plan for key, or NULL; then *record says whether the run should record
 * its sizes for one (the second run in a row with these shapes). */
tdm_memplan *tdm_exec_body_memplan(tdm_body *b, uint64_t key, bool *record);
/* Builds the body's memory plan from the sizes a successful run recorded. */
void tdm_exec_body_record(tdm_body *b, const tdm_allocator *a, size_t *record, uint64_t key);

/* ---- executor_copy.c ---- */
int tdm_exec_device_index(const frame *f, const tdm_device *dev);
tdm_monitor *tdm_exec_mon(const frame *f);
int tdm_exec_mon_host_slot(const tdm_plan *p);
void tdm_exec_mon_hold(const frame *f, const tdm_tensor *t, int sign);
void tdm_exec_mon_copy(const frame *f, const tdm_device *dev, bool upload, size_t bytes, int v);
/* The frame's table of copies, made on first need. */
tdm_status *tdm_exec_replicas(frame *f);
/* Starts (asynchronous source) or makes (blocking source) the host copy of device value v. */
tdm_status *tdm_exec_host_copy(frame *f, int v, tdm_tensor **host);
/* take_outputs: the output's host copy when an asynchronous download made one, else NULL. */
tdm_status *tdm_exec_staged_output(frame *f, int v, const tdm_tensor **ready);
/* End of a run's asynchronous copies; on their failure the outputs handed out are taken back. */
tdm_status *tdm_exec_finish(frame *f, tdm_status *st, tdm_tensor **outputs, size_t n_out);
/* The tensor of value v in the memory `dev` works on (host for host-memory devices). */
tdm_status *tdm_exec_input_for(frame *f, int v, tdm_device *dev, const tdm_tensor **out,
                               uint64_t *flow);
/* Frees the copies of value v. */
void tdm_exec_drop_replicas(frame *f, int v);

/* ---- executor_stream.c (streamed weights, sched/budget.h) ---- */
typedef struct tdm_stream_run tdm_stream_run;
typedef struct tdm_stream_pool tdm_stream_pool;
/* Starts a run of a plan with a budget on a device with memory of its own: one such run at
 * a time (the budget is one run's), the activations of these input shapes checked against
 * the budget (a refit streams more when they need more room), the run's streamed weights;
 * tdm_stream_end gives every buffer back and the plan to the next run (also after a
 * failure). inputs: per graph input (NULL = its initializer). */
tdm_status *tdm_stream_begin(frame *f, const tdm_tensor *const *inputs);
void tdm_stream_end(frame *f);
/* Before node i: uploads the streamed weights of the units up to the window ahead. */
tdm_status *tdm_stream_prefetch(frame *f, size_t i);
/* Whether value v is a streamed weight of this run for dev; then tdm_stream_input gives its
 * device copy (uploading it now if no prefetch did) and its upload's trace flow. */
bool tdm_stream_applies(const frame *f, int v, const tdm_device *dev);
tdm_status *tdm_stream_input(frame *f, int v, tdm_device *dev, const tdm_tensor **out,
                             uint64_t *flow);
/* After node i: the streamed weights it was the last reader of go back to the ring. */
void tdm_stream_after(frame *f, size_t i);

/* ---- executor_multi.c ---- */
/* Runs a multi-device plan: one host thread per device (the caller serves device 0). */
tdm_status *tdm_exec_parallel(frame *f);

#endif

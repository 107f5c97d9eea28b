/* Kernels: the unit of work a backend runs for one node, and the kernel table entry that is
 * the single source for dispatch and for "supported" (see backend.h). */
#ifndef TDM_BACKENDS_KERNEL_H
#define TDM_BACKENDS_KERNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/clock.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/threadpool.h"
#include "graph/graph.h"

typedef struct tdm_kernel_ctx tdm_kernel_ctx;

/* How a run is asked to stop early (tdm_session_cancel, tdm_run_options.timeout_ms): owned
 * by whoever started the run and alive until the run returns. The executor checks it between
 * nodes; Loop and Scan between iterations. `cancelled` is written with __atomic_store_n by
 * the canceller and read only through tdm_run_ctl_check (any thread). */
typedef struct tdm_run_ctl {
    int cancelled;       /* 0, then 1 once cancelled */
    int64_t deadline_ns; /* tdm_now_ns() time the run stops at; 0 = none (set before the run) */
    int64_t timeout_ms;  /* what gave the deadline (for the message) */
} tdm_run_ctl;

/* NULL while the run may go on; else a TDM_ERR_CANCELLED status (caller frees). c may be NULL. */
static inline tdm_status *tdm_run_ctl_check(const tdm_run_ctl *c) {
    if (!c) return NULL;
    if (__atomic_load_n(&c->cancelled, __ATOMIC_ACQUIRE))
        return TDM_ERR(TDM_ERR_CANCELLED, "the run was cancelled");
    if (c->deadline_ns && tdm_now_ns() >= c->deadline_ns)
        return TDM_ERR(TDM_ERR_CANCELLED, "the run's deadline (timeout_ms %lld) passed",
                       (long long)c->timeout_ms);
    return NULL;
}

/* Bounds of one run of a Loop or Scan node (tdm_session_options.loop_max_iterations and
 * loop_timeout_ms, resolved by the session; see "Resource limits" in tandem.h). */
typedef struct tdm_loop_bounds {
    int64_t max_iterations; /* iterations of one Loop node; 0 = no bound */
    int64_t timeout_ms;     /* wall time of one Loop or Scan node; 0 = no bound */
} tdm_loop_bounds;

struct tdm_kernel_ctx {
    const tdm_node *node;
    int opset;
    int n_in;
    const tdm_tensor *const *in; /* in[i] == NULL: omitted optional input */
    int n_out;
    tdm_tensor **out;            /* allocated from the inferred shapes; NULL for omitted
                                    outputs and for outputs of TDM_OP_DATA_DEPENDENT ops,
                                    which the kernel creates with alloc_output */
    tdm_threadpool *pool;        /* intra-op threads (may be NULL = serial) */
    const tdm_allocator *alloc;  /* for scratch memory and outputs */
    void *state;                 /* what the kernel's prepare() returned, or NULL */
    /* Creates out[i] with the given dtype and shape (data-dependent ops). */
    tdm_status *(*alloc_output)(tdm_kernel_ctx *ctx, int i, tdm_dtype dtype, int rank,
                                const int64_t *dims);
    /* Runs a subgraph of this node (If/Loop/Scan bodies): `in` bind the body's inputs in
     * order, values the body reads from enclosing scopes come from the running graph, and
     * out[0..n_out) receive new tensors (caller frees). */
    tdm_status *(*run_subgraph)(tdm_kernel_ctx *ctx, const struct tdm_graph *body, int n_in,
                                const tdm_tensor *const *in, int n_out, tdm_tensor **out);
    void *exec; /* the executor's frame (for run_subgraph) */
    struct tdm_device *device; /* the device running the kernel */
    /* The run's stop request, or NULL when the run cannot be cancelled: long kernels (Loop,
     * Scan) call tdm_run_ctl_check(ctx->run_ctl) now and then and return its status. */
    const tdm_run_ctl *run_ctl;
    /* The run's Loop / Scan bounds; NULL = the built-in defaults (core/settings.h). */
    const tdm_loop_bounds *loop;
    /* The SIMD variants of the CPU kernels (backends/cpu/cpu_simd.h), set by the execute of a
     * device that runs CPU kernels (cpu, test); NULL elsewhere: the portable ones are used. */
    const struct tdm_cpu_simd *cpu_simd;
};

typedef tdm_status *(*tdm_kernel_fn)(tdm_kernel_ctx *ctx);

/* Bit for a dtype in a kernel's type mask. */
#define TDM_T(dt) (1u << (dt))
/* Bits of the containers (core/tensor.h; their dtypes are >= 32): tdm_kernel_type_bit. */
#define TDM_T_SEQUENCE (1u << 29)
#define TDM_T_MAP (1u << 30)
#define TDM_T_OPTIONAL (1u << 31)
#define TDM_T_CONTAINERS (TDM_T_SEQUENCE | TDM_T_MAP | TDM_T_OPTIONAL)
static inline uint32_t tdm_kernel_type_bit(tdm_dtype dt) {
    return dt == TDM_SEQUENCE ? TDM_T_SEQUENCE
           : dt == TDM_MAP    ? TDM_T_MAP
           : dt == TDM_OPTIONAL ? TDM_T_OPTIONAL
           : (unsigned)dt < 29 ? TDM_T(dt)
                               : 0;
}
#define TDM_T_FLOATS (TDM_T(TDM_FLOAT) | TDM_T(TDM_DOUBLE) | TDM_T(TDM_FLOAT16) | TDM_T(TDM_BFLOAT16))
#define TDM_T_SINTS (TDM_T(TDM_INT8) | TDM_T(TDM_INT16) | TDM_T(TDM_INT32) | TDM_T(TDM_INT64))
#define TDM_T_UINTS (TDM_T(TDM_UINT8) | TDM_T(TDM_UINT16) | TDM_T(TDM_UINT32) | TDM_T(TDM_UINT64))
#define TDM_T_INTS (TDM_T_SINTS | TDM_T_UINTS)
#define TDM_T_NUMERIC (TDM_T_FLOATS | TDM_T_INTS)
#define TDM_T_ALL (TDM_T_NUMERIC | TDM_T(TDM_BOOL) | TDM_T(TDM_STRING))

typedef struct tdm_kernel_def {
    const char *domain; /* "" = ai.onnx */
    const char *op;
    int since, until;   /* opset range, inclusive; until 0 = open */
    int type_input;     /* input whose dtype selects the kernel; -1 = any (no typed input) */
    uint32_t types;     /* accepted dtypes of that input (TDM_T masks) */
    tdm_kernel_fn run;
    /* Optional: builds per-node state once at plan time (e.g. packed weights, primitives).
     * `in` holds constant inputs where known (others NULL). */
    tdm_status *(*prepare)(const tdm_node *node, int opset, int n_in,
                           const tdm_tensor *const *in, const tdm_allocator *a, void **state);
    /* Optional: frees what prepare made. */
    void (*release)(void *state, const tdm_allocator *a);
    /* What the kernel promises (TDM_KF_* below); 0 = nothing. Each entry states its own:
     * another kernel of the same op promises nothing for it. */
    unsigned flags;
} tdm_kernel_def;

/* Kernel flags (tdm_kernel_def.flags). WRITES_ALL: the kernel writes every byte of every
 * output it does not allocate itself, so the executor need not zero planned output memory
 * first. INPLACE(i): output 0 may be given the memory of input i (0..14) when this node is
 * that input's last reader: the kernel reads each element of input i no later than it writes
 * the same element of output 0 and never reads an element it has overwritten; it writes all
 * of output 0. The executor does this only for arena memory on host-memory devices. */
#define TDM_KF_WRITES_ALL 1u
#define TDM_KF_INPLACE(i) ((unsigned)((i) + 1) << 8)
#define TDM_KF_INPLACE_INPUT(flags) ((int)(((flags) >> 8) & 0xfu) - 1) /* -1: none */
/* HOST_READS(mask): on a device with memory of its own, the kernel reads inputs i (bit i,
 * i < 16: shape and index arguments such as Reshape's shape or Slice's starts) on the host
 * or not at all, and takes them in host memory or in its own device's: the executor passes
 * such an input where it is (host or that device) instead of uploading it, so a 32-byte
 * shape costs no copy and no event. */
#define TDM_KF_HOST_READS(mask) (((unsigned)(mask) & 0xffffu) << 16)
#define TDM_KF_HOST_READ(flags, i) ((i) >= 0 && (i) < 16 && (((flags) >> (16 + (i))) & 1u))

/* What kernel k promises for `node`: its flags, without INPLACE(i) when the node has no
 * input i. */
unsigned tdm_kernel_flags(const tdm_kernel_def *k, const tdm_node *node);

/* Whether table entry k is for this node: domain ("ai.onnx" is ""), op, the node's opset
 * within the range, and the dtype of the type-deciding input (`in_types[type_input]`) in
 * k->types. The one lookup of an op: backends with tables of their own (entries that embed
 * a tdm_kernel_def) match with it and add their own checks; run functions never look the op
 * up again. */
bool tdm_kernel_matches(const tdm_kernel_def *k, const tdm_node *node, const tdm_dtype *in_types,
                        int n_in);

/* Finds the kernel for a node in a table: the first entry that tdm_kernel_matches. NULL if
 * none. */
const tdm_kernel_def *tdm_kernel_find(const tdm_kernel_def *const *tables, const int *counts,
                                      int n_tables, const tdm_node *node,
                                      const tdm_dtype *in_types, int n_in);

#endif

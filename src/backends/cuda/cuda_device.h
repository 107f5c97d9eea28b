/* The CUDA backend, private header: the device object and the contract between the device
 * (cuda_backend.c, cuda_mem.c) and the kernel table entries (cuda_blas.c, cuda_dnn.c and the
 * k_ops*.c files of tandem's own kernels).
 *
 * The backend is a plugin, libtandem_cuda.so, loaded at run time by src/backends/
 * cuda_loader.c (see cuda_plugin.h). It carries its own copy of the few tandem internals
 * its kernels use (core/, graph/graph.c, ops/infer_util.c, ops/nn_conv.c, backends/kernel.c;
 * see CMakeLists.txt), so it links with --no-undefined and needs nothing from the process.
 *
 * ---- For kernel writers -------------------------------------------------------------------
 * A kernel table entry's run(ctx) gets:
 *   cuda_device *d = cuda_ctx_device(ctx);   the device (ctx->device->ctx)
 *   d->stream                                the compute stream: launch everything there, never
 *                                            on the legacy default stream, never synchronize
 *                                            (a kernel only enqueues work)
 *   d->cublas, d->lt, d->cudnn               handles already bound to d->stream
 *   cuda_precision_of(d)                     the arithmetic asked for (CUDA_PREC_FP32 default)
 *   ctx->in[i]->data / ctx->out[i]->data     device pointers (cudaMalloc'd memory of this
 *                                            device); omitted inputs are NULL tensors
 *   cuda_scratch(d, bytes, &p)               device scratch, stream-ordered: free it with
 *                                            cuda_scratch_free(d, p) once the kernels that use
 *                                            it are enqueued (the memory is reused only after
 *                                            they have run)
 *   cuda_read_ints(ctx, i, ...)              the values of a small int32/int64 input (shape,
 *                                            axes, starts...): copies to the host and waits
 *   cuda_check(err, "what")                  a cudaError_t as a status (NULL on success)
 * execute() holds the device lock around run(): handles and the stream are not shared with
 * other threads while a kernel enqueues. With CUDA graphs on (cuda_graph.c) run() may be
 * called later than execute(), inside a stream capture, with copies of ctx (no exec, no
 * alloc_output, host inputs copied): enqueue only stream-ordered work (kernels, *Async
 * copies between device buffers, cuda_scratch), no cudaMalloc and no host synchronisation;
 * cuda_read_ints/cuda_to_host are fine (they keep the segment out of graphs). Outputs are allocated (uninitialised) by the
 * executor from the inferred shapes; data-dependent ops call ctx->alloc_output.
 *
 * ---- Kernel tables ---------------------------------------------------------------------
 * Each family file defines `const cuda_kernel_entry cuda_kernels_<family>[]` and
 * `const int cuda_kernels_<family>_count`. cuda_backend.c searches the families listed in
 * CUDA_FAMILIES below, in order (the first match wins). The families of tandem's own kernels
 * (k_ops*.c) are referenced weakly: a family that no file defines yet is skipped, so the
 * plugin builds while they are being written. Names reserved for them:
 *   k_ops.c -> ops, k_ops_eltwise.c -> ops_eltwise, k_ops_reduce.c -> ops_reduce,
 *   k_ops_shape.c -> ops_shape, k_ops_misc.c -> ops_misc, k_ops_attn.c -> ops_attn,
 *   k_ops_quant.c -> ops_quant
 * (any file may define any of these names; ask to have a name added to the list).
 * Entry matching: domain, op, opset range, and ctx input `def.type_input`'s dtype in
 * `def.types`; every other present input must have the type input's dtype unless its bit
 * is set in int_inputs (int32/int64), bool_inputs (bool) or any_inputs (anything); then
 * accept() (optional) may still refuse the node (attributes it does not handle). */
#ifndef TDM_BACKENDS_CUDA_CUDA_DEVICE_H
#define TDM_BACKENDS_CUDA_CUDA_DEVICE_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"

/* ---- kernel tables ---- */

typedef struct cuda_kernel_entry {
    tdm_kernel_def def;
    uint32_t int_inputs;  /* inputs that must be int32 or int64 */
    uint32_t bool_inputs; /* inputs that must be bool */
    uint32_t any_inputs;  /* inputs of any dtype */
    /* Optional: false refuses the node (unsupported attributes, dtype combinations...). */
    bool (*accept)(const tdm_node *node, const tdm_dtype *in_types, int n_in);
} cuda_kernel_entry;

/* Families in search order: blas (MatMul, Gemm, FusedMatMul: cuda_blas.c) and dnn (Conv,
 * ConvTranspose, pooling, BatchNormalization, FusedConv: cuda_dnn.c) are the device's own;
 * the ops_* families are tandem's kernels (weak, see above). */
#define CUDA_OWN_FAMILIES(X) X(blas) X(dnn)
#define CUDA_OPS_FAMILIES(X)                                                             \
    X(ops) X(ops_eltwise) X(ops_reduce) X(ops_shape) X(ops_misc) X(ops_attn) X(ops_quant)

#define CUDA_X_(f)                                                                       \
    extern const cuda_kernel_entry cuda_kernels_##f[];                                   \
    extern const int cuda_kernels_##f##_count;
CUDA_OWN_FAMILIES(CUDA_X_)
#undef CUDA_X_
#define CUDA_X_(f)                                                                       \
    extern const cuda_kernel_entry cuda_kernels_##f[] __attribute__((weak));             \
    extern const int cuda_kernels_##f##_count __attribute__((weak));
CUDA_OPS_FAMILIES(CUDA_X_)
#undef CUDA_X_

/* ---- the device ---- */

/* Arithmetic for float32 models (tdm_session_options.precision). FP32: exact float32 (no
 * TF32 tensor cores). TF32: matrix products and convolutions on TF32 tensor cores. FP16 /
 * BF16: matrix products and convolutions take their operands in that type and accumulate
 * in float32; tensors stay float32 in memory, element-wise kernels compute in float32. */
typedef enum cuda_precision {
    CUDA_PREC_FP32,
    CUDA_PREC_TF32,
    CUDA_PREC_FP16,
    CUDA_PREC_BF16
} cuda_precision;

#define CUDA_STAGING_SLOTS 2
#define CUDA_STAGING_BYTES ((size_t)8 << 20)

typedef struct cuda_device {
    const tdm_allocator *a;
    const tdm_logger *log;
    const tdm_settings *settings; /* the environment's (outlives the device); never NULL */
    tdm_device *dev;          /* the tdm_device this is the ctx of */
    int ordinal;              /* CUDA device number */
    int cc_major, cc_minor;   /* compute capability */
    int sm_count;
    size_t total_mem;
    char name[96];
    pthread_mutex_t lock;     /* held by execute() and by anything using the handles */
    cudaStream_t stream;      /* compute */
    cudaStream_t h2d, d2h;    /* copies (ordered against the compute stream by events) */
    cublasHandle_t cublas;
    cublasLtHandle_t lt;
    cudnnHandle_t cudnn;
    /* memory (cuda_mem.c): a pool of its own for stream-ordered allocation, freed memory
     * kept for reuse; mem_limit bytes at most in use (0 = the device's memory) */
    cudaMemPool_t pool;
    _Atomic size_t mem_limit;
    _Atomic bool d2h_pending; /* an asynchronous download may still read freed buffers */
    /* pinned staging for uploads: slots used in turn, each free once its event completed */
    pthread_mutex_t copy_lock;
    void *staging[CUDA_STAGING_SLOTS];
    cudaEvent_t staging_done[CUDA_STAGING_SLOTS];
    int staging_next;
    /* under copy_lock: events that order the copy streams against the compute stream */
    cudaEvent_t ev_compute, ev_h2d, ev_d2h;
    /* cuBLASLt / cuDNN workspace, grown on demand, used on the compute stream under lock */
    void *ws;
    size_t ws_size;
    _Atomic int precision;    /* cuda_precision */
    /* CUDA graphs (cuda_graph.c). `gate` (recursive) is held by every user of the compute
     * stream outside a kernel (execute, buffers, copies, events, synchronize) and through a
     * whole capture, so nothing of another thread lands in a graph; order: gate, then lock
     * or copy_lock. */
    pthread_mutex_t gate;
    bool gate_ready;
    struct cuda_graphs *graphs; /* under gate; NULL until a window opens */
    _Atomic bool graphs_on;     /* settings->cuda_graphs / configure("cuda_graphs") */
    _Atomic unsigned ws_gen;    /* bumped whenever the workspace moves */
    bool capturing;             /* the compute stream is being captured (gate held) */
    _Atomic long graph_hits, graph_captures, graph_fallbacks, graph_refused;
    /* Gather's index check inside a CUDA-graph launch window (k_ops_shape.c): a word of
     * mapped pinned memory the kernels set when an index is out of range, read by the host
     * after it waited for the device (cuda_index_check), instead of the read-back after the
     * Gather that runs elsewhere: that wait kept every segment with a Gather out of the
     * graphs ("a kernel reads device memory on the host", 19 segments of an H200 run). The
     * flag is the device's: with graphs on, a wait reports a bad index of any run on the
     * device since the last wait (graphs are off by default). gather_node: a Gather issued
     * since the last check (under gate) */
    volatile int *index_bad;   /* host view; NULL: the read-back after each Gather instead */
    int *index_bad_dev;        /* the kernels' view */
    char gather_node[96];
} cuda_device;

/* The error of an out-of-range Gather index seen since the last check (the flag cleared), or
 * NULL. Called after the host waited for the device's work. */
tdm_status *cuda_index_check(cuda_device *d);

static inline cuda_device *cuda_ctx_device(const tdm_kernel_ctx *ctx) {
    return (cuda_device *)ctx->device->ctx;
}
static inline cuda_precision cuda_precision_of(cuda_device *d) {
    return (cuda_precision)atomic_load(&d->precision);
}

/* ---- errors ---- */
/* NULL for cudaSuccess, else TDM_ERR_DEVICE "cuda: <what>: <cudaGetErrorString> (<name>)"
 * (TDM_ERR_OUT_OF_MEMORY for cudaErrorMemoryAllocation). */
tdm_status *cuda_check(cudaError_t err, const char *what);
tdm_status *cuda_blas_check(cublasStatus_t err, const char *what);
tdm_status *cuda_dnn_check(cudnnStatus_t err, const char *what);

/* ---- memory (cuda_mem.c) ---- */
/* Device memory on the compute stream's order (at least 256 bytes, 256-byte aligned). Out
 * of memory (or over the limit) is TDM_ERR_OUT_OF_MEMORY; the device stays usable. */
tdm_status *cuda_mem_alloc(cuda_device *d, size_t size, void **p);
void cuda_mem_free(cuda_device *d, void *p);
static inline tdm_status *cuda_scratch(cuda_device *d, size_t size, void **p) {
    return cuda_mem_alloc(d, size, p);
}
static inline void cuda_scratch_free(cuda_device *d, void *p) { cuda_mem_free(d, p); }
/* The shared workspace of at least `size` bytes (valid until the next call; compute stream,
 * device lock held). */
tdm_status *cuda_workspace(cuda_device *d, size_t size, void **p);

/* ---- cuBLASLt (cuda_blas.c) ---- */
/* Largest power of two (up to 256) dividing the address: cuBLASLt's heuristic assumes
 * 256-byte aligned operands unless told otherwise. */
static inline uint32_t cuda_align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a & (al - 1))) al >>= 1;
    return al;
}
/* A matmul preference for cuBLASLt's heuristic: at most 32 MiB of workspace and the operands'
 * alignments (cuBLASLt's A, B, C, D in bytes, cuda_align_of). */
tdm_status *cuda_lt_preference(const uint32_t align[4], cublasLtMatmulPreference_t *pref);
/* Copies (blocking) `size` bytes of device memory to the host, after the compute stream's
 * queued work. */
tdm_status *cuda_to_host(cuda_device *d, void *host, const void *dev_ptr, size_t size);
/* Reads a 1-D/scalar int32/int64 input i (on this device or on the host) into vals (at most
 * max, *count set). Errors name `what` and the node. */
tdm_status *cuda_read_ints(const tdm_kernel_ctx *ctx, int i, const char *what, int64_t *vals,
                           int max, int *count);
/* Pool, staging and streams: set up at device creation, released at close. */
tdm_status *cuda_mem_init(cuda_device *d);
void cuda_mem_release(cuda_device *d);

/* The device interface members of cuda_mem.c (buffers, copies, events, host memory). */
tdm_status *cuda_buffer_alloc(tdm_device *dev, size_t size, void **buf);
void cuda_buffer_free(tdm_device *dev, void *buf);
tdm_status *cuda_upload(tdm_device *dev, void *buf, const void *host, size_t size);
tdm_status *cuda_upload_queued(tdm_device *dev, void *buf, const void *host, size_t size,
                               void *after, void **done);
tdm_status *cuda_download(tdm_device *dev, void *host, const void *buf, size_t size);
tdm_status *cuda_download_async(tdm_device *dev, void *host, const void *buf, size_t size,
                                void **event);
tdm_status *cuda_host_alloc(tdm_device *dev, size_t size, void **host);
tdm_status *cuda_host_register(tdm_device *dev, void *host, size_t size);
void cuda_host_unregister(tdm_device *dev, void *host);
void cuda_host_free(tdm_device *dev, void *host);
tdm_status *cuda_event_record(tdm_device *dev, void **event);
tdm_status *cuda_event_wait(tdm_device *dev, tdm_device *owner, void *event);
tdm_status *cuda_event_sync(tdm_device *dev, void *event);
void cuda_event_free(tdm_device *dev, void *event);

/* ---- CUDA graphs (cuda_graph.c) ----
 * The launch windows of backend.h (segment_begin/_end) captured once per key and replayed;
 * see the top of cuda_graph.c. Every cuda_graph_* call below is made with d->gate held. */
#define CUDA_GRAPH_ENTRIES 16
tdm_status *cuda_graph_init(cuda_device *d);    /* the gate; the cuda_graphs setting */
void cuda_graph_release(cuda_device *d);        /* before cuda_mem_release; logs the counts */
tdm_status *cuda_graph_configure(cuda_device *d, const char *value); /* "0" | "1" */
tdm_status *cuda_segment_begin(tdm_device *dev, uint64_t key);       /* take the gate */
tdm_status *cuda_segment_end(tdm_device *dev, bool ok);
/* execute(): true when the kernel was taken care of (held back, or issued with the held-back
 * ones; *st its status), false when the caller runs it. */
bool cuda_graph_execute(cuda_device *d, const tdm_kernel_def *k, tdm_kernel_ctx *ctx,
                        tdm_status **st);
/* buffer_alloc / buffer_free: true when served from a window's arena / held back. */
bool cuda_graph_alloc(cuda_device *d, size_t size, void **p);
bool cuda_graph_free(cuda_device *d, void *p);
/* Before the host or another device can observe this device (`what` does: a download, an
 * event record, a synchronize): held-back kernels are issued first. */
tdm_status *cuda_graph_observe(cuda_device *d, const char *what);
/* Before a kernel reads device memory on the host (cuda_to_host): an error inside a capture. */
tdm_status *cuda_graph_host_read(cuda_device *d);
/* Whether the calling thread has a launch window open (warming or collecting a segment). */
bool cuda_graph_window_open(cuda_device *d);

/* ---- activations shared by cuda_blas.c / cuda_dnn.c (FusedConv, FusedMatMul) ---- */
typedef enum cuda_act { CUDA_ACT_NONE, CUDA_ACT_RELU, CUDA_ACT_GELU, CUDA_ACT_GELU_TANH,
                        CUDA_ACT_OTHER } cuda_act;

/* Is `dev` a device of this plugin (its events are cudaEvent_t)? */
bool cuda_is_own_device(const tdm_device *dev);

#endif

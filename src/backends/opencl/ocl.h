/* The OpenCL backend, private header: the device object, program/kernel cache, launch and
 * buffer helpers shared by the op family files (ocl_<family>.c).
 *
 * Layout: ocl_backend.c discovers devices and implements tdm_device_iface; ocl_program.c
 * builds one program per family (OpenCL C source embedded in the family file) with an
 * on-disk binary cache; ocl_util.c holds the helpers below; each family file holds its
 * OpenCL source, its run functions and its kernel table. Kernels run float32 only.
 *
 * Threading: tdm_device_iface.execute holds the device lock while a run function sets
 * kernel arguments and enqueues (cl_kernel objects are shared and not thread-safe); buffer
 * allocation, upload and download go straight to OpenCL, which is thread-safe for those.
 * All work goes to one in-order queue per device, so commands run in issue order; uploads
 * return before the copy is done (the v2 contract), downloads block, and the version 3
 * members (ocl_async.c) add events, download_async and mapped staging memory. */
#ifndef TDM_BACKENDS_OPENCL_OCL_H
#define TDM_BACKENDS_OPENCL_OCL_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"

/* Op families: one program and one kernel table each. */
#define OCL_FAMILIES(X)                                                                  \
    X(gemm)                                                                              \
    X(conv)                                                                              \
    X(pool)                                                                              \
    X(eltwise)                                                                           \
    X(misc)                                                                              \
    X(reduce)                                                                            \
    X(shape)

enum {
#define OCL_X_(f) OCL_PROG_##f,
    OCL_FAMILIES(OCL_X_)
#undef OCL_X_
    OCL_PROG_COUNT
};

/* A kernel table entry: the common kernel definition plus what the inputs other than the
 * type-deciding one must be: inputs whose bit is set in int_inputs must be int32/int64
 * (indices, shapes, axes), in bool_inputs bool; every other present input must be float32. accept (optional)
 * rejects nodes whose attributes ask for what the kernel does not do (training mode...). */
typedef struct ocl_kernel_entry {
    tdm_kernel_def def;
    uint32_t int_inputs;
    bool (*accept)(const tdm_node *node);
    uint32_t bool_inputs; /* inputs that must be bool (Where's condition) */
} ocl_kernel_entry;

#define OCL_X_(f)                                                                        \
    extern const ocl_kernel_entry ocl_kernels_##f[];                                     \
    extern const int ocl_kernels_##f##_count;                                            \
    extern const char ocl_src_##f[];
OCL_FAMILIES(OCL_X_)
#undef OCL_X_

/* OpenCL C written inline: OCL_SRC(code) makes a string literal of the code (no
 * preprocessor lines inside; put #defines in ordinary string literals before it). */
#define OCL_SRC(...) #__VA_ARGS__ "\n"

#define OCL_MAX_KERNELS 96
#define OCL_POOL_MAX 64
#define OCL_KERNEL_NAME 40

typedef struct ocl_program {
    cl_program prog;
    bool built;
    char *error; /* build failure message, kept so that later uses fail the same way */
    int n_kernels;
    char names[OCL_MAX_KERNELS][OCL_KERNEL_NAME];
    cl_kernel kernels[OCL_MAX_KERNELS];
} ocl_program;

typedef struct ocl_device {
    const tdm_allocator *a;
    const tdm_logger *log;
    const tdm_settings *settings; /* the environment's (outlives the device); never NULL */
    cl_platform_id platform;
    cl_device_id id;
    cl_context ctx;
    cl_command_queue queue;
    bool is_cpu;      /* CL_DEVICE_TYPE_CPU (PoCL): kernels tuned for caches, not local memory */
    bool unified;     /* host-unified memory: buffers are CL_MEM_ALLOC_HOST_PTR (zero-copy) */
    bool gpu_style;   /* kernels for GPUs: local-memory GEMM tiles, a work-group per row in
                         row reductions; else (CPU devices) register blocks and a work-item
                         per row. the setting opencl_kernels (gpu|cpu) overrides the device type */
    size_t max_wg;    /* CL_DEVICE_MAX_WORK_GROUP_SIZE */
    cl_uint cus;      /* CL_DEVICE_MAX_COMPUTE_UNITS */
    cl_ulong max_alloc;
    cl_ulong local_mem;
    char ident[512];  /* platform/device/driver versions: part of the binary cache key */
    pthread_mutex_t lock;
    ocl_program progs[OCL_PROG_COUNT];
    cl_mem dummy;     /* a small buffer bound to absent optional buffer arguments */
    /* freed buffers kept for reuse (ocl_buffer.c): fresh buffers cost page faults on
     * first touch, and a plan frees and allocates the same sizes every run */
    pthread_mutex_t pool_lock;
    int pool_n;
    size_t pool_bytes, pool_cap;
    size_t pool_size[OCL_POOL_MAX];
    cl_mem pool_mem[OCL_POOL_MAX];
    /* staging host memory handed out by host_alloc (ocl_async.c), guarded by host_lock */
    pthread_mutex_t host_lock;
    struct ocl_host_block *host_blocks;
} ocl_device;

/* ---- the asynchronous members of the device interface (ocl_async.c) ---- */
tdm_status *ocl_event_record(tdm_device *dev, void **event);
tdm_status *ocl_event_wait(tdm_device *dev, tdm_device *owner, void *event);
tdm_status *ocl_event_sync(tdm_device *dev, void *event);
void ocl_event_free(tdm_device *dev, void *event);
tdm_status *ocl_upload_async(tdm_device *dev, void *buf, const void *host, size_t size);
tdm_status *ocl_download_async(tdm_device *dev, void *host, const void *buf, size_t size,
                               void **event);
tdm_status *ocl_host_alloc(tdm_device *dev, size_t size, void **host);
void ocl_host_free(tdm_device *dev, void *host);
tdm_status *ocl_configure(tdm_device *dev, const char *key, const char *value);
/* Unmaps and releases every staging block still allocated (device close). */
void ocl_host_blocks_release(ocl_device *d);

/* Window attributes (kernel_shape, strides, dilations, pads) that fit the kernels' at most 3
 * spatial dims: the accept of Conv and pooling entries. find_kernel does not see shapes, so a
 * node without any of these attributes is claimed and checked again when it runs. */
bool ocl_window_attrs_ok(const tdm_node *node);

/* ---- errors ---- */
const char *ocl_errname(cl_int err);
/* TDM_ERR_DEVICE "opencl: <what>: CL_... (<code>)". */
tdm_status *ocl_error(cl_int err, const char *what);

/* ---- programs and kernels (ocl_program.c) ---- */
/* The kernel `name` of family program `prog`, building the program on first use (from the
 * binary cache when it holds a build for this device and source). Call with the device
 * lock held. */
tdm_status *ocl_kernel(ocl_device *d, int prog, const char *name, cl_kernel *out);
void ocl_programs_release(ocl_device *d);

/* ---- buffers (ocl_buffer.c) ---- */
/* A device buffer of at least `size` bytes (contents undefined), from the reuse pool when
 * it holds one of the same rounded size. */
tdm_status *ocl_buf_alloc(ocl_device *d, size_t size, cl_mem *out);
/* Back to the pool (or released when the pool is full). Safe while queued commands still
 * use the buffer: every later user runs after them on the in-order queue. */
void ocl_buf_free(ocl_device *d, cl_mem m);
void ocl_buf_pool_release(ocl_device *d);

/* ---- launching ---- */
typedef struct ocl_arg {
    size_t size;
    const void *ptr; /* NULL with size > 0: local memory of that many bytes */
} ocl_arg;
#define OCL_ARG(v) {sizeof(v), &(v)}
#define OCL_LOCAL(bytes) {(bytes), NULL}

/* Sets the arguments of kernel `name` and enqueues it over `dims` dimensions. gws is
 * rounded up to a multiple of lws (kernels check their bounds); lws NULL picks a default
 * 1-D work-group size. */
tdm_status *ocl_launch(ocl_device *d, int prog, const char *name, int dims, const size_t *gws,
                       const size_t *lws, int n_args, const ocl_arg *args);
/* 1-D launch over n items of a FOR_ITEMS kernel: appends the `chunk` argument. `work`
 * (ocl_launchn) is the number of elements one item touches (a row's length): CPU devices
 * give a work-item at least ~1024 elements. */
tdm_status *ocl_launch1(ocl_device *d, int prog, const char *name, int64_t n, int n_args,
                        const ocl_arg *args);
tdm_status *ocl_launchn(ocl_device *d, int prog, const char *name, int64_t n, int64_t work,
                        int n_args, const ocl_arg *args);
/* Launch of a FOR_SEGS kernel over `rows` rows of L elements: appends seg, nseg and chunk. */
tdm_status *ocl_launch_rows(ocl_device *d, int prog, const char *name, int64_t rows, int64_t L,
                            int n_args, const ocl_arg *args);
/* The default 1-D work-group size for this device. */
size_t ocl_wg1(const ocl_device *d);

/* ---- buffers ---- */
/* Temporary device buffers that live for one kernel run (released at ocl_scope_end: the
 * OpenCL runtime keeps them until queued commands that use them finish). The first
 * OCL_SCOPE_INLINE sit in the scope; more go to a table on the heap (d->a) that grows as
 * needed, so there is no limit on their number. */
#define OCL_SCOPE_INLINE 16
typedef struct ocl_scope {
    ocl_device *d;
    size_t n;                       /* temporaries held: mem[] first, then more[] */
    cl_mem mem[OCL_SCOPE_INLINE];
    cl_mem *more;                   /* heap table past OCL_SCOPE_INLINE (NULL until needed) */
    size_t more_cap;
} ocl_scope;

ocl_device *ocl_ctx_device(const tdm_kernel_ctx *ctx);
void ocl_scope_begin(ocl_scope *s, ocl_device *d);
void ocl_scope_end(ocl_scope *s);
/* A temporary buffer of `bytes` (uninitialised), or holding a copy of `host` when non-NULL. */
tdm_status *ocl_temp(ocl_scope *s, size_t bytes, const void *host, cl_mem *out);
/* The device buffer of input i (NULL input: the dummy buffer). An input in host memory is
 * uploaded to a temporary of the scope. */
tdm_status *ocl_in(ocl_scope *s, const tdm_kernel_ctx *ctx, int i, cl_mem *out);
/* The device buffer of output i (must be on this device). */
tdm_status *ocl_out(const tdm_kernel_ctx *ctx, int i, cl_mem *out);
/* Reads a 1-D/scalar int32/int64 input (on the host or on this device) into vals. */
tdm_status *ocl_read_ints(const tdm_kernel_ctx *ctx, int i, const char *what, int64_t *vals,
                          int max, int *count);
/* Device-to-device copy of `bytes` (no-op for 0). */
tdm_status *ocl_copy(ocl_device *d, cl_mem src, size_t src_off, cl_mem dst, size_t dst_off,
                     size_t bytes);

/* ---- shapes ---- */
/* Packs up to 8 dims into a long8 argument (unused lanes = fill). */
void ocl_pack8(int64_t out[8], int n, const int64_t *vals, int64_t fill);
/* Broadcast of inputs onto an output shape, collapsed: adjacent dims merge when every
 * input is either broadcast over both or contiguous over both. Result: rank r (<= 8; 0 for
 * a scalar output treated as rank 1 of size 1), dims, and per input the element strides
 * (0 = broadcast). */
typedef struct ocl_bcast {
    int rank;
    int64_t dims[TDM_MAX_RANK];
    int64_t strides[3][TDM_MAX_RANK];
} ocl_bcast;
void ocl_bcast_plan(int n_in, const tdm_tensor *const *ins, const tdm_tensor *out, ocl_bcast *b);

/* ---- shared OpenCL C: activation epilogue and batch offsets ---- */
/* Activation codes of the epilogue (GEMM, Conv, fused ops). */
enum { OCL_ACT_NONE, OCL_ACT_RELU, OCL_ACT_LEAKY, OCL_ACT_CLIP, OCL_ACT_SIGMOID, OCL_ACT_TANH,
       OCL_ACT_HSIGMOID, OCL_ACT_HSWISH, OCL_ACT_GELU, OCL_ACT_GELU_TANH };

/* UNPACK8(v, a) declares long a[8] holding the lanes of the long8 kernel argument v (helper
 * functions take such arrays: long8 parameters of non-kernel functions change the ABI on
 * some CPU targets and make PoCL print warnings). */
/* FOR_ITEMS(i, n): the body runs for this work-item's items i < n. Kernels launched with
 * ocl_launch1 take `long chunk` as their last parameter: a work-item handles `chunk`
 * consecutive items (CPU devices: long runs that vectorise and few work-groups; GPUs:
 * chunk 1, neighbouring work-items on neighbouring items).
 * FOR_SEGS(r, j0, j1, rows, L): row kernels whose rows may be long or few: items are
 * segments [j0, j1) of row r, `seg` long, `nseg` per row (kernel parameters `long seg,
 * long nseg` before `chunk`; see ocl_launch_rows). */
#define OCL_COMMON_SRC                                                                   \
    "#define UNPACK8(v, a) long a[8] = {(v).s0, (v).s1, (v).s2, (v).s3, (v).s4, (v).s5, " \
    "(v).s6, (v).s7}\n"                                                                  \
    "#define FOR_ITEMS(i, n) for (long i = (long)get_global_id(0) * chunk, "              \
    "i##_end = min(i + chunk, (long)(n)); i < i##_end; i++)\n"                          \
    "#define FOR_SEGS(r, j0, j1, rows, L) FOR_ITEMS(r##_it, (rows) * nseg) "              \
    "for (long r = r##_it / nseg, j0 = (r##_it % nseg) * seg, j1 = min(j0 + seg, "       \
    "(long)(L)), r##_once = 1; r##_once; r##_once = 0)\n"                               \
    OCL_SRC(                                                                             \
    float act_apply(float v, int act, float p, float q) {                               \
        switch (act) {                                                                   \
        case 1: return v > 0.0f ? v : 0.0f;                                              \
        case 2: return v < 0.0f ? v * p : v;                                             \
        case 3: return fmin(fmax(v, p), q);                                              \
        case 4: return 1.0f / (1.0f + exp(-v));                                          \
        case 5: return tanh(v);                                                          \
        case 6: return fmax(0.0f, fmin(1.0f, p * v + q));                                \
        case 7: return v * fmax(0.0f, fmin(1.0f, v / 6.0f + 0.5f));                      \
        case 8: return 0.5f * v * (1.0f + erf(v * 0.70710678118654752f));               \
        case 9: return 0.5f * v * (1.0f + tanh(0.7978845608028654f *                     \
                                             (v + 0.044715f * v * v * v)));             \
        }                                                                                \
        return v;                                                                        \
    }                                                                                    \
    /* offsets of entry b of a batch over dims d[0..nd) in three operands */             \
    void batch_offsets(long b, int nd, const long *d, const long *a0, const long *a1,   \
                       const long *a2, long *o0, long *o1, long *o2) {                  \
        long x = 0, y = 0, z = 0;                                                        \
        for (int i = nd - 1; i >= 0; i--) {                                              \
            long idx = b % d[i];                                                         \
            b /= d[i];                                                                   \
            x += idx * a0[i];                                                            \
            y += idx * a1[i];                                                            \
            z += idx * a2[i];                                                            \
        }                                                                                \
        *o0 = x;                                                                         \
        *o1 = y;                                                                         \
        *o2 = z;                                                                         \
    })

/* Element-wise kernel generators (eltwise and misc programs), after OCL_COMMON_SRC:
 *   UNARY(name, expr of v, p, q)      y[i] = expr
 *   BINARY_T(name, T, expr of a, b)   Y (of type T) = expr, as name_nn (same shapes),
 *                                     name_ns / name_sn (a scalar side), name_bc (broadcast
 *                                     rows over the collapsed shape); BINARY(name, expr) is
 *                                     BINARY_T(name, float, expr). See ocl_binary. */
#define OCL_ELTWISE_SRC                                                                  \
    OCL_SRC(                                                                             \
    void bcast2(long i, int rank, const long *d, const long *x, const long *y, long *oa, \
                long *ob) {                                                              \
        long a = 0, b = 0;                                                               \
        for (int k = rank - 1; k >= 0; k--) {                                            \
            long c = i % d[k];                                                           \
            i /= d[k];                                                                   \
            a += c * x[k];                                                               \
            b += c * y[k];                                                               \
        }                                                                                \
        *oa = a;                                                                         \
        *ob = b;                                                                         \
    })                                                                                   \
    "#define UNARY(name, expr) __kernel void name(__global const float *x, "             \
    "__global float *y, long n, float p, float q, long chunk) { "                        \
    "FOR_ITEMS(i, n) { float v = x[i]; y[i] = (expr); } }\n"                             \
    "#define BINARY_T(name, T, expr) "                                                   \
    "__kernel void name##_nn(__global const float *A, __global const float *B, "         \
    "__global T *Y, long n, long chunk) { "                                              \
    "FOR_ITEMS(i, n) { float a = A[i], b = B[i]; Y[i] = (expr); } } "                    \
    "__kernel void name##_ns(__global const float *A, __global const float *B, "         \
    "__global T *Y, long n, long chunk) { float b = B[0]; "                              \
    "FOR_ITEMS(i, n) { float a = A[i]; Y[i] = (expr); } } "                              \
    "__kernel void name##_sn(__global const float *A, __global const float *B, "         \
    "__global T *Y, long n, long chunk) { float a = A[0]; "                              \
    "FOR_ITEMS(i, n) { float b = B[i]; Y[i] = (expr); } } "                              \
    "__kernel void name##_bc(__global const float *A, __global const float *B, "         \
    "__global T *Y, long rows, long L, long saL, long sbL, int rank, long8 dims, "        \
    "long8 sa, long8 sb, long seg, long nseg, long chunk) { "                            \
    "UNPACK8(dims, d); UNPACK8(sa, x); UNPACK8(sb, y); "                                 \
    "FOR_SEGS(r, j0, j1, rows, L) { long oa, ob; bcast2(r, rank, d, x, y, &oa, &ob); "   \
    "__global T *Yr = Y + r * L; "                                                       \
    "for (long j = j0; j < j1; j++) { float a = A[oa + j * saL], b = B[ob + j * sbL]; "  \
    "Yr[j] = (expr); } } }\n"                                                            \
    "#define BINARY(name, expr) BINARY_T(name, float, expr)\n"

/* Runs the BINARY kernel `base` of program `prog`: y (shape Y) = op(a (shape A), b (shape
 * B)) with numpy broadcasting; a may be y itself when A has Y's shape. */
tdm_status *ocl_binary(ocl_device *d, int prog, const char *base, cl_mem a, const tdm_tensor *A,
                       cl_mem b, const tdm_tensor *B, cl_mem y, const tdm_tensor *Y);

/* ---- GEMM (ocl_gemm.c), shared with Conv and the fused ops ----
 * C[b] (M x N, row-major, contiguous; batch b at c_off + b*M*N)
 *   = act(alpha * op(A[b]) op(B[b]) + beta * bias[b] + z[b])
 * A(m, k) = a[a_off + batch_a + m*sam + k*sak], B(k, n) = b[b_off + batch_b + k*sbk + n*sbn],
 * bias(m, n) = bias[bias_off + batch_bias + m*sbm + n*sbn2] (has_bias); with has_z, the
 * residual z (laid out like C) is added before the activation act. Batch index b is
 * decomposed over bdims[0..nbd) (row-major) with per-operand strides (0 = broadcast). */
typedef struct ocl_gemm {
    int64_t M, N, K, batch;
    cl_mem a, b, c, bias;
    int64_t a_off, sam, sak;
    int64_t b_off, sbk, sbn;
    int64_t c_off;
    int64_t bias_off, sbm, sbn2;
    bool has_bias;
    bool has_z;  /* residual: + z[z_off + b*M*N + m*N + n] before the activation */
    cl_mem z;
    int64_t z_off;
    float alpha, beta;
    int nbd;
    int64_t bdims[8], bsa[8], bsb[8], bsbias[8];
    int act;
    float act_p, act_q;
} ocl_gemm;
/* ---- element-wise (ocl_eltwise.c): dst (shape of dst_shape) = src broadcast ---- */
tdm_status *ocl_bcast_copy(ocl_device *d, cl_mem src, const tdm_tensor *src_shape, cl_mem dst,
                           const tdm_tensor *dst_shape);

/* ---- reductions (ocl_reduce.c): y[r] = reduce(x[r*cols .. r*cols + cols)) ---- */
enum { OCL_RED_SUM, OCL_RED_MEAN, OCL_RED_MAX, OCL_RED_MIN, OCL_RED_PROD, OCL_RED_SUMSQ,
       OCL_RED_L1, OCL_RED_L2, OCL_RED_LOGSUM };
tdm_status *ocl_reduce_rows(ocl_device *d, int op, cl_mem x, cl_mem y, int64_t rows,
                            int64_t cols);
/* Softmax (LogSoftmax with lg) of rows of `cols` contiguous values; x may equal y. */
tdm_status *ocl_softmax_rows(ocl_device *d, cl_mem x, cl_mem y, int64_t rows, int64_t cols,
                             bool lg);

/* Panel buffers of the CPU-device GEMM kept across ocl_gemm_run_ws calls, so that a loop
 * of GEMMs (a convolution image by image) packs into the same two temporaries instead of
 * allocating two per call. Safe because the queue is in order: the packing of one call runs
 * after the GEMM of the previous one has read the panels. Zero-initialise; the buffers
 * belong to the scope passed with it. */
typedef struct ocl_gemm_ws {
    cl_mem ap, bp;
    size_t ap_bytes, bp_bytes;
} ocl_gemm_ws;

void ocl_gemm_init(ocl_gemm *g);
tdm_status *ocl_gemm_run(ocl_device *d, ocl_scope *s, const ocl_gemm *g);
/* ocl_gemm_run with panel buffers from (and kept in) ws; ws NULL: fresh ones. */
tdm_status *ocl_gemm_run_ws(ocl_device *d, ocl_scope *s, const ocl_gemm *g, ocl_gemm_ws *ws);
/* Bytes of the two panel buffers a GEMM of `batch` MxK by KxN products uses on CPU devices
 * (0 on GPU-style devices); false on overflow. */
bool ocl_gemm_panel_bytes(const ocl_device *d, int64_t M, int64_t N, int64_t K, int64_t batch,
                          size_t *a_bytes, size_t *b_bytes);
/* FusedConv / FusedMatMul "activation" attributes -> OCL_ACT_* code and parameters. */
tdm_status *ocl_fused_activation(const tdm_node *node, int *act, float *p, float *q);
bool ocl_fused_activation_known(const tdm_node *node);

#endif

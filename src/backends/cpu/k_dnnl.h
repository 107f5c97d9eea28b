/* CPU kernels of the dnnl family (oneDNN fast paths): what the k_dnnl*.c files share.
 * Private to the family.
 *
 * Every kernel of the family has the same shape:
 *  - prepare() reads the attributes, notes which input is a constant weight and returns a
 *    state. It never fails for a node it cannot speed up: it returns a state marked
 *    `generic`, and run() then hands the node to the generic kernel (dn_fallback).
 *  - run() builds the key of the real input shapes (and the thread count), finds or builds
 *    the entry for that key in the state's cache (dn_cache_get: built once per shape, under
 *    the state's lock; a shape oneDNN declines gets an entry marked `generic`, so it is tried
 *    once), and executes it.
 *  - Constant weights are reordered into the layout the primitive chose (format_tag_any)
 *    when the entry is built and kept in the entry; other weights are reordered per run.
 *  - Activations (X, Y) are plain row-major tensors; a primitive that prefers a blocked
 *    layout gets reorders in and out inside the kernel. The blocked-layout ops (BlockedConv,
 *    BlockedPool; ops/fused.h) take and give channel-blocked tensors as they are: their
 *    primitives are made for that layout and need no reorders.
 *  - Threads: oneDNN always runs single-threaded (OpenMP thread count 1 in the calling
 *    thread and in tandem's workers: no OpenMP team is ever started). The kernels split the
 *    work into independent items (row blocks of a matmul, output-channel or group blocks of
 *    a convolution per image, channel blocks of a pooling) and run them on the session's
 *    thread pool (dn_parallel), which balances them dynamically: OpenMP's static partition
 *    with spin-waiting threads collapses when the machine is busy (measured 6x slower
 *    than single-threaded at 2 threads on a loaded 2-core machine), the pool does not.
 *  - Scratchpads are user-managed, so a primitive may run from several threads at once: the
 *    convolution and pooling kernels give each work item its part of one scratch buffer
 *    that the node's state keeps from run to run (dn_scratch_get); other executions
 *    allocate theirs per call. Entries are never removed before
 *    release(), so a pointer to one stays valid without the lock. */
#ifndef TDM_CPU_K_DNNL_H
#define TDM_CPU_K_DNNL_H

#include <dnnl.h>
#include <pthread.h>
#include <stdatomic.h>

#include "backends/cpu/cpu_kernels.h"

#define DN_CACHE 8    /* shapes remembered per node (more: built and dropped per run) */
#define DN_KEY 40     /* int64 words in a shape key */
#define DN_MAX_ARGS 8 /* arguments of one primitive execution */

/* A primitive plus the scratchpad bytes it wants; p NULL = nothing to do (e.g. a reorder
 * between equal layouts). */
typedef struct dn_prim {
    dnnl_primitive_t p;
    size_t scratch;
} dn_prim;

/* Head of every cache entry (op entries embed it first). */
typedef struct dn_entry {
    int nkey;
    int64_t key[DN_KEY];
    bool generic; /* oneDNN declined this shape: use the generic kernel */
    bool temp;    /* not in the cache (it was full): dn_entry_done frees it */
} dn_entry;

typedef struct dn_state dn_state;
/* Builds the entry for the current inputs (op-specific; e->generic starts true). Returns
 * NULL with e->generic still set when oneDNN cannot do the shape. */
typedef tdm_status *(*dn_build_fn)(dn_state *s, tdm_kernel_ctx *ctx, dn_entry *e);
/* Frees what an entry holds (not the entry itself). */
typedef void (*dn_clear_fn)(dn_state *s, dn_entry *e);

/* Common head of every dnnl kernel state (op states embed it first). */
struct dn_state {
    bool generic;              /* the whole node runs on the generic kernel */
    const tdm_allocator *alloc;
    dnnl_engine_t eng;
    pthread_mutex_t mu;
    bool mu_init;
    const tdm_tensor *wconst;  /* the constant weight tensor seen at prepare, or NULL */
    size_t entry_size;
    dn_clear_fn clear;
    int n_entries;
    dn_entry *entries[DN_CACHE];
    /* the node's run scratch, kept between runs (dn_scratch_get) */
    atomic_flag arena_busy;
    void *arena;
    size_t arena_size;
    char impl[96]; /* what the last built entry runs (dn_note_impl; under mu) */
    char refused[64]; /* the reference implementation a build refused (dn_refuse_ref) */
};

/* ---- k_dnnl.c ---- */

/* Allocates a state of `size` bytes (a struct that starts with dn_state) whose cache entries
 * have `entry_size` bytes. Without a oneDNN engine the state comes back generic. */
tdm_status *dn_state_new(const tdm_allocator *a, size_t size, size_t entry_size,
                         dn_clear_fn clear, dn_state **out);
/* release() of every family kernel: destroys the entries, the engine and the lock. */
void dn_release(void *state, const tdm_allocator *a);

/* Runs the node with the generic kernel (the nn / fused families' table entry for it). */
tdm_status *dn_fallback(tdm_kernel_ctx *ctx);

/* Number of threads of this run (the session's intra-op count). */
int dn_threads(tdm_kernel_ctx *ctx);
/* OpenMP thread count 1 in the calling thread; returns the previous count for dn_omp_end. */
int dn_omp_begin(void);
void dn_omp_end(int prev);

/* Finds or builds the entry for `key`; *e is NULL after an error. */
tdm_status *dn_cache_get(dn_state *s, tdm_kernel_ctx *ctx, const int64_t *key, int nkey,
                         dn_build_fn build, dn_entry **e);
/* After a run: frees a temporary (uncached) entry. */
void dn_entry_done(dn_state *s, dn_entry *e);

/* ---- implementations: a oneDNN reference kernel is never accepted on a hot path ----
 * After creating a primitive descriptor the op files read its implementation name; a
 * reference one (name starting "ref") makes them try their next choice (another layout, the
 * activation applied by own code instead of as a post-op, and last the generic kernel), and
 * log at INFO what they did. */
/* oneDNN's implementation name of pd ("jit:avx512_core", "ref:any", ...; "?" if unknown). */
const char *dn_pd_impl(const_dnnl_primitive_desc_t pd);
/* The same for a created primitive ("" for none: an identity reorder). */
const char *dn_prim_impl(const dn_prim *p);
/* The implementation is oneDNN's reference code. */
bool dn_pd_is_ref(const_dnnl_primitive_desc_t pd);
/* True (and pd destroyed, its name kept in s->refused) when pd is oneDNN's reference code:
 * the caller tries its next choice. dn_cache_get logs a build that ends on the generic
 * kernel because of it. Call from a build function. */
bool dn_refuse_ref(dn_state *s, dnnl_primitive_desc_t pd);
/* Records what the node runs (kernel_impl; call under s->mu, i.e. from a build function). */
void dn_note_impl(dn_state *s, const char *fmt, ...) TDM_PRINTF(2, 3);
/* Logs through the CPU device's logger, naming the node (nothing without a CPU device). */
void dn_log(tdm_kernel_ctx *ctx, tdm_log_level level, const char *fmt, ...) TDM_PRINTF(3, 4);
/* A short name of md's layout ("abcd", "aBcd16b", "acdb", "?"), for messages. */
const char *dn_md_layout(const dnnl_memory_desc_t *md, char *buf, size_t size);

/* Channel block of the layouts oneDNN's JIT kernels use on this CPU (16 with AVX-512, else 8). */
/* Quantization constants: an 8-bit scalar (absent = 0; false for another shape or type), an
 * 8-bit tensor of zeros (absent counts), a float scalar. */
bool dn_q8_scalar(const tdm_tensor *t, int32_t *v);
bool dn_q8_zeros(const tdm_tensor *t);
bool dn_f32_scalar(const tdm_tensor *t, float *v);
/* A clip post-op [lo, hi] on attr (the int8 kernels' folded Relu / Clip); false if refused. */
bool dn_attr_clip(dnnl_primitive_attr_t attr, float lo, float hi);
/* The same clip (when `clip`) followed by Y's zero point yzp as an eltwise linear post-op
 * (x + yzp, the last step before oneDNN saturates and rounds): what a dst zero point does,
 * in the same f32 arithmetic. */
bool dn_attr_q8_out(dnnl_primitive_attr_t attr, bool clip, float lo, float hi, int32_t yzp);
/* A QConv / QConvTranspose / QMatMul node's qmin / qmax attributes narrower than Y's 8-bit type
 * yt: true with the clip bounds relative to Y's zero point yzp in *lo, *hi (for dn_attr_clip). */
bool dn_q8_clip(const tdm_node *node, tdm_dtype yt, int32_t yzp, float *lo, float *hi);
/* The requantisation constants of an int8 convolution or matmul: *oscale = n output scales
 * x_scale * w_scale[i] / y_scale (w_scale per tensor, or n values), as the reference kernels
 * compute them, and *bias = a copy of the int32 bias b (nb values; NULL when b is NULL). Both
 * from `a` (the caller frees them); false when out of memory. */
bool dn_q8_requant(const tdm_allocator *a, float xs, const tdm_tensor *ws, float ys, int64_t n,
                   const tdm_tensor *b, int64_t nb, float **oscale, int32_t **bias);
/* oneDNN's ISA has 8-bit dot products without saturation (AVX512-VNNI or AVX-VNNI). */
bool dn_has_vnni(void);
/* ---- int8 without VNNI: exact halves ----
 * Without VNNI, oneDNN's u8 x s8 kernels sum the products of two adjacent input channels (or
 * K rows) in a saturating int16 (vpmaddubsw): x0 w0 + x1 w1 must fit, which full-range
 * weights (quantizers map a channel's largest |w| to 127) and bytes of X above 128 break
 * (nudenet's YOLO stem: 58 steps off, its class scores garbage). Exact remedy: each weight
 * w = a + b, a = trunc(w / 2), b = w - a (|a|, |b| <= 64, so 255 (|a0| + |a1|) <= 32640), and
 * the product runs over X twice against [a | b] (X' = [X, X] along channels or K): the same
 * int32 sum, one requantisation, exact on any CPU, twice the work. A node keeps the halves
 * only when some two same-sign weights of a channel can pass int16 with a byte of 255
 * (dn_q8_lim < 255), and a run takes them only when X's largest byte (or its zero point) is
 * above that limit (a vectorised max of X). VNNI CPUs: never (their dot products are 32-bit).
 *
 * The largest byte x for which x (w0 + w1) fits int16 for ANY two same-sign weights of any
 * channel (whatever pairing the kernel uses; always >= 128); 255 when none can saturate.
 * Channel m's weights: w[m * mstride + k * kstride], k < per. */
int dn_q8_lim(const int8_t *w, int64_t M, int64_t per, int64_t mstride, int64_t kstride);
/* a[i] = trunc(w[i] / 2), b[i] = w[i] - a[i] for i < n. */
void dn_q8_halves(const int8_t *w, int8_t *a, int8_t *b, int64_t n);
/* This run needs the halves: lim < 255, X is uint8 and its largest byte (or the zero point
 * xzp, which padding reads) is above lim. Reads all of X (the device's max_u8, cpu_simd.h). */
bool dn_q8_halves_use(int lim, const tdm_kernel_ctx *ctx, const tdm_tensor *x, int32_t xzp);
/* ---- int8 (signed) X without VNNI: run as uint8 ----
 * oneDNN's s8 x s8 kernels without VNNI shift X by 128 and halve the weights (inexact: 3-4
 * steps measured). Exact instead: x ^ 0x80 is the byte x + 128, and with the zero point + 128
 * every difference x - zp, so every sum, is the same; the node then runs the uint8 path (with
 * its halves where large bytes can saturate). dn_q8_flip: a node whose X zero point zp is
 * int8 runs so on this CPU (no VNNI). */
bool dn_q8_flip(const tdm_tensor *zp);
/* view = *x as uint8 at dst (x->count bytes, 64-byte aligned), dst[i] = x[i] ^ 0x80 (SSE2
 * where there is, the pool's threads over 64 KiB blocks). */
tdm_status *dn_q8_flip_x(tdm_kernel_ctx *ctx, const tdm_tensor *x, uint8_t *dst, tdm_tensor *view);
/* The run's CPU device has precision bf16 (cpu_device.h): convolutions and matmuls build
 * bf16 primitives (bf16 source and weights, f32 accumulation and results). */
bool dn_bf16(const tdm_kernel_ctx *ctx);
/* oneDNN dispatches to AMX (avx512_core_amx) in this process. */
bool dn_amx(void);
int64_t dn_block(void);

/* Plain row-major descriptor with the given dims (float32). */
void dn_md_plain(dnnl_memory_desc_t *md, int nd, const int64_t *dims);
/* Descriptor with explicit strides (elements). */
void dn_md_strided(dnnl_memory_desc_t *md, int nd, const int64_t *dims, const int64_t *strides);
/* Descriptor by format tag (dnnl_format_tag_any allowed); false if oneDNN refuses. */
bool dn_md_tag(dnnl_memory_desc_t *md, int nd, const int64_t *dims, dnnl_format_tag_t tag);
/* Channel-blocked tag (aBc8b, aBcd16b, ...) for nd dims, channels-last (acb, acdb, acdeb)
 * for block TDM_BLOCK_CHANNELS_LAST (ops/fused.h); 0 if none. */
dnnl_format_tag_t dn_tag_blocked(int nd, int64_t block);
/* How md lays out dim 1 (channels): 1 = plain row-major, B = blocks of B channels
 * (aBcd<B>b), TDM_BLOCK_CHANNELS_LAST = channels-last, 0 = something else. */
int64_t dn_channel_layout(const dnnl_memory_desc_t *md);
size_t dn_md_bytes(const dnnl_memory_desc_t *md);

/* Creates the primitive for `pd` (destroys pd) and notes its scratchpad size. */
tdm_status *dn_prim_from_pd(dnnl_primitive_desc_t pd, dn_prim *out);
/* A reorder from `from` to `to`; out->p stays NULL when the layouts are equal. */
tdm_status *dn_reorder_new(dnnl_engine_t eng, const dnnl_memory_desc_t *from,
                           const dnnl_memory_desc_t *to, dn_prim *out);
void dn_prim_clear(dn_prim *p);
/* Primitive attributes with a user-managed scratchpad. */
tdm_status *dn_attr_new(dnnl_primitive_attr_t *attr);
/* Queries one of the pd's memory descriptors into *out. */
void dn_query_md(const_dnnl_primitive_desc_t pd, dnnl_query_t what, dnnl_memory_desc_t *out);

/* One execution argument. */
typedef struct dn_arg {
    int arg;
    const dnnl_memory_desc_t *md;
    const void *ptr;
} dn_arg;

/* Executes a primitive, single-threaded, on a fresh stream (plus a scratchpad from the
 * kernel's allocator when it needs one). Safe from any thread. */
tdm_status *dn_exec(tdm_kernel_ctx *ctx, dnnl_engine_t eng, const dn_prim *p, int n,
                    const dn_arg *args);
/* dn_exec with the primitive's scratchpad at `scratch` (p->scratch bytes; NULL: allocated
 * for the call). */
tdm_status *dn_exec_in(tdm_kernel_ctx *ctx, dnnl_engine_t eng, const dn_prim *p, int n,
                       const dn_arg *args, void *scratch);
/* The oneDNN memory objects and stream of one primitive's executions, kept from call to call
 * (dn_exec_held only points them at each call's data): creating and destroying them per call
 * cost about as much as a small matmul itself. Lives in a cache entry (zeroed = empty);
 * `busy` is a trylock: a call that finds it taken (another thread runs the same primitive)
 * creates its own objects as dn_exec_in does. */
typedef struct dn_held {
    atomic_flag busy;
    bool built;
    int n;                                  /* arguments the objects were made for */
    int arg[DN_MAX_ARGS];
    const dnnl_memory_desc_t *md[DN_MAX_ARGS];
    dnnl_memory_t mem[DN_MAX_ARGS + 1];     /* [n]: the scratchpad, when the primitive has one */
    void *scratch;                          /* its memory, bound once (a call's own wins) */
    const tdm_allocator *alloc;             /* what `scratch` came from */
    dnnl_stream_t stream;
} dn_held;
/* dn_exec_in through `h`'s kept objects (args must name the same descriptors call after call;
 * other calls fall back to fresh objects). */
tdm_status *dn_exec_held(tdm_kernel_ctx *ctx, dnnl_engine_t eng, const dn_prim *p, int n,
                         const dn_arg *args, void *scratch, dn_held *h);
/* Destroys what `h` keeps (no call may be using it). */
void dn_held_clear(dn_held *h);
/* `n` zeroed dn_held (an array a kernel entry keeps, one per work item; NULL when out of
 * memory: the calls then make their own objects), and their release. */
dn_held *dn_held_array(const tdm_allocator *a, size_t n);
void dn_held_array_free(const tdm_allocator *a, dn_held *h, size_t n);
/* Scratch memory for one run of a node: the state's buffer, kept from run to run (grown when
 * a run needs more), when no other run of the node holds it; else a fresh allocation
 * (*own set). 64-byte aligned. Return it with dn_scratch_put. NULL when out of memory. */
void *dn_scratch_get(dn_state *s, tdm_kernel_ctx *ctx, size_t bytes, bool *own);
void dn_scratch_put(dn_state *s, tdm_kernel_ctx *ctx, void *p, bool own);
/* Runs a reorder prim from `src` to `dst`; when p->p is NULL (equal layouts) copies the bytes. */
tdm_status *dn_exec_reorder(tdm_kernel_ctx *ctx, dnnl_engine_t eng, const dn_prim *p,
                            const dnnl_memory_desc_t *from, const void *src,
                            const dnnl_memory_desc_t *to, void *dst);
/* dn_exec_reorder through `h`'s kept objects (h may be NULL). */
tdm_status *dn_exec_reorder_held(tdm_kernel_ctx *ctx, dnnl_engine_t eng, const dn_prim *p,
                                 const dnnl_memory_desc_t *from, const void *src,
                                 const dnnl_memory_desc_t *to, void *dst, dn_held *h);

/* Runs fn(arg, ctx, i) for i in [0, n) on the session's thread pool (dynamically balanced);
 * returns the first error. */
typedef tdm_status *(*dn_item_fn)(void *arg, tdm_kernel_ctx *ctx, int64_t item);
tdm_status *dn_parallel(tdm_kernel_ctx *ctx, int64_t n, dn_item_fn fn, void *arg);

/* How many pieces to split `units` into for `threads` threads when an image (or a batch) has
 * `images` independent parts already: 1 when images >= 2 * threads. Each piece is a multiple
 * of `align` units (except the last). Returns the piece size. */
int64_t dn_chunk(int64_t units, int64_t align, int64_t images, int threads);

/* Maps a oneDNN status to a tandem status naming the node. */
tdm_status *dn_error(tdm_kernel_ctx *ctx, dnnl_status_t st, const char *what);
tdm_status *dn_oom(tdm_kernel_ctx *ctx);

/* Appends the post-op for an activation name ("", "Relu", ...) with its parameters.
 * Returns false for an activation oneDNN cannot express. */
bool dn_append_activation(dnnl_post_ops_t po, const char *act, const float *params,
                          size_t n_params);

/* ---- op files ---- */
tdm_status *dn_conv_prepare(const tdm_node *node, int opset, int n_in,
                            const tdm_tensor *const *in, const tdm_allocator *a, void **state);
tdm_status *dn_conv_run(tdm_kernel_ctx *ctx);
tdm_status *dn_matmul_prepare(const tdm_node *node, int opset, int n_in,
                              const tdm_tensor *const *in, const tdm_allocator *a, void **state);
void dn_matmul_release(void *state, const tdm_allocator *a);
tdm_status *dn_matmul_run(tdm_kernel_ctx *ctx);
tdm_status *dn_pool_prepare(const tdm_node *node, int opset, int n_in,
                            const tdm_tensor *const *in, const tdm_allocator *a, void **state);
tdm_status *dn_pool_run(tdm_kernel_ctx *ctx);
/* k_dnnl_nwc.c: ConvNwc1d (tap-wise sgemm; no generic kernel: it always runs) */
tdm_status *dn_nwc_prepare(const tdm_node *node, int opset, int n_in,
                           const tdm_tensor *const *in, const tdm_allocator *a, void **state);
void dn_nwc_release(void *state, const tdm_allocator *a);
tdm_status *dn_nwc_run(tdm_kernel_ctx *ctx);

/* k_dnnl_qconv.c / k_dnnl_qmatmul.c: int8 (the reference kernels of k_misc_quant.c are
 * their fallback) */
tdm_status *dn_qconv_prepare(const tdm_node *node, int opset, int n_in,
                             const tdm_tensor *const *in, const tdm_allocator *a, void **state);
void dn_qconv_release(void *state, const tdm_allocator *a);
tdm_status *dn_qconv_run(tdm_kernel_ctx *ctx);
tdm_status *dn_qmatmul_prepare(const tdm_node *node, int opset, int n_in,
                               const tdm_tensor *const *in, const tdm_allocator *a, void **state);
void dn_qmatmul_release(void *state, const tdm_allocator *a);
tdm_status *dn_qmatmul_run(tdm_kernel_ctx *ctx);
/* k_dnnl_qdeconv.c: QConvTranspose (k_misc_qdeconv.c's reference is its fallback) */
tdm_status *dn_qdeconv_prepare(const tdm_node *node, int opset, int n_in,
                               const tdm_tensor *const *in, const tdm_allocator *a, void **state);
void dn_qdeconv_release(void *state, const tdm_allocator *a);
tdm_status *dn_qdeconv_run(tdm_kernel_ctx *ctx);
/* k_dnnl_qconv.c: dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols (bytes; SSE2
 * 16 x 16 tiles): 8-bit images between NCHW and NHWC */
void dn_tr_u8(const uint8_t *src, int64_t rows, int64_t cols, int64_t lds, uint8_t *dst,
              int64_t ldd);
/* n channels-last pixels of X' = [X, X] (2C bytes each; with G groups of C / G channels,
 * [Xg, Xg] for each group g) at dst, from n pixels of X: plain (src: channel 0 of the first
 * pixel, channels `plane` bytes apart) or channels-last (nhwc: C bytes a pixel). The int8
 * products' exact halves without VNNI (k_dnnl.h, dn_q8_halves). */
void dn_x2_u8(const uint8_t *src, bool nhwc, int64_t C, int64_t G, int64_t n, int64_t plane,
              uint8_t *dst);

/* ---- k_dnnl_layout.c: channel-blocked tensors [N, ceil(C/B), S..., B] (ops/fused.h) ---- */
tdm_status *dn_to_blocked_run(tdm_kernel_ctx *ctx);
tdm_status *dn_from_blocked_run(tdm_kernel_ctx *ctx);
tdm_status *dn_blocked_concat_run(tdm_kernel_ctx *ctx);
/* Plain [n, c, sp] <-> blocked [n, ceil(c/b), sp, b] (padding channels written as 0), in
 * tiles on `pool`'s threads (NULL: the caller's). */
void dn_block_copy(tdm_threadpool *pool, const float *src, int64_t n, int64_t c, int64_t sp,
                   int64_t b, float *dst);
void dn_unblock_copy(tdm_threadpool *pool, const float *src, int64_t n, int64_t c, int64_t sp,
                     int64_t b, float *dst);
/* Generic path of BlockedConv / BlockedPool: unblocks X (when blocked, with c_in channels)
 * and Z, runs the generic kernel of plain op `domain`.`op` at `opset`, and blocks its
 * c_out-channel result into Y. */
tdm_status *dn_blocked_fallback(tdm_kernel_ctx *ctx, const char *domain, const char *op, int opset,
                                int64_t c_in, int64_t c_out);

#endif

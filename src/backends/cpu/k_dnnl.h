/* CPU kernels of the dnnl family (oneDNN fast paths): what the k_dnnl*.c files share.
 * Private to the family.
 *
 * Every kernel of the family has the same shape:
 *  - prepare() reads the attributes, notes which inputs are constant (weights) and returns a
 *    state. It never fails for a node it cannot speed up: it returns a state marked
 *    `generic`, and run() then hands the node to the generic kernel (dn_fallback).
 *  - run() builds the key of the real input shapes (and the thread count), finds or creates
 *    the oneDNN primitive for that key in the state's cache (dn_cache_get; creation happens
 *    once per shape, under the state's lock), and executes it. A shape oneDNN declines gets a
 *    cache entry marked `generic`, so it is tried only once.
 *  - Constant weights are reordered into the layout the primitive chose (format_tag_any)
 *    once, at the first run of a shape whose layout has not been seen (dn_weights_get);
 *    non-constant weights are reordered on every run, into scratch memory.
 *  - Activations (X, Y) are plain row-major tensors. A primitive that prefers a blocked
 *    layout gets reorders in and out inside the kernel.
 *  - Threads: oneDNN runs on OpenMP. Before creating and before executing a primitive the
 *    kernel sets the calling thread's OpenMP thread count to the session's thread count
 *    (tdm_threadpool_size), and the count is part of the cache key.
 *  - Scratchpads are user-managed (allocated per run from the kernel's allocator), so one
 *    primitive may run from several session threads at once; entries are never removed
 *    before release(), so a pointer to one stays valid without the lock. */
#ifndef TDM_CPU_K_DNNL_H
#define TDM_CPU_K_DNNL_H

#include <dnnl.h>
#include <pthread.h>

#include "backends/cpu/cpu_kernels.h"

#define DN_CACHE 8    /* shapes remembered per node (more: built and dropped per run) */
#define DN_KEY 40     /* int64 words in a shape key */
#define DN_MAX_ARGS 8 /* arguments of one primitive execution */

/* A primitive plus the scratchpad bytes it wants. */
typedef struct dn_prim {
    dnnl_primitive_t p;
    size_t scratch;
} dn_prim;

/* One cache entry: everything needed to run one input shape. Op files fill it. */
typedef struct dn_entry {
    int nkey;
    int64_t key[DN_KEY];
    bool generic;        /* oneDNN declined this shape: use the generic kernel */
    dn_prim main;        /* the op */
    dn_prim r_src;       /* plain X -> the primitive's src layout (p NULL: same layout) */
    dn_prim r_dst;       /* the primitive's dst layout -> plain Y (p NULL: same layout) */
    dn_prim r_z;         /* plain Z -> dst layout (sum post-op, blocked dst only) */
    dn_prim r_wei;       /* user weights -> the primitive's weights layout (p NULL: same) */
    dnnl_memory_desc_t src_md, wei_md, dst_md;     /* the primitive's layouts */
    dnnl_memory_desc_t usr_src, usr_wei, usr_dst;  /* the tensors' own layouts */
    dnnl_memory_desc_t bias_md;
    const void *wei_cached; /* constant weights in wei_md (owned by the state's wcache) */
    int64_t aux[8];         /* op-specific numbers (e.g. Gemm: how C is applied) */
} dn_entry;

/* Constant weights already reordered, by layout. */
typedef struct dn_wcache {
    dnnl_memory_desc_t md;
    void *data;
} dn_wcache;

/* Common head of every dnnl kernel state (op states embed it first). */
typedef struct dn_state {
    bool generic;              /* the whole node runs on the generic kernel */
    const tdm_allocator *alloc;
    dnnl_engine_t eng;
    pthread_mutex_t mu;
    bool mu_init;
    const tdm_tensor *wconst;  /* the constant weight tensor seen at prepare, or NULL */
    int n_entries;
    dn_entry *entries[DN_CACHE]; /* allocated as shapes appear */
    int n_wcache;
    dn_wcache wcache[DN_CACHE];
} dn_state;

/* Builds one cache entry for the current inputs (op-specific). Returns NULL with
 * e->generic set when oneDNN cannot do the shape; errors only for real failures. */
typedef tdm_status *(*dn_build_fn)(dn_state *s, tdm_kernel_ctx *ctx, dn_entry *e);

/* ---- k_dnnl.c ---- */

/* Allocates a state of `size` bytes (a struct that starts with dn_state), with its engine and
 * lock. On failure of oneDNN (no engine) the state comes back with generic set. */
tdm_status *dn_state_new(const tdm_allocator *a, size_t size, dn_state **out);
/* Destroys every primitive, cached weight, the engine and the lock, and frees the state. */
void dn_state_free(dn_state *s);
/* release() of every family kernel. */
void dn_release(void *state, const tdm_allocator *a);

/* Runs the node with the generic kernel (the nn / fused families' table entry for it). */
tdm_status *dn_fallback(tdm_kernel_ctx *ctx);

/* Threads for this run (the session's intra-op count); also sets OpenMP's count. */
int dn_threads(tdm_kernel_ctx *ctx);

/* Finds or builds the entry for `key`. *e is NULL after an error. When the cache is full (or
 * out of memory for a new entry) the entry is built in *tmp and the caller destroys it with
 * dn_entry_clear after the run (dn_entry_done does that when e == tmp). */
tdm_status *dn_cache_get(dn_state *s, tdm_kernel_ctx *ctx, const int64_t *key, int nkey,
                         dn_build_fn build, dn_entry *tmp, dn_entry **e);
void dn_entry_clear(dn_entry *e);
void dn_entry_done(dn_entry *e, dn_entry *tmp);

/* Plain row-major descriptor of a float tensor with the given dims. */
void dn_md_plain(dnnl_memory_desc_t *md, int nd, const int64_t *dims);
/* Descriptor with explicit strides (elements). */
void dn_md_strided(dnnl_memory_desc_t *md, int nd, const int64_t *dims, const int64_t *strides);

/* Creates the primitive for `pd` (destroys pd) and notes its scratchpad size. */
tdm_status *dn_prim_from_pd(dnnl_primitive_desc_t pd, dn_prim *out);
/* A reorder from `from` to `to`; out->p stays NULL when the layouts are equal. */
tdm_status *dn_reorder_new(dnnl_engine_t eng, const dnnl_memory_desc_t *from,
                           const dnnl_memory_desc_t *to, dn_prim *out);
/* Primitive attributes with a user-managed scratchpad. */
tdm_status *dn_attr_new(dnnl_primitive_attr_t *attr);

/* One execution argument. */
typedef struct dn_arg {
    int arg;
    const dnnl_memory_desc_t *md;
    const void *ptr;
} dn_arg;

/* Executes a primitive on a fresh stream with the given arguments (plus a scratchpad from the
 * kernel's allocator when it needs one). */
tdm_status *dn_exec(tdm_kernel_ctx *ctx, dnnl_engine_t eng, const dn_prim *p, int n,
                    const dn_arg *args);
/* Shorthand for running a reorder prim from `src` to `dst`. */
tdm_status *dn_exec_reorder(tdm_kernel_ctx *ctx, dnnl_engine_t eng, const dn_prim *p,
                            const dnnl_memory_desc_t *from, const void *src,
                            const dnnl_memory_desc_t *to, void *dst);

/* The weights for entry e: the cached reordered constant (built on first use, under the lock
 * the caller holds) when `constant`, else NULL (the caller reorders per run). */
tdm_status *dn_weights_cache(dn_state *s, tdm_kernel_ctx *ctx, dn_entry *e, const void *w);

/* Maps a oneDNN status to a tandem status naming the node. */
tdm_status *dn_error(tdm_kernel_ctx *ctx, dnnl_status_t st, const char *what);

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
tdm_status *dn_matmul_run(tdm_kernel_ctx *ctx);
tdm_status *dn_pool_prepare(const tdm_node *node, int opset, int n_in,
                            const tdm_tensor *const *in, const tdm_allocator *a, void **state);
tdm_status *dn_pool_run(tdm_kernel_ctx *ctx);

#endif

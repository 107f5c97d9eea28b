/* CUDA graphs: the executor's launch windows (backend.h version 4, segment_begin/_end)
 * captured once and replayed, so that a repeated run of the same shapes costs one
 * cudaGraphLaunch per segment instead of one or more launches per node.
 *
 * Off unless the cuda_graphs setting (TANDEM_CUDA_GRAPHS=1) or configure("cuda_graphs", "1"):
 * nothing here could be run on a GPU when it was written (see scripts/gpu-check.sh, which
 * runs both ways).
 *
 * A window (one segment of one run, one host thread: the owner) meets an entry per key
 * (segment key from the executor, mixed with the precision) that goes through:
 *   WARM   first sight: kernels run as usual; the window counts the bytes the executor
 *          allocates in it and notes anything a graph cannot hold (a data-dependent or
 *          control-flow node, an input in another device's memory or a large host input, a
 *          read of device memory on the host, an event for another device, a synchronize).
 *          Such a window is NEVER captured (said once in the log). cuDNN algorithm choice,
 *          cuBLASLt heuristics and workspace growth all happen here, outside any capture.
 *   READY  second sight: the window holds its kernels back (a journal of copies of their
 *          contexts) and serves the executor's allocations from an arena of the entry
 *          (device memory of the size counted by the warm run, bump-allocated on the host:
 *          the same allocation sequence gives the same addresses on every run). At
 *          segment_end the journal is issued once inside cudaStreamBeginCapture /
 *          EndCapture on the compute stream, instantiated, and launched.
 *   GRAPH  later sights: kernels are held back and only their signature is built (kernel,
 *          node, prepared state, every input/output address, dtype and shape, the bytes of
 *          host inputs); if it equals the captured one at segment_end the graph is
 *          launched, else the journal is issued as plain launches (a fallback) and the
 *          entry warms again (NEVER after three such misses).
 * Why capture at segment_end from a journal instead of live: allocations, frees, uploads
 * and the executor's host work all happen outside the capture, so the capture holds only
 * the kernels (and the scratch allocations they make, which become graph memory nodes
 * freed inside the graph), and nothing of another thread can leak into it (the gate).
 *
 * Capture mode: cudaStreamCaptureModeThreadLocal. Relaxed would let a kernel's unsafe call
 * (cudaMalloc, a synchronous copy) pass silently and bake a wrong graph; Global would make
 * other threads' unsafe calls on other devices/streams fail during our capture. ThreadLocal
 * turns our own thread's unsafe calls into a failed capture (the window then runs its
 * kernels plainly and the entry is NEVER captured) and leaves other threads alone; other
 * threads' work on this device's streams waits on the gate meanwhile.
 *
 * Addresses: the signature holds every device pointer a kernel receives; the arena makes
 * those of the window's own tensors stable, weights are uploaded once per session, and a
 * tensor made elsewhere (another segment's pool memory) that moves makes the signature
 * differ: plain launches, never a stale graph. cudaGraphExecUpdate is not used: a window
 * whose addresses move is one whose inputs come from outside it, and re-capturing costs
 * about what updating does while keeping one rule.
 *
 * Ordering while kernels are held back (collect modes):
 *   - frees of pool memory (any thread) are held back until the window's kernels are issued;
 *   - uploads go ahead (their target is a fresh arena block; the compute stream waits for
 *     them before the held-back kernels are issued);
 *   - anything that lets the host or another device observe this device (download, event
 *     record, synchronize) first issues the held-back kernels as plain launches.
 * The arena is reused by the next run of the same key only once every tensor allocated from
 * it was freed (`live`), and the compute stream orders the reuse behind the last launch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_device.h"
#include "core/alloc.h"
#include "ops/op.h"

#define ARENA_ALIGN 256
#define MAX_HOST_INPUT 4096 /* bytes of a host-memory input copied into the journal */
#define MAX_MISSES 3

typedef enum ent_state { ENT_WARM, ENT_READY, ENT_GRAPH, ENT_NEVER } ent_state;

typedef struct entry {
    bool used;
    ent_state state;
    uint64_t key, last_use;
    size_t bytes;              /* the warm run's allocations in the window (arena size) */
    char *arena;
    size_t arena_size;
    size_t live;               /* arena blocks handed out and not yet freed */
    cudaGraphExec_t exec;
    unsigned ws_gen;           /* d->ws_gen when captured */
    uint64_t *sig;
    size_t n_sig;
    int misses;
} entry;

typedef enum win_mode {
    WIN_OFF,     /* no window, or this one is not followed */
    WIN_WARM,    /* plain launches, measuring */
    WIN_CAPTURE, /* kernels held back, captured at the end */
    WIN_REPLAY,  /* kernels held back, graph launched at the end */
    WIN_EAGER    /* held-back kernels were issued; the rest of the window runs plainly */
} win_mode;

typedef struct jrec { /* a held-back kernel */
    const tdm_kernel_def *k;
    tdm_kernel_ctx ctx;
    tdm_tensor *t;       /* header copies: n_in inputs then n_out outputs */
    const tdm_tensor **in;
    tdm_tensor **out;
    unsigned char *host; /* copies of host-memory inputs */
} jrec;

struct cuda_graphs {
    entry ent[CUDA_GRAPH_ENTRIES];
    uint64_t clock;
    /* the open window */
    win_mode mode;
    pthread_t owner;
    entry *e;
    size_t bytes, arena_used;
    const char *why;     /* WARM: why the window cannot be captured */
    jrec *j;
    size_t n_j, cap_j;
    uint64_t *sig;
    size_t n_sig, cap_sig;
    void **frees;
    size_t n_frees, cap_frees;
    tdm_status *err;     /* of held-back kernels issued early */
};

static bool grow(const tdm_allocator *a, void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t n = *cap ? *cap * 2 : 64;
    while (n < need) n *= 2;
    if (n > SIZE_MAX / elem) return false;
    void *p = tdm_alloc(a, n * elem);
    if (!p) return false;
    if (*arr) memcpy(p, *arr, *cap * elem);
    tdm_free(a, *arr);
    *arr = p;
    *cap = n;
    return true;
}

static bool is_owner(const struct cuda_graphs *g) {
    return g && g->mode != WIN_OFF && pthread_equal(g->owner, pthread_self());
}

static bool collecting(const struct cuda_graphs *g) {
    return g && (g->mode == WIN_CAPTURE || g->mode == WIN_REPLAY);
}

static void journal_clear(cuda_device *d) {
    struct cuda_graphs *g = d->graphs;
    for (size_t i = 0; i < g->n_j; i++) {
        tdm_free(d->a, g->j[i].t);
        tdm_free(d->a, (void *)g->j[i].in);
        tdm_free(d->a, g->j[i].out);
        tdm_free(d->a, g->j[i].host);
    }
    g->n_j = 0;
    g->n_sig = 0;
}

/* Gate held, the compute stream not capturing. */
static void entry_drop_graph(cuda_device *d, entry *e) {
    if (e->exec) {
        cudaStreamSynchronize(d->stream); /* no launch of it may still be running */
        cudaGraphExecDestroy(e->exec);
        cudaGetLastError();
    }
    e->exec = NULL;
    e->n_sig = 0;
}

static void entry_free(cuda_device *d, entry *e) {
    entry_drop_graph(d, e);
    tdm_free(d->a, e->sig);
    if (e->arena) cuda_mem_free(d, e->arena);
    memset(e, 0, sizeof *e);
}

static void never(cuda_device *d, entry *e, const char *why) {
    if (e->state != ENT_NEVER) {
        atomic_fetch_add(&d->graph_refused, 1);
        tdm_log(d->log, TDM_LOG_INFO, "cuda:%d: a segment runs without a CUDA graph: %s",
                d->ordinal, why);
    }
    entry_drop_graph(d, e);
    if (e->arena && !e->live) { /* its memory back to the pool (stream-ordered) */
        cuda_mem_free(d, e->arena);
        e->arena = NULL;
        e->arena_size = 0;
    }
    e->state = ENT_NEVER;
}

/* Warms the entry again (its graph no longer fits), NEVER after MAX_MISSES. */
static void miss(cuda_device *d, entry *e, const char *why) {
    entry_drop_graph(d, e);
    if (++e->misses >= MAX_MISSES) never(d, e, why);
    else if (e->state != ENT_NEVER) e->state = ENT_WARM;
}

static void flush_frees(cuda_device *d) {
    struct cuda_graphs *g = d->graphs;
    for (size_t i = 0; i < g->n_frees; i++) cuda_mem_free(d, g->frees[i]);
    g->n_frees = 0;
}

/* Issues the held-back kernels as plain launches (in order); the rest of the window runs
 * plainly. The first error is kept for the owner (g->err). Gate held. */
static void issue_plainly(cuda_device *d) {
    struct cuda_graphs *g = d->graphs;
    g->mode = WIN_EAGER;
    atomic_fetch_add(&d->graph_fallbacks, 1);
    tdm_status *st = cuda_check(cudaSetDevice(d->ordinal), "selecting the device");
    for (size_t i = 0; i < g->n_j && !st; i++) {
        pthread_mutex_lock(&d->lock);
        st = g->j[i].k->run(&g->j[i].ctx);
        pthread_mutex_unlock(&d->lock);
    }
    if (st && !g->err) g->err = st;
    else tdm_status_free(st);
    journal_clear(d);
    flush_frees(d);
}

/* Leaves the collect modes: `why` is the reason; NEVER when the segment itself cannot be
 * held in a graph, else it warms again. */
static void fall_back(cuda_device *d, const char *why, bool forever) {
    struct cuda_graphs *g = d->graphs;
    entry *e = g->e;
    issue_plainly(d);
    if (forever) never(d, e, why);
    else miss(d, e, why);
}

/* ---- set-up ---- */

tdm_status *cuda_graph_init(cuda_device *d) {
    pthread_mutexattr_t at;
    pthread_mutexattr_init(&at);
    pthread_mutexattr_settype(&at, PTHREAD_MUTEX_RECURSIVE);
    int rc = pthread_mutex_init(&d->gate, &at);
    pthread_mutexattr_destroy(&at);
    if (rc) return TDM_ERR(TDM_ERR_DEVICE, "cuda: cannot create a lock");
    d->gate_ready = true;
    atomic_store(&d->graphs_on, d->settings->cuda_graphs);
    return NULL;
}

tdm_status *cuda_graph_configure(cuda_device *d, const char *value) {
    if (!value || (strcmp(value, "0") != 0 && strcmp(value, "1") != 0))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "cuda: cuda_graphs '%s' is not 0 or 1",
                       value ? value : "");
    atomic_store(&d->graphs_on, value[0] == '1');
    return NULL;
}

void cuda_graph_release(cuda_device *d) {
    if (!d->gate_ready) return;
    long hits = atomic_load(&d->graph_hits), caps = atomic_load(&d->graph_captures),
         falls = atomic_load(&d->graph_fallbacks), refused = atomic_load(&d->graph_refused);
    if (atomic_load(&d->graphs_on) || hits || caps) {
        tdm_log(d->log, TDM_LOG_INFO, "cuda:%d: CUDA graphs: %ld replays, %ld captures, %ld "
                "fallbacks, %ld segments not capturable", d->ordinal, hits, caps, falls, refused);
        const char *path = d->settings->cuda_graphs_log; /* for scripts/gpu-check.sh */
        FILE *fp = path[0] ? fopen(path, "a") : NULL;
        if (fp) {
            fprintf(fp, "cuda:%d graphs=%s replays=%ld captures=%ld fallbacks=%ld "
                    "not_capturable=%ld\n", d->ordinal, atomic_load(&d->graphs_on) ? "on" : "off",
                    hits, caps, falls, refused);
            fclose(fp);
        }
    }
    struct cuda_graphs *g = d->graphs;
    if (g) {
        journal_clear(d);
        flush_frees(d);
        for (int i = 0; i < CUDA_GRAPH_ENTRIES; i++)
            if (g->ent[i].used) entry_free(d, &g->ent[i]);
        tdm_free(d->a, g->j);
        tdm_free(d->a, g->sig);
        tdm_free(d->a, g->frees);
        tdm_status_free(g->err);
        tdm_free(d->a, g);
        d->graphs = NULL;
    }
    pthread_mutex_destroy(&d->gate);
    d->gate_ready = false;
}

/* ---- windows ---- */

static entry *find_entry(cuda_device *d, uint64_t key) {
    struct cuda_graphs *g = d->graphs;
    entry *free_slot = NULL, *oldest = NULL;
    for (int i = 0; i < CUDA_GRAPH_ENTRIES; i++) {
        entry *e = &g->ent[i];
        if (e->used && e->key == key) return e;
        if (!e->used) {
            if (!free_slot) free_slot = e;
        } else if (!e->live && (!oldest || e->last_use < oldest->last_use)) {
            oldest = e;
        }
    }
    entry *e = free_slot ? free_slot : oldest;
    if (!e) return NULL; /* every entry's arena is in use */
    if (e->used) entry_free(d, e);
    e->used = true;
    e->key = key;
    e->state = ENT_WARM;
    return e;
}

tdm_status *cuda_segment_begin(tdm_device *dev, uint64_t key) {
    cuda_device *d = dev->ctx;
    if (!atomic_load(&d->graphs_on)) return NULL;
    pthread_mutex_lock(&d->gate);
    struct cuda_graphs *g = d->graphs;
    if (!g && (g = d->graphs = tdm_calloc(d->a, 1, sizeof *g)) == NULL) goto plain;
    if (g->mode != WIN_OFF) goto plain; /* another thread's window is open: this one is plain */
    entry *e = find_entry(d, key ^ (0x9e3779b97f4a7c15ull * (uint64_t)(cuda_precision_of(d) + 1)));
    if (!e) goto plain;
    e->last_use = ++g->clock;
    g->e = e;
    g->owner = pthread_self();
    g->bytes = g->arena_used = 0;
    g->why = NULL;
    switch (e->state) {
    case ENT_NEVER:
        goto plain;
    case ENT_WARM:
        g->mode = WIN_WARM;
        break;
    case ENT_READY:
    case ENT_GRAPH:
        if (e->live) { /* the previous run's tensors still hold the arena */
            atomic_fetch_add(&d->graph_fallbacks, 1);
            goto plain;
        }
        if (e->state == ENT_GRAPH && e->ws_gen != atomic_load(&d->ws_gen)) {
            entry_drop_graph(d, e); /* the workspace it uses moved: capture again */
            e->state = ENT_READY;
        }
        if (e->state == ENT_READY && e->bytes > e->arena_size) {
            if (e->arena) cuda_mem_free(d, e->arena);
            e->arena = NULL;
            e->arena_size = 0;
            void *p = NULL;
            tdm_status *st = cuda_mem_alloc(d, e->bytes, &p);
            if (st) {
                tdm_status_free(st);
                never(d, e, "no device memory for the graph's buffers");
                goto plain;
            }
            e->arena = p;
            e->arena_size = e->bytes;
        }
        g->mode = e->state == ENT_GRAPH ? WIN_REPLAY : WIN_CAPTURE;
        break;
    }
plain: /* (the mode of a window this thread does not follow is left as it is) */
    pthread_mutex_unlock(&d->gate);
    return NULL;
}

/* Captures the journal, instantiates and launches it. Gate held. */
static tdm_status *capture_and_launch(cuda_device *d) {
    struct cuda_graphs *g = d->graphs;
    entry *e = g->e;
    if (atomic_exchange(&d->d2h_pending, false)) { /* cuda_mem_free's wait, done before */
        pthread_mutex_lock(&d->copy_lock);
        if (cudaEventRecord(d->ev_d2h, d->d2h) == cudaSuccess)
            cudaStreamWaitEvent(d->stream, d->ev_d2h, 0);
        pthread_mutex_unlock(&d->copy_lock);
    }
    tdm_status *st = cuda_check(cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeThreadLocal),
                                "beginning a graph capture");
    if (!st) {
        d->capturing = true;
        for (size_t i = 0; i < g->n_j && !st; i++) {
            pthread_mutex_lock(&d->lock);
            st = g->j[i].k->run(&g->j[i].ctx);
            pthread_mutex_unlock(&d->lock);
        }
        cudaGraph_t graph = NULL;
        cudaError_t ec = cudaStreamEndCapture(d->stream, &graph);
        d->capturing = false;
        if (!st) st = cuda_check(ec, "ending a graph capture");
        else cudaGetLastError();
        cudaGraphExec_t exec = NULL;
        if (!st) st = cuda_check(cudaGraphInstantiate(&exec, graph,
                                                      cudaGraphInstantiateFlagAutoFreeOnLaunch),
                                 "instantiating a graph");
        if (graph) cudaGraphDestroy(graph);
        if (!st) {
            e->exec = exec;
            e->ws_gen = atomic_load(&d->ws_gen);
        }
    }
    if (st) {
        /* nothing of the capture ran: the kernels go plainly; if they fail too the error is
         * theirs (warm again), else the segment cannot be captured */
        char why[200];
        snprintf(why, sizeof why, "capture failed: %.180s", tdm_status_message(st));
        tdm_status_free(st);
        issue_plainly(d);
        if (g->err) miss(d, e, why);
        else never(d, e, why);
        st = g->err;
        g->err = NULL;
        return st;
    }
    uint64_t *sig = tdm_alloc(d->a, (g->n_sig ? g->n_sig : 1) * sizeof *sig);
    if (!sig) { /* without its signature the graph cannot be checked: launch once, then warm */
        entry_drop_graph(d, e);
        issue_plainly(d);
        miss(d, e, "out of memory");
        st = g->err;
        g->err = NULL;
        return st;
    }
    memcpy(sig, g->sig, g->n_sig * sizeof *sig);
    tdm_free(d->a, e->sig);
    e->sig = sig;
    e->n_sig = g->n_sig;
    e->state = ENT_GRAPH;
    atomic_fetch_add(&d->graph_captures, 1);
    st = cuda_check(cudaGraphLaunch(e->exec, d->stream), "launching a graph");
    if (st) miss(d, e, "launch failed");
    journal_clear(d);
    return st;
}

tdm_status *cuda_segment_end(tdm_device *dev, bool ok) {
    cuda_device *d = dev->ctx;
    if (!d->gate_ready) return NULL;
    pthread_mutex_lock(&d->gate);
    struct cuda_graphs *g = d->graphs;
    if (!is_owner(g)) {
        pthread_mutex_unlock(&d->gate);
        return NULL;
    }
    entry *e = g->e;
    tdm_status *st = NULL;
    switch (g->mode) {
    case WIN_WARM:
        if (!ok) break;
        if (g->why) {
            never(d, e, g->why);
        } else {
            e->bytes = g->bytes;
            e->state = ENT_READY;
        }
        break;
    case WIN_CAPTURE:
        if (!ok) { /* the run stopped: its held-back kernels are not needed */
            journal_clear(d);
            break;
        }
        st = capture_and_launch(d);
        break;
    case WIN_REPLAY:
        if (!ok) {
            journal_clear(d);
            break;
        }
        if (g->n_sig != e->n_sig) {
            fall_back(d, "the segment's kernels changed", false);
            break;
        }
        st = cuda_check(cudaGraphLaunch(e->exec, d->stream), "launching a graph");
        if (st) miss(d, e, "launch failed");
        else atomic_fetch_add(&d->graph_hits, 1);
        journal_clear(d);
        break;
    default:
        break;
    }
    flush_frees(d);
    if (!st) st = g->err;
    else tdm_status_free(g->err);
    g->err = NULL;
    g->mode = WIN_OFF;
    g->e = NULL;
    pthread_mutex_unlock(&d->gate);
    return st;
}

/* ---- kernels ---- */

/* Why node/ctx cannot be held in a graph, or NULL. */
static const char *not_capturable(cuda_device *d, const tdm_kernel_ctx *ctx) {
    const tdm_node *n = ctx->node;
    if (n->schema && (n->schema->flags & TDM_OP_DATA_DEPENDENT))
        return "a data-dependent operator (output shapes known only after it ran)";
    if (n->n_implicit > 0) return "a control-flow operator";
    for (int i = 0; i < ctx->n_in; i++) {
        const tdm_tensor *t = ctx->in[i];
        if (!t) continue;
        if (t->device && t->device != (void *)d->dev) return "an input in another device's memory";
        if (!t->device && t->nbytes > MAX_HOST_INPUT) return "a large input in host memory";
    }
    for (int i = 0; i < ctx->n_out; i++)
        if (!ctx->out[i] && n->outputs[i] >= 0) return "an output made by the kernel";
    return NULL;
}

static bool sig_push(cuda_device *d, uint64_t w) {
    struct cuda_graphs *g = d->graphs;
    if (!grow(d->a, (void **)&g->sig, &g->cap_sig, g->n_sig + 1, sizeof *g->sig)) return false;
    g->sig[g->n_sig++] = w;
    return true;
}

static bool sig_tensor(cuda_device *d, const tdm_tensor *t) {
    if (!t) return sig_push(d, 0);
    /* device memory by address; host memory by value (launches take it by value, and the
     * journal keeps a copy) */
    bool ok = sig_push(d, t->device ? (uint64_t)(uintptr_t)t->data : 1) &&
              sig_push(d, (uint64_t)(uintptr_t)t->device) &&
              sig_push(d, ((uint64_t)t->dtype << 32) | (uint32_t)t->rank);
    for (int k = 0; ok && k < t->rank && k < TDM_MAX_RANK; k++) ok = sig_push(d, (uint64_t)t->dims[k]);
    if (ok && !t->device && t->data && t->nbytes) { /* host values are baked into launches */
        ok = sig_push(d, t->nbytes);
        for (size_t off = 0; ok && off < t->nbytes; off += 8) {
            uint64_t w = 0;
            memcpy(&w, (const char *)t->data + off, t->nbytes - off < 8 ? t->nbytes - off : 8);
            ok = sig_push(d, w);
        }
    }
    return ok;
}

static tdm_status *no_alloc_output(tdm_kernel_ctx *ctx, int i, tdm_dtype dt, int rank,
                                   const int64_t *dims) {
    (void)i, (void)dt, (void)rank, (void)dims;
    return TDM_ERR(TDM_ERR_INTERNAL, "%s node '%s': no outputs can be made inside a CUDA graph",
                   ctx->node->op_type, ctx->node->name);
}

/* Copies the kernel and its context into the journal; false when out of memory. */
static bool journal_push(cuda_device *d, const tdm_kernel_def *k, const tdm_kernel_ctx *ctx) {
    struct cuda_graphs *g = d->graphs;
    if (!grow(d->a, (void **)&g->j, &g->cap_j, g->n_j + 1, sizeof *g->j)) return false;
    jrec *r = &g->j[g->n_j];
    memset(r, 0, sizeof *r);
    size_t nt = (size_t)ctx->n_in + (size_t)ctx->n_out, host = 0;
    for (int i = 0; i < ctx->n_in; i++)
        if (ctx->in[i] && !ctx->in[i]->device) host += (ctx->in[i]->nbytes + 15) / 16 * 16;
    r->t = tdm_calloc(d->a, nt + 1, sizeof *r->t);
    r->in = tdm_calloc(d->a, (size_t)ctx->n_in + 1, sizeof *r->in);
    r->out = tdm_calloc(d->a, (size_t)ctx->n_out + 1, sizeof *r->out);
    r->host = host ? tdm_alloc(d->a, host) : NULL;
    if (!r->t || !r->in || !r->out || (host && !r->host)) {
        tdm_free(d->a, r->t);
        tdm_free(d->a, (void *)r->in);
        tdm_free(d->a, r->out);
        tdm_free(d->a, r->host);
        return false;
    }
    size_t off = 0;
    for (int i = 0; i < ctx->n_in; i++) {
        const tdm_tensor *t = ctx->in[i];
        if (!t) continue;
        tdm_tensor *c = &r->t[i];
        *c = *t;
        c->owns_data = false;
        c->pooled = true;
        c->release = NULL;
        if (!t->device && t->nbytes) {
            memcpy(r->host + off, t->data, t->nbytes);
            c->data = r->host + off;
            off += (t->nbytes + 15) / 16 * 16;
        }
        r->in[i] = c;
    }
    for (int i = 0; i < ctx->n_out; i++) {
        const tdm_tensor *t = ctx->out[i];
        if (!t) continue;
        tdm_tensor *c = &r->t[ctx->n_in + i];
        *c = *t;
        c->owns_data = false;
        c->pooled = true;
        c->release = NULL;
        r->out[i] = c;
    }
    r->k = k;
    r->ctx = *ctx;
    r->ctx.in = r->in;
    r->ctx.out = r->out;
    r->ctx.alloc_output = no_alloc_output;
    r->ctx.run_subgraph = NULL;
    r->ctx.exec = NULL;
    r->ctx.run_ctl = NULL;
    g->n_j++;
    return true;
}

bool cuda_graph_execute(cuda_device *d, const tdm_kernel_def *k, tdm_kernel_ctx *ctx,
                        tdm_status **st) {
    struct cuda_graphs *g = d->graphs;
    if (!is_owner(g)) return false;
    if (g->mode == WIN_WARM) {
        const char *why = not_capturable(d, ctx);
        if (why && !g->why) g->why = why;
        return false;
    }
    if (!collecting(g)) return false;
    const char *why = not_capturable(d, ctx);
    bool pushed = false;
    if (why) { /* the warm run did not see it (same shapes): no graph for this segment */
        fall_back(d, why, true);
    } else if (!journal_push(d, k, ctx)) {
        fall_back(d, "out of memory", false);
    } else {
        pushed = true;
        size_t from = g->n_sig;
        bool ok = sig_push(d, (uint64_t)(uintptr_t)k) && sig_push(d, (uint64_t)(uintptr_t)ctx->node) &&
                  sig_push(d, (uint64_t)(uintptr_t)ctx->state) &&
                  sig_push(d, ((uint64_t)(uint32_t)ctx->n_in << 32) | (uint32_t)ctx->n_out);
        for (int i = 0; ok && i < ctx->n_in; i++) ok = sig_tensor(d, ctx->in[i]);
        for (int i = 0; ok && i < ctx->n_out; i++) ok = sig_tensor(d, ctx->out[i]);
        if (!ok) {
            fall_back(d, "out of memory", false);
        } else if (g->mode == WIN_REPLAY) {
            entry *e = g->e;
            bool same = g->n_sig <= e->n_sig &&
                        !memcmp(g->sig + from, e->sig + from, (g->n_sig - from) * sizeof *g->sig);
            if (!same) fall_back(d, "the segment's kernels, shapes or addresses keep changing", false);
        }
        if (collecting(g)) return true; /* held back */
    }
    /* the held-back kernels were issued plainly (this one too when it was journaled) */
    *st = g->err;
    g->err = NULL;
    return pushed || *st;
}

/* ---- memory and copies ---- */

bool cuda_graph_alloc(cuda_device *d, size_t size, void **p) {
    struct cuda_graphs *g = d->graphs;
    if (!is_owner(g)) return false;
    size_t need = size < ARENA_ALIGN ? ARENA_ALIGN : size;
    if (need > SIZE_MAX - ARENA_ALIGN) need = SIZE_MAX - ARENA_ALIGN; /* fails below */
    need = (need + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    if (g->mode == WIN_WARM) {
        g->bytes = g->bytes > SIZE_MAX - need ? SIZE_MAX : g->bytes + need;
        return false;
    }
    if (!collecting(g)) return false;
    entry *e = g->e;
    if (need > e->arena_size - g->arena_used) {
        fall_back(d, "the segment allocates more than in its warm run", false);
        return false;
    }
    *p = e->arena + g->arena_used;
    g->arena_used += need;
    e->live++;
    return true;
}

bool cuda_graph_free(cuda_device *d, void *p) {
    struct cuda_graphs *g = d->graphs;
    if (!g || !p) return false;
    for (int i = 0; i < CUDA_GRAPH_ENTRIES; i++) {
        entry *e = &g->ent[i];
        if (!e->used || !e->arena || (char *)p < e->arena || (char *)p >= e->arena + e->arena_size)
            continue;
        if (e->live) e->live--;
        if (!e->live && e->state == ENT_NEVER) { /* the memory of a segment without graph */
            cuda_mem_free(d, e->arena);
            e->arena = NULL;
            e->arena_size = 0;
            return true;
        }
        if (atomic_exchange(&d->d2h_pending, false)) {
            /* an asynchronous download may still read the block the next run rewrites */
            pthread_mutex_lock(&d->copy_lock);
            if (cudaEventRecord(d->ev_d2h, d->d2h) == cudaSuccess)
                cudaStreamWaitEvent(d->stream, d->ev_d2h, 0);
            pthread_mutex_unlock(&d->copy_lock);
        }
        return true;
    }
    if (!collecting(g)) return false;
    if (!grow(d->a, (void **)&g->frees, &g->cap_frees, g->n_frees + 1, sizeof *g->frees)) {
        fall_back(d, "out of memory", false); /* issued: the memory may go now */
        return false;
    }
    g->frees[g->n_frees++] = p;
    return true;
}

tdm_status *cuda_graph_observe(cuda_device *d, const char *what) {
    struct cuda_graphs *g = d->graphs;
    if (!g) return NULL;
    bool own = is_owner(g);
    if (g->mode == WIN_WARM && own) {
        if (!g->why) g->why = what;
        return NULL;
    }
    if (!collecting(g)) return NULL;
    /* the owner's own segment needs it: never capturable; another thread: maybe by chance */
    fall_back(d, what, own);
    if (!own) return NULL;
    tdm_status *st = g->err;
    g->err = NULL;
    return st;
}

bool cuda_graph_window_open(cuda_device *d) { return is_owner(d->graphs); }

tdm_status *cuda_graph_host_read(cuda_device *d) {
    struct cuda_graphs *g = d->graphs;
    if (d->capturing && is_owner(g))
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "cuda: a kernel reads device memory on the host "
                       "inside a graph capture");
    if (g && g->mode == WIN_WARM && is_owner(g) && !g->why)
        g->why = "a kernel reads device memory on the host";
    return NULL;
}

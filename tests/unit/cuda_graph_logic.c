/* The CUDA graph logic of the plugin (src/backends/cuda/cuda_graph.c) on the CPU: built with
 * the plugin (TANDEM_CUDA), the CUDA runtime calls it makes are stubs here that write a
 * trace, and a fake device drives windows through it (as cuda_backend.c / cuda_mem.c do):
 *   warm run (plain launches) -> capture (held back, captured at the end, launched) ->
 *   replays (one launch, no kernel runs) -> another key warms on its own -> a download
 *   inside the window (held-back kernels issued first, never captured again) -> the
 *   workspace moves (captured again) -> a capture that cannot begin (plain, never again)
 *   -> an input from outside the window whose address moves (plain, warms again) -> frees
 *   of memory from outside the window wait until the held-back kernels are issued;
 *   every pool block comes back by the end. Each run's trace is compared with the expected
 * one; any difference fails (exit 1). Runs under ASan/UBSan in the ASan build. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_device.h"
#include "core/alloc.h"
#include "ops/op.h"

static char trace[8192];
static void T(const char *s) { strcat(trace, s); strcat(trace, " "); }
static int capturing_stream;
static int fail_begin;

cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; T("sync"); return cudaSuccess; }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) { free(e); T("execdestroy"); return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { (void)e, (void)s; return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f) { (void)s, (void)e, (void)f; return cudaSuccess; }
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode m) {
    (void)s; if (m != cudaStreamCaptureModeThreadLocal) T("WRONG-MODE");
    if (fail_begin) return cudaErrorNotSupported;
    capturing_stream = 1; T("begincap"); return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) { (void)s; capturing_stream = 0; *g = malloc(8); T("endcap"); return cudaSuccess; }
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long f) { (void)g; if (f != cudaGraphInstantiateFlagAutoFreeOnLaunch) T("WRONG-FLAGS"); *e = malloc(8); T("inst"); return cudaSuccess; }
cudaError_t cudaGraphDestroy(cudaGraph_t g) { free(g); return cudaSuccess; }
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) { (void)e, (void)s; T("LAUNCH"); return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { (void)d; return cudaSuccess; }

tdm_status *cuda_check(cudaError_t err, const char *what) {
    return err == cudaSuccess ? NULL : TDM_ERR(TDM_ERR_DEVICE, "cuda: %s: %d", what, (int)err);
}
/* The device pool's stub hands out addresses never used before (a bump over a static arena,
 * nothing reused): an address that "moves" between runs moves for certain, whatever the C
 * library's malloc would have reused. */
static int pool_live;
static _Alignas(256) unsigned char pool_arena[16 << 20];
static size_t pool_used;
tdm_status *cuda_mem_alloc(cuda_device *d, size_t size, void **p) {
    (void)d;
    size = (size + 255) & ~(size_t)255;
    if (size > sizeof pool_arena - pool_used) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "stub pool");
    *p = pool_arena + pool_used;
    pool_used += size;
    pool_live++;
    T("palloc");
    return NULL;
}
void cuda_mem_free(cuda_device *d, void *p) { (void)d, (void)p; pool_live--; T("pfree"); }

/* the device's buffer_alloc / free / execute as cuda_mem.c / cuda_backend.c do them */
static void *balloc(cuda_device *d, size_t n) {
    void *p = NULL;
    pthread_mutex_lock(&d->gate);
    if (!cuda_graph_alloc(d, n, &p)) cuda_mem_alloc(d, n, &p);
    pthread_mutex_unlock(&d->gate);
    return p;
}
static void bfree(cuda_device *d, void *p) {
    pthread_mutex_lock(&d->gate);
    if (!cuda_graph_free(d, p)) cuda_mem_free(d, p);
    pthread_mutex_unlock(&d->gate);
}
static tdm_status *krun(tdm_kernel_ctx *ctx) {
    cuda_device *d = ctx->device->ctx;
    T(d->capturing ? "k(cap)" : "k");
    /* reads inputs / writes outputs: they must be alive */
    for (int i = 0; i < ctx->n_in; i++) if (!ctx->in[i]->data) T("NO-INPUT");
    return NULL;
}
static tdm_kernel_def kdef = {"", "Relu", 1, 0, 0, 0, krun, NULL, NULL};
static tdm_status *execute(cuda_device *d, tdm_kernel_ctx *ctx) {
    pthread_mutex_lock(&d->gate);
    tdm_status *st = NULL;
    if (!cuda_graph_execute(d, &kdef, ctx, &st)) {
        pthread_mutex_lock(&d->lock);
        st = kdef.run(ctx);
        pthread_mutex_unlock(&d->lock);
    }
    pthread_mutex_unlock(&d->gate);
    return st;
}
static struct tdm_op_schema schema;

/* One "run": a window of 3 nodes chained x -> a -> b -> c, values freed after use. */
static int failures;
static void check(bool ok, const char *what) {
    if (!ok) {
        printf("FAILED: %s\n", what);
        failures++;
    }
}

static int outside; /* the window's input allocated before segment_begin */
static void run(cuda_device *d, tdm_device *dev, uint64_t key, int64_t n, bool observe,
                const char *want) {
    trace[0] = 0;
    void *xo = NULL; /* (at an address no earlier run had) */
    if (outside) {
        T("[x outside]");
        cuda_mem_alloc(d, (size_t)n * 4, &xo);
    }
    tdm_node node = {0};
    node.schema = &schema;
    node.op_type = "Relu";
    node.name = "r";
    int outs_idx[1] = {0};
    node.outputs = outs_idx;
    node.n_outputs = 1;
    check(!cuda_segment_begin(dev, key), "segment_begin");
    tdm_tensor x = {.dtype = TDM_FLOAT, .rank = 1, .dims = {n}, .count = n, .nbytes = (size_t)n * 4};
    x.data = xo ? xo : balloc(d, x.nbytes); /* the upload's buffer */
    x.device = dev;
    tdm_tensor *prev = &x;
    tdm_tensor t[3];
    for (int i = 0; i < 3; i++) {
        t[i] = x;
        t[i].data = balloc(d, x.nbytes);
        const tdm_tensor *ins[1] = {prev};
        tdm_tensor *outs[1] = {&t[i]};
        tdm_kernel_ctx ctx = {.node = &node, .n_in = 1, .in = ins, .n_out = 1, .out = outs, .device = dev};
        check(!execute(d, &ctx), "execute");
        if (prev != &x || i == 0) { T("[free]"); bfree(d, prev->data); } /* its last reader ran */
        prev = &t[i];
        if (observe && i == 1) {
            pthread_mutex_lock(&d->gate);
            check(!cuda_graph_observe(d, "a download inside the segment"), "observe");
            pthread_mutex_unlock(&d->gate);
        }
    }
    check(!cuda_segment_end(dev, true), "segment_end");
    bfree(d, t[2].data); /* the output, after its download */
    printf("key %llu n %lld%s: %s\n", (unsigned long long)key, (long long)n, observe ? " observed" : "", trace);
    if (strcmp(trace, want) != 0) {
        printf("FAILED: expected %s\n", want);
        failures++;
    }
}

#define PLAIN_REST "palloc k [free] pfree palloc k [free] pfree palloc k [free] pfree pfree "
#define PLAIN "palloc " PLAIN_REST
#define CAPTURE "palloc [free] [free] [free] begincap k(cap) k(cap) k(cap) endcap inst LAUNCH "
#define REPLAY "[free] [free] [free] LAUNCH "
#define OUT "[x outside] palloc "

int main(void) {
    cuda_device d;
    memset(&d, 0, sizeof d);
    tdm_device dev = {.ctx = &d};
    d.dev = &dev;
    pthread_mutex_init(&d.lock, NULL);
    pthread_mutex_init(&d.copy_lock, NULL);
    tdm_settings set = tdm_settings_builtin;
    set.cuda_graphs = true;
    d.settings = &set;
    check(!cuda_graph_init(&d), "init");
    run(&d, &dev, 1, 16, false, PLAIN);   /* warm */
    run(&d, &dev, 1, 16, false, CAPTURE); /* the arena, kernels captured at the end, launched */
    run(&d, &dev, 1, 16, false, REPLAY);
    run(&d, &dev, 1, 16, false, REPLAY);
    run(&d, &dev, 2, 32, false, PLAIN);   /* another key warms on its own */
    run(&d, &dev, 1, 16, false, REPLAY);
    /* a download after node 2: nodes 1-2 issued plainly first, the graph dropped, node 3
     * plain; the arena goes back once its last block is freed */
    run(&d, &dev, 1, 16, true, "[free] [free] k k sync execdestroy palloc k [free] pfree pfree ");
    run(&d, &dev, 1, 16, false, PLAIN);   /* never again */
    run(&d, &dev, 2, 32, false, CAPTURE);
    run(&d, &dev, 2, 32, false, REPLAY);
    atomic_fetch_add(&d.ws_gen, 1);       /* the workspace moved: captured again */
    run(&d, &dev, 2, 32, false, "sync execdestroy [free] [free] [free] begincap k(cap) k(cap) "
                                "k(cap) endcap inst LAUNCH ");
    fail_begin = 1;
    run(&d, &dev, 3, 8, false, PLAIN);
    run(&d, &dev, 3, 8, false, "palloc [free] [free] [free] k k k pfree "); /* plain, never */
    run(&d, &dev, 3, 8, false, PLAIN);
    fail_begin = 0;
    /* the window's input comes from outside it (allocated before segment_begin) and moves
     * between runs: its free waits for the held-back kernels; a moved address is a miss */
    outside = 1;
    const char *want4[] = {
        OUT PLAIN_REST,
        OUT "palloc [free] [free] [free] begincap k(cap) k(cap) k(cap) endcap inst LAUNCH pfree ",
        OUT "k sync execdestroy [free] pfree palloc k [free] palloc k [free] pfree pfree ",
        OUT PLAIN_REST,
        OUT "[free] [free] [free] begincap k(cap) k(cap) k(cap) endcap inst LAUNCH pfree ",
    };
    for (int r = 0; r < 5; r++) run(&d, &dev, 4, 8, false, want4[r]);
    printf("hits %ld captures %ld fallbacks %ld refused %ld\n", d.graph_hits, d.graph_captures,
           d.graph_fallbacks, d.graph_refused);
    check(d.graph_hits == 4 && d.graph_captures == 5 && d.graph_fallbacks == 3 &&
          d.graph_refused == 2, "counts");
    cuda_graph_release(&d);
    check(pool_live == 0, "every pool block freed");
    printf("%s\n", failures ? "FAILED" : "PASSED");
    return failures != 0;
}

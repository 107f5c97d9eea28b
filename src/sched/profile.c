/* Device profiles: micro-benchmarks run through the device's own kernels (found with
 * find_kernel, run with execute, exactly as the executor does) and copies, cached on disk.
 *
 * What is measured (float32, best of many short runs, under a second per device):
 *   gemm_gflops      MatMul [512,512] x [512,512]
 *   conv_gflops      Conv X [1,64,56,56], W [64,64,3,3], pads 1
 *   conv1x1_gflops   Conv X [1,128,28,28], W [128,128,1,1] (pointwise, as in MobileNets)
 *   dwconv_gflops    Conv X [1,144,56,56], W [144,1,3,3], group 144, pads 1 (depthwise)
 *   mem_gbps         Add of two 4M-element vectors: (2 inputs + 1 output) bytes / time, the
 *                    same byte count the cost model uses (tdm_node_bytes); Relu if no Add
 *   (a device with memory of its own whose run of one of these took under 0.5 ms runs it
 *    again at a larger size: MatMul 2048^3, the Convs at batch 16, Add of 32M elements; the
 *    better rate is kept: see scale_up)
 *   host_busy_speed  devices with their own memory: conv_gflops measured again while `threads`
 *                    host threads spin, over conv_gflops (does it compute on the host's cores?)
 *   launch_us        a 1-element Relu (Add if no Relu), including what the executor does
 *                    around every node
 *                    (shape inference, output allocation); for devices with their own memory,
 *                    a batch of launches is timed and then one wait, divided by the batch size
 *   h2d/d2h_gbps     upload / download of 16 MiB (bandwidth past the fixed latency), from
 *                    and to ordinary (pageable) host memory
 *   h2d/d2h_latency_us  a 4-byte upload / download; link_latency_us is their mean
 *   h2d/d2h_pinned_* the same from and to the device's staging memory (host_alloc: pinned or
 *                    mapped), which the executor's asynchronous copies use (sched/xfer.h);
 *                    devices without host_alloc get the pageable figures
 * Devices that work on host memory need no copies: their h2d_gbps, d2h_gbps and
 * link_latency_us are 0, which the cost model reads as "no copy needed". A benchmark whose op
 * the device has no kernel for leaves its number at 0 ("not measured").
 *
 * The cache: <tdm_cache_dir>/profiles/<device name>-<hash of identity>.txt, key=value lines.
 * A file that cannot be read back exactly (wrong identity, missing or bad numbers) is measured
 * again and replaced; a cache that cannot be written is not an error. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/hash.h"
#include "ops/op.h"
#include "sched/profile.h"
#include "sched/xfer.h"

#ifndef TANDEM_VERSION
#define TANDEM_VERSION "unknown"
#endif

#define PROFILE_FORMAT 3 /* 3: devices with memory of their own scale benchmarks up */
#define BIG_COPY ((size_t)16 << 20)
#define ADD_ELEMS ((int64_t)4 << 20)
#define LAUNCH_BATCH 32

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- cache location ---------------------------------------------------------------- */

const char *tdm_cache_dir(const tdm_settings *set, char *buf, size_t size) {
    const char *v = tdm_settings_or_builtin(set)->cache_dir;
    int n = v[0] ? snprintf(buf, size, "%s", v) : -1;
    if (n < 0 || (size_t)n >= size) return NULL;
    return buf;
}


/* <dir>/profiles/<name>-<hash>.txt into path; false if no cache dir or too long. */
static bool cache_path(const tdm_settings *set, const tdm_device_profile *p, char *dir,
                       size_t dir_size, char *path, size_t path_size) {
    char base[4096];
    if (!tdm_cache_dir(set, base, sizeof base)) return false;
    int n = snprintf(dir, dir_size, "%s/profiles", base);
    if (n < 0 || (size_t)n >= dir_size) return false;
    char name[sizeof p->device];
    size_t i = 0;
    for (; p->device[i] && i + 1 < sizeof name; i++) {
        char c = p->device[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '.';
        name[i] = ok ? c : '_';
    }
    name[i] = 0;
    n = snprintf(path, path_size, "%s/%s-%016llx.txt", dir, name,
                 (unsigned long long)tdm_hash_str(TDM_HASH_INIT, p->identity));
    return n >= 0 && (size_t)n < path_size;
}

/* ---- the cache file ------------------------------------------------------------------ */

typedef struct num_field {
    const char *key;
    size_t off;
} num_field;

static const num_field num_fields[] = {
    {"gemm_gflops", offsetof(tdm_device_profile, gemm_gflops)},
    {"conv_gflops", offsetof(tdm_device_profile, conv_gflops)},
    {"conv1x1_gflops", offsetof(tdm_device_profile, conv1x1_gflops)},
    {"dwconv_gflops", offsetof(tdm_device_profile, dwconv_gflops)},
    {"host_busy_speed", offsetof(tdm_device_profile, host_busy_speed)},
    {"mem_gbps", offsetof(tdm_device_profile, mem_gbps)},
    {"launch_us", offsetof(tdm_device_profile, launch_us)},
    {"h2d_gbps", offsetof(tdm_device_profile, h2d_gbps)},
    {"d2h_gbps", offsetof(tdm_device_profile, d2h_gbps)},
    {"link_latency_us", offsetof(tdm_device_profile, link_latency_us)},
    {"h2d_latency_us", offsetof(tdm_device_profile, h2d_latency_us)},
    {"d2h_latency_us", offsetof(tdm_device_profile, d2h_latency_us)},
    {"h2d_pinned_gbps", offsetof(tdm_device_profile, h2d_pinned_gbps)},
    {"d2h_pinned_gbps", offsetof(tdm_device_profile, d2h_pinned_gbps)},
    {"h2d_pinned_latency_us", offsetof(tdm_device_profile, h2d_pinned_latency_us)},
    {"d2h_pinned_latency_us", offsetof(tdm_device_profile, d2h_pinned_latency_us)},
};
#define N_NUM ((int)(sizeof num_fields / sizeof num_fields[0]))

static double *num_at(tdm_device_profile *p, int i) {
    return (double *)((char *)p + num_fields[i].off);
}

/* Reads the file into *p (whose device, identity and threads are set). True only when every
 * field is present, well formed and matches. */
static bool cache_read(const char *path, tdm_device_profile *p) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    tdm_device_profile r = *p;
    bool seen[N_NUM] = {false};
    bool format_ok = false, device_ok = false, identity_ok = false, threads_ok = false,
         memory_ok = false, bad = false;
    char line[512];
    for (int lines = 0; !bad && fgets(line, sizeof line, f); lines++) {
        size_t len = strlen(line);
        if (lines > 64 || (len == sizeof line - 1 && line[len - 1] != '\n')) {
            bad = true; /* not ours: too long */
            break;
        }
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!line[0] || line[0] == '#') continue;
        char *eq = strchr(line, '=');
        if (!eq) {
            bad = true;
            break;
        }
        *eq = 0;
        const char *key = line, *val = eq + 1;
        char *end = NULL;
        if (!strcmp(key, "format")) {
            format_ok = strtol(val, &end, 10) == PROFILE_FORMAT && val[0] && !*end;
        } else if (!strcmp(key, "device")) {
            device_ok = !strcmp(val, p->device);
        } else if (!strcmp(key, "identity")) {
            identity_ok = !strcmp(val, p->identity);
        } else if (!strcmp(key, "threads")) {
            threads_ok = strtol(val, &end, 10) == p->threads && val[0] && !*end;
        } else if (!strcmp(key, "memory_bytes")) {
            errno = 0;
            long long m = strtoll(val, &end, 10);
            memory_ok = val[0] && !*end && errno == 0 && m >= 0;
            r.memory_bytes = m;
        } else {
            for (int i = 0; i < N_NUM; i++) {
                if (strcmp(key, num_fields[i].key)) continue;
                errno = 0;
                double d = strtod(val, &end);
                if (!val[0] || *end || errno || !isfinite(d) || d < 0) bad = true;
                *num_at(&r, i) = d;
                seen[i] = true;
            }
        }
    }
    if (ferror(f)) bad = true;
    fclose(f);
    for (int i = 0; i < N_NUM; i++) bad |= !seen[i];
    if (bad || !format_ok || !device_ok || !identity_ok || !threads_ok || !memory_ok) return false;
    *p = r;
    return true;
}

/* Writes the profile through a temporary file and a rename, so readers never see half a
 * file. Failures are ignored (the profile is still good, only not kept). */
static void cache_write(const char *dir, const char *path, const tdm_device_profile *p) {
    char parent[4200];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = 0;
        /* the cache directory and its parents (usually just ~/.cache/tandem) */
        for (char *q = parent + 1; *q; q++) {
            if (*q != '/') continue;
            *q = 0;
            mkdir(parent, 0755);
            *q = '/';
        }
        mkdir(parent, 0755);
    }
    mkdir(dir, 0755);
    char tmp[4200];
    int n = snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    if (n < 0 || (size_t)n >= sizeof tmp) return;
    int fd = mkstemp(tmp);
    if (fd < 0) return;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(tmp);
        return;
    }
    fprintf(f, "# tandem device profile (measured; `tandem devices --reprofile` measures again)\n");
    fprintf(f, "format=%d\ndevice=%s\nidentity=%s\nthreads=%d\n", PROFILE_FORMAT, p->device,
            p->identity, p->threads);
    for (int i = 0; i < N_NUM; i++)
        fprintf(f, "%s=%.17g\n", num_fields[i].key, *num_at((tdm_device_profile *)p, i));
    fprintf(f, "memory_bytes=%lld\n", (long long)p->memory_bytes);
    bool ok = !ferror(f);
    if (fclose(f) != 0) ok = false;
    if (!ok || rename(tmp, path) != 0) unlink(tmp);
}

/* ---- running one node on the device -------------------------------------------------- */

#define BN_MAX_IN 3

typedef struct bench {
    tdm_device *dev;
    const tdm_allocator *a;
    tdm_threadpool *pool;
} bench;

typedef struct bench_node {
    tdm_node node;
    const tdm_kernel_def *k;  /* NULL: the device has no kernel for it */
    void *state;
    const tdm_tensor *host_in[BN_MAX_IN];
    tdm_tensor *in[BN_MAX_IN]; /* in the device's memory (NULL: host_in is used) */
    tdm_value_info out_info;
    tdm_tensor *out;
} bench_node;

static tdm_status *new_output(const bench *b, const tdm_value_info *vi, tdm_tensor **out) {
    if (b->dev->host_memory) return tdm_tensor_new(b->a, vi->dtype, vi->rank, vi->dims, out);
    return tdm_device_tensor_new(b->dev, b->a, vi->dtype, vi->rank, vi->dims, out);
}

static const tdm_tensor *bn_in(const bench_node *bn, int i) {
    return bn->in[i] ? bn->in[i] : bn->host_in[i];
}

/* Shapes the output (the schema's infer) into bn->out_info. */
static tdm_status *bn_infer(bench_node *bn) {
    tdm_node *n = &bn->node;
    tdm_value_info in[BN_MAX_IN];
    memset(in, 0, sizeof in);
    for (int i = 0; i < n->n_inputs; i++) {
        const tdm_tensor *t = bn->host_in[i];
        in[i].present = true;
        in[i].dtype = t->dtype;
        in[i].rank = t->rank;
        memcpy(in[i].dims, t->dims, sizeof t->dims);
        in[i].data = t;
    }
    memset(&bn->out_info, 0, sizeof bn->out_info);
    bn->out_info.present = true;
    bn->out_info.rank = -1;
    tdm_infer_ctx ictx = {n, n->opset, n->n_inputs, in, 1, &bn->out_info};
    TDM_TRY(n->schema->infer(&ictx));
    if (bn->out_info.rank < 0 || bn->out_info.dtype == TDM_UNDEFINED)
        return TDM_ERR(TDM_ERR_INTERNAL, "profile: %s output shape not inferred", n->op_type);
    return NULL;
}

/* Finds the kernel, puts the inputs in the device's memory, allocates the output and
 * prepares the kernel. bn->k stays NULL when the device cannot run the op. */
static tdm_status *bn_setup(const bench *b, bench_node *bn) {
    tdm_node *n = &bn->node;
    n->schema = tdm_op_find(n->domain, n->op_type, n->opset);
    if (!n->schema || !n->schema->infer) return NULL;
    tdm_dtype types[BN_MAX_IN];
    for (int i = 0; i < n->n_inputs; i++) types[i] = bn->host_in[i]->dtype;
    const tdm_kernel_def *k = tdm_device_find_kernel(b->dev, n, types, n->n_inputs);
    if (!k) return NULL;
    TDM_TRY(bn_infer(bn));
    if (!b->dev->host_memory)
        for (int i = 0; i < n->n_inputs; i++)
            TDM_TRY(tdm_device_to_device(b->dev, b->a, bn->host_in[i], &bn->in[i]));
    TDM_TRY(new_output(b, &bn->out_info, &bn->out));
    if (k->prepare) {
        const tdm_tensor *ins[BN_MAX_IN];
        for (int i = 0; i < n->n_inputs; i++) ins[i] = bn_in(bn, i);
        TDM_TRY(k->prepare(n, n->opset, n->n_inputs, ins, b->a, &bn->state));
    }
    bn->k = k;
    return NULL;
}

static void bn_free(const bench *b, bench_node *bn) {
    if (bn->k && bn->k->release && bn->state) bn->k->release(bn->state, b->a);
    bn->state = NULL;
    for (int i = 0; i < BN_MAX_IN; i++) {
        tdm_tensor_destroy(bn->in[i]);
        bn->in[i] = NULL;
    }
    tdm_tensor_destroy(bn->out);
    bn->out = NULL;
}

static tdm_status *bn_execute(const bench *b, bench_node *bn, tdm_tensor **out) {
    const tdm_tensor *ins[BN_MAX_IN];
    for (int i = 0; i < bn->node.n_inputs; i++) ins[i] = bn_in(bn, i);
    tdm_kernel_ctx ctx = {
        .node = &bn->node, .opset = bn->node.opset, .n_in = bn->node.n_inputs, .in = ins,
        .n_out = 1, .out = out, .pool = b->pool, .alloc = b->a, .state = bn->state,
        .device = b->dev,
    };
    return tdm_device_execute(b->dev, bn->k, &ctx);
}

/* Waits for the device's queued work: synchronize, or a small download (which returns only
 * after all earlier work) for a device without synchronize. */
static tdm_status *dev_wait(const bench *b, const tdm_tensor *t) {
    if (b->dev->host_memory) return NULL;
    if (tdm_device_has_synchronize(b->dev)) return tdm_device_synchronize(b->dev);
    unsigned char tiny[4];
    size_t n = t && t->nbytes < sizeof tiny ? t->nbytes : sizeof tiny;
    if (!t || !n) return NULL;
    return tdm_device_download(b->dev, tiny, t->data, n);
}

/* Best seconds of one run: a warm-up, then up to max_reps timed runs or `budget` seconds. */
static tdm_status *bn_time(const bench *b, bench_node *bn, int max_reps, double budget,
                           double *best) {
    TDM_TRY(bn_execute(b, bn, &bn->out));
    TDM_TRY(dev_wait(b, bn->out));
    double start = now_s();
    *best = INFINITY;
    for (int r = 0; r < max_reps; r++) {
        double t0 = now_s();
        TDM_TRY(bn_execute(b, bn, &bn->out));
        TDM_TRY(dev_wait(b, bn->out));
        double t = now_s() - t0;
        if (t < *best) *best = t;
        if (r >= 1 && now_s() - start > budget) break;
    }
    if (!(*best > 1e-9)) *best = 1e-9;
    return NULL;
}

/* ---- the benchmarks (best of many short runs: on a busy machine the best run is the one
 * least disturbed by other work) ------------------------------------------------------------------- */

static tdm_status *host_tensor(const bench *b, int rank, const int64_t *dims, unsigned seed,
                               tdm_tensor **out) {
    TDM_TRY(tdm_tensor_new(b->a, TDM_FLOAT, rank, dims, out));
    float *d = (*out)->data;
    for (int64_t i = 0; i < (*out)->count; i++)
        d[i] = (float)((int)((i * 7919 + seed * 104729) % 2001) - 1000) * 0.001f;
    return NULL;
}

static void node_init(tdm_node *n, const char *op, int n_in, int *ins, int *outs) {
    memset(n, 0, sizeof *n);
    n->name = (char *)"tandem_profile";
    n->op_type = (char *)op;
    n->domain = (char *)"";
    n->opset = 17;
    n->n_inputs = n_in;
    n->inputs = ins;
    n->n_outputs = 1;
    n->outputs = outs;
    n->device = -1;
}

/* Runs a single-output node on host inputs; *gflops_or_gbps = work / best time / 1e9.
 * Leaves *result at 0 when the device has no kernel for the op. */
static tdm_status *bench_op(const bench *b, const char *op, tdm_tensor **host_in, int n_in,
                            tdm_attr *attrs, int n_attrs, double work, int max_reps,
                            double budget, double *result) {
    int ins[BN_MAX_IN] = {0, 1, 2}, outs[1] = {BN_MAX_IN};
    bench_node bn;
    memset(&bn, 0, sizeof bn);
    node_init(&bn.node, op, n_in, ins, outs);
    bn.node.attrs = attrs;
    bn.node.n_attrs = n_attrs;
    for (int i = 0; i < n_in; i++) bn.host_in[i] = host_in[i];
    *result = 0;
    tdm_status *st = bn_setup(b, &bn);
    double best = 0;
    if (!st && bn.k) st = bn_time(b, &bn, max_reps, budget, &best);
    if (!st && bn.k) *result = work / best / 1e9;
    bn_free(b, &bn);
    return st ? tdm_status_wrap(st, "profiling %s on %s: ", op, b->dev->name) : NULL;
}

/* A device with memory of its own is waited for after each timed run, and at the sizes below
 * a GPU spends most of a run in that wait and the launch: an H200 did the 512^3 MatMul at
 * 8.8 TFLOP/s and the 1x1 Conv at a rate near a 16-core CPU's (2026-12-04), where its
 * ResNet-50 layers run many times faster than the CPU's, and placement split ResNet-50 and
 * BERT over both devices at 2-4x the GPU's time alone. Such a device runs a benchmark again
 * at SCALE_UP times the work when a small run took under SCALE_UP_BELOW_S; the better rate is
 * kept (the cost model adds launch_us to each node for the fixed cost). Devices that work on
 * host memory, and slower ones (PoCL), keep the small sizes. */
#define SCALE_UP_BELOW_S 0.5e-3
static bool scale_up(const bench *b, double work, double rate_g) {
    return !b->dev->host_memory && rate_g > 0 && work / (rate_g * 1e9) < SCALE_UP_BELOW_S;
}

static tdm_status *bench_gemm_n(const bench *b, int64_t n, double *gflops) {
    int64_t dims[2] = {n, n};
    tdm_tensor *x[2] = {NULL, NULL};
    tdm_status *st = host_tensor(b, 2, dims, 1, &x[0]);
    if (!st) st = host_tensor(b, 2, dims, 2, &x[1]);
    if (!st) st = bench_op(b, "MatMul", x, 2, NULL, 0, 2.0 * (double)n * (double)n * (double)n, 30, 0.12, gflops);
    tdm_tensor_destroy(x[0]);
    tdm_tensor_destroy(x[1]);
    return st;
}

/* MatMul 512^3; scaled up: 2048^3 (64x the work) */
static tdm_status *bench_gemm(const bench *b, double *gflops) {
    TDM_TRY(bench_gemm_n(b, 512, gflops));
    double big = 0;
    if (scale_up(b, 2.0 * 512 * 512 * 512, *gflops)) TDM_TRY(bench_gemm_n(b, 2048, &big));
    if (big > *gflops) *gflops = big;
    return NULL;
}

/* FLOPs of bench_conv_batch's Conv at batch n */
static double conv_work(int64_t n, int64_t c, int64_t hw, int64_t m, int64_t k, int64_t group) {
    return 2.0 * (double)n * (double)m * (double)hw * (double)hw * (double)(c / group) * (double)(k * k);
}

/* Conv of x [n, c, hw, hw] with m filters of k x k, pads k/2, `group` groups. */
static tdm_status *bench_conv_batch(const bench *b, int64_t n, int64_t c, int64_t hw, int64_t m,
                                    int64_t k, int64_t group, double *gflops) {
    int64_t xd[4] = {n, c, hw, hw}, wd[4] = {m, c / group, k, k};
    int64_t pads[4] = {k / 2, k / 2, k / 2, k / 2}, kernel[2] = {k, k};
    tdm_attr attrs[3];
    memset(attrs, 0, sizeof attrs);
    attrs[2].name = (char *)"group";
    attrs[2].type = TDM_ATTR_INT;
    attrs[2].i = group;
    attrs[0].name = (char *)"pads";
    attrs[0].type = TDM_ATTR_INTS;
    attrs[0].ints = pads;
    attrs[0].n = 4;
    attrs[1].name = (char *)"kernel_shape";
    attrs[1].type = TDM_ATTR_INTS;
    attrs[1].ints = kernel;
    attrs[1].n = 2;
    tdm_tensor *x[2] = {NULL, NULL};
    tdm_status *st = host_tensor(b, 4, xd, 3, &x[0]);
    if (!st) st = host_tensor(b, 4, wd, 4, &x[1]);
    if (!st) st = bench_op(b, "Conv", x, 2, attrs, 3, conv_work(n, c, hw, m, k, group), 30, 0.12, gflops);
    tdm_tensor_destroy(x[0]);
    tdm_tensor_destroy(x[1]);
    return st;
}

/* The Conv at batch 1; scaled up: batch 16 */
static tdm_status *bench_conv_shape(const bench *b, int64_t c, int64_t hw, int64_t m, int64_t k,
                                    int64_t group, double *gflops) {
    TDM_TRY(bench_conv_batch(b, 1, c, hw, m, k, group, gflops));
    double big = 0;
    if (scale_up(b, conv_work(1, c, hw, m, k, group), *gflops)) TDM_TRY(bench_conv_batch(b, 16, c, hw, m, k, group, &big));
    if (big > *gflops) *gflops = big;
    return NULL;
}

static tdm_status *bench_conv(const bench *b, double *gflops) {
    return bench_conv_shape(b, 64, 56, 64, 3, 1, gflops);
}

/* pointwise and depthwise convolutions: the better of two windows */
static tdm_status *bench_conv_kinds(const bench *b, tdm_device_profile *p) {
    double pw = 0, dw = 0;
    TDM_TRY(bench_conv_shape(b, 128, 28, 128, 1, 1, &pw));
    TDM_TRY(bench_conv_shape(b, 144, 56, 144, 3, 144, &dw));
    if (pw > p->conv1x1_gflops) p->conv1x1_gflops = pw;
    if (dw > p->dwconv_gflops) p->dwconv_gflops = dw;
    return NULL;
}

/* Host threads that keep their cores busy until told to stop. */
typedef struct spinner {
    atomic_int *stop;
    double sink;
} spinner;

static void *spin_main(void *arg) {
    spinner *s = arg;
    double x = 1.0;
    while (!atomic_load_explicit(s->stop, memory_order_relaxed))
        for (int i = 0; i < 4096; i++) x = x * 1.0000001 + 1e-9;
    s->sink = x;
    return NULL;
}

/* conv_gflops again with `threads` host threads spinning, over `alone` (capped at 1). */
static tdm_status *bench_host_busy(const bench *b, int threads, double alone, double *keep) {
    enum { MAX_SPIN = 64 };
    pthread_t th[MAX_SPIN];
    spinner sp[MAX_SPIN];
    atomic_int stop;
    atomic_init(&stop, 0);
    int n = 0;
    if (threads > MAX_SPIN) threads = MAX_SPIN;
    for (; n < threads; n++) {
        sp[n].stop = &stop;
        sp[n].sink = 0;
        if (pthread_create(&th[n], NULL, spin_main, &sp[n]) != 0) break;
    }
    double busy = 0;
    tdm_status *st = n > 0 ? bench_conv(b, &busy) : NULL;
    atomic_store(&stop, 1);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    *keep = n > 0 && alone > 0 && busy > 0 ? (busy < alone ? busy / alone : 1.0) : 0;
    return st;
}

/* Add (2 inputs + 1 output), or Relu (1 + 1) on a device without Add. */
static tdm_status *bench_bandwidth_n(const bench *b, int64_t elems, double *gbps) {
    int64_t dims[1] = {elems};
    tdm_tensor *x[2] = {NULL, NULL};
    tdm_status *st = host_tensor(b, 1, dims, 5, &x[0]);
    if (!st) st = host_tensor(b, 1, dims, 6, &x[1]);
    double bytes = (double)elems * sizeof(float);
    if (!st) st = bench_op(b, "Add", x, 2, NULL, 0, 3 * bytes, 20, 0.15, gbps);
    if (!st && *gbps == 0) st = bench_op(b, "Relu", x, 1, NULL, 0, 2 * bytes, 20, 0.15, gbps);
    tdm_tensor_destroy(x[0]);
    tdm_tensor_destroy(x[1]);
    return st;
}

/* Add of 4M elements; scaled up: 32M (3 x 128 MiB) */
static tdm_status *bench_bandwidth(const bench *b, double *gbps) {
    TDM_TRY(bench_bandwidth_n(b, ADD_ELEMS, gbps));
    double big = 0;
    if (scale_up(b, 3.0 * (double)ADD_ELEMS * sizeof(float), *gbps))
        TDM_TRY(bench_bandwidth_n(b, ADD_ELEMS * 8, &big));
    if (big > *gbps) *gbps = big;
    return NULL;
}

/* One small node as the executor runs it: infer, allocate the output, execute, free. */
static tdm_status *launch_once(const bench *b, bench_node *bn) {
    TDM_TRY(bn_infer(bn));
    tdm_tensor *out = NULL;
    TDM_TRY(new_output(b, &bn->out_info, &out));
    tdm_status *st = bn_execute(b, bn, &out);
    tdm_tensor_destroy(out);
    return st;
}

/* A 1-element `op` with n_in inputs; *us stays 0 when the device has no kernel for it. */
static tdm_status *bench_launch(const bench *b, const char *op, int n_in, double *us) {
    int64_t dims[1] = {1};
    tdm_tensor *x = NULL;
    int ins[2] = {0, 0}, outs[1] = {1};
    bench_node bn;
    memset(&bn, 0, sizeof bn);
    node_init(&bn.node, op, n_in, ins, outs);
    *us = 0;
    tdm_status *st = host_tensor(b, 1, dims, 7, &x);
    if (!st) {
        for (int i = 0; i < n_in; i++) bn.host_in[i] = x;
        st = bn_setup(b, &bn);
    }
    if (!st && bn.k) {
        /* device memory: a batch of launches, one wait (queued work is what the executor
         * issues); host memory: each launch is complete when it returns */
        int batch = b->dev->host_memory ? 1 : LAUNCH_BATCH;
        double best = INFINITY, start = now_s();
        for (int r = 0; r < 400 && !st; r++) {
            double t0 = now_s();
            for (int i = 0; i < batch && !st; i++) st = launch_once(b, &bn);
            if (!st) st = dev_wait(b, bn.out);
            double t = (now_s() - t0) / batch;
            if (r > 0 && t < best) best = t; /* the first round warms up */
            if (r >= 20 && now_s() - start > 0.05) break;
        }
        if (!st) *us = best * 1e6 > 1e-3 ? best * 1e6 : 1e-3;
    }
    bn_free(b, &bn);
    tdm_tensor_destroy(x);
    return st ? tdm_status_wrap(st, "profiling launches on %s: ", b->dev->name) : NULL;
}

/* Best seconds of `reps` uploads (each followed by a wait) or downloads of `size` bytes. */
static tdm_status *time_copy(const bench *b, bool up, void *buf, void *host, size_t size,
                             int reps, double *best) {
    tdm_device *d = b->dev;
    *best = INFINITY;
    for (int r = 0; r <= reps; r++) { /* round 0 warms up */
        double t0 = now_s();
        if (up) {
            TDM_TRY(tdm_device_upload(d, buf, host, size));
            if (tdm_device_has_synchronize(d)) {
                TDM_TRY(tdm_device_synchronize(d));
            } else {
                unsigned char tiny[4];
                TDM_TRY(tdm_device_download(d, tiny, buf, size < 4 ? size : 4));
            }
        } else {
            TDM_TRY(tdm_device_download(d, host, buf, size));
        }
        double t = now_s() - t0;
        if (r > 0 && t < *best) *best = t;
    }
    return NULL;
}

static double bandwidth(size_t bytes, double t_big, double latency) {
    double t = t_big - latency;
    if (t < t_big * 0.1) t = t_big; /* latency noise larger than the transfer: ignore it */
    return (double)bytes / t / 1e9;
}

/* Latency and bandwidth of uploads and downloads between `host` (BIG_COPY bytes) and a
 * device buffer. */
static tdm_status *link_figures(const bench *b, void *buf, void *host, double *h2d_gbps,
                                double *d2h_gbps, double *h2d_us, double *d2h_us) {
    double up_small = 0, down_small = 0, up_big = 0, down_big = 0;
    TDM_TRY(time_copy(b, true, buf, host, 4, 50, &up_small));
    TDM_TRY(time_copy(b, false, buf, host, 4, 50, &down_small));
    TDM_TRY(time_copy(b, true, buf, host, BIG_COPY, 5, &up_big));
    TDM_TRY(time_copy(b, false, buf, host, BIG_COPY, 5, &down_big));
    *h2d_us = up_small * 1e6 > 1e-3 ? up_small * 1e6 : 1e-3;
    *d2h_us = down_small * 1e6 > 1e-3 ? down_small * 1e6 : 1e-3;
    *h2d_gbps = bandwidth(BIG_COPY, up_big, up_small);
    *d2h_gbps = bandwidth(BIG_COPY, down_big, down_small);
    return NULL;
}

static tdm_status *bench_link(const bench *b, tdm_device_profile *p) {
    tdm_device *d = b->dev;
    if (d->host_memory) return NULL; /* no copies: 0 = "no copy needed" */
    if (!tdm_device_has_buffers(d))
        return TDM_ERR(TDM_ERR_INTERNAL, "device %s has no memory interface", d->name);
    void *host = tdm_alloc(b->a, BIG_COPY);
    void *buf = NULL, *pinned = NULL;
    bool can_pin = tdm_device_has_staging(d);
    tdm_status *st = host ? NULL : TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory profiling copies");
    if (!st) {
        memset(host, 1, BIG_COPY);
        st = tdm_device_buffer_alloc(d, BIG_COPY, &buf);
        if (st) buf = NULL;
    }
    if (!st)
        st = link_figures(b, buf, host, &p->h2d_gbps, &p->d2h_gbps, &p->h2d_latency_us,
                          &p->d2h_latency_us);
    if (!st && can_pin && !(st = tdm_device_host_alloc(d, BIG_COPY, &pinned))) {
        memset(pinned, 1, BIG_COPY);
        st = link_figures(b, buf, pinned, &p->h2d_pinned_gbps, &p->d2h_pinned_gbps,
                          &p->h2d_pinned_latency_us, &p->d2h_pinned_latency_us);
    } else if (!st) {
        p->h2d_pinned_gbps = p->h2d_gbps;
        p->d2h_pinned_gbps = p->d2h_gbps;
        p->h2d_pinned_latency_us = p->h2d_latency_us;
        p->d2h_pinned_latency_us = p->d2h_latency_us;
    } else {
        pinned = NULL;
    }
    if (!st) p->link_latency_us = (p->h2d_latency_us + p->d2h_latency_us) / 2;
    if (pinned) tdm_device_host_free(d, pinned);
    if (buf) tdm_device_buffer_free(d, buf);
    tdm_free(b->a, host);
    return st ? tdm_status_wrap(st, "profiling copies to %s: ", d->name) : NULL;
}

static int64_t host_memory_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return 0;
    return (int64_t)pages * (int64_t)page;
}

static tdm_status *measure(tdm_device *dev, const tdm_allocator *a, const tdm_settings *set,
                           int threads, tdm_device_profile *p) {
    bench b = {dev, a, NULL};
    TDM_TRY(tdm_threadpool_create(threads, set->spin_us, &b.pool));
    /* the compute benchmarks run in two windows apart in time, best kept: a burst of other
     * work on a shared machine spoils one window more often than both */
    double gemm2 = 0, conv2 = 0;
    tdm_status *st = bench_gemm(&b, &p->gemm_gflops);
    if (!st) st = bench_conv(&b, &p->conv_gflops);
    if (!st) st = bench_conv_kinds(&b, p);
    if (!st) st = bench_bandwidth(&b, &p->mem_gbps);
    if (!st) st = bench_launch(&b, "Relu", 1, &p->launch_us);
    if (!st && p->launch_us == 0) st = bench_launch(&b, "Add", 2, &p->launch_us);
    if (!st) st = bench_link(&b, p);
    if (!st) st = bench_gemm(&b, &gemm2);
    if (!st) st = bench_conv(&b, &conv2);
    if (!st) st = bench_conv_kinds(&b, p);
    if (gemm2 > p->gemm_gflops) p->gemm_gflops = gemm2;
    if (conv2 > p->conv_gflops) p->conv_gflops = conv2;
    if (!st && !dev->host_memory) st = bench_host_busy(&b, threads, p->conv_gflops, &p->host_busy_speed);
    tdm_threadpool_free(b.pool);
    /* capacity: host memory for host-memory devices; other backends cannot say yet (0) */
    p->memory_bytes = dev->host_memory ? host_memory_bytes() : 0;
    return st;
}

tdm_status *tdm_profile_device(tdm_device *dev, const tdm_allocator *a, const tdm_settings *set,
                               int threads, bool reprofile, tdm_device_profile *out) {
    if (!dev || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_profile_device: NULL argument");
    set = tdm_settings_or_builtin(set);
    if (threads < 1) threads = tdm_cpu_count();
    tdm_device_profile p;
    memset(&p, 0, sizeof p);
    snprintf(p.device, sizeof p.device, "%s", dev->name);
    snprintf(p.identity, sizeof p.identity, "%s; tandem %s; %d threads", dev->description,
             TANDEM_VERSION, threads);
    for (char *c = p.identity; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    p.threads = threads;
    char dir[4200], path[4400];
    bool have_path = cache_path(set, &p, dir, sizeof dir, path, sizeof path);
    if (have_path && !reprofile && cache_read(path, &p)) {
        p.from_cache = true;
        p.staged_copies = tdm_xfer_device_async(dev) && !tdm_xfer_forced_sync(set);
        *out = p;
        return NULL;
    }
    TDM_TRY(measure(dev, a, set, threads, &p));
    if (have_path) cache_write(dir, path, &p);
    p.staged_copies = tdm_xfer_device_async(dev) && !tdm_xfer_forced_sync(set);
    *out = p;
    return NULL;
}

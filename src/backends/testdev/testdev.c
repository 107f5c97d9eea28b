/* The test device: an accelerator stand-in for tests and CI machines without one. It has
 * memory of its own (buffers it allocates; data reaches it only through upload/download),
 * runs the CPU kernel table on that memory, and can be slowed down to test schedulers.
 *
 * Enabled by the environment's settings (tdm_env_options; the variables in brackets give
 * their defaults): test_devices=N (TANDEM_TEST_DEVICES; N devices "test:0".."test:N-1", at
 * most 4); test_device_delay_us=D (TANDEM_TEST_DEVICE_DELAY_US) adds D microseconds to every
 * kernel (a slow device); test_device_ops="Op1,Op2" (TANDEM_TEST_DEVICE_OPS) limits the ops
 * it claims (an accelerator that supports only some ops); test_device_fail_every=K
 * (TANDEM_TEST_DEVICE_FAIL_EVERY) makes every K-th kernel fail (a device that errors
 * mid-run).
 *
 * Its kernels run on the calling thread, so an event recorded on it has completed at once.
 * It has a copy queue (backend.h version 7): upload_queued copies on a thread of its own,
 * started on first use, whose events complete when the bytes are in place; event_wait and
 * event_sync block the calling thread until then. Streamed weights (sched/budget.h) thus
 * really go up while the device's kernels run.
 *
 * Registered host memory (version 8) is modelled as CUDA has it: host_register records the
 * range (one that shares a 4 KiB page with a registered range is an error, as
 * cudaHostRegister's), an upload
 * from inside a registered range is one copy, and one from elsewhere goes through a 1 MiB
 * staging buffer piece by piece (the host copy CUDA makes into its pinned staging); the
 * bytes each way are counted (up_direct, up_staged). Ranges left registered at close are
 * released.
 *
 * Shape arguments (the inputs whose values shape inference reads: Reshape's shape, Slice's
 * starts...) are taken where they are, as the CUDA kernels take them (td_kernel_flags). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_simd.h"
#include "core/alloc.h"

/* An event: done once its copy (if any) has been made; guarded by the device's copy lock. */
typedef struct td_event {
    bool done;
} td_event;

typedef struct td_copy {
    struct td_copy *next;
    void *buf;
    const void *host;
    size_t size;
    td_event *done;
} td_copy;

typedef struct testdev {
    const tdm_allocator *a;
    /* the copy queue: a FIFO served by one thread */
    pthread_mutex_t copy_mu;
    pthread_cond_t copy_cv;
    td_copy *head, *tail;
    bool copier_started, stopping;
    pthread_t copier;
    long delay_us;
    long fail_every;
    long calls; /* atomically counted kernels (for fail_every) */
    char ops[512]; /* ",Op1,Op2," or "" = all */
    /* registered host memory (guarded by copy_mu) and the bytes uploaded from it / staged */
    struct td_range {
        const char *lo;
        size_t size;
    } *ranges;
    int n_ranges, cap_ranges;
    unsigned char *staging; /* TD_STAGING bytes, made on first use */
    int64_t up_direct, up_staged;
    tdm_cpu_simd simd; /* the CPU kernels' variants, as the CPU device has them */
} testdev;

static const tdm_kernel_def *td_find_kernel(tdm_device *dev, const tdm_node *node,
                                            const tdm_dtype *in_types, int n_in) {
    testdev *td = dev->ctx;
    if (td->ops[0]) {
        char key[128];
        snprintf(key, sizeof key, ",%s,", node->op_type);
        if (!strstr(td->ops, key)) return NULL;
    }
    for (int i = 0; i < n_in; i++)
        if (in_types[i] == TDM_STRING) return NULL; /* device memory holds no strings */
    return tdm_cpu_find_kernel(node, in_types, n_in);
}

static tdm_status *td_execute(tdm_device *dev, const tdm_kernel_def *k, tdm_kernel_ctx *ctx) {
    testdev *td = dev->ctx;
    if (td->fail_every > 0 && __atomic_add_fetch(&td->calls, 1, __ATOMIC_RELAXED) % td->fail_every == 0)
        return TDM_ERR(TDM_ERR_DEVICE, "%s: injected failure in %s node '%s'", dev->name,
                       ctx->node->op_type, ctx->node->name);
    if (td->delay_us > 0) {
        struct timespec ts = {td->delay_us / 1000000, (td->delay_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    ctx->cpu_simd = &td->simd;
    return k->run(ctx);
}

static tdm_status *td_alloc(tdm_device *dev, size_t size, void **buf) {
    testdev *td = dev->ctx;
    void *p = tdm_calloc(td->a, 1, size ? size : 1);
    if (!p) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "%s: out of device memory (%zu bytes)", dev->name, size);
    *buf = p;
    return NULL;
}

static void td_free(tdm_device *dev, void *buf) {
    testdev *td = dev->ctx;
    tdm_free(td->a, buf);
}

#define TD_STAGING ((size_t)1 << 20)

/* Whether [host, host + size) lies in a registered range; copy_mu held. */
static bool td_registered(const testdev *td, const void *host, size_t size) {
    const char *p = host;
    for (int i = 0; i < td->n_ranges; i++)
        if (p >= td->ranges[i].lo && p + size <= td->ranges[i].lo + td->ranges[i].size) return true;
    return false;
}

/* One host -> device copy: direct from registered memory, else through the staging buffer
 * (copy_mu held for the staging buffer; the copier thread and the host share it). */
static void td_copy_in(testdev *td, void *buf, const void *host, size_t size) {
    pthread_mutex_lock(&td->copy_mu);
    bool direct = td_registered(td, host, size) || size == 0;
    if (!direct && !td->staging) td->staging = tdm_calloc(td->a, 1, TD_STAGING);
    if (direct || !td->staging) {
        pthread_mutex_unlock(&td->copy_mu);
        memcpy(buf, host, size);
        pthread_mutex_lock(&td->copy_mu);
        td->up_direct += (int64_t)size;
    } else {
        for (size_t off = 0; off < size; off += TD_STAGING) {
            size_t n = size - off < TD_STAGING ? size - off : TD_STAGING;
            memcpy(td->staging, (const char *)host + off, n);
            memcpy((char *)buf + off, td->staging, n);
        }
        td->up_staged += (int64_t)size;
    }
    pthread_mutex_unlock(&td->copy_mu);
}

static tdm_status *td_upload(tdm_device *dev, void *buf, const void *host, size_t size) {
    td_copy_in(dev->ctx, buf, host, size);
    return NULL;
}

static tdm_status *td_host_register(tdm_device *dev, void *host, size_t size) {
    testdev *td = dev->ctx;
    if (!host || !size)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s: registering an empty range of host memory", dev->name);
    tdm_status *st = NULL;
    const char *lo = host;
    /* pages are what gets locked: ranges that share a page overlap (as for cudaHostRegister) */
    const uintptr_t pg = 4096;
    uintptr_t a0 = (uintptr_t)lo & ~(pg - 1), a1 = ((uintptr_t)lo + size + pg - 1) & ~(pg - 1);
    pthread_mutex_lock(&td->copy_mu);
    for (int i = 0; i < td->n_ranges && !st; i++) {
        uintptr_t b0 = (uintptr_t)td->ranges[i].lo & ~(pg - 1);
        uintptr_t b1 = ((uintptr_t)td->ranges[i].lo + td->ranges[i].size + pg - 1) & ~(pg - 1);
        if (a0 < b1 && b0 < a1)
            st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s: host memory %p (%zu bytes) shares pages "
                         "with a registered range", dev->name, host, size);
    }
    if (!st && td->n_ranges == td->cap_ranges) {
        int cap = td->cap_ranges ? 2 * td->cap_ranges : 16;
        struct td_range *r = tdm_calloc(td->a, (size_t)cap, sizeof *r);
        if (!r) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "%s: out of memory registering host memory", dev->name);
        else {
            if (td->n_ranges) memcpy(r, td->ranges, (size_t)td->n_ranges * sizeof *r);
            tdm_free(td->a, td->ranges);
            td->ranges = r;
            td->cap_ranges = cap;
        }
    }
    if (!st) td->ranges[td->n_ranges++] = (struct td_range){lo, size};
    pthread_mutex_unlock(&td->copy_mu);
    return st;
}

static void td_host_unregister(tdm_device *dev, void *host) {
    testdev *td = dev->ctx;
    pthread_mutex_lock(&td->copy_mu);
    for (int i = 0; i < td->n_ranges; i++)
        if (td->ranges[i].lo == host) {
            td->ranges[i] = td->ranges[--td->n_ranges];
            break;
        }
    pthread_mutex_unlock(&td->copy_mu);
}

static tdm_status *td_download(tdm_device *dev, void *host, const void *buf, size_t size) {
    (void)dev;
    memcpy(host, buf, size);
    return NULL;
}

/* ---- events and the copy queue ---- */

static tdm_status *td_event_record(tdm_device *dev, void **event) {
    testdev *td = dev->ctx;
    td_event *e = tdm_calloc(td->a, 1, sizeof *e);
    if (!e) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "%s: out of memory for an event", dev->name);
    e->done = true; /* kernels ran on the calling thread: all work so far is done */
    *event = e;
    return NULL;
}

static tdm_status *td_event_sync(tdm_device *dev, void *event) {
    testdev *td = dev->ctx;
    td_event *e = event;
    if (!e) return NULL;
    pthread_mutex_lock(&td->copy_mu);
    while (!e->done) pthread_cond_wait(&td->copy_cv, &td->copy_mu);
    pthread_mutex_unlock(&td->copy_mu);
    return NULL;
}

static tdm_status *td_event_wait(tdm_device *dev, tdm_device *owner, void *event) {
    if (owner && owner != dev) return tdm_device_event_sync(owner, event);
    return td_event_sync(dev, event); /* the next kernel runs on this thread: it waits here */
}

static void td_event_free(tdm_device *dev, void *event) {
    testdev *td = dev->ctx;
    tdm_free(td->a, event);
}

static void *td_copier(void *arg) {
    testdev *td = arg;
    pthread_mutex_lock(&td->copy_mu);
    for (;;) {
        while (!td->head && !td->stopping) pthread_cond_wait(&td->copy_cv, &td->copy_mu);
        if (!td->head) break;
        td_copy *c = td->head;
        pthread_mutex_unlock(&td->copy_mu);
        td_copy_in(td, c->buf, c->host, c->size);
        pthread_mutex_lock(&td->copy_mu);
        td->head = c->next;
        if (!td->head) td->tail = NULL;
        c->done->done = true;
        tdm_free(td->a, c);
        pthread_cond_broadcast(&td->copy_cv);
    }
    pthread_mutex_unlock(&td->copy_mu);
    return NULL;
}

static tdm_status *td_upload_queued(tdm_device *dev, void *buf, const void *host, size_t size,
                                    void *after, void **done) {
    testdev *td = dev->ctx;
    TDM_TRY(td_event_sync(dev, after)); /* (compute events are done at once) */
    td_event *e = tdm_calloc(td->a, 1, sizeof *e);
    td_copy *c = tdm_calloc(td->a, 1, sizeof *c);
    if (!e || !c) {
        tdm_free(td->a, e);
        tdm_free(td->a, c);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "%s: out of memory queueing a copy", dev->name);
    }
    *c = (td_copy){NULL, buf, host, size, e};
    tdm_status *st = NULL;
    pthread_mutex_lock(&td->copy_mu);
    if (!td->copier_started) {
        if (pthread_create(&td->copier, NULL, td_copier, td) == 0) td->copier_started = true;
        else st = TDM_ERR(TDM_ERR_DEVICE, "%s: cannot start the copy thread", dev->name);
    }
    if (!st) {
        if (td->tail) td->tail->next = c;
        else td->head = c;
        td->tail = c;
        pthread_cond_broadcast(&td->copy_cv);
    }
    pthread_mutex_unlock(&td->copy_mu);
    if (st) {
        tdm_free(td->a, e);
        tdm_free(td->a, c);
        return st;
    }
    *done = e;
    return NULL;
}

static void td_close(tdm_device *dev) {
    testdev *td = dev->ctx;
    const tdm_allocator *a = td->a;
    pthread_mutex_lock(&td->copy_mu);
    td->stopping = true;
    pthread_cond_broadcast(&td->copy_cv);
    pthread_mutex_unlock(&td->copy_mu);
    if (td->copier_started) pthread_join(td->copier, NULL);
    tdm_free(a, td->ranges);
    tdm_free(a, td->staging);
    pthread_mutex_destroy(&td->copy_mu);
    pthread_cond_destroy(&td->copy_cv);
    tdm_free(a, td);
    tdm_free(a, dev);
}

/* As the CUDA tables promise for their shape arguments (TDM_KF_HOST_READS): the inputs whose
 * values shape inference reads are taken where they are. Its buffers are host memory, so the
 * CPU kernels read them in either place. */
static unsigned td_kernel_flags(tdm_device *dev, const tdm_kernel_def *k, const tdm_node *node) {
    (void)dev;
    (void)k;
    return node && node->schema ? TDM_KF_HOST_READS(node->schema->shape_inputs) : 0;
}

static const tdm_device_iface td_iface = {
    .api_version = TDM_DEVICE_IFACE_VERSION,
    .find_kernel = td_find_kernel,
    .kernel_flags = td_kernel_flags,
    .execute = td_execute,
    .close = td_close,
    .buffer_alloc = td_alloc,
    .buffer_free = td_free,
    .upload = td_upload,
    .download = td_download,
    .event_record = td_event_record,
    .event_wait = td_event_wait,
    .event_sync = td_event_sync,
    .event_free = td_event_free,
    .upload_queued = td_upload_queued,
    .host_register = td_host_register,
    .host_unregister = td_host_unregister,
};

static tdm_status *td_discover(const tdm_allocator *a, const tdm_logger *log,
                               const tdm_settings *set, tdm_device **devs, int max, int *n,
                               char *why, size_t why_size) {
    (void)log;
    (void)why;
    (void)why_size;
    *n = 0;
    set = tdm_settings_or_builtin(set);
    /* none asked for: not a missing backend either */
    int want = set->test_devices < 4 ? (int)set->test_devices : 4;
    for (int i = 0; i < want && *n < max; i++) {
        tdm_device *d = tdm_calloc(a, 1, sizeof *d);
        testdev *td = tdm_calloc(a, 1, sizeof *td);
        if (!d || !td) {
            tdm_free(a, d);
            tdm_free(a, td);
            return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating test devices");
        }
        td->a = a;
        pthread_mutex_init(&td->copy_mu, NULL);
        pthread_cond_init(&td->copy_cv, NULL);
        /* the CPU's cap too: the test device runs CPU kernels, and its measured profile
         * must not look faster than a capped CPU only because its kernels are not capped */
        tdm_cpu_isa isa = tdm_cpu_host_isa(), cap;
        if (set->cpu_isa[0] && tdm_cpu_isa_parse(set->cpu_isa, &cap)) isa = tdm_cpu_isa_min(isa, cap);
        tdm_cpu_simd_init(&td->simd, isa);
        td->delay_us = set->test_device_delay_us;
        td->fail_every = set->test_device_fail_every;
        if (set->test_device_ops[0]) snprintf(td->ops, sizeof td->ops, ",%s,", set->test_device_ops);
        d->iface = &td_iface;
        d->ctx = td;
        snprintf(d->name, sizeof d->name, "test:%d", i);
        /* the ISA is part of the description, hence of the profile's identity: a profile
         * measured under another cap is not reused */
        snprintf(d->isa, sizeof d->isa, "%s", tdm_cpu_isa_name(isa));
        snprintf(d->description, sizeof d->description,
                 "test device (own memory, CPU kernels %s%s)", d->isa,
                 td->delay_us ? ", slowed" : "");
        d->host_memory = false;
        devs[(*n)++] = d;
    }
    return NULL;
}

const tdm_backend_reg tdm_backend_testdev = {"test", td_discover};

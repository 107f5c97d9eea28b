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
 * mid-run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_simd.h"
#include "core/alloc.h"

typedef struct testdev {
    const tdm_allocator *a;
    long delay_us;
    long fail_every;
    long calls; /* atomically counted kernels (for fail_every) */
    char ops[512]; /* ",Op1,Op2," or "" = all */
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

static tdm_status *td_upload(tdm_device *dev, void *buf, const void *host, size_t size) {
    (void)dev;
    memcpy(buf, host, size);
    return NULL;
}

static tdm_status *td_download(tdm_device *dev, void *host, const void *buf, size_t size) {
    (void)dev;
    memcpy(host, buf, size);
    return NULL;
}

static void td_close(tdm_device *dev) {
    testdev *td = dev->ctx;
    const tdm_allocator *a = td->a;
    tdm_free(a, td);
    tdm_free(a, dev);
}

static const tdm_device_iface td_iface = {
    .api_version = TDM_DEVICE_IFACE_VERSION,
    .find_kernel = td_find_kernel,
    .execute = td_execute,
    .close = td_close,
    .buffer_alloc = td_alloc,
    .buffer_free = td_free,
    .upload = td_upload,
    .download = td_download,
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

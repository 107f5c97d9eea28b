/* The CPU device: runs kernels from the CPU kernel table on the calling thread, with the
 * session's thread pool for intra-op parallelism. */
#include <stdio.h>
#include <stdlib.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "core/alloc.h"
#include "core/threadpool.h"

static const tdm_kernel_def *const cpu_tables[] = {
#define TDM_X_(fam) tdm_cpu_kernels_##fam,
    TDM_CPU_FAMILIES(TDM_X_)
#undef TDM_X_
};
static const int *const cpu_counts[] = {
#define TDM_X_(fam) &tdm_cpu_kernels_##fam##_count,
    TDM_CPU_FAMILIES(TDM_X_)
#undef TDM_X_
};
#define N_TABLES ((int)(sizeof cpu_tables / sizeof cpu_tables[0]))

const tdm_kernel_def *tdm_cpu_find_kernel(const tdm_node *node, const tdm_dtype *in_types,
                                          int n_in) {
    int counts[N_TABLES];
    for (int i = 0; i < N_TABLES; i++) counts[i] = *cpu_counts[i];
    return tdm_kernel_find(cpu_tables, counts, N_TABLES, node, in_types, n_in);
}

static const tdm_kernel_def *cpu_find_kernel(tdm_device *dev, const tdm_node *node,
                                             const tdm_dtype *in_types, int n_in) {
    (void)dev;
    return tdm_cpu_find_kernel(node, in_types, n_in);
}

/* The promises come from the kernel table's flags column (tdm_kernel_def.flags). */
static unsigned cpu_kernel_flags(tdm_device *dev, const tdm_kernel_def *k, const tdm_node *node) {
    (void)dev;
    return tdm_kernel_flags(k, node);
}

static tdm_status *cpu_execute(tdm_device *dev, const tdm_kernel_def *k, tdm_kernel_ctx *ctx) {
    (void)dev;
    return k->run(ctx);
}

static void cpu_close(tdm_device *dev) {
    const tdm_allocator *a = dev->ctx;
    tdm_free(a, dev);
}

static const tdm_device_iface cpu_iface = {
    .api_version = TDM_DEVICE_IFACE_VERSION,
    .find_kernel = cpu_find_kernel,
    .execute = cpu_execute,
    .synchronize = NULL,
    .close = cpu_close,
    .kernel_flags = cpu_kernel_flags,
};

static tdm_status *cpu_discover(const tdm_allocator *a, const tdm_logger *log,
                                const tdm_settings *set, tdm_device **devs, int max, int *n,
                                char *why, size_t why_size) {
    (void)log;
    (void)set;
    (void)why;
    (void)why_size;
    *n = 0;
    if (max < 1) return NULL;
    tdm_device *d = tdm_calloc(a, 1, sizeof *d);
    if (!d) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating the cpu device");
    d->iface = &cpu_iface;
    d->ctx = (void *)a;
    snprintf(d->name, sizeof d->name, "cpu");
    snprintf(d->description, sizeof d->description, "host CPU, %d logical cores",
             tdm_cpu_count());
    d->host_memory = true;
    devs[0] = d;
    *n = 1;
    return NULL;
}

const tdm_backend_reg tdm_backend_cpu = {"cpu", cpu_discover};

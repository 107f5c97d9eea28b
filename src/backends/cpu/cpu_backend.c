/* The CPU device: runs kernels from the CPU kernel table on the calling thread, with the
 * session's thread pool for intra-op parallelism. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_simd.h"
#include "core/alloc.h"
#include "core/threadpool.h"
#include "ops/fused.h"

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

/* Ops of the default domain whose CPU kernels write every element of every output (checked
 * kernel by kernel: no path leaves a part for the executor's zeroing), and those that may
 * write output 0 over input 0 (a copy that becomes nothing). Fused ops: Attention. */
static const char *const writes_all_ops[] = {
    "Add", "Sub", "Mul", "Div", "Transpose", "Concat", "Gather", "LayerNormalization", "Softmax",
};
static const char *const copy_ops[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"};

static bool in_names(const char *op, const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(op, names[i]) == 0) return true;
    return false;
}

static unsigned cpu_kernel_flags(tdm_device *dev, const tdm_kernel_def *k, const tdm_node *node) {
    (void)dev;
    unsigned f = tdm_cpu_dnnl_flags(k, node);
    if (f) return f;
    if (node->domain[0])
        return strcmp(node->domain, TDM_FUSED_DOMAIN) == 0 && strcmp(node->op_type, "Attention") == 0
                   ? TDM_KF_WRITES_ALL
                   : 0;
    if (in_names(node->op_type, copy_ops, sizeof copy_ops / sizeof *copy_ops))
        return TDM_KF_WRITES_ALL | TDM_KF_INPLACE(0);
    if (in_names(node->op_type, writes_all_ops, sizeof writes_all_ops / sizeof *writes_all_ops))
        return TDM_KF_WRITES_ALL;
    return 0;
}

/* The CPU device's context: its allocator and the own kernels' SIMD variants, chosen when
 * the device is created. */
typedef struct cpu_dev {
    const tdm_allocator *a;
    tdm_cpu_simd simd;
} cpu_dev;

static tdm_status *cpu_execute(tdm_device *dev, const tdm_kernel_def *k, tdm_kernel_ctx *ctx) {
    const cpu_dev *cd = dev->ctx;
    ctx->cpu_simd = &cd->simd;
    return k->run(ctx);
}

static void cpu_close(tdm_device *dev) {
    cpu_dev *cd = dev->ctx;
    const tdm_allocator *a = cd->a;
    tdm_free(a, cd);
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
    cpu_dev *cd = tdm_calloc(a, 1, sizeof *cd);
    if (!d || !cd) {
        tdm_free(a, d);
        tdm_free(a, cd);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating the cpu device");
    }
    cd->a = a;
    tdm_cpu_simd_init(&cd->simd, tdm_cpu_host_isa());
    d->iface = &cpu_iface;
    d->ctx = cd;
    snprintf(d->name, sizeof d->name, "cpu");
    snprintf(d->description, sizeof d->description, "host CPU, %d logical cores",
             tdm_cpu_count());
    d->host_memory = true;
    devs[0] = d;
    *n = 1;
    return NULL;
}

const tdm_backend_reg tdm_backend_cpu = {"cpu", cpu_discover};

/* The CPU device: runs kernels from the CPU kernel table on the calling thread, with the
 * session's thread pool for intra-op parallelism. */
#include <stdio.h>
#include <stdlib.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_device.h"
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

/* The promises come from the kernel table's flags column (tdm_kernel_def.flags). */
static unsigned cpu_kernel_flags(tdm_device *dev, const tdm_kernel_def *k, const tdm_node *node) {
    (void)dev;
    return tdm_kernel_flags(k, node);
}

/* Kernels find the own SIMD variants of their device (cpu_device.h) in their context. */
static tdm_status *cpu_execute(tdm_device *dev, const tdm_kernel_def *k, tdm_kernel_ctx *ctx) {
    const tdm_cpu_dev *c = dev->ctx;
    ctx->cpu_simd = &c->simd;
    return k->run(ctx);
}

static void cpu_close(tdm_device *dev) {
    tdm_cpu_dev *c = dev->ctx;
    const tdm_allocator *a = c->alloc;
    pthread_mutex_destroy(&c->mu);
    tdm_free(a, c);
    tdm_free(a, dev);
}

static void cpu_describe(tdm_device *dev) {
    tdm_cpu_dev *c = dev->ctx;
    const char *own = tdm_cpu_isa_name(c->isa), *dnnl = tdm_cpu_isa_name(c->dnnl_isa);
    snprintf(dev->isa, sizeof dev->isa, "%s", own);
    if (c->isa == c->dnnl_isa)
        snprintf(dev->description, sizeof dev->description, "host CPU, %d logical cores, %s",
                 tdm_cpu_count(), own);
    else
        snprintf(dev->description, sizeof dev->description,
                 "host CPU, %d logical cores, %s (oneDNN %s)", tdm_cpu_count(), own, dnnl);
}

/* "cpu_isa": the ISA cap (cpu_device.h), given once when the environment is created; an
 * empty value means the machine's best. Other keys are not the CPU's. */
static tdm_status *cpu_configure(tdm_device *dev, const char *key, const char *value) {
    tdm_cpu_dev *c = dev->ctx;
    if (strcmp(key, "precision") == 0) { /* (the session checked the name) */
        bool bf16 = value && strcmp(value, "bf16") == 0;
        if (bf16 && c->dnnl_isa < TDM_ISA_AVX512_CORE_BF16)
            return TDM_ERR(TDM_ERR_UNSUPPORTED,
                           "precision bf16 on the cpu needs AVX512_BF16 or AMX, and oneDNN runs "
                           "%s here (machine %s%s): tandem does not emulate bf16; use fp32",
                           tdm_cpu_isa_name(c->dnnl_isa), tdm_cpu_isa_name(tdm_cpu_isa_detect()),
                           c->dnnl_isa < tdm_cpu_isa_detect() ? ", capped by cpu_isa / "
                                                                "TANDEM_CPU_ISA" : "");
        atomic_store(&c->bf16, bf16);
        if (bf16)
            tdm_log(&c->log, TDM_LOG_INFO, "cpu: precision bf16 (oneDNN %s): convolutions and "
                    "matmuls take bf16 inputs, accumulate in f32", tdm_cpu_isa_name(c->dnnl_isa));
        return NULL;
    }
    if (strcmp(key, "cpu_layout") == 0) { /* (before any plan: set with cpu_isa) */
        static const struct {
            const char *name;
            tdm_channels_last mode;
        } layouts[] = {{"auto", TDM_CL_SUITED}, {"blocked", TDM_CL_NEVER}, {"channels_last", TDM_CL_ALWAYS}};
        const char *want = value && value[0] ? value : "auto";
        for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
            if (strcmp(want, layouts[i].name) == 0) {
                c->layout = layouts[i].mode;
                return NULL;
            }
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                       "cpu_layout '%s' is not a layout (auto, blocked or channels_last)", value);
    }
    if (strcmp(key, "cpu_isa") != 0) return NULL;
    tdm_cpu_isa best = tdm_cpu_isa_detect(), want = best;
    bool cap = value && value[0];
    if (cap && !tdm_cpu_isa_parse(value, &want))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                       "cpu_isa '%s' is not an ISA level (portable, sse41, avx2, avx512_core, "
                       "avx512_core_vnni, avx512_core_bf16, avx512_core_amx or all)", value);
    want = tdm_cpu_isa_min(want, best);
    bool applied;
    tdm_cpu_isa dnnl = tdm_cpu_dnnl_isa_apply(cap, want, &applied);
    if (!applied && dnnl != want)
        tdm_log(&c->log, TDM_LOG_WARN,
                "cpu_isa %s: oneDNN's ISA is set once per process and is already %s (an "
                "earlier environment used oneDNN first); own kernels use %s, oneDNN %s",
                tdm_cpu_isa_name(want), tdm_cpu_isa_name(dnnl), tdm_cpu_isa_name(want),
                tdm_cpu_isa_name(dnnl));
    c->isa = want;
    tdm_cpu_simd_init(&c->simd, want);
    c->dnnl_isa = dnnl;
    cpu_describe(dev);
    tdm_log(&c->log, TDM_LOG_INFO, "cpu: ISA %s (machine %s, oneDNN %s)", tdm_cpu_isa_name(want),
            tdm_cpu_isa_name(best), tdm_cpu_isa_name(dnnl));
    return NULL;
}

/* oneDNN's own choice of layout on this CPU, asked once (after the ISA is settled: the probe
 * is oneDNN's first use): the channel block (8 or 16, else 0) and whether channels-last is
 * preferred. */
static void cpu_probe_layout(tdm_cpu_dev *c) {
    pthread_mutex_lock(&c->mu);
    if (!c->block_known) {
        bool cl;
        int64_t b = tdm_cpu_dnnl_probe_block(&cl);
        c->block = b == 8 || b == 16 ? b : 0;
        c->cl = cl && c->block;
        c->block_known = true;
        tdm_log(&c->log, TDM_LOG_INFO, "cpu: oneDNN's convolutions take %s%lld%s on %s",
                c->block ? "channel blocks of " : "plain layouts (block ", (long long)c->block,
                c->cl ? " and prefer channels-last" : "", tdm_cpu_isa_name(c->dnnl_isa));
    }
    pthread_mutex_unlock(&c->mu);
}

/* The channel block the blocked-layout pass uses (where it does not go channels-last). */
static int64_t cpu_channel_block(tdm_device *dev) {
    tdm_cpu_dev *c = dev->ctx;
    cpu_probe_layout(c);
    return c->block;
}

/* Channels-last where oneDNN prefers it: per graph (auto), everywhere (cpu_layout
 * channels_last) or never (cpu_layout blocked). */
static int cpu_channels_last(tdm_device *dev) {
    tdm_cpu_dev *c = dev->ctx;
    cpu_probe_layout(c);
    return c->cl ? (int)c->layout : TDM_CL_NEVER;
}

static size_t cpu_kernel_impl(tdm_device *dev, const tdm_kernel_def *k, void *state, char *buf,
                              size_t size) {
    (void)dev;
    if (!tdm_cpu_dnnl_impl(k, state, buf, size)) snprintf(buf, size, "tandem");
    return strlen(buf);
}

static const tdm_device_iface cpu_iface = {
    .api_version = TDM_DEVICE_IFACE_VERSION,
    .find_kernel = cpu_find_kernel,
    .execute = cpu_execute,
    .synchronize = NULL,
    .close = cpu_close,
    .configure = cpu_configure,
    .kernel_flags = cpu_kernel_flags,
    .channel_block = cpu_channel_block,
    .kernel_impl = cpu_kernel_impl,
    .channels_last = cpu_channels_last,
};

tdm_cpu_dev *tdm_cpu_dev_of(const tdm_device *dev) {
    return dev && dev->iface == &cpu_iface ? dev->ctx : NULL;
}

static tdm_status *cpu_discover(const tdm_allocator *a, const tdm_logger *log,
                                const tdm_settings *set, tdm_device **devs, int max, int *n,
                                char *why, size_t why_size) {
    (void)set;
    (void)why;
    (void)why_size;
    *n = 0;
    if (max < 1) return NULL;
    tdm_device *d = tdm_calloc(a, 1, sizeof *d);
    tdm_cpu_dev *c = tdm_calloc(a, 1, sizeof *c);
    if (!d || !c || pthread_mutex_init(&c->mu, NULL) != 0) {
        tdm_free(a, d);
        tdm_free(a, c);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating the cpu device");
    }
    c->alloc = a;
    if (log) c->log = *log;
    /* the machine's best until configure("cpu_isa") caps it (oneDNN is not touched here:
     * its ISA can be set only before its first use) */
    c->isa = c->dnnl_isa = tdm_cpu_isa_detect();
    c->layout = TDM_CL_SUITED; /* until configure("cpu_layout") says otherwise */
    tdm_cpu_simd_init(&c->simd, c->isa); /* own kernels' variants, chosen again under a cap */
    d->iface = &cpu_iface;
    d->ctx = c;
    snprintf(d->name, sizeof d->name, "cpu");
    cpu_describe(d);
    d->host_memory = true;
    devs[0] = d;
    *n = 1;
    return NULL;
}

const tdm_backend_reg tdm_backend_cpu = {"cpu", cpu_discover};

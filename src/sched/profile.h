/* Device capability profiles: measured by short micro-benchmarks through the device's own
 * kernels and copies, cached on disk (XDG cache dir, keyed by device identity and tandem
 * version), read by the cost model. */
#ifndef TDM_SCHED_PROFILE_H
#define TDM_SCHED_PROFILE_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"
#include "core/threadpool.h"

typedef struct tdm_device_profile {
    char device[32];        /* "cpu", "opencl:0", ... */
    char identity[200];     /* what the cache is keyed by: description + tandem version */
    int threads;            /* host threads the measurement used (CPU) */
    double gemm_gflops;     /* float32 MatMul 512x512x512 (best of a few) */
    double conv_gflops;     /* float32 Conv 1x64x56x56, 3x3, 64->64 */
    double mem_gbps;        /* device memory bandwidth (large element-wise Add) */
    double launch_us;       /* fixed cost of one small kernel */
    double h2d_gbps;        /* host -> device copy bandwidth (0 for host-memory devices) */
    double d2h_gbps;        /* device -> host */
    double link_latency_us; /* fixed cost of one copy */
    int64_t memory_bytes;   /* device memory capacity (host: physical RAM) */
    bool from_cache;
    /* per direction and host memory kind (0 for host-memory devices): pageable = ordinary
     * host memory (h2d_gbps/d2h_gbps above), pinned = the device's host_alloc staging
     * memory (the pageable figures again for a device without host_alloc) */
    double h2d_latency_us, d2h_latency_us;
    double h2d_pinned_gbps, d2h_pinned_gbps;
    double h2d_pinned_latency_us, d2h_pinned_latency_us;
    /* not cached: the executor copies to and from this device through staging memory
     * (sched/xfer.h), so the cost model reads the pinned figures */
    bool staged_copies;
    /* convolution kinds whose speed differs most from the 3x3 benchmark on some devices
     * (PoCL runs depthwise convolutions ~20x slower than dense ones): 0 = not measured, the
     * cost model then uses conv_gflops */
    double conv1x1_gflops; /* float32 Conv 1x128x28x28, 1x1, 128->128 */
    double dwconv_gflops;  /* float32 depthwise Conv 1x144x56x56, 3x3, group 144 */
    /* share of its 3x3 conv speed a device with its own memory keeps while every host core
     * is busy (0: not measured, and for host-memory devices): about 1 for a GPU, about half or
     * less for a device that computes on the host's own cores (an OpenCL CPU device such as
     * PoCL), whose work a split cannot overlap with the CPU's */
    double host_busy_speed;
} tdm_device_profile;

/* Returns the profile of `dev`, measured now (reprofile, or nothing cached) or read from
 * the cache. `threads` is the CPU thread count the measurement should use; `set` the
 * environment's settings (cache folder, spin, copies; NULL = the built-in defaults). */
tdm_status *tdm_profile_device(tdm_device *dev, const tdm_allocator *a, const tdm_settings *set,
                               int threads, bool reprofile, tdm_device_profile *out);

/* Where profiles live: the cache_dir setting (TANDEM_CACHE_DIR, else $XDG_CACHE_HOME/tandem,
 * else $HOME/.cache/tandem; resolved by api/settings.c). Writes into buf; returns buf, or
 * NULL when there is no cache folder or it does not fit. */
const char *tdm_cache_dir(const tdm_settings *set, char *buf, size_t size);

#endif

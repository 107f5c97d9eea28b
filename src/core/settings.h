/* The settings of an environment, resolved: every TANDEM_* setting as a plain value.
 *
 * tdm_env_create fills them once (src/api/settings.c: the fields of tdm_env_options, the
 * process environment for the fields the caller left unset, then the built-in defaults) and
 * never changes them afterwards. The environment owns them and outlives its devices, plans
 * and sessions, so those may keep a pointer. Nothing else in the library reads the process
 * environment: code below src/api gets the settings it needs from here.
 *
 * Plain values only (no pointers): the CUDA plugin receives them through device discovery
 * and the struct's size is part of the plugin ABI (backends/cuda/cuda_plugin.h). */
#ifndef TDM_CORE_SETTINGS_H
#define TDM_CORE_SETTINGS_H

#include <stdbool.h>
#include <stdint.h>

#define TDM_SETTINGS_PATH 4096 /* longest path a setting holds, with its terminating 0 */

/* Built-in defaults (what an environment gets when neither options nor variables say). */
#define TDM_SPIN_US_DEFAULT 200
#define TDM_LOOP_MAX_ITERATIONS_DEFAULT 10000000

typedef struct tdm_settings {
    char cache_dir[TDM_SETTINGS_PATH];  /* device profiles, OpenCL binaries; "" = no cache */
    char plugin_dir[TDM_SETTINGS_PATH]; /* first folder for libtandem_cuda.so; "" = none */
    int64_t spin_us;                    /* idle intra-op threads spin this long; 0 = never */
    bool sync_copies;                   /* blocking copies instead of events */
    int64_t loop_max_iterations;        /* a Loop node's iterations in one run; 0 = no bound */
    int64_t loop_timeout_ms;            /* a Loop or Scan node's time in one run; 0 = none */
    bool cuda_disable;                  /* do not look for CUDA */
    char cuda_precision[8];             /* "fp32" | "tf32" | "fp16" | "bf16" */
    int64_t cuda_mem_limit_mb;          /* cap of a CUDA device's memory pool; 0 = none */
    bool cuda_graphs;                   /* capture repeated segments as CUDA graphs */
    char cuda_graphs_log[TDM_SETTINGS_PATH]; /* file the graph counts are appended to; "" */
    bool opencl_disable;                /* do not look for OpenCL */
    char opencl_kernels[4];             /* "gpu" | "cpu" kernel style; "" = by device type */
    char cpu_isa[24];                   /* the CPU's ISA cap ("avx2", ...); "" = the machine's best */
    char cpu_layout[16];                /* "auto" | "blocked" | "channels_last"; "" = auto */
    /* the test device (backends/testdev): a stand-in accelerator for tests */
    int64_t test_devices;               /* how many test:N devices (0..4) */
    int64_t test_device_delay_us;       /* each kernel sleeps this long */
    char test_device_ops[256];          /* ops it runs, comma-separated; "" = all */
    int64_t test_device_fail_every;     /* every N-th kernel fails (device error); 0 = never */
    char log_stderr[8];                 /* "error" | "warn" | "info" | "debug"; "" = none */
} tdm_settings;

/* The built-in defaults, for code given no settings (NULL): unit tests that open a backend
 * directly. Immutable. */
extern const tdm_settings tdm_settings_builtin;

/* s, or the built-in defaults when s is NULL. */
static inline const tdm_settings *tdm_settings_or_builtin(const tdm_settings *s) {
    return s ? s : &tdm_settings_builtin;
}

#endif

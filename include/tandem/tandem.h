/*
 * tandem — an inference runtime that runs ONNX models on CPUs and GPUs together.
 *
 * This is the whole public C API. Every handle is opaque. Conventions:
 *
 *  - Every fallible function returns a `tdm_status *`. NULL means success. A non-NULL
 *    status carries a code and a message; the caller owns it and frees it with
 *    tdm_status_free(). On failure, out-parameters are left untouched.
 *  - Every `*_free` function accepts NULL and does nothing then.
 *  - Strings returned by getters are owned by the object they came from and live as long
 *    as that object.
 *  - Threading: a tdm_env may be shared by any number of threads. A tdm_session may run
 *    concurrently from several threads (tdm_session_run is thread-safe); creating and
 *    freeing a session must not race with runs on it. Tensors are not synchronised: do not
 *    write a tensor while a run reads it.
 *
 * Usage:
 *
 *     tdm_env *env = NULL;
 *     tdm_session *s = NULL;
 *     tdm_status *st = tdm_env_create(NULL, &env);
 *     if (!st) st = tdm_session_create(env, "model.onnx", NULL, &s);
 *     if (!st) {
 *         int64_t dims[4] = {1, 3, 224, 224};
 *         tdm_tensor *in = NULL, *out = NULL;
 *         st = tdm_tensor_create(env, TDM_FLOAT, 4, dims, &in);
 *         // ... fill tdm_tensor_data(in) ...
 *         const char *in_name = "input", *out_name = "output";
 *         if (!st) st = tdm_session_run(s, 1, &in_name, (const tdm_tensor *const *)&in,
 *                                       1, &out_name, &out);
 *         tdm_tensor_free(in);
 *         tdm_tensor_free(out);
 *     }
 *     if (st) { fprintf(stderr, "%s\n", tdm_status_message(st)); tdm_status_free(st); }
 *     tdm_session_free(s);
 *     tdm_env_free(env);
 */
#ifndef TANDEM_TANDEM_H
#define TANDEM_TANDEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TDM_API __attribute__((visibility("default")))
#else
#define TDM_API
#endif

#define TDM_VERSION_MAJOR 0
#define TDM_VERSION_MINOR 1
#define TDM_VERSION_PATCH 0
#define TDM_MAX_RANK 8

/* ---- status ---------------------------------------------------------------------- */

/* One source list for codes and names (X-macro). */
#define TDM_STATUS_CODES(X)                                                              \
    X(TDM_OK, 0, "ok")                                                                   \
    X(TDM_ERR_INVALID_ARGUMENT, 1, "invalid argument")                                  \
    X(TDM_ERR_INVALID_MODEL, 2, "invalid model")                                        \
    X(TDM_ERR_UNSUPPORTED, 3, "unsupported")                                            \
    X(TDM_ERR_OUT_OF_MEMORY, 4, "out of memory")                                        \
    X(TDM_ERR_NOT_FOUND, 5, "not found")                                                \
    X(TDM_ERR_IO, 6, "i/o error")                                                       \
    X(TDM_ERR_RUNTIME, 7, "runtime error")                                              \
    X(TDM_ERR_DEVICE, 8, "device error")                                                \
    X(TDM_ERR_LIMIT, 9, "limit exceeded")                                               \
    X(TDM_ERR_INTERNAL, 10, "internal error")                                          \
    X(TDM_ERR_CANCELLED, 11, "cancelled")

typedef enum tdm_code {
#define TDM_X_(name, value, text) name = value,
    TDM_STATUS_CODES(TDM_X_)
#undef TDM_X_
} tdm_code;

typedef struct tdm_status tdm_status;

TDM_API tdm_code tdm_status_code(const tdm_status *status);       /* TDM_OK for NULL */
TDM_API const char *tdm_status_message(const tdm_status *status); /* "ok" for NULL */
TDM_API const char *tdm_code_name(tdm_code code);
TDM_API void tdm_status_free(tdm_status *status);

/* ---- data types (numbers equal ONNX TensorProto.DataType) ---------------------------- */

typedef enum tdm_dtype {
    TDM_UNDEFINED = 0,
    TDM_FLOAT = 1,
    TDM_UINT8 = 2,
    TDM_INT8 = 3,
    TDM_UINT16 = 4,
    TDM_INT16 = 5,
    TDM_INT32 = 6,
    TDM_INT64 = 7,
    TDM_STRING = 8,
    TDM_BOOL = 9,
    TDM_FLOAT16 = 10,
    TDM_DOUBLE = 11,
    TDM_UINT32 = 12,
    TDM_UINT64 = 13,
    TDM_COMPLEX64 = 14,
    TDM_COMPLEX128 = 15,
    TDM_BFLOAT16 = 16,
    TDM_DTYPE_COUNT = 17, /* tensor element types are 1..TDM_DTYPE_COUNT-1 */
    /* Non-tensor values (ONNX sequence, map and optional types) travel in the same handle,
     * tdm_tensor, with one of these as dtype: see "sequences, maps, optionals" below. */
    TDM_SEQUENCE = 100,
    TDM_MAP = 101,
    TDM_OPTIONAL = 102
} tdm_dtype;

TDM_API const char *tdm_dtype_name(tdm_dtype dtype); /* "float32", "int64", ... */
TDM_API size_t tdm_dtype_size(tdm_dtype dtype);      /* bytes per element; 0 if unknown;
                                                         for STRING, sizeof(char *) */

/* ---- environment -------------------------------------------------------------------- */

typedef enum tdm_log_level {
    TDM_LOG_ERROR = 0,
    TDM_LOG_WARN = 1,
    TDM_LOG_INFO = 2,
    TDM_LOG_DEBUG = 3
} tdm_log_level;

typedef void (*tdm_log_fn)(void *user, tdm_log_level level, const char *message);

/* Allocator hook: all host memory that tandem allocates for models, tensors and plans goes
 * through these. malloc must return memory aligned to at least 64 bytes when `align` is 64.
 * Either all three are set or none. */
typedef struct tdm_allocator {
    void *(*alloc)(void *user, size_t size, size_t align);
    void (*free)(void *user, void *ptr);
    void *user;
} tdm_allocator;

typedef struct tdm_env_options {
    int api_version;         /* set to TDM_API_VERSION */
    tdm_log_fn log;          /* optional; default: no logging */
    void *log_user;
    tdm_log_level log_level; /* messages above this level are dropped */
    tdm_allocator allocator; /* optional; zeroed = libc */
    int threads;             /* default intra-op threads for sessions; 0 = number of cores */

    /* ---- settings (the README's table "Settings") -----------------------------------------
     * Each field below has a TANDEM_* environment variable (named beside it) that gives its
     * default: tdm_env_create reads the process environment once, for the fields left unset,
     * and nothing in the library reads it afterwards. Unset means 0 / NULL, so a zeroed
     * struct takes everything from the environment. Numbers: 0 = unset, a negative value =
     * "none" (what the variable's 0 says), a positive value is the setting. Switches:
     * TDM_SETTING_ON or TDM_SETTING_OFF; the variable's 1 / 0 (also true/false, on/off,
     * yes/no). Strings: NULL or "" = unset. A malformed variable or field makes tdm_env_create
     * fail with TDM_ERR_INVALID_ARGUMENT, naming it. */
    const char *cache_dir;       /* TANDEM_CACHE_DIR: device profiles and OpenCL binaries;
                                    default $XDG_CACHE_HOME/tandem, else ~/.cache/tandem */
    const char *plugin_dir;      /* TANDEM_PLUGIN_DIR: looked in first for libtandem_cuda.so */
    int spin_us;                 /* TANDEM_SPIN_US: how long an idle intra-op thread spins
                                    before it sleeps, 0..1000000; default 200; < 0 = never */
    int sync_copies;             /* TANDEM_SYNC_COPIES: blocking copies instead of events */
    int64_t loop_max_iterations; /* TANDEM_LOOP_MAX_ITERATIONS: default bound of the
                                    iterations of one Loop node in one run (see "Resource
                                    limits"); default 10000000; < 0 = no bound */
    int64_t loop_timeout_ms;     /* TANDEM_LOOP_TIMEOUT_MS: default bound of the wall time of
                                    one Loop or Scan node in one run; default none */
    int cuda_disable;            /* TANDEM_CUDA_DISABLE: do not look for CUDA */
    const char *cuda_precision;  /* TANDEM_CUDA_PRECISION: a CUDA device's arithmetic until a
                                    session sets one: "fp32" (default), "tf32", "fp16", "bf16" */
    int64_t cuda_mem_limit_mb;   /* TANDEM_CUDA_MEM_LIMIT_MB: cap of a CUDA device's memory
                                    pool in MiB; default none */
    int cuda_graphs;             /* TANDEM_CUDA_GRAPHS: capture repeated segments as CUDA
                                    graphs and replay them; default off */
    const char *cuda_graphs_log; /* TANDEM_CUDA_GRAPHS_LOG: file the graph counts of each CUDA
                                    device are appended to when it closes */
    int opencl_disable;          /* TANDEM_OPENCL_DISABLE: do not look for OpenCL */
    const char *opencl_kernels;  /* TANDEM_OPENCL_KERNELS: "gpu" or "cpu" kernel style;
                                    default by device type */
    /* the test device: test:0.. stand-in accelerators with memory of their own that run the
     * CPU kernels (for tests) */
    int test_devices;            /* TANDEM_TEST_DEVICES: how many, 0..4; default none */
    int64_t test_device_delay_us; /* TANDEM_TEST_DEVICE_DELAY_US: each kernel sleeps so long */
    const char *test_device_ops; /* TANDEM_TEST_DEVICE_OPS: the ops it runs, comma-separated;
                                    default every op of the CPU */
    int64_t test_device_fail_every; /* TANDEM_TEST_DEVICE_FAIL_EVERY: every N-th kernel fails
                                    with TDM_ERR_DEVICE; default never */
    const char *cpu_isa;         /* TANDEM_CPU_ISA: caps the instruction sets the CPU device
                                    uses, oneDNN's and tandem's own kernels alike: "sse41",
                                    "avx2", "avx512_core", "avx512_core_vnni",
                                    "avx512_core_bf16", "avx512_core_amx" (oneDNN's names;
                                    "portable": plain C for own kernels); a level above the
                                    machine's is the machine's; default the machine's best.
                                    oneDNN's level is process-wide and fixed at its first
                                    use: the first environment sets it; a later one asking
                                    for another logs a warning, and tdm_env_device_isa and
                                    the device description say what runs. An unknown name
                                    fails tdm_env_create. */
    const char *cpu_layout;      /* TANDEM_CPU_LAYOUT: the activation layout of the CPU's
                                    convolution chains: "auto" (the default: channels-last
                                    where oneDNN's convolutions prefer it and the model's
                                    dense k x k convolutions whose channel counts are
                                    multiples of 16 do enough of its work, else the channel
                                    block: nChw16c / nChw8c), "blocked" (always the channel
                                    block), "channels_last" (wherever oneDNN prefers it) */
    const char *log_stderr;      /* TANDEM_LOG: "error", "warn", "info" or "debug": with no log
                                    function set, messages at or above that level go to
                                    stderr, one line each ("tandem: LEVEL: message"); default
                                    none */
} tdm_env_options;

/* Values of the switches in tdm_env_options (0 = unset: the environment variable decides). */
#define TDM_SETTING_ON 1
#define TDM_SETTING_OFF (-1)

#define TDM_API_VERSION 1

typedef struct tdm_env tdm_env;

/* Creates an environment. `options` may be NULL for defaults. The environment discovers
 * devices (backends) at creation; a device that is absent is reported, not an error. */
TDM_API tdm_status *tdm_env_create(const tdm_env_options *options, tdm_env **out);
/* Frees the environment. All sessions and tensors created from it must be freed first. */
TDM_API void tdm_env_free(tdm_env *env);

/* Devices known to the environment: "cpu", "cuda:0", "opencl:0", ... */
TDM_API size_t tdm_env_device_count(const tdm_env *env);
TDM_API const char *tdm_env_device_name(const tdm_env *env, size_t index);
TDM_API const char *tdm_env_device_description(const tdm_env *env, size_t index);
/* The instruction-set level the CPU device's kernels use ("avx2", "avx512_core", ...; see
 * tdm_env_options.cpu_isa); NULL for other devices and bad indexes. The CPU device is found
 * at environment creation and is device 0. Discovers no lazy backend. */
TDM_API const char *tdm_env_device_isa(const tdm_env *env, size_t index);
/* Backends that were looked for but are not usable, with the reason (e.g. "cuda: no GPU"). */
TDM_API size_t tdm_env_unavailable_count(const tdm_env *env);
TDM_API const char *tdm_env_unavailable_reason(const tdm_env *env, size_t index);

/* Measured capabilities of a device: what the scheduler's cost model reads. Throughputs are
 * float32 and the best of a few runs of short micro-benchmarks through the device's own
 * kernels; 0 means "not measured" (the device has no kernel for that benchmark). */
typedef struct tdm_device_info {
    const char *name;        /* "cpu", "opencl:0", ... (owned by the environment) */
    const char *description; /* (owned by the environment) */
    bool host_memory;        /* works on host memory: no copies to or from the host */
    int threads;             /* host threads the measurement used */
    double gemm_gflops;      /* MatMul 512x512x512, GFLOP/s */
    double conv_gflops;      /* Conv 1x64x56x56, 3x3, 64->64, pads 1, GFLOP/s */
    double mem_gbps;         /* large element-wise Add: bytes read + written per second / 1e9 */
    double launch_us;        /* fixed cost of one small node (kernel launch, shape work) */
    double h2d_gbps;         /* host -> device copy bandwidth, GB/s; 0 when host_memory */
    double d2h_gbps;         /* device -> host, GB/s; 0 when host_memory */
    double link_latency_us;  /* fixed cost of one copy; 0 when host_memory */
    int64_t memory_bytes;    /* memory capacity (host: physical RAM); 0 = unknown */
    bool from_cache;         /* read from the on-disk cache rather than measured now */
    /* per direction, from/to ordinary (pageable) host memory and from/to the device's
     * staging memory (pinned or mapped, what asynchronous copies use); 0 when host_memory */
    double h2d_latency_us;        /* a 4-byte upload, pageable memory */
    double d2h_latency_us;        /* a 4-byte download, pageable memory */
    double h2d_pinned_gbps;       /* host -> device from staging memory, GB/s */
    double d2h_pinned_gbps;       /* device -> host into staging memory, GB/s */
    double h2d_pinned_latency_us; /* a 4-byte upload from staging memory */
    double d2h_pinned_latency_us; /* a 4-byte download into staging memory */
    double conv1x1_gflops;        /* float32 1x1 convolution (0 = not measured) */
    double dwconv_gflops;         /* float32 3x3 depthwise convolution (0 = not measured) */
    double host_busy_speed;       /* share of its conv speed a device with memory of its own
                                     keeps while every host core is busy: ~1 for a GPU, well
                                     under 1 for OpenCL on the host's cores (0 = not measured) */
} tdm_device_info;

/* The profile of device `index`, measured on first use (under a second or two per device,
 * with the environment's thread count) and then read from the cache: the folder of the
 * cache_dir setting (tdm_env_options), file profiles/<device>-<hash>.txt, keyed by
 * the device's description, the tandem version and the thread count. `reprofile` measures
 * again and replaces the cached file. A cache that cannot be read or written is not an error
 * (the device is measured). Safe to call from several threads, but measurements running at
 * the same time disturb each other. */
TDM_API tdm_status *tdm_env_device_profile(tdm_env *env, size_t index, bool reprofile,
                                           tdm_device_info *out);

/* ---- tensors ------------------------------------------------------------------------ */

typedef struct tdm_tensor tdm_tensor;

/* Creates a tensor with zeroed host memory. */
TDM_API tdm_status *tdm_tensor_create(tdm_env *env, tdm_dtype dtype, int rank,
                                      const int64_t *dims, tdm_tensor **out);
/* Wraps user memory without copying; the memory must outlive the tensor and hold
 * `bytes` >= the tensor's size. STRING tensors cannot wrap memory. */
TDM_API tdm_status *tdm_tensor_wrap(tdm_env *env, tdm_dtype dtype, int rank, const int64_t *dims,
                                    void *data, size_t bytes, tdm_tensor **out);
/* Loads a serialized ONNX TensorProto (as in the ONNX test data's *.pb files). */
TDM_API tdm_status *tdm_tensor_load_onnx(tdm_env *env, const char *path, tdm_tensor **out);
TDM_API void tdm_tensor_free(tdm_tensor *tensor);

TDM_API tdm_dtype tdm_tensor_dtype(const tdm_tensor *tensor);
TDM_API int tdm_tensor_rank(const tdm_tensor *tensor);
TDM_API const int64_t *tdm_tensor_dims(const tdm_tensor *tensor);
TDM_API int64_t tdm_tensor_element_count(const tdm_tensor *tensor);
TDM_API size_t tdm_tensor_byte_size(const tdm_tensor *tensor);
/* Host pointer to the elements. For STRING tensors, an array of NUL-terminated char *. */
TDM_API void *tdm_tensor_data(tdm_tensor *tensor);
TDM_API const void *tdm_tensor_data_const(const tdm_tensor *tensor);
/* Sets element `index` of a STRING tensor (copies the bytes). */
TDM_API tdm_status *tdm_tensor_set_string(tdm_tensor *tensor, int64_t index, const char *bytes,
                                          size_t length);

/* ---- sequences, maps, optionals -------------------------------------------------------
 * ONNX's non-tensor values use the tdm_tensor handle with dtype TDM_SEQUENCE, TDM_MAP or
 * TDM_OPTIONAL. Such a value owns its items: tdm_tensor_free frees the value and every item
 * (recursively). Items are read through tdm_value_item (borrowed: valid while the value is,
 * never freed by the caller); tdm_tensor_data and friends do not apply to them.
 *   sequence: tdm_value_item_count items, all tensors of one type (or all containers);
 *   map:      2 items: the keys (1-D int64 or string tensor) and the values (a 1-D tensor with
 *             as many elements, or a sequence);
 *   optional: 0 items (none) or 1 (the element: a tensor or a sequence).
 * The constructors take ownership of the items they are given when they succeed (the caller
 * must no longer free them); on failure the caller still owns them. Session inputs and
 * outputs of these types are passed and returned like tensors. */
/* New sequence of n items (items may be NULL when n is 0). */
TDM_API tdm_status *tdm_sequence_create(tdm_env *env, size_t n, tdm_tensor *const *items,
                                        tdm_tensor **out);
/* New optional holding `item`, or none when item is NULL. */
TDM_API tdm_status *tdm_optional_create(tdm_env *env, tdm_tensor *item, tdm_tensor **out);
/* New map from 1-D keys (int64 or string) to values (1-D, as many elements as keys). */
TDM_API tdm_status *tdm_map_create(tdm_env *env, tdm_tensor *keys, tdm_tensor *values,
                                   tdm_tensor **out);
/* Items of a sequence, map or optional (0 for a tensor or NULL). */
TDM_API size_t tdm_value_item_count(const tdm_tensor *value);
/* Item i (borrowed), or NULL when out of range or not a container. */
TDM_API const tdm_tensor *tdm_value_item(const tdm_tensor *value, size_t i);
/* Loads a serialized ONNX value of `kind`: TDM_SEQUENCE (SequenceProto), TDM_OPTIONAL
 * (OptionalProto), TDM_MAP (MapProto), anything else a TensorProto. */
TDM_API tdm_status *tdm_value_load_onnx(tdm_env *env, const char *path, tdm_dtype kind,
                                        tdm_tensor **out);

/* ---- models (inspection without creating a session) --------------------------------- */

typedef struct tdm_model tdm_model;

typedef struct tdm_value_desc {
    const char *name;
    tdm_dtype dtype;
    int rank;                          /* -1 if unknown */
    int64_t dims[TDM_MAX_RANK];        /* -1 for a dynamic dimension */
    const char *dim_params[TDM_MAX_RANK]; /* symbolic names, or NULL */
} tdm_value_desc;

/* Loads and validates a model (no device work). Relative external-data locations are
 * resolved against the model file's folder. */
TDM_API tdm_status *tdm_model_load(tdm_env *env, const char *path, tdm_model **out);
/* `base_dir` resolves external data; NULL forbids external data. The buffer is copied. */
TDM_API tdm_status *tdm_model_load_from_buffer(tdm_env *env, const void *data, size_t size,
                                               const char *base_dir, tdm_model **out);
TDM_API void tdm_model_free(tdm_model *model);

TDM_API int64_t tdm_model_ir_version(const tdm_model *model);
TDM_API const char *tdm_model_producer(const tdm_model *model);
/* Opset of a domain ("" for the default ONNX domain); 0 if not imported. */
TDM_API int64_t tdm_model_opset(const tdm_model *model, const char *domain);
TDM_API size_t tdm_model_input_count(const tdm_model *model);
TDM_API size_t tdm_model_output_count(const tdm_model *model);
TDM_API tdm_status *tdm_model_input(const tdm_model *model, size_t index, tdm_value_desc *out);
TDM_API tdm_status *tdm_model_output(const tdm_model *model, size_t index, tdm_value_desc *out);
/* Every domain the model imports (index < tdm_model_opset_count): its name ("" for the
 * default ONNX domain) and *version; NULL past the end. */
TDM_API size_t tdm_model_opset_count(const tdm_model *model);
TDM_API const char *tdm_model_opset_domain(const tdm_model *model, size_t index, int64_t *version);
/* Nodes of the main graph. */
TDM_API size_t tdm_model_node_count(const tdm_model *model);
/* Subgraphs (If/Loop/Scan bodies, at any depth) and the nodes inside them. */
TDM_API size_t tdm_model_subgraph_count(const tdm_model *model);
TDM_API size_t tdm_model_nested_node_count(const tdm_model *model);
/* Distinct operator types of every node, subgraphs included, in first-seen order. */
TDM_API size_t tdm_model_op_type_count(const tdm_model *model);
TDM_API const char *tdm_model_op_type(const tdm_model *model, size_t index,
                                      size_t *node_count);
/* Whether `device` ("cpu", ...) has a kernel for every node of that op type (subgraphs
 * included). */
TDM_API bool tdm_model_op_type_supported(const tdm_model *model, size_t index,
                                         const char *device);
/* Elements and bytes of the weights: initializers and Constant nodes' tensors, subgraphs
 * included. */
TDM_API int64_t tdm_model_parameter_count(const tdm_model *model);
TDM_API int64_t tdm_model_parameter_bytes(const tdm_model *model);

/* ---- sessions ----------------------------------------------------------------------- */

typedef struct tdm_session tdm_session;

typedef struct tdm_session_options {
    int api_version;     /* TDM_API_VERSION */
    const char *devices; /* comma-separated, in order of preference; NULL = "cpu" */
    int threads;         /* intra-op threads; 0 = the environment's default */
    int opt_level;       /* 0 = no graph passes; 1 (default) = folding, dead code, fusion */
    bool no_fallback;    /* fail instead of placing a node on a less preferred device */
    const char *placement; /* NULL or "auto": cost model (device profiles) and list
                              scheduling with copy costs; "first": the first device in the
                              list with a kernel for the node; a device name: that device,
                              the others only for what it cannot run */
    const char *affinity;  /* rules "PATTERN=DEVICE;...": PATTERN is an op type ("Conv"),
                              /regex/ on node names, or #FIRST-LAST node positions */
    bool profile;          /* record per-node times of every run (tdm_session_explain
                              then shows measured next to predicted times) */
    int mode;              /* TDM_MODE_LATENCY (default): one plan over the devices;
                              TDM_MODE_THROUGHPUT: one plan per device (replicas); a batched
                              run is split across them in proportion to their measured speed,
                              a run that cannot be split goes to the replica predicted to
                              finish first (or, for a model without a batch dim to split,
                              a pipeline when predicted faster; see TDM_MODE_PIPELINE) */
    float split_alpha;     /* throughput mode: smoothing of the per-item times (0 = 0.3) */
    bool no_rebalance;     /* throughput mode: keep the initial split ratio; pipeline mode:
                              keep the auto cut (user cuts are never moved) and the
                              micro-batch size */
    const char *precision; /* accelerators' arithmetic: NULL or "fp32" (default) computes in
                              float32; "tf32", "fp16" and "bf16" let a device that supports
                              them (cuda) compute float32 models in that precision; the cpu
                              takes "bf16" (convolutions and matmuls with bf16 inputs, f32
                              accumulation) where it has AVX512_BF16 or AMX, and fails the
                              session with TDM_ERR_UNSUPPORTED elsewhere (no emulation) */
    const char *pipeline_cuts; /* TDM_MODE_PIPELINE: where stages 2, 3, ... start, as node
                              names or #positions in the model's node order, comma-separated
                              ("#12,#30" or "conv5,fc"); stage k runs on the k-th device.
                              NULL = the auto cut: the cost model balances the slowest stage */
    int micro_batch;       /* TDM_MODE_PIPELINE: rows per micro-batch of a batched run;
                              0 = the batch divided by the number of stages, then (unless
                              no_rebalance) the size that measured stage costs predict
                              fastest: fixed costs per micro-batch favour fewer (logged) */
    int probe_ms;          /* throughput mode: a device whose run fails with a device error is
                              taken out; it is tried again (a probe run) after this many ms,
                              doubling after every failed probe up to 64x, and taken back when
                              a probe succeeds (both logged). 0 = 1000; < 0 = never take a
                              device out */
    int64_t loop_max_iterations; /* bound of the iterations of one Loop node in one run (see
                              "Resource limits" below); 0 = the environment's setting
                              (tdm_env_options.loop_max_iterations); < 0 = no bound */
    int64_t loop_timeout_ms;   /* bound of the wall time of one Loop or Scan node in one run;
                              0 = the environment's setting; < 0 = no bound */
    /* ---- memory budgets and weight residency (appended; zero = the defaults) ---- */
    const char *device_memory; /* "DEV=SIZE[,DEV=SIZE]": the most each device may hold for
                              weights, activations and (generators) KV cache together, e.g.
                              "cuda:0=8GiB" or "test:0=24MiB" (units B, KiB, MiB, GiB, TiB,
                              KB, MB, GB, TB, K, M, G, T), or a share of the weights placed
                              there on top of the activations ("cuda:0=25%"). A device
                              with memory of its own over its budget keeps the small
                              weights resident and streams the rest from host memory
                              before the layers that need them, or runs
                              the layers that fit and leaves the rest to the CPU, whichever
                              the cost model predicts faster (tdm_session_explain says which
                              and why); a host device over its budget is an error. A budget
                              that cannot hold the largest weight plus the activations fails
                              session creation with TDM_ERR_LIMIT. Runs of a plan with a
                              budget on such a device take turns (the budget is one run's);
                              the first run with new input shapes checks their activations
                              and streams more weights when they need the room (or fails
                              with TDM_ERR_LIMIT). NULL = no budgets */
    const char *residency;     /* comma-separated: "mapped" maps external data into the
                              weights' tensors (read from disk on use, never copied whole
                              into memory; for CPU kernels that read weights in place);
                              "streamed" / "layers" force that plan for devices over their
                              budgets; "window=K" fixes the prefetch window of streamed
                              weights (else chosen by the cost model); "kv=device|host|cpu"
                              places a generator's KV caches: on the device of their attention,
                              in host memory copied each token, or in host memory with their
                              attention on the CPU (default "kv=auto": the budget decides).
                              NULL = defaults */
    /* ---- symbolic dimensions (appended) ---- */
    const char *free_dims;     /* "NAME=SIZE[,NAME=SIZE]": the model inputs' symbolic
                              dimensions (ONNX dim_param) named NAME fixed to SIZE (>= 1) before
                              the session plans, as ONNX Runtime's free-dimension overrides: the
                              graph passes then see the real sizes (the CPU's layout choice
                              depends on the images per thread, shapes fold). A run whose inputs
                              differ fails with TDM_ERR_INVALID_ARGUMENT. A NAME no input has, a
                              malformed list, or a mode other than TDM_MODE_LATENCY (the others
                              cut the batch): TDM_ERR_INVALID_ARGUMENT. NULL = none */
} tdm_session_options;

#define TDM_MODE_LATENCY 0
#define TDM_MODE_THROUGHPUT 1
/* TDM_MODE_PIPELINE: the model is cut into consecutive stages, one per device (in the order
 * of options.devices), each planned for its device; a run's batch is divided into
 * micro-batches that flow through the stages over bounded queues, so every device works on
 * a different micro-batch (or a different concurrent run) at the same time. Outputs equal a
 * single-device run's. TDM_MODE_THROUGHPUT picks this mode by itself for models whose batch
 * cannot be split when the cost model predicts the pipeline to beat a replica per device
 * (the choice and its reason are logged at TDM_LOG_INFO). */
#define TDM_MODE_PIPELINE 2

/* Per-device figures of a session (throughput mode: per replica; latency mode: one entry per
 * device of the plan with runs and items of the whole session; pipeline mode: one entry per
 * device of the session, summed over every cut the rebalancer used). */
typedef struct tdm_device_stats {
    const char *device;
    int64_t runs;          /* runs (or run parts) this device took */
    int64_t items;         /* batch items it computed */
    double busy_ms;        /* time spent running */
    double share;          /* current fraction of a split batch given to it */
    double ms_per_item;    /* smoothed measured time per item (0 until measured) */
} tdm_device_stats;

/* Creates a session: loads the model, checks and optimises the graph, places nodes on
 * devices and prepares the plan. `options` may be NULL. */
TDM_API tdm_status *tdm_session_create(tdm_env *env, const char *path,
                                       const tdm_session_options *options, tdm_session **out);
TDM_API tdm_status *tdm_session_create_from_buffer(tdm_env *env, const void *data, size_t size,
                                                   const char *base_dir,
                                                   const tdm_session_options *options,
                                                   tdm_session **out);
/* Waits for the session's asynchronous runs, then frees it. */
TDM_API void tdm_session_free(tdm_session *session);

TDM_API const tdm_model *tdm_session_model(const tdm_session *session);

/* Runs the model. Inputs are matched by name; every graph input without an initializer
 * must be given. `output_names` may be NULL with n_outputs equal to the model's output
 * count to fetch all outputs in order. On success outputs[i] receive new tensors that the
 * caller frees. Thread-safe. */
TDM_API tdm_status *tdm_session_run(tdm_session *session, size_t n_inputs,
                                    const char *const *input_names,
                                    const tdm_tensor *const *inputs, size_t n_outputs,
                                    const char *const *output_names, tdm_tensor **outputs);

/* Resource limits of a run (see SECURITY.md), fixed when the session is created: the
 * session's options, else the environment's (tdm_env_options, whose defaults come from the
 * variables TANDEM_LOOP_MAX_ITERATIONS and TANDEM_LOOP_TIMEOUT_MS):
 *   loop_max_iterations  iterations of one Loop node in one run, default 10000000. Past it
 *                        the run fails with TDM_ERR_LIMIT.
 *   loop_timeout_ms      wall time of one Loop or Scan node in one run, default no bound;
 *                        past it the run fails with TDM_ERR_LIMIT.
 * A malformed variable fails tdm_env_create with TDM_ERR_INVALID_ARGUMENT. Besides these
 * bounds, an asynchronous run can be cancelled and any run given a deadline (see "cancelling
 * runs" below). */

/* Called once when an asynchronous run ends, on a tandem thread. `status` is NULL on
 * success and is owned by the callee; `outputs` (n_outputs) belong to the callee too. */
typedef void (*tdm_run_callback)(void *user, tdm_status *status, size_t n_outputs,
                                 tdm_tensor **outputs);

/* Queues a run and returns at once. The inputs are referenced, not copied: they must stay
 * valid and unchanged until the callback runs. */
TDM_API tdm_status *tdm_session_run_async(tdm_session *session, size_t n_inputs,
                                          const char *const *input_names,
                                          const tdm_tensor *const *inputs, size_t n_outputs,
                                          const char *const *output_names,
                                          tdm_run_callback callback, void *user);

/* ---- cancelling runs and deadlines ------------------------------------------------------
 *
 * An asynchronous run started with tdm_session_run_async_ex gets an id, unique within its
 * session and never reused (ids count up from 1; 0 is never an id). tdm_session_cancel(s, id)
 * asks that run to stop:
 *  - a run still queued is taken out of the queue without running; its callback is called
 *    with TDM_ERR_CANCELLED on the thread that called tdm_session_cancel, before that call
 *    returns (so do not hold a lock there that the callback takes);
 *  - a running run stops at the next node boundary, or inside a Loop or Scan at the next
 *    iteration, and its callback (on the session's thread, as usual) gets TDM_ERR_CANCELLED.
 *    A kernel already running finishes first (a long single kernel delays the stop);
 *  - a run that has already completed, or an id the session never gave, is left alone:
 *    cancelling it is a harmless no-op (so cancel may race with completion freely).
 * tdm_session_cancel returns true when it caught the run before its end: then the callback
 * gets TDM_ERR_CANCELLED, whatever the run did meanwhile (outputs made before the stop was
 * seen are freed by tandem). It returns false when the run had ended (its callback has been
 * or is being called with the run's own result), was cancelled already, or is unknown.
 * Either way the callback is called exactly once.
 *
 * tdm_run_options.timeout_ms gives a run a deadline, counted from the call that starts it: a
 * run queued past it is taken out when it would start, one running past it stops as above;
 * both end with TDM_ERR_CANCELLED and a message naming the deadline. Synchronous runs take
 * a deadline through tdm_session_run_ex.
 *
 * Throughput mode stops every part of a split batch; pipeline mode stops each micro-batch at
 * its next stage. Devices that queue work (opencl, cuda) stop issuing kernels; work already
 * queued on the device finishes.
 *
 * Threading: cancel functions may be called from any thread, also from inside a run's
 * callback, but not concurrently with tdm_session_free of the same session. tdm_session_free
 * still waits for every queued and running run; call tdm_session_cancel_all first to make it
 * return quickly.
 *
 *     tdm_run_options ro = {sizeof ro, 2000};  // a 2 s deadline
 *     tdm_run_id id = 0;
 *     st = tdm_session_run_async_ex(s, 1, &in_name, ins, 1, &out_name, &ro, on_done, ctx, &id);
 *     ...
 *     tdm_session_cancel(s, id);  // the client went away
 */
typedef uint64_t tdm_run_id;

/* ABI: set struct_size to sizeof(tdm_run_options); the struct may grow at its end and the
 * library reads only struct_size bytes (members past it take their defaults). */
typedef struct tdm_run_options {
    size_t struct_size;  /* sizeof(tdm_run_options) */
    int64_t timeout_ms;  /* deadline counted from the start call; 0 = none; < 0 is invalid */
} tdm_run_options;

/* tdm_session_run_async with options (may be NULL) and the run's id in *id (may be NULL). */
TDM_API tdm_status *tdm_session_run_async_ex(tdm_session *session, size_t n_inputs,
                                             const char *const *input_names,
                                             const tdm_tensor *const *inputs, size_t n_outputs,
                                             const char *const *output_names,
                                             const tdm_run_options *options,
                                             tdm_run_callback callback, void *user,
                                             tdm_run_id *id);
/* tdm_session_run with options (may be NULL): a run past its deadline returns
 * TDM_ERR_CANCELLED. */
TDM_API tdm_status *tdm_session_run_ex(tdm_session *session, size_t n_inputs,
                                       const char *const *input_names,
                                       const tdm_tensor *const *inputs, size_t n_outputs,
                                       const char *const *output_names,
                                       const tdm_run_options *options, tdm_tensor **outputs);
/* Cancels one asynchronous run (see above). true: the callback gets TDM_ERR_CANCELLED;
 * false: the run had ended or was ending, was cancelled before, or the id is unknown (nothing
 * is done). NULL session or id 0: false. */
TDM_API bool tdm_session_cancel(tdm_session *session, tdm_run_id id);
/* Cancels every asynchronous run of the session queued or running now; returns how many
 * were caught (each of their callbacks gets TDM_ERR_CANCELLED). Runs started later are not
 * affected. */
TDM_API size_t tdm_session_cancel_all(tdm_session *session);

/* ---- I/O binding -------------------------------------------------------------------------
 *
 * A binding names a run's inputs once and lets outputs be written into tensors the caller
 * made, as ONNX Runtime's IOBinding does. The node that makes a bound output writes straight
 * into the caller's memory: no allocation for it and no copy out. An output may be bound to
 * the very tensor an input is bound to; the node then updates it in place. That is how a
 * language model's KV cache is kept (past_present_share_buffer): each layer's cache is
 * allocated once as [batch, kv_heads, max_length, head_dim], given as `past_key_values.N.key`
 * and bound as `present.N.key`, and the attention kernel writes only the new positions.
 *
 *  - A bound output's dtype and shape must be exactly what the run produces; otherwise the run
 *    fails with TDM_ERR_INVALID_ARGUMENT and a message giving both. Its contents are then
 *    unspecified (the nodes before the failing one may have written it).
 *  - A bound output that is not also an input of the node making it is zeroed before the node
 *    runs (unless the kernel writes all of it), like any new output.
 *  - Outputs bound with a NULL tensor are made by the run and kept by the binding until its
 *    next run, its clear or its free (tdm_io_binding_output); outputs not bound at all are
 *    computed and dropped.
 *  - Tensors are borrowed: they must outlive every run of the binding that uses them. The
 *    session never frees or reuses their memory for anything else.
 *  - Threading: a binding is used by one thread at a time (runs, binds); different bindings of
 *    one session may run at the same time, like tdm_session_run. Two runs writing the same
 *    bound tensor at once race.
 *  - Devices: a host tensor can be bound to an output made by a node on the CPU (host
 *    memory), also in a plan with other nodes on a device with memory of its own; an output
 *    made on such a device (cuda, opencl, test) bound to a host tensor is refused with
 *    TDM_ERR_UNSUPPORTED naming both (tensors in a device's memory come only from inside
 *    tandem: the generator's KV caches kept on the device). The throughput and pipeline modes
 *    refuse bound outputs. Bound inputs work everywhere.
 *
 *     tdm_io_binding *b = NULL;
 *     st = tdm_io_binding_create(s, &b);
 *     st = tdm_io_binding_bind_input(b, "past_key_values.0.key", cache0);
 *     st = tdm_io_binding_bind_output(b, "present.0.key", cache0);   // updated in place
 *     st = tdm_io_binding_bind_output(b, "logits", NULL);            // made by the run
 *     st = tdm_session_run_bound(s, b, NULL);
 *     const tdm_tensor *logits = tdm_io_binding_output(b, "logits");
 *     tdm_io_binding_free(b);
 */
typedef struct tdm_io_binding tdm_io_binding;

TDM_API tdm_status *tdm_io_binding_create(tdm_session *session, tdm_io_binding **out);
/* Frees the binding and the outputs it kept; bound tensors stay the caller's. */
TDM_API void tdm_io_binding_free(tdm_io_binding *binding);
/* Binds (or, with another tensor, re-binds) a graph input by name; TDM_ERR_NOT_FOUND for a
 * name the model does not have. */
TDM_API tdm_status *tdm_io_binding_bind_input(tdm_io_binding *binding, const char *name,
                                              const tdm_tensor *tensor);
/* Binds a graph output by name to `tensor` (written in place), or with tensor NULL asks the
 * binding to keep the output the run makes. */
TDM_API tdm_status *tdm_io_binding_bind_output(tdm_io_binding *binding, const char *name,
                                               tdm_tensor *tensor);
/* Forgets every input and output binding (and frees the outputs kept). */
TDM_API void tdm_io_binding_clear(tdm_io_binding *binding);
/* Runs the session with the binding's inputs and outputs; `options` may be NULL (see
 * tdm_run_options: a deadline). Thread-safe as described above. */
TDM_API tdm_status *tdm_session_run_bound(tdm_session *session, tdm_io_binding *binding,
                                          const tdm_run_options *options);
/* After a successful run: the tensor of output `name`, the caller's when bound to one, else
 * the one the binding kept; NULL when the output was not bound or the last run failed.
 * Owned by the binding (or the caller); valid until the binding's next run, clear or free. */
TDM_API tdm_tensor *tdm_io_binding_output(const tdm_io_binding *binding, const char *name);

/* Number of entries tdm_session_device_stats reports. */
TDM_API size_t tdm_session_device_count(const tdm_session *session);
TDM_API tdm_status *tdm_session_device_stats(tdm_session *session, size_t index,
                                             tdm_device_stats *out);

/* ---- explaining the plan ----------------------------------------------------------- */

typedef enum tdm_explain_format {
    TDM_EXPLAIN_TEXT = 0,     /* one line per node: device, predicted ms per device, reason */
    TDM_EXPLAIN_SEGMENTS = 1, /* one line per segment of consecutive nodes on one device */
    TDM_EXPLAIN_JSON = 2,     /* {"nodes":[{name,op,device,impl,predicted_ms,reason,...}],
                                  "copies":[{value,from,to,bytes}], "predicted_total_ms",...};
                                  impl: what runs the node for the shapes run so far (oneDNN's
                                  implementation name such as "jit:avx512_core", or "tandem"
                                  for an own kernel; "" before the first run) */
    TDM_EXPLAIN_DOT = 3,      /* Graphviz: nodes coloured by device, copies as red edges */
    TDM_EXPLAIN_PROFILE = 4   /* measured times per op and per op type, share of the total,
                                 achieved GFLOP/s and GB/s, copies, the critical path */
} tdm_explain_format;

/* Describes where each node runs and why, the copies between devices, and the predicted
 * total against each single device (and measured times when the session profiles). *out is
 * a NUL-terminated string freed with tdm_string_free. */
TDM_API tdm_status *tdm_session_explain(tdm_session *session, tdm_explain_format format,
                                        char **out);
TDM_API void tdm_string_free(char *s);

/* Stores the per-node times measured by a profiling session (options.profile) in the cache
 * folder, keyed by the model's bytes and input shapes; later sessions of the same model use
 * them instead of the cost model's estimates when placing nodes. */
TDM_API tdm_status *tdm_session_save_measurements(tdm_session *session);
/* Forgets the per-node times measured so far (e.g. after warm-up runs). */
TDM_API void tdm_session_reset_measurements(tdm_session *session);

/* ---- tracing --------------------------------------------------------------------------- */

/* Starts recording every kernel, copy and run of this session against one monotonic clock.
 * Call it and tdm_session_trace_stop while no run of the session is in progress. */
TDM_API tdm_status *tdm_session_trace_start(tdm_session *session);
/* Stops recording and writes the events as Chrome trace JSON (opens in Perfetto and
 * chrome://tracing): one track per device and per device's copies, arrows from each copy
 * to the kernel that reads it. `path` may be NULL to discard. */
TDM_API tdm_status *tdm_session_trace_stop(tdm_session *session, const char *path);

/* ---- monitoring ------------------------------------------------------------------------ */

/* Live per-device figures of a session: what a rebalancer, a load generator or a /metrics
 * page reads while runs go on. A window starts when the session is created and again at
 * every tdm_session_monitor_reset; counts and times are since the window start, levels
 * (memory in use, runs in flight, runs queued) are right now.
 *
 * ABI: the struct may grow at its end in later versions. Callers pass sizeof their struct;
 * the library fills only that many bytes (members it does not know stay as the caller set
 * them), so a program built against an older header keeps working with a newer library.
 * (tdm_device_stats has no size or version member, so it cannot grow safely; this is a new
 * struct rather than an extension of it.)
 *
 * Threading: every function here may be called from any thread while runs (synchronous,
 * asynchronous, throughput-mode parts) are in progress; the figures of one call are taken
 * under the session's counter lock and are consistent with each other.
 *
 *     tdm_device_monitor m;
 *     for (size_t i = 0; i < tdm_session_monitor_count(s); i++)
 *         if (!tdm_session_monitor(s, i, &m, sizeof m))
 *             printf("%s %.0f%% busy, %lld bytes\n", m.device, 100 * m.utilization,
 *                    (long long)m.memory_in_use);
 */
typedef struct tdm_device_monitor {
    const char *device;       /* "cpu", "opencl:0", ... (owned by the environment) */
    double window_ms;         /* time since the window start */
    double busy_ms;           /* time in the window during which the device executed at least
                                 one node (concurrent nodes count once), as the host sees it: for
                                 devices that queue work (opencl, cuda) the time spent issuing
                                 kernels, a lower bound of the device's own busy time */
    double utilization;       /* busy_ms / window_ms, in [0, 1] */
    int64_t kernels;          /* nodes executed in the window */
    int64_t memory_in_use;    /* bytes the session's runs hold on the device now: device buffers
                                 (weights uploaded once count for the session's life) and, for
                                 host-memory devices, arenas of runs in progress and heap
                                 tensors of the runs */
    int64_t memory_peak;      /* highest memory_in_use in the window (>= memory_in_use) */
    int runs_in_flight;       /* runs executing now whose plan uses the device (asynchronous
                                 runs, concurrent synchronous runs; in throughput mode each
                                 part of a split batch counts, on every device its replica's
                                 plan uses) */
    int runs_queued;          /* asynchronous runs of the session waiting to start (one queue
                                 per session: the same number for every device) */
    int64_t uploads;          /* copies into the device's memory in the window */
    int64_t downloads;        /* copies out of it */
    int64_t bytes_uploaded;
    int64_t bytes_downloaded;
    double copies_per_s;      /* (uploads + downloads) / window */
    double copy_bytes_per_s;  /* (bytes_uploaded + bytes_downloaded) / window */
    int64_t bytes_uploaded_pinned; /* of bytes_uploaded: streamed weights copied from host
                                      memory registered (page-locked) with the device */
    int64_t kv_bytes_uploaded;   /* of bytes_uploaded: a generator's KV cache (pasts kept in
                                    host memory uploaded to the attention on the device) */
    int64_t kv_bytes_downloaded; /* of bytes_downloaded: its presents brought back */
} tdm_device_monitor;

/* Number of entries: the session's devices, in the order of tdm_session_options.devices. */
TDM_API size_t tdm_session_monitor_count(const tdm_session *session);
/* Fills the first `struct_size` bytes of *out (pass sizeof(tdm_device_monitor)) for device
 * `index`. struct_size must be at least offsetof(tdm_device_monitor, window_ms) + sizeof
 * (double), i.e. cover `device` and `window_ms`. */
TDM_API tdm_status *tdm_session_monitor(tdm_session *session, size_t index,
                                        tdm_device_monitor *out, size_t struct_size);
/* Starts a new window for every device of the session: busy time, kernels and copies to 0,
 * peaks to the current use. Levels are not changed. */
TDM_API void tdm_session_monitor_reset(tdm_session *session);

/* ---- version ------------------------------------------------------------------------ */

TDM_API const char *tdm_version_string(void);

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_TANDEM_H */

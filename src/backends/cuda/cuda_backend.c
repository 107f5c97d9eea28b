/* The CUDA device: discovery, the kernel table search, execute/synchronize/configure/close,
 * and the plugin's entry. Memory, copies and events are in cuda_mem.c; cuBLAS kernels in
 * cuda_blas.c, cuDNN kernels in cuda_dnn.c, tandem's own kernels in k_ops*.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_plugin.h"
#include "core/alloc.h"

/* ---- errors ---- */

tdm_status *cuda_check(cudaError_t err, const char *what) {
    if (err == cudaSuccess) return NULL;
    cudaGetLastError(); /* clear a non-sticky error so that the next call starts clean */
    tdm_code code = err == cudaErrorMemoryAllocation ? TDM_ERR_OUT_OF_MEMORY : TDM_ERR_DEVICE;
    return TDM_ERR(code, "cuda: %s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

tdm_status *cuda_blas_check(cublasStatus_t err, const char *what) {
    if (err == CUBLAS_STATUS_SUCCESS) return NULL;
    tdm_code code = err == CUBLAS_STATUS_ALLOC_FAILED ? TDM_ERR_OUT_OF_MEMORY
                    : err == CUBLAS_STATUS_NOT_SUPPORTED ? TDM_ERR_UNSUPPORTED
                                                         : TDM_ERR_DEVICE;
    return TDM_ERR(code, "cublas: %s: %s (%d)", what, cublasGetStatusString(err), (int)err);
}

tdm_status *cuda_dnn_check(cudnnStatus_t err, const char *what) {
    if (err == CUDNN_STATUS_SUCCESS) return NULL;
    /* cuDNN 9 codes come in families: 3xxx "not supported", 400[34] allocation failures */
    int e = (int)err;
    tdm_code code = e == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
                            e == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED
                        ? TDM_ERR_OUT_OF_MEMORY
                    : e >= CUDNN_STATUS_NOT_SUPPORTED && e < CUDNN_STATUS_INTERNAL_ERROR
                        ? TDM_ERR_UNSUPPORTED
                        : TDM_ERR_DEVICE;
    return TDM_ERR(code, "cudnn: %s: %s (%d)", what, cudnnGetErrorString(err), (int)err);
}

/* ---- the kernel table ---- */

typedef struct family {
    const cuda_kernel_entry *entries;
    const int *count;
    bool needs_dnn;
} family;

static bool entry_matches(const cuda_kernel_entry *e, const tdm_node *node,
                          const tdm_dtype *in_types, int n_in) {
    const tdm_kernel_def *k = &e->def;
    if (!tdm_kernel_matches(k, node, in_types, n_in)) return false;
    tdm_dtype main = k->type_input >= 0 ? in_types[k->type_input] : TDM_UNDEFINED;
    if (n_in > 32) return false;
    for (int i = 0; i < n_in; i++) {
        if (i == k->type_input || node->inputs[i] < 0) continue;
        uint32_t bit = 1u << i;
        tdm_dtype t = in_types[i];
        if (e->any_inputs & bit) continue;
        if (e->int_inputs & bit) {
            if (t != TDM_INT64 && t != TDM_INT32) return false;
        } else if (e->bool_inputs & bit) {
            if (t != TDM_BOOL) return false;
        } else if (main != TDM_UNDEFINED && t != main) {
            return false;
        }
    }
    return !e->accept || e->accept(node, in_types, n_in);
}

static const tdm_kernel_def *cuda_find_kernel(tdm_device *dev, const tdm_node *node,
                                              const tdm_dtype *in_types, int n_in) {
    cuda_device *d = dev->ctx;
    const family families[] = {
#define CUDA_X_(f) {cuda_kernels_##f, &cuda_kernels_##f##_count, false},
        CUDA_OWN_FAMILIES(CUDA_X_)
        CUDA_OPS_FAMILIES(CUDA_X_)
#undef CUDA_X_
    };
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        const family *fa = &families[f];
        if (!fa->entries || !fa->count) continue; /* a weak family nobody defined */
        if (fa->entries == cuda_kernels_dnn && !d->cudnn) continue;
        for (int i = 0; i < *fa->count; i++)
            if (entry_matches(&fa->entries[i], node, in_types, n_in)) return &fa->entries[i].def;
    }
    return NULL;
}

/* ---- the device interface ---- */

static tdm_status *cuda_execute(tdm_device *dev, const tdm_kernel_def *k, tdm_kernel_ctx *ctx) {
    cuda_device *d = dev->ctx;
    TDM_TRY(cuda_check(cudaSetDevice(d->ordinal), "selecting the device"));
    pthread_mutex_lock(&d->gate);
    tdm_status *st = NULL;
    if (!cuda_graph_execute(d, k, ctx, &st)) { /* not held back for a CUDA graph */
        pthread_mutex_lock(&d->lock);
        st = k->run(ctx);
        pthread_mutex_unlock(&d->lock);
    }
    pthread_mutex_unlock(&d->gate);
    return st;
}

static tdm_status *cuda_synchronize(tdm_device *dev) {
    cuda_device *d = dev->ctx;
    TDM_TRY(cuda_check(cudaSetDevice(d->ordinal), "selecting the device"));
    pthread_mutex_lock(&d->gate);
    tdm_status *st = cuda_graph_observe(d, "a synchronize inside the segment");
    if (!st) st = cuda_check(cudaStreamSynchronize(d->h2d), "waiting for uploads");
    if (!st) st = cuda_check(cudaStreamSynchronize(d->stream), "waiting for the kernels");
    if (!st) st = cuda_check(cudaStreamSynchronize(d->d2h), "waiting for downloads");
    pthread_mutex_unlock(&d->gate);
    if (!st) st = cuda_index_check(d);
    return st;
}

static tdm_status *parse_precision(const char *value, cuda_precision *out) {
    static const struct { const char *name; cuda_precision p; } names[] = {
        {"fp32", CUDA_PREC_FP32}, {"tf32", CUDA_PREC_TF32},
        {"fp16", CUDA_PREC_FP16}, {"bf16", CUDA_PREC_BF16},
    };
    if (!value || !value[0]) {
        *out = CUDA_PREC_FP32;
        return NULL;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(value, names[i].name) == 0) {
            *out = names[i].p;
            return NULL;
        }
    return TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                   "cuda: precision '%s' is not one of fp32, tf32, fp16, bf16", value);
}

/* Keys: "precision" (fp32|tf32|fp16|bf16), "mem_limit_mb" (0 = the device's memory),
 * "cuda_graphs" (0|1: capture repeated segments as CUDA graphs, cuda_graph.c). The
 * settings are the device's: sessions of one environment share it, the last one set wins. */
static tdm_status *cuda_configure(tdm_device *dev, const char *key, const char *value) {
    cuda_device *d = dev->ctx;
    if (!key) return NULL;
    if (strcmp(key, "precision") == 0) {
        cuda_precision p;
        TDM_TRY(parse_precision(value, &p));
        atomic_store(&d->precision, (int)p);
        return NULL;
    }
    if (strcmp(key, "cuda_graphs") == 0) return cuda_graph_configure(d, value);
    if (strcmp(key, "mem_limit_mb") == 0) {
        char *end = NULL;
        unsigned long long mb = value ? strtoull(value, &end, 10) : 0;
        if (!value || !value[0] || *end || value[0] == '-' || mb > ((unsigned long long)1 << 40))
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "cuda: mem_limit_mb '%s' is not a size in MiB",
                           value ? value : "");
        atomic_store(&d->mem_limit, (size_t)mb << 20);
        return NULL;
    }
    return NULL;
}

static void device_free(cuda_device *d) {
    if (!d) return;
    cudaSetDevice(d->ordinal);
    if (d->stream) cudaStreamSynchronize(d->stream);
    if (d->h2d) cudaStreamSynchronize(d->h2d);
    if (d->d2h) cudaStreamSynchronize(d->d2h);
    if (d->cudnn) cudnnDestroy(d->cudnn);
    if (d->lt) cublasLtDestroy(d->lt);
    if (d->cublas) cublasDestroy(d->cublas);
    cuda_graph_release(d); /* its arenas go back to the pool */
    cuda_mem_release(d);
    if (d->stream) cudaStreamDestroy(d->stream);
    if (d->h2d) cudaStreamDestroy(d->h2d);
    if (d->d2h) cudaStreamDestroy(d->d2h);
    pthread_mutex_destroy(&d->lock);
    pthread_mutex_destroy(&d->copy_lock);
    tdm_free(d->a, d);
}

static void cuda_close(tdm_device *dev) {
    cuda_device *d = dev->ctx;
    const tdm_allocator *a = d->a;
    device_free(d);
    tdm_free(a, dev);
}

/* The promises come from the kernel tables' flags (TDM_KF_HOST_READS: shape arguments
 * taken where they are). */
static unsigned cuda_kernel_flags(tdm_device *dev, const tdm_kernel_def *k, const tdm_node *node) {
    (void)dev;
    return tdm_kernel_flags(k, node);
}

static const tdm_device_iface cuda_iface = {
    .api_version = TDM_DEVICE_IFACE_VERSION,
    .find_kernel = cuda_find_kernel,
    .kernel_flags = cuda_kernel_flags,
    .execute = cuda_execute,
    .synchronize = cuda_synchronize,
    .close = cuda_close,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_free = cuda_buffer_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .event_record = cuda_event_record,
    .event_wait = cuda_event_wait,
    .event_sync = cuda_event_sync,
    .event_free = cuda_event_free,
    .download_async = cuda_download_async,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .configure = cuda_configure,
    .segment_begin = cuda_segment_begin,
    .segment_end = cuda_segment_end,
    .upload_queued = cuda_upload_queued,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
};

bool cuda_is_own_device(const tdm_device *dev) { return dev && dev->iface == &cuda_iface; }

/* ---- discovery ---- */

/* Streams, handles and memory of device `ordinal`; NULL with the reason in why when it
 * cannot be used. */
static tdm_status *open_device(const tdm_allocator *a, const tdm_logger *log,
                               const tdm_settings *set, int ordinal, cuda_device **out,
                               char *why, size_t why_size) {
    *out = NULL;
    struct cudaDeviceProp prop;
    cudaError_t e = cudaSetDevice(ordinal);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, ordinal);
    if (e != cudaSuccess) {
        snprintf(why, why_size, "device %d: %s", ordinal, cudaGetErrorString(e));
        cudaGetLastError();
        return NULL;
    }
    cuda_device *d = tdm_calloc(a, 1, sizeof *d);
    if (!d) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a cuda device");
    d->a = a;
    d->log = log;
    d->settings = set;
    d->ordinal = ordinal;
    d->cc_major = prop.major;
    d->cc_minor = prop.minor;
    d->sm_count = prop.multiProcessorCount;
    d->total_mem = prop.totalGlobalMem;
    snprintf(d->name, sizeof d->name, "%.95s", prop.name);
    pthread_mutex_init(&d->lock, NULL);
    pthread_mutex_init(&d->copy_lock, NULL);
    tdm_status *gst = cuda_graph_init(d);
    if (gst) {
        snprintf(why, why_size, "device %d: %s", ordinal, tdm_status_message(gst));
        tdm_status_free(gst);
        device_free(d);
        return NULL;
    }
    const char *what = "creating streams";
    e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&d->h2d, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&d->d2h, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        snprintf(why, why_size, "device %d: %s: %s", ordinal, what, cudaGetErrorString(e));
        cudaGetLastError();
        device_free(d);
        return NULL;
    }
    tdm_status *st = cuda_mem_init(d);
    if (!st && cublasCreate(&d->cublas) != CUBLAS_STATUS_SUCCESS) {
        d->cublas = NULL;
        st = TDM_ERR(TDM_ERR_DEVICE, "cuBLAS cannot start");
    }
    if (!st) st = cuda_blas_check(cublasSetStream(d->cublas, d->stream), "setting the stream");
    if (!st && cublasLtCreate(&d->lt) != CUBLAS_STATUS_SUCCESS) {
        d->lt = NULL;
        st = TDM_ERR(TDM_ERR_DEVICE, "cuBLASLt cannot start");
    }
    if (st) {
        snprintf(why, why_size, "device %d: %s", ordinal, tdm_status_message(st));
        tdm_status_free(st);
        device_free(d);
        return NULL;
    }
    /* the default arithmetic until a session sets one (tdm_session_options.precision) */
    /* (the settings reader checked the name; anything else would be fp32) */
    cuda_precision p = CUDA_PREC_FP32;
    tdm_status *pst = parse_precision(set->cuda_precision, &p);
    if (pst) {
        tdm_log(log, TDM_LOG_WARN, "cuda_precision: %s; using fp32", tdm_status_message(pst));
        tdm_status_free(pst);
        p = CUDA_PREC_FP32;
    }
    atomic_store(&d->precision, (int)p);
    /* without cuDNN (its sub-libraries missing) the device still runs everything else */
    cudnnStatus_t ds = cudnnCreate(&d->cudnn);
    if (ds == CUDNN_STATUS_SUCCESS) ds = cudnnSetStream(d->cudnn, d->stream);
    if (ds != CUDNN_STATUS_SUCCESS) {
        tdm_log(log, TDM_LOG_WARN, "cuda:%d: cuDNN unavailable (%s): convolutions and pooling "
                "run elsewhere", ordinal, cudnnGetErrorString(ds));
        if (d->cudnn) cudnnDestroy(d->cudnn);
        d->cudnn = NULL;
    }
    *out = d;
    return NULL;
}

static tdm_status *cuda_discover(const tdm_allocator *a, const tdm_logger *log,
                                 const tdm_settings *set, tdm_device **devs, int max, int *n,
                                 char *why, size_t why_size) {
    *n = 0;
    set = tdm_settings_or_builtin(set);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        int drv = 0, rt = 0;
        cudaDriverGetVersion(&drv);
        cudaRuntimeGetVersion(&rt);
        if (e == cudaErrorNoDevice)
            snprintf(why, why_size, "no GPU");
        else if (e == cudaErrorInsufficientDriver)
            snprintf(why, why_size, "CUDA driver too old (driver supports CUDA %d.%d, the "
                     "plugin needs %d.%d)", drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
        else
            snprintf(why, why_size, "no usable GPU: %s (%s)", cudaGetErrorString(e),
                     cudaGetErrorName(e));
        cudaGetLastError();
        return NULL;
    }
    if (count == 0) {
        snprintf(why, why_size, "no GPU");
        return NULL;
    }
    char last_why[200] = "";
    for (int i = 0; i < count && *n < max; i++) {
        cuda_device *d = NULL;
        tdm_status *st = open_device(a, log, set, i, &d, last_why, sizeof last_why);
        if (st) {
            for (int k = 0; k < *n; k++) cuda_close(devs[k]);
            *n = 0;
            return st;
        }
        if (!d) continue;
        tdm_device *dev = tdm_calloc(a, 1, sizeof *dev);
        if (!dev) {
            device_free(d);
            for (int k = 0; k < *n; k++) cuda_close(devs[k]);
            *n = 0;
            return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a cuda device");
        }
        dev->iface = &cuda_iface;
        dev->ctx = d;
        dev->host_memory = false;
        d->dev = dev;
        snprintf(dev->name, sizeof dev->name, "cuda:%d", *n);
        snprintf(dev->description, sizeof dev->description, "CUDA: %s, sm_%d%d, %d SMs, %.1f GiB%s",
                 d->name, d->cc_major, d->cc_minor, d->sm_count,
                 (double)d->total_mem / (1024.0 * 1024.0 * 1024.0), d->cudnn ? "" : ", no cuDNN");
        devs[(*n)++] = dev;
    }
    if (*n == 0) snprintf(why, why_size, "no usable GPU: %s", last_why);
    return NULL;
}

static const tdm_backend_reg cuda_reg = {"cuda", cuda_discover, true};

/* The plugin's one exported symbol (plugin.map). */
__attribute__((visibility("default"))) const tdm_backend_reg *
tdm_cuda_plugin_entry(const tdm_plugin_abi *host, char *why, size_t why_size) {
    const tdm_plugin_abi mine = TDM_PLUGIN_ABI_INIT;
    if (!host || host->abi != mine.abi || host->iface_version != mine.iface_version ||
        host->tensor != mine.tensor || host->node != mine.node || host->graph != mine.graph ||
        host->kernel_ctx != mine.kernel_ctx || host->kernel_def != mine.kernel_def ||
        host->device != mine.device || host->device_iface != mine.device_iface ||
        host->backend_reg != mine.backend_reg || host->settings != mine.settings) {
        snprintf(why, why_size, "the plugin was built for another version of tandem (plugin "
                 "ABI %d, interface %d; rebuild it with this libtandem)", mine.abi,
                 mine.iface_version);
        return NULL;
    }
    return &cuda_reg;
}

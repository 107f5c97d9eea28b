/* The OpenCL backend: devices "opencl:0", "opencl:1"... over all platforms (GPUs first, then
 * the others, e.g. PoCL's CPU device), each with its own context and one in-order command
 * queue (profiling enabled, for tracing). Tensors on the device are cl_mem buffers; on
 * devices that share memory with the host (CL_DEVICE_HOST_UNIFIED_MEMORY) buffers are
 * allocated with CL_MEM_ALLOC_HOST_PTR so that the driver can keep them zero-copy.
 *
 * Discovery never fails the environment: without a platform or a device it reports why and
 * yields no device. The setting opencl_disable (TANDEM_OPENCL_DISABLE=1) hides the backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/opencl/ocl.h"
#include "core/alloc.h"

#define MAX_PLATFORMS 16
#define MAX_PER_PLATFORM 16

/* ---- the kernel table: the concatenation of the family tables ---- */

static const ocl_kernel_entry *const tables[] = {
#define OCL_X_(f) ocl_kernels_##f,
    OCL_FAMILIES(OCL_X_)
#undef OCL_X_
};
static const int *const counts[] = {
#define OCL_X_(f) &ocl_kernels_##f##_count,
    OCL_FAMILIES(OCL_X_)
#undef OCL_X_
};

static bool entry_matches(const ocl_kernel_entry *e, const tdm_node *node,
                          const tdm_dtype *in_types, int n_in) {
    const tdm_kernel_def *k = &e->def;
    if (!tdm_kernel_matches(k, node, in_types, n_in)) return false;
    for (int i = 0; i < n_in && i < 32; i++) {
        if (i == k->type_input || node->inputs[i] < 0) continue;
        tdm_dtype t = in_types[i];
        if (e->int_inputs & (1u << i)) {
            if (t != TDM_INT64 && t != TDM_INT32) return false;
        } else if (e->bool_inputs & (1u << i)) {
            if (t != TDM_BOOL) return false;
        } else if (t != TDM_FLOAT) {
            return false;
        }
    }
    return n_in <= 32 && (!e->accept || e->accept(node));
}

static const tdm_kernel_def *ocl_find_kernel(tdm_device *dev, const tdm_node *node,
                                             const tdm_dtype *in_types, int n_in) {
    (void)dev;
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
        for (int i = 0; i < *counts[t]; i++)
            if (entry_matches(&tables[t][i], node, in_types, n_in)) return &tables[t][i].def;
    return NULL;
}

/* ---- the device interface ---- */

static tdm_status *ocl_execute(tdm_device *dev, const tdm_kernel_def *k, tdm_kernel_ctx *ctx) {
    ocl_device *d = dev->ctx;
    pthread_mutex_lock(&d->lock);
    tdm_status *st = k->run(ctx);
    clFlush(d->queue);
    pthread_mutex_unlock(&d->lock);
    return st;
}

static tdm_status *ocl_synchronize(tdm_device *dev) {
    ocl_device *d = dev->ctx;
    cl_int err = clFinish(d->queue);
    return err == CL_SUCCESS ? NULL : ocl_error(err, "waiting for the queue");
}

static tdm_status *ocl_buffer_alloc(tdm_device *dev, size_t size, void **buf) {
    cl_mem m;
    TDM_TRY(ocl_buf_alloc(dev->ctx, size, &m));
    *buf = m;
    return NULL;
}

static void ocl_buffer_free(tdm_device *dev, void *buf) { ocl_buf_free(dev->ctx, (cl_mem)buf); }

static tdm_status *ocl_download(tdm_device *dev, void *host, const void *buf, size_t size) {
    ocl_device *d = dev->ctx;
    if (!size) return NULL;
    cl_int err = clEnqueueReadBuffer(d->queue, (cl_mem)buf, CL_TRUE, 0, size, host, 0, NULL, NULL);
    return err == CL_SUCCESS ? NULL : ocl_error(err, "download");
}

static void ocl_device_free(ocl_device *d) {
    if (!d) return;
    if (d->queue) clFinish(d->queue);
    if (d->queue) ocl_host_blocks_release(d);
    pthread_mutex_destroy(&d->host_lock);
    ocl_programs_release(d);
    ocl_buf_pool_release(d);
    pthread_mutex_destroy(&d->pool_lock);
    if (d->dummy) clReleaseMemObject(d->dummy);
    if (d->queue) clReleaseCommandQueue(d->queue);
    if (d->ctx) clReleaseContext(d->ctx);
    pthread_mutex_destroy(&d->lock);
    tdm_free(d->a, d);
}

static void ocl_close(tdm_device *dev) {
    ocl_device *d = dev->ctx;
    const tdm_allocator *a = d->a;
    ocl_device_free(d);
    tdm_free(a, dev);
}

static const tdm_device_iface ocl_iface = {
    .api_version = TDM_DEVICE_IFACE_VERSION,
    .find_kernel = ocl_find_kernel,
    .execute = ocl_execute,
    .synchronize = ocl_synchronize,
    .close = ocl_close,
    .buffer_alloc = ocl_buffer_alloc,
    .buffer_free = ocl_buffer_free,
    .upload = ocl_upload_async,
    .download = ocl_download,
    .event_record = ocl_event_record,
    .event_wait = ocl_event_wait,
    .event_sync = ocl_event_sync,
    .event_free = ocl_event_free,
    .download_async = ocl_download_async,
    .host_alloc = ocl_host_alloc,
    .host_free = ocl_host_free,
    .configure = ocl_configure,
};

/* ---- discovery ---- */

typedef struct found {
    cl_platform_id platform;
    cl_device_id id;
    bool gpu;
} found;

static void info_str(cl_device_id id, cl_device_info what, char *buf, size_t size) {
    buf[0] = 0;
    if (clGetDeviceInfo(id, what, size - 1, buf, NULL) != CL_SUCCESS) buf[0] = 0;
    buf[size - 1] = 0;
}

/* Context, queue and properties of one device; *skip set (and NULL returned) when the
 * device cannot be used, with the reason in why. */
static tdm_status *open_device(const tdm_allocator *a, const tdm_logger *log,
                               const tdm_settings *set, const found *f, ocl_device **out,
                               char *why, size_t why_size) {
    *out = NULL;
    cl_bool avail = CL_FALSE, compiler = CL_FALSE;
    clGetDeviceInfo(f->id, CL_DEVICE_AVAILABLE, sizeof avail, &avail, NULL);
    clGetDeviceInfo(f->id, CL_DEVICE_COMPILER_AVAILABLE, sizeof compiler, &compiler, NULL);
    if (!avail || !compiler) {
        snprintf(why, why_size, "device not available%s", compiler ? "" : " (no compiler)");
        return NULL;
    }
    ocl_device *d = tdm_calloc(a, 1, sizeof *d);
    if (!d) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating an opencl device");
    d->a = a;
    d->log = log;
    d->settings = set;
    d->platform = f->platform;
    d->id = f->id;
    pthread_mutex_init(&d->lock, NULL);
    pthread_mutex_init(&d->pool_lock, NULL);
    pthread_mutex_init(&d->host_lock, NULL);
    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)f->platform, 0};
    d->ctx = clCreateContext(props, 1, &f->id, NULL, NULL, &err);
    if (err == CL_SUCCESS)
        d->queue = clCreateCommandQueue(d->ctx, f->id, CL_QUEUE_PROFILING_ENABLE, &err);
    if (err == CL_SUCCESS) d->dummy = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, 64, NULL, &err);
    if (err != CL_SUCCESS) {
        snprintf(why, why_size, "cannot open device: %s (%d)", ocl_errname(err), (int)err);
        ocl_device_free(d);
        return NULL;
    }
    cl_device_type type = 0;
    cl_bool unified = CL_FALSE;
    clGetDeviceInfo(f->id, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    clGetDeviceInfo(f->id, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
    clGetDeviceInfo(f->id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof d->max_wg, &d->max_wg, NULL);
    clGetDeviceInfo(f->id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof d->cus, &d->cus, NULL);
    clGetDeviceInfo(f->id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof d->max_alloc, &d->max_alloc, NULL);
    clGetDeviceInfo(f->id, CL_DEVICE_LOCAL_MEM_SIZE, sizeof d->local_mem, &d->local_mem, NULL);
    cl_ulong global = 0;
    clGetDeviceInfo(f->id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL);
    d->pool_cap = (size_t)(global / 8 < ((cl_ulong)256 << 20) ? global / 8 : ((cl_ulong)256 << 20));
    d->is_cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
    d->unified = unified == CL_TRUE;
    if (d->max_wg < 1) d->max_wg = 1;
    const char *style = set->opencl_kernels;
    d->gpu_style = style[0] ? strcmp(style, "gpu") == 0 : !d->is_cpu;
    if (d->max_wg < 256 || d->local_mem < 16384) d->gpu_style = false;
    char pname[128] = "", pver[128] = "", dname[128] = "", dver[128] = "", drv[64] = "";
    clGetPlatformInfo(f->platform, CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
    clGetPlatformInfo(f->platform, CL_PLATFORM_VERSION, sizeof pver - 1, pver, NULL);
    info_str(f->id, CL_DEVICE_NAME, dname, sizeof dname);
    info_str(f->id, CL_DEVICE_VERSION, dver, sizeof dver);
    info_str(f->id, CL_DRIVER_VERSION, drv, sizeof drv);
    snprintf(d->ident, sizeof d->ident, "%s|%s|%s|%s|%s", pname, pver, dname, dver, drv);
    *out = d;
    return NULL;
}

static void describe(const ocl_device *d, char *buf, size_t size) {
    char pname[64] = "", dname[96] = "";
    cl_uint cus = 0;
    cl_ulong mem = 0;
    clGetPlatformInfo(d->platform, CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
    info_str(d->id, CL_DEVICE_NAME, dname, sizeof dname);
    clGetDeviceInfo(d->id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    clGetDeviceInfo(d->id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
    /* the description keys cached profiles: a unified-memory device's global memory figure
     * follows the host's free memory (PoCL), so it is left out there */
    if (d->unified)
        snprintf(buf, size, "%s: %s, %u compute units, host-unified memory", pname, dname, (unsigned)cus);
    else
        snprintf(buf, size, "%s: %s, %u compute units, %.1f GiB", pname, dname, (unsigned)cus,
                 (double)mem / (1024.0 * 1024.0 * 1024.0));
}

static tdm_status *ocl_discover(const tdm_allocator *a, const tdm_logger *log,
                                const tdm_settings *set, tdm_device **devs, int max, int *n,
                                char *why, size_t why_size) {
    *n = 0;
    set = tdm_settings_or_builtin(set);
    if (set->opencl_disable) {
        snprintf(why, why_size, "disabled (the setting opencl_disable, TANDEM_OPENCL_DISABLE)");
        return NULL;
    }
    cl_platform_id plats[MAX_PLATFORMS];
    cl_uint np = 0;
    cl_int err = clGetPlatformIDs(MAX_PLATFORMS, plats, &np);
    if (err != CL_SUCCESS || np == 0) {
        snprintf(why, why_size, "no platform found");
        return NULL;
    }
    if (np > MAX_PLATFORMS) np = MAX_PLATFORMS;
    found list[MAX_PLATFORMS * MAX_PER_PLATFORM];
    int nf = 0;
    for (int pass = 0; pass < 2; pass++) /* GPUs first, then the others */
        for (cl_uint p = 0; p < np; p++) {
            cl_device_id ids[MAX_PER_PLATFORM];
            cl_uint nd = 0;
            if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, MAX_PER_PLATFORM, ids, &nd) != CL_SUCCESS)
                continue;
            if (nd > MAX_PER_PLATFORM) nd = MAX_PER_PLATFORM;
            for (cl_uint i = 0; i < nd; i++) {
                cl_device_type type = 0;
                clGetDeviceInfo(ids[i], CL_DEVICE_TYPE, sizeof type, &type, NULL);
                bool gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
                if (gpu == (pass == 0)) list[nf++] = (found){plats[p], ids[i], gpu};
            }
        }
    if (nf == 0) {
        snprintf(why, why_size, "no device found (%u platform%s)", (unsigned)np, np > 1 ? "s" : "");
        return NULL;
    }
    char last_why[200] = "";
    for (int i = 0; i < nf && *n < max; i++) {
        ocl_device *d = NULL;
        tdm_status *st = open_device(a, log, set, &list[i], &d, last_why, sizeof last_why);
        if (st) {
            for (int k = 0; k < *n; k++) tdm_device_close(devs[k]);
            *n = 0;
            return st;
        }
        if (!d) continue;
        tdm_device *dev = tdm_calloc(a, 1, sizeof *dev);
        if (!dev) {
            ocl_device_free(d);
            for (int k = 0; k < *n; k++) tdm_device_close(devs[k]);
            *n = 0;
            return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating an opencl device");
        }
        dev->iface = &ocl_iface;
        dev->ctx = d;
        dev->host_memory = false;
        snprintf(dev->name, sizeof dev->name, "opencl:%d", *n);
        describe(d, dev->description, sizeof dev->description);
        devs[(*n)++] = dev;
    }
    if (*n == 0) snprintf(why, why_size, "no usable device: %s", last_why);
    return NULL;
}

/* lazy: loading the ICD and the platforms costs ~0.1 s; only environments that list devices
 * or ask for an opencl device pay it */
const tdm_backend_reg tdm_backend_opencl = {"opencl", ocl_discover, true};

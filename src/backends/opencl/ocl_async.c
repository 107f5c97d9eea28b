/* The asynchronous members of the OpenCL device (tdm_device_iface version 3): events are
 * cl_event objects (the caller owns one reference, released by event_free), copies are
 * enqueued without blocking on the device's in-order queue, and staging host memory is a
 * CL_MEM_ALLOC_HOST_PTR buffer mapped once for its whole life.
 *
 * Waiting on another device's event: an event of the same OpenCL context becomes a barrier
 * in this device's queue (the host thread does not wait); an event of another context (each
 * opened device has a context of its own) or of another backend is waited for on the host,
 * as backend.h allows.
 *
 * Staging memory: on devices that share memory with the host (CL_DEVICE_HOST_UNIFIED_MEMORY,
 * PoCL) a mapped ALLOC_HOST_PTR buffer is ordinary host memory the runtime knows; on discrete
 * GPUs drivers pin it, so copies from it run by DMA without a bounce buffer. Blocks are kept
 * in a list so host_free can find the buffer behind a pointer. */
#include <string.h>

#include "backends/opencl/ocl.h"
#include "core/alloc.h"

struct ocl_host_block {
    void *ptr;
    cl_mem mem;
    size_t size;
    struct ocl_host_block *next;
};

static bool same_backend(const tdm_device *a, const tdm_device *b) {
    return a && b && a->iface == b->iface;
}

tdm_status *ocl_event_record(tdm_device *dev, void **event) {
    ocl_device *d = dev->ctx;
    cl_event ev = NULL;
    cl_int err = clEnqueueMarkerWithWaitList(d->queue, 0, NULL, &ev);
    if (err != CL_SUCCESS) return ocl_error(err, "recording an event");
    clFlush(d->queue);
    *event = ev;
    return NULL;
}

tdm_status *ocl_event_wait(tdm_device *dev, tdm_device *owner, void *event) {
    ocl_device *d = dev->ctx;
    if (!event) return TDM_ERR(TDM_ERR_INTERNAL, "opencl: waiting on a NULL event");
    if (!owner) owner = dev;
    if (same_backend(dev, owner)) {
        ocl_device *o = owner->ctx;
        cl_event ev = event;
        cl_int err;
        if (o->ctx == d->ctx) /* the queue waits, the host goes on */
            err = clEnqueueBarrierWithWaitList(d->queue, 1, &ev, NULL);
        else /* events cannot cross contexts: wait here */
            err = clWaitForEvents(1, &ev);
        return err == CL_SUCCESS ? NULL : ocl_error(err, "waiting for an event");
    }
    if (!tdm_device_has_events(owner))
        return TDM_ERR(TDM_ERR_INTERNAL, "opencl: device %s has no events to wait on", owner->name);
    return tdm_device_event_sync(owner, event); /* another backend's event: the host waits */
}

tdm_status *ocl_event_sync(tdm_device *dev, void *event) {
    (void)dev;
    if (!event) return TDM_ERR(TDM_ERR_INTERNAL, "opencl: waiting on a NULL event");
    cl_event ev = event;
    cl_int err = clWaitForEvents(1, &ev);
    if (err == CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) {
        cl_int status = 0;
        clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL);
        return ocl_error(status < 0 ? status : err, "a queued command failed");
    }
    return err == CL_SUCCESS ? NULL : ocl_error(err, "waiting for an event");
}

void ocl_event_free(tdm_device *dev, void *event) {
    (void)dev;
    if (event) clReleaseEvent((cl_event)event);
}

/* host -> device without blocking (the v2 contract: the host memory stays valid until a
 * later synchronize, download or completed event on this device). */
tdm_status *ocl_upload_async(tdm_device *dev, void *buf, const void *host, size_t size) {
    ocl_device *d = dev->ctx;
    if (!size) return NULL;
    cl_int err = clEnqueueWriteBuffer(d->queue, (cl_mem)buf, CL_FALSE, 0, size, host, 0, NULL, NULL);
    if (err == CL_SUCCESS) clFlush(d->queue);
    return err == CL_SUCCESS ? NULL : ocl_error(err, "upload");
}

tdm_status *ocl_download_async(tdm_device *dev, void *host, const void *buf, size_t size,
                               void **event) {
    ocl_device *d = dev->ctx;
    cl_event ev = NULL;
    cl_int err = size ? clEnqueueReadBuffer(d->queue, (cl_mem)buf, CL_FALSE, 0, size, host, 0,
                                            NULL, &ev)
                      : clEnqueueMarkerWithWaitList(d->queue, 0, NULL, &ev);
    if (err != CL_SUCCESS) return ocl_error(err, "download");
    clFlush(d->queue);
    *event = ev;
    return NULL;
}

tdm_status *ocl_host_alloc(tdm_device *dev, size_t size, void **host) {
    ocl_device *d = dev->ctx;
    if (size > d->max_alloc)
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "opencl: staging buffer of %zu bytes exceeds the "
                       "largest allocation (%llu bytes)", size, (unsigned long long)d->max_alloc);
    size_t bytes = size ? size : 1;
    struct ocl_host_block *b = tdm_calloc(d->a, 1, sizeof *b);
    if (!b) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory allocating staging memory");
    cl_int err;
    b->mem = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &err);
    if (err == CL_SUCCESS)
        b->ptr = clEnqueueMapBuffer(d->queue, b->mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                    bytes, 0, NULL, NULL, &err);
    if (err != CL_SUCCESS) {
        if (b->mem) clReleaseMemObject(b->mem);
        tdm_free(d->a, b);
        return ocl_error(err, "allocating staging memory");
    }
    b->size = bytes;
    pthread_mutex_lock(&d->host_lock);
    b->next = d->host_blocks;
    d->host_blocks = b;
    pthread_mutex_unlock(&d->host_lock);
    *host = b->ptr;
    return NULL;
}

static void block_release(ocl_device *d, struct ocl_host_block *b) {
    cl_event ev = NULL;
    if (clEnqueueUnmapMemObject(d->queue, b->mem, b->ptr, 0, NULL, &ev) == CL_SUCCESS && ev) {
        clWaitForEvents(1, &ev);
        clReleaseEvent(ev);
    }
    clReleaseMemObject(b->mem);
    tdm_free(d->a, b);
}

void ocl_host_free(tdm_device *dev, void *host) {
    ocl_device *d = dev->ctx;
    if (!host) return;
    pthread_mutex_lock(&d->host_lock);
    struct ocl_host_block **pp = &d->host_blocks, *b = NULL;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->ptr == host) {
            b = *pp;
            *pp = b->next;
            break;
        }
    pthread_mutex_unlock(&d->host_lock);
    if (b) block_release(d, b);
}

void ocl_host_blocks_release(ocl_device *d) {
    pthread_mutex_lock(&d->host_lock);
    struct ocl_host_block *b = d->host_blocks;
    d->host_blocks = NULL;
    pthread_mutex_unlock(&d->host_lock);
    while (b) {
        struct ocl_host_block *next = b->next;
        block_release(d, b);
        b = next;
    }
}

/* "precision": the kernels compute float32 only; the reduced precisions are requests a
 * device may decline (tdm_session_options.precision), so they are accepted and ignored. */
tdm_status *ocl_configure(tdm_device *dev, const char *key, const char *value) {
    if (!key || strcmp(key, "precision") != 0) return NULL;
    static const char *const known[] = {"fp32", "tf32", "fp16", "bf16"};
    for (size_t i = 0; value && i < sizeof known / sizeof known[0]; i++)
        if (strcmp(value, known[i]) == 0) return NULL;
    return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s: unknown precision '%s' (fp32, tf32, fp16, bf16)",
                   dev->name, value ? value : "(null)");
}

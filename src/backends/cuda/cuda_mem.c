/* CUDA device memory, copies and events.
 *
 * Memory: a pool of the device's own (cudaMemPoolCreate) with stream-ordered allocation on
 * the compute stream; freed memory stays in the pool (release threshold: never) and is
 * reused by later allocations in stream order, so a plan's buffers cost no cudaMalloc after
 * its first run. The optional limit counts the pool's memory in use.
 *
 * Copies: uploads run on the h2d stream, downloads on the d2h stream. Each copy stream first
 * waits for the compute stream's work issued so far (the buffer may be memory the pool just
 * handed back), and the compute stream waits for an upload before its next kernel, so an
 * upload, the kernels that read it and a download run in issue order, as backend.h asks.
 * Pageable host memory goes up through two pinned staging buffers used in turn: the host
 * copy into one overlaps the DMA out of the other, and the caller's memory is free as soon
 * as upload() returns. Pinned memory (host_alloc) is copied directly. */
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_device.h"
#include "core/alloc.h"
#include "ops/op.h"

#define MIN_ALLOC 256

static tdm_status *select_device(cuda_device *d) {
    return cuda_check(cudaSetDevice(d->ordinal), "selecting the device");
}

tdm_status *cuda_mem_init(cuda_device *d) {
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = d->ordinal;
    TDM_TRY(cuda_check(cudaMemPoolCreate(&d->pool, &props), "creating the memory pool"));
    uint64_t keep = UINT64_MAX;
    TDM_TRY(cuda_check(cudaMemPoolSetAttribute(d->pool, cudaMemPoolAttrReleaseThreshold, &keep),
                       "configuring the memory pool"));
    for (int i = 0; i < CUDA_STAGING_SLOTS; i++) {
        TDM_TRY(cuda_check(cudaHostAlloc(&d->staging[i], CUDA_STAGING_BYTES, cudaHostAllocPortable),
                           "allocating pinned staging memory"));
        TDM_TRY(cuda_check(cudaEventCreateWithFlags(&d->staging_done[i], cudaEventDisableTiming),
                           "creating an event"));
    }
    void *flag = NULL; /* the index check's word (no mapped memory: read back per Gather) */
    if (cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess) {
        void *dev_view = NULL;
        if (cudaHostGetDevicePointer(&dev_view, flag, 0) == cudaSuccess) {
            d->index_bad = flag;
            d->index_bad_dev = dev_view;
            *d->index_bad = 0;
        } else {
            cudaGetLastError();
            cudaFreeHost(flag);
        }
    } else {
        cudaGetLastError();
    }
    cudaEvent_t *evs[] = {&d->ev_compute, &d->ev_h2d, &d->ev_d2h};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        TDM_TRY(cuda_check(cudaEventCreateWithFlags(evs[i], cudaEventDisableTiming),
                           "creating an event"));
    /* the cuda_mem_limit_mb setting (0..2^40, checked by the settings reader) */
    atomic_store(&d->mem_limit, (size_t)d->settings->cuda_mem_limit_mb << 20);
    return NULL;
}

void cuda_mem_release(cuda_device *d) {
    if (d->ws) cudaFreeAsync(d->ws, d->stream);
    d->ws = NULL;
    d->ws_size = 0;
    if (d->stream) cudaStreamSynchronize(d->stream);
    for (int i = 0; i < CUDA_STAGING_SLOTS; i++) {
        if (d->staging_done[i]) {
            cudaEventSynchronize(d->staging_done[i]);
            cudaEventDestroy(d->staging_done[i]);
        }
        if (d->staging[i]) cudaFreeHost(d->staging[i]);
        d->staging[i] = NULL;
        d->staging_done[i] = NULL;
    }
    if (d->index_bad) cudaFreeHost((void *)d->index_bad);
    d->index_bad = NULL;
    d->index_bad_dev = NULL;
    if (d->ev_compute) cudaEventDestroy(d->ev_compute);
    if (d->ev_h2d) cudaEventDestroy(d->ev_h2d);
    if (d->ev_d2h) cudaEventDestroy(d->ev_d2h);
    if (d->pool) cudaMemPoolDestroy(d->pool);
    d->pool = NULL;
    cudaGetLastError();
}

/* ---- device memory ---- */

tdm_status *cuda_mem_alloc(cuda_device *d, size_t size, void **p) {
    if (size > SIZE_MAX - MIN_ALLOC)
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "cuda: %zu bytes cannot be allocated", size);
    size = size < MIN_ALLOC ? MIN_ALLOC : (size + MIN_ALLOC - 1) / MIN_ALLOC * MIN_ALLOC;
    size_t limit = atomic_load(&d->mem_limit);
    if (limit) {
        uint64_t used = 0;
        cudaMemPoolGetAttribute(d->pool, cudaMemPoolAttrUsedMemCurrent, &used);
        if (used + size > limit)
            return TDM_ERR(TDM_ERR_OUT_OF_MEMORY,
                           "cuda:%d: %zu bytes more would exceed the memory limit of %zu MiB "
                           "(%llu MiB in use)", d->ordinal, size, limit >> 20,
                           (unsigned long long)(used >> 20));
    }
    void *q = NULL;
    cudaError_t e = cudaMallocFromPoolAsync(&q, size, d->pool, d->stream);
    if (e == cudaErrorMemoryAllocation) {
        /* memory cached in the pool may be what is missing on a device shared with others:
         * wait for pending frees, give the cache back and try once more */
        cudaGetLastError();
        cudaStreamSynchronize(d->stream);
        cudaMemPoolTrimTo(d->pool, 0);
        e = cudaMallocFromPoolAsync(&q, size, d->pool, d->stream);
    }
    if (e != cudaSuccess) {
        tdm_status *st = cuda_check(e, "allocating device memory");
        return tdm_status_wrap(st, "cuda:%d: %zu bytes: ", d->ordinal, size);
    }
    *p = q;
    return NULL;
}

void cuda_mem_free(cuda_device *d, void *p) {
    if (!p) return;
    if (atomic_exchange(&d->d2h_pending, false)) {
        /* an asynchronous download may still read this memory: the compute stream (where
         * the free is ordered) waits for the downloads issued so far */
        pthread_mutex_lock(&d->copy_lock);
        if (cudaEventRecord(d->ev_d2h, d->d2h) == cudaSuccess)
            cudaStreamWaitEvent(d->stream, d->ev_d2h, 0);
        pthread_mutex_unlock(&d->copy_lock);
    }
    cudaFreeAsync(p, d->stream);
}

tdm_status *cuda_workspace(cuda_device *d, size_t size, void **p) {
    if (size <= d->ws_size && d->ws) {
        *p = d->ws;
        return NULL;
    }
    if (d->capturing) /* a graph would own it; the warm run of the segment grows it instead */
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "cuda: the workspace cannot grow inside a graph capture");
    size_t want = size < 2 * d->ws_size ? 2 * d->ws_size : size;
    if (want < ((size_t)4 << 20)) want = (size_t)4 << 20;
    void *q = NULL;
    tdm_status *st = cuda_mem_alloc(d, want, &q);
    if (st && want > size) { /* the doubling may be what does not fit */
        tdm_status_free(st);
        want = size;
        st = cuda_mem_alloc(d, want, &q);
    }
    if (st) return st;
    if (d->ws) cuda_mem_free(d, d->ws); /* stream-ordered: earlier kernels finish first */
    d->ws = q;
    d->ws_size = want;
    atomic_fetch_add(&d->ws_gen, 1); /* graphs that use the old one are captured again */
    *p = q;
    return NULL;
}

tdm_status *cuda_buffer_alloc(tdm_device *dev, size_t size, void **buf) {
    cuda_device *d = dev->ctx;
    TDM_TRY(select_device(d));
    pthread_mutex_lock(&d->gate);
    tdm_status *st = cuda_graph_alloc(d, size, buf) ? NULL : cuda_mem_alloc(d, size, buf);
    pthread_mutex_unlock(&d->gate);
    return st;
}

void cuda_buffer_free(tdm_device *dev, void *buf) {
    cuda_device *d = dev->ctx;
    if (cudaSetDevice(d->ordinal) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    pthread_mutex_lock(&d->gate);
    if (!cuda_graph_free(d, buf)) cuda_mem_free(d, buf);
    pthread_mutex_unlock(&d->gate);
}

/* ---- copies ---- */

static bool is_pinned(const void *host) {
    struct cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, host) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return at.type == cudaMemoryTypeHost;
}

/* `copy` waits for the compute stream's work issued so far. Call with copy_lock held. */
static tdm_status *after_compute(cuda_device *d, cudaStream_t copy) {
    TDM_TRY(cuda_check(cudaEventRecord(d->ev_compute, d->stream), "recording an event"));
    return cuda_check(cudaStreamWaitEvent(copy, d->ev_compute, 0), "ordering a copy");
}

static tdm_status *upload_locked(cuda_device *d, void *buf, const void *host, size_t size) {
    TDM_TRY(after_compute(d, d->h2d));
    if (is_pinned(host)) {
        TDM_TRY(cuda_check(cudaMemcpyAsync(buf, host, size, cudaMemcpyHostToDevice, d->h2d),
                           "upload"));
    } else {
        for (size_t off = 0; off < size;) {
            size_t n = size - off < CUDA_STAGING_BYTES ? size - off : CUDA_STAGING_BYTES;
            int slot = d->staging_next;
            d->staging_next = (slot + 1) % CUDA_STAGING_SLOTS;
            TDM_TRY(cuda_check(cudaEventSynchronize(d->staging_done[slot]),
                               "waiting for a staging buffer"));
            memcpy(d->staging[slot], (const char *)host + off, n);
            TDM_TRY(cuda_check(cudaMemcpyAsync((char *)buf + off, d->staging[slot], n,
                                               cudaMemcpyHostToDevice, d->h2d), "upload"));
            TDM_TRY(cuda_check(cudaEventRecord(d->staging_done[slot], d->h2d), "recording an event"));
            off += n;
        }
    }
    /* the compute stream's next kernels see the data */
    TDM_TRY(cuda_check(cudaEventRecord(d->ev_h2d, d->h2d), "recording an event"));
    return cuda_check(cudaStreamWaitEvent(d->stream, d->ev_h2d, 0), "ordering an upload");
}

/* The copy queue (backend.h version 7): the h2d stream waits only for `after` (not for the
 * compute issued so far) and the compute stream does not wait for the copy: a kernel that
 * reads buf waits on *done (event_wait). Pageable memory still goes through the staging
 * buffers (the host thread copies each 8 MiB piece in); pinned memory goes up directly. */
tdm_status *cuda_upload_queued(tdm_device *dev, void *buf, const void *host, size_t size,
                               void *after, void **done) {
    cuda_device *d = dev->ctx;
    TDM_TRY(select_device(d));
    cudaEvent_t ev = NULL;
    TDM_TRY(cuda_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "creating an event"));
    pthread_mutex_lock(&d->gate);
    pthread_mutex_lock(&d->copy_lock);
    tdm_status *st = NULL;
    if (after) st = cuda_check(cudaStreamWaitEvent(d->h2d, (cudaEvent_t)after, 0), "ordering a copy");
    if (!st && size && is_pinned(host)) {
        st = cuda_check(cudaMemcpyAsync(buf, host, size, cudaMemcpyHostToDevice, d->h2d), "upload");
    } else {
        for (size_t off = 0; !st && off < size;) {
            size_t n = size - off < CUDA_STAGING_BYTES ? size - off : CUDA_STAGING_BYTES;
            int slot = d->staging_next;
            d->staging_next = (slot + 1) % CUDA_STAGING_SLOTS;
            st = cuda_check(cudaEventSynchronize(d->staging_done[slot]), "waiting for a staging buffer");
            if (st) break;
            memcpy(d->staging[slot], (const char *)host + off, n);
            st = cuda_check(cudaMemcpyAsync((char *)buf + off, d->staging[slot], n,
                                            cudaMemcpyHostToDevice, d->h2d), "upload");
            if (!st) st = cuda_check(cudaEventRecord(d->staging_done[slot], d->h2d), "recording an event");
            off += n;
        }
    }
    if (!st) st = cuda_check(cudaEventRecord(ev, d->h2d), "recording an event");
    pthread_mutex_unlock(&d->copy_lock);
    pthread_mutex_unlock(&d->gate);
    if (st) {
        cudaEventDestroy(ev);
        return st;
    }
    *done = ev;
    return NULL;
}

tdm_status *cuda_upload(tdm_device *dev, void *buf, const void *host, size_t size) {
    cuda_device *d = dev->ctx;
    if (!size) return NULL;
    TDM_TRY(select_device(d));
    pthread_mutex_lock(&d->gate);
    pthread_mutex_lock(&d->copy_lock);
    tdm_status *st = upload_locked(d, buf, host, size);
    pthread_mutex_unlock(&d->copy_lock);
    pthread_mutex_unlock(&d->gate);
    return st;
}

/* Enqueues a download on d2h after the compute stream's work; copy_lock held. */
static tdm_status *download_enqueue(cuda_device *d, void *host, const void *buf, size_t size) {
    TDM_TRY(after_compute(d, d->d2h));
    return cuda_check(cudaMemcpyAsync(host, buf, size, cudaMemcpyDeviceToHost, d->d2h), "download");
}

/* Gate held. */
static tdm_status *download_blocking(cuda_device *d, void *host, const void *buf, size_t size) {
    if (!size) return NULL;
    TDM_TRY(select_device(d));
    pthread_mutex_lock(&d->copy_lock);
    tdm_status *st = download_enqueue(d, host, buf, size);
    pthread_mutex_unlock(&d->copy_lock);
    if (st) return st;
    TDM_TRY(cuda_check(cudaStreamSynchronize(d->d2h), "waiting for a download"));
    return cuda_index_check(d);
}

tdm_status *cuda_download(tdm_device *dev, void *host, const void *buf, size_t size) {
    cuda_device *d = dev->ctx;
    pthread_mutex_lock(&d->gate);
    tdm_status *st = cuda_graph_observe(d, "a download inside the segment");
    if (!st) st = download_blocking(d, host, buf, size);
    pthread_mutex_unlock(&d->gate);
    return st;
}

tdm_status *cuda_to_host(cuda_device *d, void *host, const void *dev_ptr, size_t size) {
    pthread_mutex_lock(&d->gate);
    tdm_status *st = cuda_graph_host_read(d);
    if (!st) st = download_blocking(d, host, dev_ptr, size);
    pthread_mutex_unlock(&d->gate);
    return st;
}

tdm_status *cuda_download_async(tdm_device *dev, void *host, const void *buf, size_t size,
                                void **event) {
    cuda_device *d = dev->ctx;
    TDM_TRY(select_device(d));
    cudaEvent_t ev = NULL;
    TDM_TRY(cuda_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "creating an event"));
    pthread_mutex_lock(&d->gate);
    tdm_status *st = cuda_graph_observe(d, "a download inside the segment");
    if (st) {
    } else if (size && is_pinned(host)) {
        pthread_mutex_lock(&d->copy_lock);
        st = download_enqueue(d, host, buf, size);
        if (!st) st = cuda_check(cudaEventRecord(ev, d->d2h), "recording an event");
        pthread_mutex_unlock(&d->copy_lock);
        if (!st) atomic_store(&d->d2h_pending, true);
    } else {
        /* pageable memory: the copy cannot be asynchronous; the event is complete at once */
        st = download_blocking(d, host, buf, size);
        if (!st) st = cuda_check(cudaEventRecord(ev, d->d2h), "recording an event");
    }
    pthread_mutex_unlock(&d->gate);
    if (st) {
        cudaEventDestroy(ev);
        return st;
    }
    *event = ev;
    return NULL;
}

tdm_status *cuda_host_alloc(tdm_device *dev, size_t size, void **host) {
    cuda_device *d = dev->ctx;
    TDM_TRY(select_device(d));
    void *p = NULL;
    TDM_TRY(cuda_check(cudaHostAlloc(&p, size ? size : 1, cudaHostAllocPortable),
                       "allocating pinned host memory"));
    *host = p;
    return NULL;
}

void cuda_host_free(tdm_device *dev, void *host) {
    if (host) cudaFreeHost(host);
}

/* Registered host memory (backend.h version 8): cudaHostRegister page-locks the range, so
 * is_pinned() sees it and upload / upload_queued copy it directly on the h2d stream. Memory
 * mapped read-only (weights mapped from external data) needs the read-only flag. */
tdm_status *cuda_host_register(tdm_device *dev, void *host, size_t size) {
    cuda_device *d = dev->ctx;
    TDM_TRY(select_device(d));
    cudaError_t e = cudaHostRegister(host, size, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
        cudaGetLastError();
        e = cudaHostRegister(host, size, cudaHostRegisterPortable | cudaHostRegisterReadOnly);
    }
    return cuda_check(e, "registering host memory of streamed weights");
}

void cuda_host_unregister(tdm_device *dev, void *host) {
    cuda_device *d = dev->ctx;
    tdm_status *st = host ? select_device(d) : NULL;
    if (!host || st) {
        tdm_status_free(st);
        return;
    }
    if (cudaHostUnregister(host) != cudaSuccess) cudaGetLastError();
}

/* ---- events ---- */

tdm_status *cuda_event_record(tdm_device *dev, void **event) {
    cuda_device *d = dev->ctx;
    TDM_TRY(select_device(d));
    cudaEvent_t ev = NULL;
    TDM_TRY(cuda_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "creating an event"));
    pthread_mutex_lock(&d->gate);
    tdm_status *st = cuda_graph_observe(d, "an event inside the segment");
    if (!st) st = cuda_check(cudaEventRecord(ev, d->stream), "recording an event");
    pthread_mutex_unlock(&d->gate);
    if (st) {
        cudaEventDestroy(ev);
        return st;
    }
    *event = ev;
    return NULL;
}

tdm_status *cuda_event_wait(tdm_device *dev, tdm_device *owner, void *event) {
    cuda_device *d = dev->ctx;
    if (!event) return NULL;
    if (cuda_is_own_device(owner)) {
        TDM_TRY(select_device(d));
        pthread_mutex_lock(&d->gate);
        tdm_status *st = cuda_check(cudaStreamWaitEvent(d->stream, (cudaEvent_t)event, 0),
                                    "waiting for an event");
        pthread_mutex_unlock(&d->gate);
        return st;
    }
    /* another backend's event: the host thread waits for it */
    if (owner && tdm_device_has_events(owner)) return tdm_device_event_sync(owner, event);
    return NULL;
}

tdm_status *cuda_index_check(cuda_device *d) {
    if (!d->index_bad || !*d->index_bad) return NULL;
    pthread_mutex_lock(&d->gate);
    char node[sizeof d->gather_node];
    memcpy(node, d->gather_node, sizeof node);
    d->gather_node[0] = 0;
    *d->index_bad = 0;
    pthread_mutex_unlock(&d->gate);
    return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "Gather node '%s'%s: an index is out of range for "
                   "its axis (cuda:%d checks the indices as the kernels run and reports it at "
                   "the next wait for the device)", node[0] ? node : "?",
                   node[0] ? " (or a Gather after it)" : "", d->ordinal);
}

tdm_status *cuda_event_sync(tdm_device *dev, void *event) {
    if (!event) return NULL;
    TDM_TRY(cuda_check(cudaEventSynchronize((cudaEvent_t)event), "waiting for an event"));
    return cuda_index_check(dev->ctx);
}

void cuda_event_free(tdm_device *dev, void *event) {
    if (event) cudaEventDestroy((cudaEvent_t)event);
}

/* ---- small integer inputs ---- */

tdm_status *cuda_read_ints(const tdm_kernel_ctx *ctx, int i, const char *what, int64_t *vals,
                           int max, int *count) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *t = i < ctx->n_in ? ctx->in[i] : NULL;
    if (!t) return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "%s is missing", what);
    if (t->dtype != TDM_INT64 && t->dtype != TDM_INT32)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "%s must be int32 or int64", what);
    if (t->rank > 1 || t->count > max)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "%s must be a scalar or 1-D with at most %d values", what, max);
    int n = (int)t->count;
    const void *src = t->data;
    int64_t stack[64];
    void *heap = NULL;
    if (t->device) {
        void *buf = t->nbytes <= sizeof stack ? (void *)stack : (heap = tdm_alloc(ctx->alloc, t->nbytes));
        if (!buf) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory reading %s", what);
        tdm_status *st = cuda_to_host(cuda_ctx_device(ctx), buf, t->data, t->nbytes);
        if (st) {
            tdm_free(ctx->alloc, heap);
            return st;
        }
        src = buf;
    }
    for (int k = 0; k < n; k++)
        vals[k] = t->dtype == TDM_INT64 ? ((const int64_t *)src)[k] : ((const int32_t *)src)[k];
    *count = n;
    tdm_free(ctx->alloc, heap);
    return NULL;
}

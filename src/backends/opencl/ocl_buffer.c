/* OpenCL buffers with a reuse pool. Sizes are rounded up to 4 KiB and reused only at the
 * same rounded size; the pool holds at most OCL_POOL_MAX buffers and pool_cap bytes, the
 * oldest leaving first. Reuse is safe without events because the device has one in-order
 * queue: a command that writes a reused buffer runs after every command that read it. */
#include <string.h>

#include "backends/opencl/ocl.h"

static size_t round_size(size_t size) {
    if (size == 0) return 4096;
    return size > SIZE_MAX - 4095 ? size : (size + 4095) & ~(size_t)4095;
}

tdm_status *ocl_buf_alloc(ocl_device *d, size_t size, cl_mem *out) {
    if (size > d->max_alloc)
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "opencl: buffer of %zu bytes exceeds the largest "
                       "allocation (%llu bytes)", size, (unsigned long long)d->max_alloc);
    size_t want = round_size(size);
    if (want > d->max_alloc) want = size ? size : 4;
    pthread_mutex_lock(&d->pool_lock);
    for (int i = d->pool_n - 1; i >= 0; i--) {
        if (d->pool_size[i] != want) continue;
        *out = d->pool_mem[i];
        d->pool_bytes -= want;
        d->pool_n--;
        memmove(&d->pool_size[i], &d->pool_size[i + 1], (size_t)(d->pool_n - i) * sizeof(size_t));
        memmove(&d->pool_mem[i], &d->pool_mem[i + 1], (size_t)(d->pool_n - i) * sizeof(cl_mem));
        pthread_mutex_unlock(&d->pool_lock);
        return NULL;
    }
    pthread_mutex_unlock(&d->pool_lock);
    cl_int err;
    cl_mem_flags fl = CL_MEM_READ_WRITE | (d->unified ? CL_MEM_ALLOC_HOST_PTR : 0);
    cl_mem m = clCreateBuffer(d->ctx, fl, want, NULL, &err);
    if (err != CL_SUCCESS) {
        /* the pool may hold the memory that is missing: empty it and try once more */
        ocl_buf_pool_release(d);
        m = clCreateBuffer(d->ctx, fl, want, NULL, &err);
        if (err != CL_SUCCESS) return ocl_error(err, "allocating a buffer");
    }
    *out = m;
    return NULL;
}

void ocl_buf_free(ocl_device *d, cl_mem m) {
    if (!m) return;
    size_t size = 0;
    if (clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof size, &size, NULL) != CL_SUCCESS ||
        size > d->pool_cap) {
        clReleaseMemObject(m);
        return;
    }
    cl_mem evict[OCL_POOL_MAX];
    int n_evict = 0;
    pthread_mutex_lock(&d->pool_lock);
    while (d->pool_n > 0 && (d->pool_n >= OCL_POOL_MAX || d->pool_bytes + size > d->pool_cap)) {
        evict[n_evict++] = d->pool_mem[0];
        d->pool_bytes -= d->pool_size[0];
        d->pool_n--;
        memmove(&d->pool_size[0], &d->pool_size[1], (size_t)d->pool_n * sizeof(size_t));
        memmove(&d->pool_mem[0], &d->pool_mem[1], (size_t)d->pool_n * sizeof(cl_mem));
    }
    d->pool_size[d->pool_n] = size;
    d->pool_mem[d->pool_n++] = m;
    d->pool_bytes += size;
    pthread_mutex_unlock(&d->pool_lock);
    for (int i = 0; i < n_evict; i++) clReleaseMemObject(evict[i]);
}

void ocl_buf_pool_release(ocl_device *d) {
    pthread_mutex_lock(&d->pool_lock);
    int n = d->pool_n;
    cl_mem mem[OCL_POOL_MAX];
    memcpy(mem, d->pool_mem, (size_t)n * sizeof(cl_mem));
    d->pool_n = 0;
    d->pool_bytes = 0;
    pthread_mutex_unlock(&d->pool_lock);
    for (int i = 0; i < n; i++) clReleaseMemObject(mem[i]);
}

#include "backends/backend.h"

const tdm_backend_reg *const tdm_backends[] = {
#define TDM_X_(b) &tdm_backend_##b,
    TDM_BACKENDS(TDM_X_)
#undef TDM_X_
    NULL,
};

static void release_device_buffer(void *device, void *data) {
    tdm_device_buffer_free(device, data);
}

tdm_status *tdm_device_tensor_new(tdm_device *dev, const tdm_allocator *a, tdm_dtype dtype,
                                  int rank, const int64_t *dims, tdm_tensor **out) {
    if (dtype == TDM_STRING)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "string tensors cannot live on device %s", dev->name);
    tdm_tensor *t = NULL;
    TDM_TRY(tdm_tensor_new_view(a, dtype, rank, dims, NULL, &t));
    void *buf = NULL;
    tdm_status *st = tdm_device_buffer_alloc(dev, t->nbytes, &buf);
    if (st) {
        tdm_tensor_destroy(t);
        return tdm_status_wrap(st, "device %s: ", dev->name);
    }
    t->data = buf;
    t->device = dev;
    t->release = release_device_buffer;
    *out = t;
    return NULL;
}

tdm_status *tdm_device_to_device(tdm_device *dev, const tdm_allocator *a, const tdm_tensor *host,
                                 tdm_tensor **out) {
    if (host->device)
        return TDM_ERR(TDM_ERR_INTERNAL, "tdm_device_to_device: source is not in host memory");
    tdm_tensor *t = NULL;
    TDM_TRY(tdm_device_tensor_new(dev, a, host->dtype, host->rank, host->dims, &t));
    tdm_status *st = host->nbytes ? tdm_device_upload(dev, t->data, host->data, host->nbytes) : NULL;
    if (st) {
        tdm_tensor_destroy(t);
        return tdm_status_wrap(st, "upload to %s: ", dev->name);
    }
    *out = t;
    return NULL;
}

tdm_status *tdm_device_to_host(const tdm_allocator *a, const tdm_tensor *t, tdm_tensor **out) {
    tdm_device *dev = t->device;
    if (!dev) return tdm_tensor_clone(a, t, out);
    tdm_tensor *h = NULL;
    TDM_TRY(tdm_tensor_new(a, t->dtype, t->rank, t->dims, &h));
    tdm_status *st = t->nbytes ? tdm_device_download(dev, h->data, t->data, t->nbytes) : NULL;
    if (st) {
        tdm_tensor_destroy(h);
        return tdm_status_wrap(st, "download from %s: ", dev->name);
    }
    *out = h;
    return NULL;
}

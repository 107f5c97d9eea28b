/* The wrappers of tdm_device_iface (see backend.h): the one place outside the backends that
 * reads dev->iface. Each wrapper reads its member through at(dev, version), the version that
 * added the member, so an interface filled in by an older plug-in is never read past its
 * end. Also compiled into the CUDA plugin (its own hidden copy): it waits on other
 * backends' events through tdm_device_event_wait's default. */
#include "backends/backend.h"

/* The device's interface when it is at least `version` (the version that added a member). */
static const tdm_device_iface *at(const tdm_device *dev, int version) {
    return dev && dev->iface && dev->iface->api_version >= version ? dev->iface : NULL;
}

static tdm_status *lacks(const tdm_device *dev, const char *what) {
    return TDM_ERR(TDM_ERR_UNSUPPORTED, "device %s has no %s", dev ? dev->name : "(none)", what);
}

/* ---- version 1 ---- */

const tdm_kernel_def *tdm_device_find_kernel(tdm_device *dev, const tdm_node *node,
                                             const tdm_dtype *in_types, int n_in) {
    const tdm_device_iface *i = at(dev, 1);
    return i && i->find_kernel ? i->find_kernel(dev, node, in_types, n_in) : NULL;
}

tdm_status *tdm_device_execute(tdm_device *dev, const tdm_kernel_def *k, tdm_kernel_ctx *ctx) {
    const tdm_device_iface *i = at(dev, 1);
    return i && i->execute ? i->execute(dev, k, ctx) : lacks(dev, "execute");
}

tdm_status *tdm_device_synchronize(tdm_device *dev) {
    const tdm_device_iface *i = at(dev, 1);
    return i && i->synchronize ? i->synchronize(dev) : NULL;
}

void tdm_device_close(tdm_device *dev) {
    const tdm_device_iface *i = at(dev, 1);
    if (i && i->close) i->close(dev);
}

/* ---- version 2 ---- */

tdm_status *tdm_device_buffer_alloc(tdm_device *dev, size_t size, void **buf) {
    const tdm_device_iface *i = at(dev, 2);
    return i && i->buffer_alloc ? i->buffer_alloc(dev, size, buf)
                                : lacks(dev, "memory of its own (buffer_alloc)");
}

void tdm_device_buffer_free(tdm_device *dev, void *buf) {
    const tdm_device_iface *i = at(dev, 2);
    if (i && i->buffer_free) i->buffer_free(dev, buf);
}

tdm_status *tdm_device_upload(tdm_device *dev, void *buf, const void *host, size_t size) {
    const tdm_device_iface *i = at(dev, 2);
    return i && i->upload ? i->upload(dev, buf, host, size)
                          : lacks(dev, "memory of its own (upload)");
}

tdm_status *tdm_device_download(tdm_device *dev, void *host, const void *buf, size_t size) {
    const tdm_device_iface *i = at(dev, 2);
    return i && i->download ? i->download(dev, host, buf, size)
                            : lacks(dev, "memory of its own (download)");
}

/* ---- version 3 ---- */

tdm_status *tdm_device_event_record(tdm_device *dev, void **event) {
    const tdm_device_iface *i = at(dev, 3);
    return i && i->event_record ? i->event_record(dev, event) : lacks(dev, "events");
}

tdm_status *tdm_device_event_wait(tdm_device *dev, tdm_device *owner, void *event) {
    const tdm_device_iface *i = at(dev, 3);
    if (i && i->event_wait) return i->event_wait(dev, owner, event);
    return tdm_device_event_sync(owner ? owner : dev, event); /* the host thread waits */
}

tdm_status *tdm_device_event_sync(tdm_device *dev, void *event) {
    const tdm_device_iface *i = at(dev, 3);
    return i && i->event_sync ? i->event_sync(dev, event) : lacks(dev, "events");
}

void tdm_device_event_free(tdm_device *dev, void *event) {
    const tdm_device_iface *i = at(dev, 3);
    if (i && i->event_free && event) i->event_free(dev, event);
}

tdm_status *tdm_device_download_async(tdm_device *dev, void *host, const void *buf, size_t size,
                                      void **event) {
    const tdm_device_iface *i = at(dev, 3);
    return i && i->download_async ? i->download_async(dev, host, buf, size, event)
                                  : lacks(dev, "asynchronous downloads");
}

tdm_status *tdm_device_host_alloc(tdm_device *dev, size_t size, void **host) {
    const tdm_device_iface *i = at(dev, 3);
    return i && i->host_alloc ? i->host_alloc(dev, size, host) : lacks(dev, "staging memory");
}

void tdm_device_host_free(tdm_device *dev, void *host) {
    const tdm_device_iface *i = at(dev, 3);
    if (i && i->host_free && host) i->host_free(dev, host);
}

tdm_status *tdm_device_configure(tdm_device *dev, const char *key, const char *value) {
    const tdm_device_iface *i = at(dev, 3);
    return i && i->configure ? i->configure(dev, key, value) : NULL;
}

/* ---- version 4 ---- */

tdm_status *tdm_device_segment_begin(tdm_device *dev, uint64_t key) {
    const tdm_device_iface *i = at(dev, 4);
    return i && i->segment_begin ? i->segment_begin(dev, key) : NULL;
}

tdm_status *tdm_device_segment_end(tdm_device *dev, bool ok) {
    const tdm_device_iface *i = at(dev, 4);
    return i && i->segment_end ? i->segment_end(dev, ok) : NULL;
}

/* ---- version 5 ---- */

unsigned tdm_device_kernel_flags(tdm_device *dev, const tdm_kernel_def *k, const tdm_node *node) {
    const tdm_device_iface *i = at(dev, 5);
    return i && i->kernel_flags && k ? i->kernel_flags(dev, k, node) : 0;
}

int64_t tdm_device_channel_block(tdm_device *dev) {
    const tdm_device_iface *i = at(dev, 6);
    return i && i->channel_block ? i->channel_block(dev) : 0;
}

/* ---- version 9 ---- */

int tdm_device_channels_last(tdm_device *dev) {
    const tdm_device_iface *i = at(dev, 9);
    return i && i->channels_last ? i->channels_last(dev) : 0;
}

size_t tdm_device_kernel_impl(tdm_device *dev, const tdm_kernel_def *k, void *state, char *buf,
                              size_t size) {
    if (!buf || !size) return 0;
    buf[0] = 0;
    const tdm_device_iface *i = at(dev, 6);
    return i && i->kernel_impl && k ? i->kernel_impl(dev, k, state, buf, size) : 0;
}

/* ---- version 7 ---- */

tdm_status *tdm_device_upload_queued(tdm_device *dev, void *buf, const void *host, size_t size,
                                     void *after, void **done) {
    const tdm_device_iface *i = at(dev, 7);
    return i && i->upload_queued ? i->upload_queued(dev, buf, host, size, after, done)
                                 : lacks(dev, "copy queue");
}

/* ---- version 8 ---- */

tdm_status *tdm_device_host_register(tdm_device *dev, void *host, size_t size) {
    const tdm_device_iface *i = at(dev, 8);
    return i && i->host_register ? i->host_register(dev, host, size)
                                 : lacks(dev, "registration of host memory");
}

void tdm_device_host_unregister(tdm_device *dev, void *host) {
    const tdm_device_iface *i = at(dev, 8);
    if (i && i->host_unregister && host) i->host_unregister(dev, host);
}

/* ---- what a device has ---- */

bool tdm_device_has_synchronize(const tdm_device *dev) {
    const tdm_device_iface *i = at(dev, 1);
    return i && i->synchronize;
}

bool tdm_device_has_buffers(const tdm_device *dev) {
    const tdm_device_iface *i = at(dev, 2);
    return i && i->buffer_alloc && i->buffer_free && i->upload && i->download;
}

bool tdm_device_has_events(const tdm_device *dev) {
    const tdm_device_iface *i = at(dev, 3);
    return i && i->event_record && i->event_wait && i->event_sync && i->event_free;
}

bool tdm_device_has_staging(const tdm_device *dev) {
    const tdm_device_iface *i = at(dev, 3);
    return i && i->host_alloc && i->host_free;
}

bool tdm_device_has_async_copies(const tdm_device *dev) {
    const tdm_device_iface *i = at(dev, 3);
    return tdm_device_has_events(dev) && tdm_device_has_staging(dev) && i->download_async &&
           i->upload;
}

bool tdm_device_has_segments(const tdm_device *dev) {
    const tdm_device_iface *i = at(dev, 4);
    return i && i->segment_begin && i->segment_end;
}

bool tdm_device_has_copy_queue(const tdm_device *dev) {
    const tdm_device_iface *i = at(dev, 7);
    return i && i->upload_queued && tdm_device_has_events(dev);
}

bool tdm_device_has_host_register(const tdm_device *dev) {
    const tdm_device_iface *i = at(dev, 8);
    return i && i->host_register && i->host_unregister;
}

#include "backends/backend.h"

const tdm_backend_reg *const tdm_backends[] = {
#define TDM_X_(b) &tdm_backend_##b,
    TDM_BACKENDS(TDM_X_)
#undef TDM_X_
    NULL,
};

const tdm_kernel_def *tdm_device_find_kernel(tdm_device *dev, const tdm_node *node,
                                             const tdm_dtype *in_types, int n_in) {
    return dev->iface->find_kernel(dev, node, in_types, n_in);
}

tdm_status *tdm_device_execute(tdm_device *dev, const tdm_kernel_def *k, tdm_kernel_ctx *ctx) {
    return dev->iface->execute(dev, k, ctx);
}

tdm_status *tdm_device_synchronize(tdm_device *dev) {
    return dev->iface->synchronize ? dev->iface->synchronize(dev) : NULL;
}

void tdm_device_close(tdm_device *dev) {
    if (dev) dev->iface->close(dev);
}

/* The CUDA plugin's entry point, shared by the loader compiled into libtandem
 * (src/backends/cuda_loader.c) and the plugin libtandem_cuda.so (cuda_backend.c). No CUDA
 * headers here: libtandem includes it on machines without the toolkit.
 *
 * The loader dlopens the plugin, looks up TDM_CUDA_PLUGIN_ENTRY and calls it with the
 * layout facts of the structs both sides share; the plugin answers its backend registry
 * entry, or NULL with the reason (a plugin built from other sources). */
#ifndef TDM_BACKENDS_CUDA_CUDA_PLUGIN_H
#define TDM_BACKENDS_CUDA_CUDA_PLUGIN_H

#include <stddef.h>

#include "backends/backend.h"

/* Bumped whenever the entry's contract changes. */
#define TDM_PLUGIN_ABI 2 /* 2: discover() takes the environment's settings */
#define TDM_CUDA_PLUGIN_FILE "libtandem_cuda.so"
#define TDM_CUDA_PLUGIN_ENTRY "tdm_cuda_plugin_entry"

typedef struct tdm_plugin_abi {
    int abi;           /* TDM_PLUGIN_ABI */
    int iface_version; /* TDM_DEVICE_IFACE_VERSION */
    /* sizes of the structs that cross the boundary: a plugin built against other headers
     * is refused instead of reading the wrong fields */
    size_t tensor, node, graph, kernel_ctx, kernel_def, device, device_iface, backend_reg,
        settings;
} tdm_plugin_abi;

#define TDM_PLUGIN_ABI_INIT                                                              \
    {TDM_PLUGIN_ABI, TDM_DEVICE_IFACE_VERSION, sizeof(tdm_tensor), sizeof(tdm_node),     \
     sizeof(tdm_graph), sizeof(tdm_kernel_ctx), sizeof(tdm_kernel_def), sizeof(tdm_device), \
     sizeof(tdm_device_iface), sizeof(tdm_backend_reg), sizeof(tdm_settings)}

/* The entry: the plugin's registry entry when `host` matches what it was built with, else
 * NULL with the reason in why. */
typedef const tdm_backend_reg *(*tdm_cuda_plugin_entry_fn)(const tdm_plugin_abi *host,
                                                           char *why, size_t why_size);

#endif

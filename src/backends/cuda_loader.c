/* The `cuda` backend as libtandem sees it: a loader for the plugin libtandem_cuda.so (built
 * when the CUDA toolkit is found, see src/backends/cuda/). Discovery is lazy: nothing is
 * loaded until a cuda device is asked for or the device list is read.
 *
 * discover():
 *   0. the setting cuda_disable (TANDEM_CUDA_DISABLE): nothing is looked for;
 *   1. the driver: without libcuda.so.1 there is nothing to do ("no CUDA driver"); the
 *      plugin (cuBLAS, cuDNN: hundreds of MB of code) is not even loaded;
 *   2. the plugin, from the first folder that holds it: the setting plugin_dir
 *      (TANDEM_PLUGIN_DIR), the folder of the object this code is in (libtandem.so, or the
 *      executable for static links), the executable's folder, the build folder, the install
 *      folder;
 *   3. its entry (tdm_cuda_plugin_entry), given the layout facts of the shared structs: a
 *      plugin of another build is refused;
 *   4. the plugin's own discover (no GPU, driver too old...).
 * Every failure is *n = 0 with a one-line reason, never an error status: a CPU-only run
 * never fails because of CUDA. A plugin that yielded devices stays loaded for the rest of
 * the process (the devices' code lives in it); otherwise it is unloaded again. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/cuda/cuda_plugin.h"

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

/* dir of `file` (without the trailing slash) into out; false if it has none */
static bool dir_of(const char *file, char *out, size_t size) {
    const char *slash = strrchr(file, '/');
    if (!slash) return false;
    size_t len = (size_t)(slash - file);
    if (len == 0) len = 1; /* "/x" -> "/" */
    if (len >= size) return false;
    memcpy(out, file, len);
    out[len] = 0;
    return true;
}

/* The plugin path in the first candidate folder that holds it; false when none does. */
static bool find_plugin(const tdm_settings *set, char *path, size_t size) {
    char dirs[5][PATH_MAX];
    int nd = 0;
    const char *first = set->plugin_dir;
    if (first[0] && strlen(first) < PATH_MAX) snprintf(dirs[nd++], PATH_MAX, "%s", first);
    Dl_info info;
    if (dladdr((void *)&tdm_backend_cuda, &info) && info.dli_fname &&
        dir_of(info.dli_fname, dirs[nd], PATH_MAX))
        nd++;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        if (dir_of(exe, dirs[nd], PATH_MAX)) nd++;
    }
#ifdef TANDEM_PLUGIN_BUILD_DIR
    snprintf(dirs[nd++], PATH_MAX, "%s", TANDEM_PLUGIN_BUILD_DIR);
#endif
#ifdef TANDEM_PLUGIN_INSTALL_DIR
    snprintf(dirs[nd++], PATH_MAX, "%s", TANDEM_PLUGIN_INSTALL_DIR);
#endif
    for (int i = 0; i < nd; i++) {
        int w = snprintf(path, size, "%s/%s", dirs[i], TDM_CUDA_PLUGIN_FILE);
        if (w > 0 && (size_t)w < size && access(path, R_OK) == 0) return true;
    }
    return false;
}

static tdm_status *cuda_loader_discover(const tdm_allocator *a, const tdm_logger *log,
                                        const tdm_settings *set, tdm_device **devs, int max,
                                        int *n, char *why, size_t why_size) {
    *n = 0;
    set = tdm_settings_or_builtin(set);
    if (set->cuda_disable) {
        snprintf(why, why_size, "disabled (the setting cuda_disable, TANDEM_CUDA_DISABLE)");
        return NULL;
    }
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!driver) {
        snprintf(why, why_size, "no CUDA driver (libcuda.so.1 not found)");
        return NULL;
    }
    dlclose(driver);
    char path[PATH_MAX + 64];
    if (!find_plugin(set, path, sizeof path)) {
        snprintf(why, why_size, "plugin %s not found (tandem built without CUDA? set "
                 "TANDEM_PLUGIN_DIR)", TDM_CUDA_PLUGIN_FILE);
        return NULL;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *err = dlerror();
        snprintf(why, why_size, "cannot load the plugin: %.200s", err ? err : path);
        return NULL;
    }
    tdm_cuda_plugin_entry_fn entry;
    *(void **)&entry = dlsym(h, TDM_CUDA_PLUGIN_ENTRY);
    if (!entry) {
        snprintf(why, why_size, "%s has no entry %s", path, TDM_CUDA_PLUGIN_ENTRY);
        dlclose(h);
        return NULL;
    }
    tdm_plugin_abi abi = TDM_PLUGIN_ABI_INIT;
    const tdm_backend_reg *reg = entry(&abi, why, why_size);
    if (!reg) {
        dlclose(h);
        return NULL;
    }
    tdm_status *st = reg->discover(a, log, set, devs, max, n, why, why_size);
    if (st) { /* a reason, not a failure of the run */
        snprintf(why, why_size, "%s", tdm_status_message(st));
        tdm_status_free(st);
        *n = 0;
    }
    if (*n == 0) dlclose(h);
    return NULL;
}

const tdm_backend_reg tdm_backend_cuda = {"cuda", cuda_loader_discover, true};

/* OpenCL programs: one per op family, built on first use, with an on-disk cache of program
 * binaries keyed by the device (platform, device, driver versions) and a hash of the source
 * and build options.
 *
 * Cache folder: the environment's cache_dir setting (TANDEM_CACHE_DIR, else
 * $XDG_CACHE_HOME/tandem, else ~/.cache/tandem; api/settings.c) plus "opencl", next to the
 * device profiles (sched/profile.c). A cache that cannot be read or written only costs build time;
 * a binary the driver rejects is rebuilt from source and replaced. Files are written to a
 * temporary name and renamed, so concurrent processes never read half a binary. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/opencl/ocl.h"
#include "core/alloc.h"
#include "core/hash.h"

#define BUILD_OPTIONS "-cl-std=CL1.2"
#define MAX_BINARY ((size_t)256 << 20)

static const char *const family_names[OCL_PROG_COUNT] = {
#define OCL_X_(f) #f,
    OCL_FAMILIES(OCL_X_)
#undef OCL_X_
};
static const char *const family_sources[OCL_PROG_COUNT] = {
#define OCL_X_(f) ocl_src_##f,
    OCL_FAMILIES(OCL_X_)
#undef OCL_X_
};

/* mkdir -p; returns 0 when the folder exists afterwards. */
static int make_dirs(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        int r = mkdir(path, 0755);
        *p = '/';
        if (r != 0 && errno != EEXIST) return -1;
    }
    return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

/* The cache file for this device and source, or 0 when no cache folder is known. */
static int cache_path(const ocl_device *d, const char *src, char *path, size_t size) {
    const char *base = d->settings->cache_dir;
    if (!base[0]) return 0;
    char dir[1024];
    int n = snprintf(dir, sizeof dir, "%s/opencl", base);
    if (n < 0 || (size_t)n >= sizeof dir) return 0;
    uint64_t hd = tdm_hash_str(TDM_HASH_INIT, d->ident);
    uint64_t hs = tdm_hash_str(TDM_HASH_INIT, src);
    hs = tdm_hash_bytes(hs, BUILD_OPTIONS, sizeof BUILD_OPTIONS - 1);
    n = snprintf(path, size, "%s/%016llx-%016llx.bin", dir, (unsigned long long)hd,
                 (unsigned long long)hs);
    return n > 0 && (size_t)n < size;
}

static unsigned char *read_file(const tdm_allocator *a, const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0) len = ftell(f);
    if (len > 0 && (size_t)len <= MAX_BINARY && fseek(f, 0, SEEK_SET) == 0) {
        buf = tdm_alloc(a, (size_t)len);
        if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
            tdm_free(a, buf);
            buf = NULL;
        }
    }
    fclose(f);
    *size = buf ? (size_t)len : 0;
    return buf;
}

static void write_cache(ocl_device *d, cl_program prog, const char *path) {
    size_t size = 0;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS ||
        size == 0 || size > MAX_BINARY)
        return;
    unsigned char *bin = tdm_alloc(d->a, size);
    if (!bin) return;
    unsigned char *bins[1] = {bin};
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) == CL_SUCCESS) {
        char dir[1200], tmp[1300];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
        FILE *f = make_dirs(dir) == 0 ? fopen(tmp, "wb") : NULL;
        if (f) {
            bool ok = fwrite(bin, 1, size, f) == size;
            ok = fclose(f) == 0 && ok;
            if (!ok || rename(tmp, path) != 0) remove(tmp);
            else tdm_log(d->log, TDM_LOG_DEBUG, "opencl: cached program binary %s", path);
        }
    }
    tdm_free(d->a, bin);
}

/* Tries the cached binary; returns the built program or NULL. */
static cl_program from_cache(ocl_device *d, const char *path) {
    size_t size = 0;
    unsigned char *bin = read_file(d->a, path, &size);
    if (!bin) return NULL;
    const unsigned char *bins[1] = {bin};
    cl_int status = CL_SUCCESS, err;
    cl_program p = clCreateProgramWithBinary(d->ctx, 1, &d->id, &size, bins, &status, &err);
    tdm_free(d->a, bin);
    if (err != CL_SUCCESS || status != CL_SUCCESS) {
        if (p) clReleaseProgram(p);
        return NULL;
    }
    if (clBuildProgram(p, 1, &d->id, BUILD_OPTIONS, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(p);
        return NULL;
    }
    return p;
}

static tdm_status *build(ocl_device *d, int id, cl_program *out) {
    const char *src = family_sources[id];
    char path[1200];
    bool cache = cache_path(d, src, path, sizeof path);
    if (cache && (*out = from_cache(d, path))) return NULL;
    cl_int err;
    size_t len = strlen(src);
    cl_program p = clCreateProgramWithSource(d->ctx, 1, &src, &len, &err);
    if (err != CL_SUCCESS) return ocl_error(err, "creating a program");
    err = clBuildProgram(p, 1, &d->id, BUILD_OPTIONS, NULL, NULL);
    if (err != CL_SUCCESS) {
        char log[2048] = "";
        size_t n = 0;
        clGetProgramBuildInfo(p, d->id, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, &n);
        log[sizeof log - 1] = 0;
        clReleaseProgram(p);
        return TDM_ERR(TDM_ERR_DEVICE, "opencl: building the %s kernels failed: %s (%d): %s",
                       family_names[id], ocl_errname(err), (int)err, log);
    }
    if (cache) write_cache(d, p, path);
    *out = p;
    return NULL;
}

tdm_status *ocl_kernel(ocl_device *d, int prog, const char *name, cl_kernel *out) {
    if (prog < 0 || prog >= OCL_PROG_COUNT)
        return TDM_ERR(TDM_ERR_INTERNAL, "opencl: no program %d", prog);
    ocl_program *p = &d->progs[prog];
    if (p->error) return TDM_ERR(TDM_ERR_DEVICE, "%s", p->error);
    if (!p->built) {
        tdm_status *st = build(d, prog, &p->prog);
        if (st) {
            if (tdm_status_code(st) != TDM_ERR_OUT_OF_MEMORY)
                p->error = tdm_strdup(d->a, tdm_status_message(st));
            return st;
        }
        p->built = true;
    }
    for (int i = 0; i < p->n_kernels; i++)
        if (strcmp(p->names[i], name) == 0) {
            *out = p->kernels[i];
            return NULL;
        }
    if (p->n_kernels >= OCL_MAX_KERNELS || strlen(name) >= OCL_KERNEL_NAME)
        return TDM_ERR(TDM_ERR_INTERNAL, "opencl: too many kernels in program %s",
                       family_names[prog]);
    cl_int err;
    cl_kernel k = clCreateKernel(p->prog, name, &err);
    if (err != CL_SUCCESS) {
        char what[128];
        snprintf(what, sizeof what, "kernel %s of the %s program", name, family_names[prog]);
        return ocl_error(err, what);
    }
    snprintf(p->names[p->n_kernels], OCL_KERNEL_NAME, "%s", name);
    p->kernels[p->n_kernels++] = k;
    *out = k;
    return NULL;
}

void ocl_programs_release(ocl_device *d) {
    for (int i = 0; i < OCL_PROG_COUNT; i++) {
        ocl_program *p = &d->progs[i];
        for (int k = 0; k < p->n_kernels; k++) clReleaseKernel(p->kernels[k]);
        if (p->built) clReleaseProgram(p->prog);
        tdm_free(d->a, p->error);
        memset(p, 0, sizeof *p);
    }
}

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "onnx/loader.h"

tdm_status *tdm_read_file(const char *path, const tdm_allocator *a, size_t max, void **data,
                          size_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return TDM_ERR(TDM_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return TDM_ERR(TDM_ERR_IO, "'%s' is not a regular file", path);
    }
    if ((uint64_t)sb.st_size > max) {
        close(fd);
        return TDM_ERR(TDM_ERR_LIMIT, "'%s' is %lld bytes; the limit is %zu bytes", path,
                       (long long)sb.st_size, max);
    }
    size_t n = (size_t)sb.st_size;
    char *buf = tdm_alloc(a, n ? n : 1);
    if (!buf) {
        close(fd);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory reading '%s' (%zu bytes)", path, n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            tdm_free(a, buf);
            close(fd);
            return TDM_ERR(TDM_ERR_IO, "cannot read '%s': %s", path, r < 0 ? strerror(errno) : "short read");
        }
        got += (size_t)r;
    }
    close(fd);
    *data = buf;
    *size = n;
    return NULL;
}

/* Rejects absolute paths and any ".." component, before touching the file system. */
static tdm_status *check_location_text(const char *loc, const char *tensor) {
    if (!loc[0]) return TDM_ERR(TDM_ERR_INVALID_MODEL, "tensor '%s': empty external data location", tensor);
    if (loc[0] == '/' || loc[0] == '\\')
        return TDM_ERR(TDM_ERR_INVALID_MODEL,
                       "tensor '%s': external data location '%s' is absolute; it must be relative "
                       "to the model's folder", tensor, loc);
    const char *p = loc;
    while (*p) {
        const char *q = p;
        while (*q && *q != '/' && *q != '\\') q++;
        if (q - p == 2 && p[0] == '.' && p[1] == '.')
            return TDM_ERR(TDM_ERR_INVALID_MODEL,
                           "tensor '%s': external data location '%s' leaves the model's folder ('..')",
                           tensor, loc);
        p = *q ? q + 1 : q;
    }
    return NULL;
}

/* Opens external data after every check (path inside the model's folder, a regular file
 * with one link, the range inside it, the length what the tensor needs): *fd_out open, and
 * *length_out the resolved length. */
static tdm_status *open_external(const char *base_dir, const char *location, int64_t offset,
                                 int64_t length, size_t expect, const char *tensor, int *fd_out,
                                 int64_t *length_out) {
    if (!base_dir)
        return TDM_ERR(TDM_ERR_INVALID_MODEL,
                       "tensor '%s' uses external data, but the model was loaded from memory "
                       "without a base folder", tensor);
    TDM_TRY(check_location_text(location, tensor));
    if (offset < 0 || length < -1)
        return TDM_ERR(TDM_ERR_INVALID_MODEL, "tensor '%s': negative external data offset or length",
                       tensor);

    char base_real[PATH_MAX], full[PATH_MAX * 2], file_real[PATH_MAX];
    if (!realpath(base_dir, base_real))
        return TDM_ERR(TDM_ERR_IO, "tensor '%s': cannot resolve the model folder '%s': %s", tensor,
                       base_dir, strerror(errno));
    int n = snprintf(full, sizeof full, "%s/%s", base_real, location);
    if (n < 0 || (size_t)n >= sizeof full)
        return TDM_ERR(TDM_ERR_INVALID_MODEL, "tensor '%s': external data path is too long", tensor);
    if (!realpath(full, file_real))
        return TDM_ERR(TDM_ERR_IO, "tensor '%s': external data file '%s': %s", tensor, location,
                       strerror(errno));
    size_t bl = strlen(base_real);
    if (strncmp(file_real, base_real, bl) != 0 || (file_real[bl] != '/' && bl != 1))
        return TDM_ERR(TDM_ERR_INVALID_MODEL,
                       "tensor '%s': external data '%s' resolves outside the model's folder "
                       "(symbolic link?)", tensor, location);
    int fd = open(file_real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return TDM_ERR(TDM_ERR_IO, "tensor '%s': cannot open external data '%s': %s", tensor,
                       location, strerror(errno));
    struct stat sb;
    tdm_status *st = NULL;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = TDM_ERR(TDM_ERR_INVALID_MODEL, "tensor '%s': external data '%s' is not a regular file",
                     tensor, location);
        goto out;
    }
    if (sb.st_nlink > 1) {
        st = TDM_ERR(TDM_ERR_INVALID_MODEL,
                     "tensor '%s': external data '%s' has %lu hard links; refusing a file that may "
                     "be linked from outside the model's folder", tensor, location,
                     (unsigned long)sb.st_nlink);
        goto out;
    }
    int64_t fsize = sb.st_size;
    if (length < 0) {
        if (offset > fsize) {
            st = TDM_ERR(TDM_ERR_INVALID_MODEL, "tensor '%s': external data offset %lld is past the "
                         "end of '%s' (%lld bytes)", tensor, (long long)offset, location,
                         (long long)fsize);
            goto out;
        }
        length = fsize - offset;
    }
    int64_t end;
    if (!tdm_add_i64(offset, length, &end) || end > fsize) {
        st = TDM_ERR(TDM_ERR_INVALID_MODEL,
                     "tensor '%s': external data range [%lld, +%lld) runs past the end of '%s' "
                     "(%lld bytes)", tensor, (long long)offset, (long long)length, location,
                     (long long)fsize);
        goto out;
    }
    if ((uint64_t)length != expect) {
        st = TDM_ERR(TDM_ERR_INVALID_MODEL,
                     "tensor '%s': external data length %lld does not match the %zu bytes its "
                     "shape and type need", tensor, (long long)length, expect);
        goto out;
    }
    *fd_out = fd;
    *length_out = length;
    return NULL;
out:
    close(fd);
    return st;
}

tdm_status *tdm_onnx_read_external(const char *base_dir, const char *location, int64_t offset,
                                   int64_t length, void *dst, size_t expect, const char *tensor) {
    int fd = -1;
    TDM_TRY(open_external(base_dir, location, offset, length, expect, tensor, &fd, &length));
    tdm_status *st = NULL;
    int64_t end = offset + length;
    if (length == 0 || !dst) goto out; /* dst NULL: checks only */
    {
        long page = sysconf(_SC_PAGESIZE);
        int64_t aligned = offset - offset % page;
        size_t map_len = (size_t)(end - aligned);
        void *m = mmap(NULL, map_len, PROT_READ, MAP_PRIVATE, fd, aligned);
        if (m == MAP_FAILED) {
            st = TDM_ERR(TDM_ERR_IO, "tensor '%s': cannot map '%s': %s", tensor, location,
                         strerror(errno));
            goto out;
        }
        memcpy(dst, (char *)m + (offset - aligned), (size_t)length);
        munmap(m, map_len);
    }
out:
    close(fd);
    return st;
}

tdm_status *tdm_onnx_map_external(const char *base_dir, const char *location, int64_t offset,
                                  int64_t length, tdm_dtype dtype, int rank, const int64_t *dims,
                                  size_t expect, const char *tensor, const tdm_allocator *a,
                                  tdm_tensor **out) {
    *out = NULL;
    int fd = -1;
    TDM_TRY(open_external(base_dir, location, offset, length, expect, tensor, &fd, &length));
    tdm_status *st = NULL;
    if (length > 0 && offset % TDM_ALIGN == 0)
        st = tdm_tensor_new_mapped(a, dtype, rank, dims, fd, offset, out);
    close(fd);
    return st ? tdm_status_wrap(st, "tensor '%s': external data '%s': ", tensor, location) : NULL;
}

#include "core/tensor.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "core/half.h"
#include "core/status.h"

static const size_t elem_sizes[TDM_DTYPE_COUNT] = {
    [TDM_FLOAT] = 4,  [TDM_UINT8] = 1,      [TDM_INT8] = 1,        [TDM_UINT16] = 2,
    [TDM_INT16] = 2,  [TDM_INT32] = 4,      [TDM_INT64] = 8,       [TDM_STRING] = sizeof(char *),
    [TDM_BOOL] = 1,   [TDM_FLOAT16] = 2,    [TDM_DOUBLE] = 8,      [TDM_UINT32] = 4,
    [TDM_UINT64] = 8, [TDM_COMPLEX64] = 8,  [TDM_COMPLEX128] = 16, [TDM_BFLOAT16] = 2,
};

static const char *const dtype_names[TDM_DTYPE_COUNT] = {
    [TDM_UNDEFINED] = "undefined", [TDM_FLOAT] = "float32",     [TDM_UINT8] = "uint8",
    [TDM_INT8] = "int8",           [TDM_UINT16] = "uint16",     [TDM_INT16] = "int16",
    [TDM_INT32] = "int32",         [TDM_INT64] = "int64",       [TDM_STRING] = "string",
    [TDM_BOOL] = "bool",           [TDM_FLOAT16] = "float16",   [TDM_DOUBLE] = "float64",
    [TDM_UINT32] = "uint32",       [TDM_UINT64] = "uint64",     [TDM_COMPLEX64] = "complex64",
    [TDM_COMPLEX128] = "complex128", [TDM_BFLOAT16] = "bfloat16",
};

size_t tdm_dtype_elem_size(tdm_dtype t) {
    if (tdm_dtype_is_container(t)) return sizeof(tdm_tensor *);
    return (unsigned)t < TDM_DTYPE_COUNT ? elem_sizes[t] : 0;
}
bool tdm_dtype_is_container(tdm_dtype t) {
    return t == TDM_SEQUENCE || t == TDM_MAP || t == TDM_OPTIONAL;
}
bool tdm_dtype_has_ptrs(tdm_dtype t) { return t == TDM_STRING || tdm_dtype_is_container(t); }

tdm_status *tdm_container_new(const tdm_allocator *a, tdm_dtype kind, int64_t n, tdm_tensor **out) {
    if (!tdm_dtype_is_container(kind))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "not a sequence, map or optional kind");
    return tdm_tensor_new(a, kind, 1, &n, out);
}
size_t tdm_dtype_size(tdm_dtype t) { return tdm_dtype_elem_size(t); }
const char *tdm_dtype_name(tdm_dtype t) {
    if (t == TDM_SEQUENCE) return "sequence";
    if (t == TDM_MAP) return "map";
    if (t == TDM_OPTIONAL) return "optional";
    return (unsigned)t < TDM_DTYPE_COUNT && dtype_names[t] ? dtype_names[t] : "unknown";
}
bool tdm_dtype_is_float(tdm_dtype t) {
    return t == TDM_FLOAT || t == TDM_DOUBLE || t == TDM_FLOAT16 || t == TDM_BFLOAT16;
}
bool tdm_dtype_is_signed_int(tdm_dtype t) {
    return t == TDM_INT8 || t == TDM_INT16 || t == TDM_INT32 || t == TDM_INT64;
}
bool tdm_dtype_is_unsigned_int(tdm_dtype t) {
    return t == TDM_UINT8 || t == TDM_UINT16 || t == TDM_UINT32 || t == TDM_UINT64;
}

char *tdm_shape_str(int rank, const int64_t *dims, char *buf, size_t size) {
    size_t pos = 0;
    if (size == 0) return buf;
    buf[0] = 0;
    pos += (size_t)snprintf(buf + pos, size - pos, "[");
    for (int i = 0; i < rank && pos < size; i++)
        pos += (size_t)snprintf(buf + pos, size - pos, i ? ",%lld" : "%lld", (long long)dims[i]);
    if (pos < size) snprintf(buf + pos, size - pos, "]");
    return buf;
}

tdm_status *tdm_shape_count(int rank, const int64_t *dims, tdm_dtype dtype, const char *what,
                            int64_t *count, size_t *nbytes) {
    if (rank < 0 || rank > TDM_MAX_RANK)
        return TDM_ERR(TDM_ERR_LIMIT, "%s: rank %d is outside 0..%d", what, rank, TDM_MAX_RANK);
    size_t es = tdm_dtype_elem_size(dtype);
    if (es == 0) return TDM_ERR(TDM_ERR_UNSUPPORTED, "%s: unsupported data type %d", what, (int)dtype);
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s: dimension %d is negative (%lld)", what, i,
                           (long long)dims[i]);
        if (!tdm_mul_i64(n, dims[i], &n))
            return TDM_ERR(TDM_ERR_LIMIT, "%s: element count overflows", what);
    }
    int64_t bytes;
    if (!tdm_mul_i64(n, (int64_t)es, &bytes) || bytes > TDM_MAX_TENSOR_BYTES)
        return TDM_ERR(TDM_ERR_LIMIT, "%s: %lld elements of %s exceed the tensor size limit", what,
                       (long long)n, tdm_dtype_name(dtype));
    *count = n;
    *nbytes = (size_t)bytes;
    return NULL;
}

static tdm_status *tensor_header(const tdm_allocator *a, tdm_dtype dtype, int rank,
                                 const int64_t *dims, tdm_tensor **out) {
    int64_t count = 0;
    size_t nbytes = 0;
    TDM_TRY(tdm_shape_count(rank, dims, dtype, "tensor", &count, &nbytes));
    tdm_tensor *t = tdm_calloc(a, 1, sizeof *t);
    if (!t) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory allocating a tensor");
    t->dtype = dtype;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
    t->count = count;
    t->nbytes = nbytes;
    t->alloc = a;
    *out = t;
    return NULL;
}

/* A tensor that owns its buffer: zeroed (calloc) or left as allocated. */
static tdm_status *tensor_owned(const tdm_allocator *a, tdm_dtype dtype, int rank,
                                const int64_t *dims, bool zero, tdm_tensor **out) {
    tdm_tensor *t = NULL;
    TDM_TRY(tensor_header(a, dtype, rank, dims, &t));
    size_t n = t->nbytes ? t->nbytes : 1;
    t->data = zero ? tdm_calloc(a, 1, n) : tdm_alloc(a, n);
    if (!t->data) {
        n = t->nbytes;
        tdm_free(a, t);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory allocating %zu bytes for a tensor", n);
    }
    t->owns_data = true;
    *out = t;
    return NULL;
}

tdm_status *tdm_tensor_new(const tdm_allocator *a, tdm_dtype dtype, int rank,
                           const int64_t *dims, tdm_tensor **out) {
    return tensor_owned(a, dtype, rank, dims, true, out);
}

tdm_status *tdm_tensor_new_uninit(const tdm_allocator *a, tdm_dtype dtype, int rank,
                                  const int64_t *dims, tdm_tensor **out) {
    /* pointer elements (strings) must start NULL */
    return tensor_owned(a, dtype, rank, dims, tdm_dtype_has_ptrs(dtype), out);
}

tdm_status *tdm_tensor_new_view(const tdm_allocator *a, tdm_dtype dtype, int rank,
                                const int64_t *dims, void *data, tdm_tensor **out) {
    tdm_tensor *t = NULL;
    TDM_TRY(tensor_header(a, dtype, rank, dims, &t));
    t->data = data;
    t->owns_data = false;
    *out = t;
    return NULL;
}

tdm_status *tdm_tensor_clone(const tdm_allocator *a, const tdm_tensor *src, tdm_tensor **out) {
    tdm_tensor *t = NULL;
    TDM_TRY(tdm_tensor_new(a, src->dtype, src->rank, src->dims, &t));
    if (src->dtype == TDM_STRING) {
        char **d = t->data;
        char *const *s = src->data;
        for (int64_t i = 0; i < src->count; i++) {
            if (!s[i]) continue;
            d[i] = tdm_strdup(a, s[i]);
            if (!d[i]) {
                tdm_tensor_destroy(t);
                return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory copying strings");
            }
        }
    } else if (tdm_dtype_is_container(src->dtype)) {
        tdm_tensor **d = t->data;
        tdm_tensor *const *s = src->data;
        for (int64_t i = 0; i < src->count; i++) {
            if (!s[i]) continue;
            tdm_status *st = tdm_tensor_clone(a, s[i], &d[i]);
            if (st) {
                tdm_tensor_destroy(t);
                return st;
            }
        }
    } else if (src->nbytes) {
        memcpy(t->data, src->data, src->nbytes);
    }
    *out = t;
    return NULL;
}

tdm_status *tdm_tensor_reshape_view(const tdm_tensor *src, int rank, const int64_t *dims,
                                    tdm_tensor **out) {
    tdm_tensor *t = NULL;
    TDM_TRY(tensor_header(src->alloc, src->dtype, rank, dims, &t));
    if (t->count != src->count) {
        tdm_free(src->alloc, t);
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "reshape view: element counts differ");
    }
    t->data = src->data;
    *out = t;
    return NULL;
}

/* ---- shared data -----------------------------------------------------------------------
 * The first header as it was before its first share (its data, ownership and release) is kept
 * in the block; the last header to go frees the data through it. */
struct tdm_tensor_shared {
    atomic_size_t refs;
    tdm_tensor owner;
};

/* The marker of a shared tensor's `release` (never called: tdm_tensor_destroy unshares). */
static void shared_marker(void *device, void *data) { (void)device, (void)data; }

bool tdm_tensor_is_shared(const tdm_tensor *t) { return t && t->release == shared_marker; }

/* What owns t's data: the block's first header for a shared tensor, else t. */
static const tdm_tensor *data_owner(const tdm_tensor *t) {
    return tdm_tensor_is_shared(t) ? &t->shared->owner : t;
}

tdm_status *tdm_tensor_share(tdm_tensor *t, tdm_tensor **out) {
    if (!t || !out || t->pooled)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_tensor_share: %s",
                       t && out ? "a pooled tensor cannot be shared" : "NULL argument");
    tdm_tensor *h = tdm_alloc(t->alloc, sizeof *h);
    if (!h) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory sharing a tensor");
    if (!tdm_tensor_is_shared(t)) {
        struct tdm_tensor_shared *s = tdm_alloc(t->alloc, sizeof *s);
        if (!s) {
            tdm_free(t->alloc, h);
            return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory sharing a tensor");
        }
        s->owner = *t;
        atomic_init(&s->refs, 1);
        t->owns_data = false;
        t->release = shared_marker;
        t->shared = s;
    }
    atomic_fetch_add(&t->shared->refs, 1);
    *h = *t;
    *out = h;
    return NULL;
}

/* Frees what t owns of its data (not the header). */
static void release_data(const tdm_tensor *t) {
    if (tdm_tensor_is_shared(t)) {
        struct tdm_tensor_shared *s = t->shared;
        if (atomic_fetch_sub(&s->refs, 1) != 1) return;
        release_data(&s->owner);
        tdm_free(s->owner.alloc, s);
    } else if (t->release) {
        t->release(t->device, t->data);
    } else if (t->owns_data) {
        if (t->dtype == TDM_STRING && t->data) {
            char **s = t->data;
            for (int64_t i = 0; i < t->count; i++) tdm_free(t->alloc, s[i]);
        } else if (tdm_dtype_is_container(t->dtype) && t->data) {
            tdm_tensor **s = t->data;
            for (int64_t i = 0; i < t->count; i++) tdm_tensor_destroy(s[i]);
        }
        tdm_free(t->alloc, t->data);
    }
}

void tdm_tensor_destroy(tdm_tensor *t) {
    if (!t || t->pooled) return;
    release_data(t);
    tdm_free(t->alloc, t);
}

double tdm_tensor_get_f64(const tdm_tensor *t, int64_t i) {
    const void *d = t->data;
    switch (t->dtype) {
    case TDM_FLOAT: return ((const float *)d)[i];
    case TDM_DOUBLE: return ((const double *)d)[i];
    case TDM_FLOAT16: return tdm_f16_to_f32(((const uint16_t *)d)[i]);
    case TDM_BFLOAT16: return tdm_bf16_to_f32(((const uint16_t *)d)[i]);
    case TDM_INT8: return ((const int8_t *)d)[i];
    case TDM_UINT8: return ((const uint8_t *)d)[i];
    case TDM_BOOL: return ((const uint8_t *)d)[i] != 0;
    case TDM_INT16: return ((const int16_t *)d)[i];
    case TDM_UINT16: return ((const uint16_t *)d)[i];
    case TDM_INT32: return ((const int32_t *)d)[i];
    case TDM_UINT32: return ((const uint32_t *)d)[i];
    case TDM_INT64: return (double)((const int64_t *)d)[i];
    case TDM_UINT64: return (double)((const uint64_t *)d)[i];
    default: return 0;
    }
}

int64_t tdm_tensor_get_i64(const tdm_tensor *t, int64_t i) {
    const void *d = t->data;
    switch (t->dtype) {
    case TDM_INT64: return ((const int64_t *)d)[i];
    case TDM_INT32: return ((const int32_t *)d)[i];
    case TDM_UINT64: return (int64_t)((const uint64_t *)d)[i];
    case TDM_INT8: return ((const int8_t *)d)[i];
    case TDM_UINT8: return ((const uint8_t *)d)[i];
    case TDM_BOOL: return ((const uint8_t *)d)[i] != 0;
    case TDM_INT16: return ((const int16_t *)d)[i];
    case TDM_UINT16: return ((const uint16_t *)d)[i];
    case TDM_UINT32: return ((const uint32_t *)d)[i];
    default: {
        double v = tdm_tensor_get_f64(t, i);
        if (v != v) return 0;
        if (v >= 9.2e18) return INT64_MAX;
        if (v <= -9.2e18) return INT64_MIN;
        return (int64_t)v;
    }
    }
}

/* ---- tensors over mapped files --------------------------------------------------------
 * The mapping is laid out as one header page (anonymous: the mapping's total length) followed
 * by the file pages; data points into the file pages at the offset's distance from a page
 * boundary, so the header is always the page before the one data starts in. */
#define MAP_MAGIC 0x746d6170u /* "tmap" */

typedef struct map_header {
    uint32_t magic;
    size_t total;
} map_header;

static size_t page_size(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

static void map_release(void *device, void *data) {
    (void)device;
    size_t page = page_size();
    char *base = (char *)((uintptr_t)data - (uintptr_t)data % page) - page;
    const map_header *h = (const map_header *)base;
    if (h->magic == MAP_MAGIC) munmap(base, h->total);
}

bool tdm_tensor_is_mapped(const tdm_tensor *t) {
    return t && data_owner(t)->release == map_release;
}

/* tdm_tensors_share_huge's mapping: a header at its start (the bytes mapped and the tensors
 * still in it), and before each tensor's data a tag pointing back at the header. */
#define SHARE_MAGIC 0x74687567u /* "thug" */
#define SHARE_HUGE ((size_t)2 << 20)
typedef struct share_header {
    uint32_t magic;
    size_t total;
    atomic_size_t refs;
} share_header;
typedef struct share_tag {
    uint32_t magic;
    share_header *h;
} share_tag;
_Static_assert(sizeof(share_header) <= TDM_ALIGN && sizeof(share_tag) <= TDM_ALIGN,
               "share_huge headers fit one alignment unit");

static void share_release(void *device, void *data) {
    (void)device;
    const share_tag *tag = (const share_tag *)((char *)data - TDM_ALIGN);
    share_header *h = tag->magic == SHARE_MAGIC ? tag->h : NULL;
    if (h && atomic_fetch_sub(&h->refs, 1) == 1) munmap(h, h->total);
}

bool tdm_tensor_is_huge_shared(const tdm_tensor *t) {
    return t && data_owner(t)->release == share_release;
}

#if defined(__linux__) && defined(MADV_HUGEPAGE)
static bool share_movable(const tdm_tensor *t) {
    return t && t->owns_data && !t->release && !t->device && !t->pooled && t->data &&
           t->nbytes > 0 && !tdm_dtype_has_ptrs(t->dtype);
}
#endif

void tdm_tensors_share_huge(tdm_tensor *const *ts, size_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    size_t total = TDM_ALIGN; /* the header */
    for (size_t i = 0; i < n; i++)
        if (share_movable(ts[i])) {
            size_t sz = (ts[i]->nbytes + TDM_ALIGN - 1) / TDM_ALIGN * TDM_ALIGN;
            if (sz > SIZE_MAX / 2 - total) return;
            total += TDM_ALIGN + sz; /* the tag, the data */
        }
    if (total < SHARE_HUGE) return;
    size_t page = page_size();
    total = (total + page - 1) / page * page;
    /* reserve a huge page more, so that the mapping can start on a 2 MiB boundary */
    char *raw = mmap(NULL, total + SHARE_HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (raw == MAP_FAILED) return;
    char *base = (char *)(((uintptr_t)raw + SHARE_HUGE - 1) & ~(uintptr_t)(SHARE_HUGE - 1));
    if (base > raw) munmap(raw, (size_t)(base - raw));
    if (raw + SHARE_HUGE > base) munmap(base + total, (size_t)(raw + SHARE_HUGE - base));
    (void)madvise(base, total, MADV_HUGEPAGE); /* before the first write: huge faults */
    share_header *h = (share_header *)base;
    h->magic = SHARE_MAGIC;
    h->total = total;
    atomic_init(&h->refs, 1); /* held while filling, so the last move cannot free it */
    size_t off = TDM_ALIGN;
    for (size_t i = 0; i < n; i++) {
        tdm_tensor *t = ts[i];
        if (!share_movable(t)) continue;
        share_tag *tag = (share_tag *)(base + off);
        tag->magic = SHARE_MAGIC;
        tag->h = h;
        char *d = base + off + TDM_ALIGN;
        memcpy(d, t->data, t->nbytes);
        tdm_free(t->alloc, t->data);
        t->data = d;
        t->release = share_release;
        atomic_fetch_add(&h->refs, 1);
        off += TDM_ALIGN + (t->nbytes + TDM_ALIGN - 1) / TDM_ALIGN * TDM_ALIGN;
    }
    if (atomic_fetch_sub(&h->refs, 1) == 1) munmap(base, total); /* the filling's reference */
#else
    (void)ts, (void)n;
#endif
}

tdm_status *tdm_tensor_new_mapped(const tdm_allocator *a, tdm_dtype dtype, int rank,
                                  const int64_t *dims, int fd, int64_t offset, tdm_tensor **out) {
    if (offset < 0 || offset % TDM_ALIGN != 0 || dtype == TDM_STRING)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "a mapped tensor needs an offset aligned to %d bytes",
                       TDM_ALIGN);
    tdm_tensor *t = NULL;
    TDM_TRY(tensor_header(a, dtype, rank, dims, &t));
    size_t page = page_size();
    int64_t aligned = offset - offset % (int64_t)page;
    size_t delta = (size_t)(offset - aligned), map_len = delta + (t->nbytes ? t->nbytes : 1);
    size_t total = page + (map_len + page - 1) / page * page;
    char *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        tdm_free(a, t);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "cannot reserve %zu bytes of address space", total);
    }
    /* private and writable: a pass that edits a weight in place gets its own pages */
    if (mmap(base + page, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd,
             (off_t)aligned) == MAP_FAILED) {
        int e = errno;
        munmap(base, total);
        tdm_free(a, t);
        return TDM_ERR(TDM_ERR_IO, "cannot map %zu bytes at offset %lld: %s", map_len,
                       (long long)aligned, strerror(e));
    }
    map_header *h = (map_header *)base;
    h->magic = MAP_MAGIC;
    h->total = total;
    t->data = base + page + delta;
    t->release = map_release;
    t->owns_data = false;
    *out = t;
    return NULL;
}

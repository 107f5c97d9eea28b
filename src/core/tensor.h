/* Tensors: dtype, shape and host data. The struct is internal; the public API sees an
 * opaque handle. */
#ifndef TDM_CORE_TENSOR_H
#define TDM_CORE_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem/tandem.h"

struct tdm_tensor {
    tdm_dtype dtype;
    int rank;
    int64_t dims[TDM_MAX_RANK];
    int64_t count;   /* element count (product of dims; 1 for a scalar) */
    size_t nbytes;   /* count * element size */
    void *data;      /* host data (char ** for STRING) */
    const tdm_allocator *alloc;
    bool owns_data;  /* data was allocated by tandem and is freed with the tensor */
    bool pooled;     /* the header belongs to a memory plan: destroy leaves it alone */
    /* Tensors in a device's memory: `device` is the owning tdm_device (NULL = host memory)
     * and `release` frees `data` (a device buffer handle) when the tensor is destroyed. */
    void *device;
    void (*release)(void *device, void *data);
    /* Data shared by several headers (tdm_tensor_share): read only while `release` marks the
     * tensor shared, so a struct copy that clears `release` (a view) leaves it alone. */
    struct tdm_tensor_shared *shared;
};

/* Bytes per element (0 for UNDEFINED). */
size_t tdm_dtype_elem_size(tdm_dtype t);
/* Sequences, maps and optionals (TDM_SEQUENCE, TDM_MAP, TDM_OPTIONAL) are tensors of rank 1
 * whose elements are owned tdm_tensor pointers (destroyed and cloned with the container):
 *   sequence: dims[0] items, each a tensor or a container (all of one type);
 *   map:      dims[0] == 2: [0] the keys (1-D int64 or string), [1] the values (1-D, as many);
 *   optional: dims[0] == 0 (none) or 1 (the element).
 * Like strings they live in host memory only and are never pooled by a memory plan. */
bool tdm_dtype_is_container(tdm_dtype t);
/* Elements are pointers the tensor owns (strings, containers): never copied bytewise. */
bool tdm_dtype_has_ptrs(tdm_dtype t);
/* New container of `kind` with n empty (NULL) slots. */
tdm_status *tdm_container_new(const tdm_allocator *a, tdm_dtype kind, int64_t n, tdm_tensor **out);
bool tdm_dtype_is_float(tdm_dtype t);   /* float, double, float16, bfloat16 */
bool tdm_dtype_is_signed_int(tdm_dtype t);
bool tdm_dtype_is_unsigned_int(tdm_dtype t);

/* Element count of a shape, checked against overflow and TDM_MAX_TENSOR_BYTES; negative dims
 * are rejected. Returns a status naming `what` on failure. */
tdm_status *tdm_shape_count(int rank, const int64_t *dims, tdm_dtype dtype, const char *what,
                            int64_t *count, size_t *nbytes);

/* New tensor with zeroed data owned by the tensor. */
tdm_status *tdm_tensor_new(const tdm_allocator *a, tdm_dtype dtype, int rank,
                           const int64_t *dims, tdm_tensor **out);
/* tdm_tensor_new without zeroing the data, for a kernel that writes all of it (a dtype that
 * holds pointers, strings or containers, is zeroed all the same). */
tdm_status *tdm_tensor_new_uninit(const tdm_allocator *a, tdm_dtype dtype, int rank,
                                  const int64_t *dims, tdm_tensor **out);
/* Tensor header that points at `data` without owning it. */
tdm_status *tdm_tensor_new_view(const tdm_allocator *a, tdm_dtype dtype, int rank,
                                const int64_t *dims, void *data, tdm_tensor **out);
/* Deep copy (strings too). */
tdm_status *tdm_tensor_clone(const tdm_allocator *a, const tdm_tensor *src, tdm_tensor **out);
/* A second header over t's data, sharing it: the data (with whatever t owned: a buffer, a
 * mapping, a device buffer) is freed, as t would have freed it, when the last of the headers
 * sharing it is destroyed, in any order and from any thread (the count is atomic). Neither
 * header owns the data alone afterwards (owns_data false: no header may edit or move it).
 * t itself is changed on its first share (not thread-safe for t). Pooled tensors cannot be
 * shared (TDM_ERR_INVALID_ARGUMENT); *out untouched on failure. */
tdm_status *tdm_tensor_share(tdm_tensor *t, tdm_tensor **out);
/* Whether t's data is shared with another header (NULL-safe). */
bool tdm_tensor_is_shared(const tdm_tensor *t);
/* Same data, new shape (element count must match): a view that does not own the data. */
tdm_status *tdm_tensor_reshape_view(const tdm_tensor *src, int rank, const int64_t *dims,
                                    tdm_tensor **out);
void tdm_tensor_destroy(tdm_tensor *t);
/* A host tensor over the bytes of file `fd` from `offset` (a multiple of TDM_ALIGN), mapped
 * private (pages read from the file on first use, never copied whole into memory; writes
 * stay private to the process). The mapping goes with the tensor; fd may be closed after. */
tdm_status *tdm_tensor_new_mapped(const tdm_allocator *a, tdm_dtype dtype, int rank,
                                  const int64_t *dims, int fd, int64_t offset, tdm_tensor **out);
/* Whether t was made by tdm_tensor_new_mapped (NULL-safe). */
bool tdm_tensor_is_mapped(const tdm_tensor *t);
/* Moves the data of the host tensors ts[0..n) (owning plain bytes: no strings, containers,
 * device or mapped data; others are left as they are) into one anonymous mapping advised onto
 * transparent huge pages, one after another at 64-byte aligned offsets: weights a step streams
 * one after another then share 2 MiB pages, however small each is. The old buffers are freed
 * as each is copied (the peak holds one tensor twice); the mapping goes when the last of its
 * tensors is destroyed. Nothing moves when the bytes are less than one huge page or the
 * mapping fails (a hint, as tdm_advise_huge). Not thread-safe for the tensors themselves. */
void tdm_tensors_share_huge(tdm_tensor *const *ts, size_t n);
/* Whether t's data lives in such a mapping (NULL-safe). */
bool tdm_tensor_is_huge_shared(const tdm_tensor *t);

/* Reads element i of any numeric/bool tensor as double / int64 (for shape-like inputs). */
double tdm_tensor_get_f64(const tdm_tensor *t, int64_t i);
int64_t tdm_tensor_get_i64(const tdm_tensor *t, int64_t i);

/* Shape printing for messages: writes "[1,3,224,224]" into buf. Returns buf. */
char *tdm_shape_str(int rank, const int64_t *dims, char *buf, size_t size);

#endif

/* Host memory through the environment's allocator hook. */
#ifndef TDM_CORE_ALLOC_H
#define TDM_CORE_ALLOC_H

#include <stddef.h>

#include "tandem/tandem.h"

#define TDM_ALIGN 64

/* A NULL allocator means libc. All returned memory is 64-byte aligned. */
void *tdm_alloc(const tdm_allocator *a, size_t size);
void *tdm_calloc(const tdm_allocator *a, size_t n, size_t size);
void tdm_free(const tdm_allocator *a, void *p);
char *tdm_strdup(const tdm_allocator *a, const char *s);
char *tdm_strndup(const tdm_allocator *a, const char *s, size_t n);
/* A hint that [p, p + n) be backed by transparent huge pages (madvise(MADV_HUGEPAGE) over the
 * whole 2 MiB pages inside it; nothing where there are none or the system lacks the call).
 * Given before the memory is first written, the pages it covers are faulted in as huge pages
 * in the kernel's "madvise" mode: a matrix-vector product streaming a large weight then takes
 * one TLB entry per 2 MiB instead of 512. */
void tdm_advise_huge(void *p, size_t n);
/* A block of n bytes (n > 0) on fresh pages of its own, 2 MiB aligned, advised as above before
 * anything touches it, so that it faults in as huge pages where the system gives them (memory
 * from the allocator may come back from pages already faulted in at 4 KiB: no hint turns them
 * into huge ones). Zero-filled. NULL when the system refuses; systems without mmap get
 * tdm_alloc's memory (zeroed). Given back by tdm_unmap_huge with the same n. */
void *tdm_map_huge(size_t n);
void tdm_unmap_huge(void *p, size_t n);
/* Grows an array of `elem` sized items to hold at least `need`; doubles. Returns 0 or -1. */
int tdm_grow(const tdm_allocator *a, void **arr, size_t *cap, size_t need, size_t elem);

#endif

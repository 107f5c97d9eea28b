#include "core/alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "core/checked.h"

#define TDM_HUGE_PAGE ((size_t)2 << 20) /* a transparent huge page (x86-64 Linux) */

void *tdm_alloc(const tdm_allocator *a, size_t size) {
    if (size == 0) size = 1;
    if (a && a->alloc) return a->alloc(a->user, size, TDM_ALIGN);
    size_t rounded;
    if (!tdm_add_size(size, TDM_ALIGN - 1, &rounded)) return NULL;
    rounded &= ~(size_t)(TDM_ALIGN - 1);
    return aligned_alloc(TDM_ALIGN, rounded);
}

void *tdm_calloc(const tdm_allocator *a, size_t n, size_t size) {
    size_t total;
    if (!tdm_mul_size(n, size, &total)) return NULL;
    void *p = tdm_alloc(a, total);
    if (p) memset(p, 0, total ? total : 1);
    return p;
}

void tdm_advise_huge(void *p, size_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t huge = TDM_HUGE_PAGE;
    uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1), e = ((uintptr_t)p + n) & ~(huge - 1);
    if (p && (uintptr_t)p + n > (uintptr_t)p && e > a)
        (void)madvise((void *)a, e - a, MADV_HUGEPAGE); /* a hint: 4 KiB pages otherwise */
#else
    (void)p, (void)n;
#endif
}

void *tdm_map_huge(size_t n) {
#if defined(__linux__)
    const size_t huge = TDM_HUGE_PAGE;
    size_t span;
    if (n == 0 || !tdm_add_size(n, huge - 1, &span)) return NULL;
    span &= ~(huge - 1);
    if (span > SIZE_MAX - huge) return NULL;
    /* a huge page more, so that the mapping can start on a 2 MiB boundary */
    char *raw = mmap(NULL, span + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    char *base = (char *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
    if (base > raw) munmap(raw, (size_t)(base - raw));
    munmap(base + span, (size_t)(raw + huge - base)); /* the tail: 1 .. huge bytes */
    tdm_advise_huge(base, span);
    return base;
#else
    return tdm_calloc(NULL, 1, n);
#endif
}

void tdm_unmap_huge(void *p, size_t n) {
    if (!p) return;
#if defined(__linux__)
    munmap(p, (n + TDM_HUGE_PAGE - 1) & ~(TDM_HUGE_PAGE - 1));
#else
    (void)n;
    tdm_free(NULL, p);
#endif
}

void tdm_free(const tdm_allocator *a, void *p) {
    if (!p) return;
    if (a && a->free) a->free(a->user, p);
    else free(p);
}

char *tdm_strndup(const tdm_allocator *a, const char *s, size_t n) {
    char *d = tdm_alloc(a, n + 1);
    if (!d) return NULL;
    if (n) memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *tdm_strdup(const tdm_allocator *a, const char *s) {
    return tdm_strndup(a, s, strlen(s));
}

int tdm_grow(const tdm_allocator *a, void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : 8;
    while (ncap < need) {
        if (!tdm_mul_size(ncap, 2, &ncap)) return -1;
    }
    size_t bytes;
    if (!tdm_mul_size(ncap, elem, &bytes)) return -1;
    void *n = tdm_alloc(a, bytes);
    if (!n) return -1;
    if (*arr) {
        memcpy(n, *arr, *cap * elem);
        tdm_free(a, *arr);
    }
    *arr = n;
    *cap = ncap;
    return 0;
}

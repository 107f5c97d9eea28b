/* Test helper: an allocator hook (tdm_env_options.allocator) that counts the blocks it hands
 * out: `live` (not yet freed) and `total`, and the bytes asked for in all (`bytes`). A test
 * checks live == 0 after freeing everything.
 * Use: counter c = {0}; o.allocator = (tdm_allocator){c_alloc, c_free, &c}. */
#ifndef TDM_TEST_COUNTING_ALLOC_H
#define TDM_TEST_COUNTING_ALLOC_H

#include <stdatomic.h>
#include <stdlib.h>

typedef struct counter {
    atomic_long live, total, bytes;
} counter;

static void *c_alloc(void *user, size_t size, size_t align) {
    counter *c = user;
    if (align < sizeof(void *)) align = sizeof(void *);
    void *p = NULL;
    if (posix_memalign(&p, align, size ? size : 1) != 0) return NULL;
    atomic_fetch_add(&c->live, 1);
    atomic_fetch_add(&c->total, 1);
    atomic_fetch_add(&c->bytes, (long)size);
    return p;
}

static void c_free(void *user, void *p) {
    counter *c = user;
    if (!p) return;
    atomic_fetch_sub(&c->live, 1);
    free(p);
}

#endif

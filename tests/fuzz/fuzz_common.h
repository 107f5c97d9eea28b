/* Shared by the fuzz targets: an allocator hook with explicit limits, a small deterministic
 * random generator, and the environment every input runs in.
 *
 * The allocator hook refuses single allocations over FZ_MAX_ALLOC and keeps the live total
 * under FZ_MAX_LIVE: a model that declares a 100 GB tensor must come back as an
 * out-of-memory or limit status, never as an allocation the fuzzer's RSS limit trips over.
 * Memory that tandem allocates without the hook still counts against libFuzzer's
 * -malloc_limit_mb and is reported as a crash: every host allocation must go through it. */
#ifndef TDM_FUZZ_COMMON_H
#define TDM_FUZZ_COMMON_H

#include <malloc.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tandem/tandem.h"
#include "core/hash.h"

#define FZ_MAX_ALLOC ((size_t)256 << 20)
#define FZ_MAX_LIVE ((size_t)768 << 20)

typedef struct fz_alloc {
    atomic_size_t live_bytes;
    atomic_long live_blocks;
} fz_alloc;

/* Exact sizes (posix_memalign, no rounding) so that ASan sees one byte past the end. The
 * size is taken back with malloc_usable_size, which under ASan is the requested size. */
static void *fz_alloc_fn(void *user, size_t size, size_t align) {
    fz_alloc *fa = user;
    if (align < sizeof(void *)) align = sizeof(void *);
    if (size > FZ_MAX_ALLOC) return NULL;
    if (atomic_load(&fa->live_bytes) + size > FZ_MAX_LIVE) return NULL;
    void *p = NULL;
    if (posix_memalign(&p, align, size ? size : 1) != 0) return NULL;
    atomic_fetch_add(&fa->live_bytes, malloc_usable_size(p));
    atomic_fetch_add(&fa->live_blocks, 1);
    return p;
}

static void fz_free_fn(void *user, void *ptr) {
    fz_alloc *fa = user;
    if (!ptr) return;
    atomic_fetch_sub(&fa->live_bytes, malloc_usable_size(ptr));
    atomic_fetch_sub(&fa->live_blocks, 1);
    free(ptr);
}

/* A fresh environment on the limited allocator; one intra-op thread (reproducible). */
static tdm_env *fz_env(fz_alloc *fa) {
    tdm_env_options o;
    memset(&o, 0, sizeof o);
    o.api_version = TDM_API_VERSION;
    o.log_level = TDM_LOG_ERROR;
    o.allocator.alloc = fz_alloc_fn;
    o.allocator.free = fz_free_fn;
    o.allocator.user = fa;
    o.threads = 1;
    tdm_env *env = NULL;
    tdm_status *st = tdm_env_create(&o, &env);
    if (st) {
        fprintf(stderr, "fuzz: tdm_env_create: %s\n", tdm_status_message(st));
        abort();
    }
    return env;
}

/* A file's bytes (NUL-terminated, *len without it) read once at start-up; aborts when
 * missing */
static char *fz_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz: cannot open %s\n", path);
        abort();
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (!p || fread(p, 1, (size_t)n, f) != (size_t)n) abort();
    p[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return p;
}

static void fz_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(data, 1, len, f) != len)) abort();
    fclose(f);
}

/* After an input: every block the library took through the hook is back (base: the live
 * blocks once the environment was made) */
static void fz_check_leaks(fz_alloc *fa, long base) {
    long live = atomic_load(&fa->live_blocks);
    if (live != base) {
        fprintf(stderr, "fuzz: %ld blocks leaked through the allocator hook\n", live - base);
        abort();
    }
}

/* Every status the library returns must carry a known code and a non-empty message. */
static void fz_check_status(tdm_status *st) {
    if (!st) return;
    tdm_code c = tdm_status_code(st);
    const char *m = tdm_status_message(st);
    if (c <= TDM_OK || c > TDM_ERR_INTERNAL || !m || !m[0]) {
        fprintf(stderr, "fuzz: malformed status (code %d)\n", (int)c);
        abort();
    }
    if (getenv("TDM_FUZZ_VERBOSE")) fprintf(stderr, "[%s] %s\n", tdm_code_name(c), m);
    tdm_status_free(st);
}

/* Fills the next 64 KiB of stack with 0x5A before a call into tandem, so that a read of
 * uninitialized stack memory (a value_info slot past n_in, say) sees a huge rank, an
 * invalid bool, a wild pointer, and a sanitizer reports it every time instead of only when
 * the stack happens to hold garbage. */
__attribute__((noinline, unused)) static void fz_dirty_stack(void) {
    volatile unsigned char pad[65536];
    memset((void *)pad, 0x5A, sizeof pad);
    __asm__ volatile("" : : "r"(pad) : "memory");
}

/* splitmix64 */
typedef struct fz_rng {
    uint64_t s;
} fz_rng;

static inline uint64_t fz_next(fz_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t fz_below(fz_rng *r, uint64_t n) { return n ? fz_next(r) % n : 0; }

static inline uint64_t fz_hash(const uint8_t *data, size_t size) {
    return tdm_hash_bytes(TDM_HASH_INIT, data, size);
}

#endif

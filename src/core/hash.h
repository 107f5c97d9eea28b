/* FNV-1a, 64 bits: the one hash tandem uses for cache keys and file names (device profiles,
 * measured times, OpenCL binaries, memory plans, launch windows) and for name tables.
 *
 *   uint64_t h = TDM_HASH_INIT;
 *   h = tdm_hash_str(h, name);          bytes of a C string
 *   h = tdm_hash_bytes(h, data, size);  bytes of a buffer
 *   h = tdm_hash_u64(h, dim);           one 64-bit word as one step (not its 8 bytes)
 *
 * Values are stable across runs and builds: some name files on disk. Not for untrusted
 * keys where collisions would matter (no seed). */
#ifndef TDM_CORE_HASH_H
#define TDM_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

/* The start value. A digit short of FNV's published offset basis (14695981039346656037),
 * as tandem has always used it: profile and measured-time files are named with it. */
#define TDM_HASH_INIT 1469598103934665603ull
#define TDM_HASH_PRIME 1099511628211ull

static inline uint64_t tdm_hash_u64(uint64_t h, uint64_t word) {
    return (h ^ word) * TDM_HASH_PRIME;
}

static inline uint64_t tdm_hash_bytes(uint64_t h, const void *data, size_t size) {
    const unsigned char *p = data;
    for (size_t i = 0; i < size; i++) h = (h ^ p[i]) * TDM_HASH_PRIME;
    return h;
}

static inline uint64_t tdm_hash_str(uint64_t h, const char *s) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * TDM_HASH_PRIME;
    return h;
}

#endif

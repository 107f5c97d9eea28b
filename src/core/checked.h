/* Checked integer arithmetic for sizes and element counts from untrusted input. */
#ifndef TDM_CORE_CHECKED_H
#define TDM_CORE_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Each returns false on overflow and leaves *out unspecified. */
static inline bool tdm_mul_i64(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool tdm_add_i64(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
static inline bool tdm_mul_size(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool tdm_add_size(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* Largest element count or byte size tandem accepts for one tensor (2^40 bytes). */
#define TDM_MAX_TENSOR_BYTES ((int64_t)1 << 40)

#endif

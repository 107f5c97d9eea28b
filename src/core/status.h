/* Status objects: NULL is success; anything else carries a code and a message. */
#ifndef TDM_CORE_STATUS_H
#define TDM_CORE_STATUS_H

#include "tandem/tandem.h"

#if defined(__GNUC__)
#define TDM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define TDM_NODISCARD __attribute__((warn_unused_result))
#else
#define TDM_PRINTF(a, b)
#define TDM_NODISCARD
#endif

/* Builds a status with a printf-style message. Never returns NULL: when memory for the
 * message cannot be had, a preallocated out-of-memory status is returned (freeing it is a
 * no-op). */
tdm_status *tdm_status_new(tdm_code code, const char *fmt, ...) TDM_PRINTF(2, 3);
/* Prefixes the message of `st` with more context ("loading 'x': <old message>"). Returns
 * `st` (or a replacement); NULL stays NULL. */
tdm_status *tdm_status_wrap(tdm_status *st, const char *fmt, ...) TDM_PRINTF(2, 3);

#define TDM_TRY(expr)                                                                    \
    do {                                                                                 \
        tdm_status *tdm_try_st_ = (expr);                                                \
        if (tdm_try_st_) return tdm_try_st_;                                             \
    } while (0)

#define TDM_ERR(code, ...) tdm_status_new(code, __VA_ARGS__)

#endif

/* One monotonic clock for every timing and trace event. */
#ifndef TDM_CORE_CLOCK_H
#define TDM_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t tdm_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif

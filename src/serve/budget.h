/*
 * tandem serve: a byte budget shared by threads (request bodies being received and parsed).
 * take() succeeds only while the total stays within the limit; give() returns what was taken.
 * Lock-free (C11 atomics); a zero limit means no budget.
 */
#ifndef TDM_SERVE_BUDGET_H
#define TDM_SERVE_BUDGET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct sv_budget {
    size_t limit;
    _Atomic size_t used;
    _Atomic size_t peak;
} sv_budget;

static inline bool sv_budget_take(sv_budget *b, size_t n) {
    size_t cur = atomic_load(&b->used);
    do {
        if (b->limit && (n > b->limit || cur > b->limit - n)) return false;
    } while (!atomic_compare_exchange_weak(&b->used, &cur, cur + n));
    size_t peak = atomic_load(&b->peak);
    while (cur + n > peak && !atomic_compare_exchange_weak(&b->peak, &peak, cur + n)) {
    }
    return true;
}

static inline void sv_budget_give(sv_budget *b, size_t n) {
    if (n) atomic_fetch_sub(&b->used, n);
}

#endif

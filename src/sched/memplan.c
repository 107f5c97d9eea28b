#include "sched/memplan.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"

typedef struct placed {
    size_t off, size;
    int first, last;
} placed;

typedef struct order_item {
    size_t size;
    size_t v;
} order_item;

static int by_size_desc(const void *a, const void *b) {
    const order_item *x = a, *y = b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->v < y->v ? -1 : x->v > y->v;
}

static int by_off(const void *a, const void *b) {
    const placed *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Groups values that share memory: root[v] is the value heading v's chain of aliases (v
 * itself when it has none) and lst[root] the last reader of the whole chain. */
static void alias_groups(tdm_memplan *mp, size_t n, const size_t *size, const int *first,
                         const int *last, const int *alias, int *root, int *lst) {
    for (size_t v = 0; v < n; v++) {
        root[v] = (int)v;
        lst[v] = last[v];
        mp->alias_of[v] = -1;
    }
    if (!alias) return;
    /* producers run in node order: a chain's values come in order of first[] */
    for (size_t v = 0; v < n; v++) {
        int u = alias[v];
        if (u < 0 || (size_t)u >= n || (size_t)u == v || size[v] == 0 || size[u] != size[v] ||
            first[v] < 0 || last[u] != first[v] || first[u] >= first[v])
            continue;
        if (mp->offset[u]) continue; /* one taker per value (offset: a mark until placed) */
        mp->offset[u] = 1;
        mp->alias_of[v] = u;
    }
    /* chains end: every link goes to a value produced earlier (first[] falls) */
    for (size_t v = 0; v < n; v++) {
        if (mp->alias_of[v] < 0) continue;
        int r = mp->alias_of[v];
        while (mp->alias_of[r] >= 0) r = mp->alias_of[r];
        root[v] = r;
        if (last[v] > lst[r]) lst[r] = last[v];
        mp->n_inplace++;
    }
}

tdm_status *tdm_memplan_build(const tdm_allocator *a, size_t n, const size_t *size,
                              const int *first, const int *last_in, const int *alias,
                              uint64_t key, tdm_memplan **out) {
    tdm_memplan *mp = tdm_calloc(a, 1, sizeof *mp);
    order_item *ord = tdm_calloc(a, n + 1, sizeof *ord);
    placed *pl = tdm_calloc(a, n + 1, sizeof *pl);
    placed *live = tdm_calloc(a, n + 1, sizeof *live);
    int *root = tdm_calloc(a, n + 1, sizeof *root), *last = tdm_calloc(a, n + 1, sizeof *last);
    tdm_status *st = NULL;
    if (!mp || !ord || !pl || !live || !root || !last) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory planning memory");
        goto fail;
    }
    mp->key = key;
    mp->n_values = n;
    mp->offset = tdm_calloc(a, n + 1, sizeof *mp->offset);
    mp->size = tdm_calloc(a, n + 1, sizeof *mp->size);
    mp->headers = tdm_calloc(a, n + 1, sizeof *mp->headers);
    mp->alias_of = tdm_calloc(a, n + 1, sizeof *mp->alias_of);
    if (!mp->offset || !mp->size || !mp->headers || !mp->alias_of) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory planning memory");
        goto fail;
    }
    alias_groups(mp, n, size, first, last_in, alias, root, last);
    size_t m = 0;
    for (size_t v = 0; v < n; v++) {
        mp->offset[v] = -1;
        if (size[v] == 0 || root[v] != (int)v) continue;
        ord[m].size = (size[v] + TDM_ALIGN - 1) / TDM_ALIGN * TDM_ALIGN;
        ord[m].v = v;
        m++;
    }
    qsort(ord, m, sizeof *ord, by_size_desc);
    size_t n_placed = 0, total = 0;
    for (size_t i = 0; i < m; i++) {
        size_t v = ord[i].v, sz = ord[i].size;
        /* the placed blocks alive at the same time, by offset */
        size_t nl = 0;
        for (size_t j = 0; j < n_placed; j++)
            if (pl[j].first <= last[v] && first[v] <= pl[j].last) live[nl++] = pl[j];
        qsort(live, nl, sizeof *live, by_off);
        size_t off = 0;
        for (size_t j = 0; j < nl; j++) {
            if (live[j].off >= off + sz) break; /* the gap before this block fits */
            if (live[j].off + live[j].size > off) off = live[j].off + live[j].size;
        }
        pl[n_placed++] = (placed){off, sz, first[v], last[v]};
        mp->offset[v] = (int64_t)off;
        mp->size[v] = size[v];
        if (off + sz > total) total = off + sz;
    }
    for (size_t v = 0; v < n; v++)
        if (root[v] != (int)v && mp->offset[root[v]] >= 0) {
            mp->offset[v] = mp->offset[root[v]];
            mp->size[v] = size[v];
        }
    mp->arena_bytes = total;
    /* largest live set: +size where a value starts, -size after its last reader */
    int t_max = 0;
    for (size_t i = 0; i < m; i++) {
        size_t v = ord[i].v;
        if (first[v] > t_max) t_max = first[v];
        if (last[v] > t_max) t_max = last[v];
    }
    int64_t *delta = m ? tdm_calloc(a, (size_t)t_max + 3, sizeof *delta) : NULL;
    if (delta) {
        for (size_t i = 0; i < m; i++) {
            size_t v = ord[i].v;
            int f0 = first[v] < 0 ? 0 : first[v], l0 = last[v] < f0 ? f0 : last[v];
            delta[f0] += (int64_t)ord[i].size;
            delta[l0 + 1] -= (int64_t)ord[i].size;
            mp->total_bytes += ord[i].size;
        }
        int64_t live_now = 0;
        for (int t = 0; t <= t_max + 1; t++) {
            live_now += delta[t];
            if (live_now > (int64_t)mp->peak_live_bytes) mp->peak_live_bytes = (size_t)live_now;
        }
        tdm_free(a, delta);
    }
    if (total) {
        mp->arena = tdm_alloc(a, total);
        if (!mp->arena) {
            st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory allocating a %zu-byte arena", total);
            goto fail;
        }
    }
    tdm_free(a, ord);
    tdm_free(a, pl);
    tdm_free(a, live);
    tdm_free(a, root);
    tdm_free(a, last);
    *out = mp;
    return NULL;
fail:
    tdm_free(a, ord);
    tdm_free(a, pl);
    tdm_free(a, live);
    tdm_free(a, root);
    tdm_free(a, last);
    tdm_memplan_free(a, mp);
    return st;
}

void tdm_memplan_free(const tdm_allocator *a, tdm_memplan *mp) {
    if (!mp) return;
    tdm_free(a, mp->offset);
    tdm_free(a, mp->alias_of);
    tdm_free(a, mp->size);
    tdm_free(a, mp->headers);
    tdm_free(a, mp->arena);
    tdm_free(a, (void *)mp->vals);
    tdm_free(a, mp->owned);
    tdm_free(a, (void *)mp->ins);
    tdm_free(a, mp->outs);
    tdm_shape_cache_free(a, mp->shapes);
    tdm_free(a, mp);
}

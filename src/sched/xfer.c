/* Asynchronous copies for the executor: see sched/xfer.h. */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "sched/plan.h"
#include "sched/xfer.h"

#define XFER_POOL_MAX 64
#define XFER_FENCES 4
#define XFER_POOL_CAP ((size_t)512 << 20) /* staging bytes a plan keeps */

/* A block of staging memory from tdm_device_host_alloc(owner). Fences: events of copies that
 * read or write it; the block is reused only after they completed. */
typedef struct xfer_stage {
    tdm_device *owner;
    void *ptr;
    size_t size;
    bool busy;    /* handed out */
    bool pooled;  /* kept by the pool (else freed when put back) */
    int n_fences;
    tdm_device *fence_dev[XFER_FENCES];
    void *fence[XFER_FENCES];
} xfer_stage;

struct tdm_xfer_pool {
    pthread_mutex_t mu;
    int n;
    size_t bytes;
    xfer_stage *s[XFER_POOL_MAX];
};

typedef struct xfer_val {
    xfer_stage *stage;  /* the download's staging block, or NULL */
    tdm_device *owner;  /* device the download runs on */
    void *event;        /* completes when the bytes are on the host */
    int64_t t_issue, t_done;
    bool done, traced;
} xfer_val;

struct tdm_xfer {
    const tdm_allocator *a;
    tdm_xfer_pool *pool;
    size_t n;
    xfer_val *v;
    pthread_mutex_t mu;
    /* events of uploads straight from the caller's memory: waited for at the end */
    int n_fences, cap_fences;
    tdm_device **fence_dev;
    void **fence;
};

bool tdm_xfer_device_async(const tdm_device *dev) {
    return dev && !dev->host_memory && tdm_device_has_async_copies(dev);
}

bool tdm_xfer_forced_sync(const tdm_settings *set) {
    return tdm_settings_or_builtin(set)->sync_copies;
}

/* ---- staging blocks ---- */

static tdm_status *keep_first(tdm_status *first, tdm_status *st) {
    if (!first) return st;
    tdm_status_free(st);
    return first;
}

/* Waits for and frees the block's fences. */
static tdm_status *stage_sync(xfer_stage *s) {
    tdm_status *first = NULL;
    for (int i = 0; i < s->n_fences; i++) {
        tdm_device *d = s->fence_dev[i];
        first = keep_first(first, tdm_device_event_sync(d, s->fence[i]));
        tdm_device_event_free(d, s->fence[i]);
    }
    s->n_fences = 0;
    return first;
}

static void stage_destroy(xfer_stage *s, const tdm_allocator *a) {
    if (!s) return;
    tdm_status_free(stage_sync(s));
    tdm_device_host_free(s->owner, s->ptr);
    tdm_free(a, s);
}

/* Adds a fence (with the pool lock held or the block owned by one thread). A full list is
 * waited for first. */
static tdm_status *stage_fence(xfer_stage *s, tdm_device *dev, void *ev) {
    tdm_status *st = NULL;
    if (s->n_fences == XFER_FENCES) st = stage_sync(s);
    s->fence_dev[s->n_fences] = dev;
    s->fence[s->n_fences++] = ev;
    return st;
}

/* A block of at least `size` bytes of owner's staging memory, reused when the pool has an
 * idle one of a close size (one without fences first). */
static tdm_status *stage_get(tdm_xfer_pool *pool, const tdm_allocator *a, tdm_device *owner,
                             size_t size, xfer_stage **out) {
    xfer_stage *best = NULL;
    pthread_mutex_lock(&pool->mu);
    for (int i = 0; i < pool->n; i++) {
        xfer_stage *s = pool->s[i];
        if (s->busy || s->owner != owner || s->size < size || s->size / 2 > size + 65536) continue;
        if (!best || (best->n_fences && !s->n_fences) ||
            (!best->n_fences == !s->n_fences && s->size < best->size))
            best = s;
    }
    if (best) best->busy = true;
    pthread_mutex_unlock(&pool->mu);
    if (best) {
        tdm_status *st = stage_sync(best);
        if (st) {
            pthread_mutex_lock(&pool->mu);
            best->busy = false;
            pthread_mutex_unlock(&pool->mu);
            return st;
        }
        *out = best;
        return NULL;
    }
    size_t want = size > SIZE_MAX - 4095 ? size : (size + 4095) & ~(size_t)4095;
    if (want == 0) want = 4096;
    xfer_stage *s = tdm_calloc(a, 1, sizeof *s);
    if (!s) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory allocating staging memory");
    tdm_status *st = tdm_device_host_alloc(owner, want, &s->ptr);
    if (st) {
        tdm_free(a, s);
        return tdm_status_wrap(st, "staging memory for %s: ", owner->name);
    }
    s->owner = owner;
    s->size = want;
    s->busy = true;
    xfer_stage *victim = NULL;
    pthread_mutex_lock(&pool->mu);
    if (pool->n == XFER_POOL_MAX || pool->bytes + want > XFER_POOL_CAP)
        for (int i = 0; i < pool->n; i++) /* make room: the first idle block leaves */
            if (!pool->s[i]->busy) {
                victim = pool->s[i];
                pool->bytes -= victim->size;
                pool->s[i] = pool->s[--pool->n];
                break;
            }
    if (pool->n < XFER_POOL_MAX && pool->bytes + want <= XFER_POOL_CAP) {
        s->pooled = true;
        pool->s[pool->n++] = s;
        pool->bytes += want;
    }
    pthread_mutex_unlock(&pool->mu);
    stage_destroy(victim, a);
    *out = s;
    return NULL;
}

/* Back to the pool (with a fence when ev is not NULL); a block the pool does not keep is
 * freed once its fences completed. */
static tdm_status *stage_put(tdm_xfer_pool *pool, const tdm_allocator *a, xfer_stage *s,
                             tdm_device *dev, void *ev) {
    tdm_status *st = ev ? stage_fence(s, dev, ev) : NULL;
    if (!s->pooled) {
        stage_destroy(s, a);
        return st;
    }
    pthread_mutex_lock(&pool->mu);
    s->busy = false;
    pthread_mutex_unlock(&pool->mu);
    return st;
}

void tdm_xfer_pool_free(tdm_xfer_pool *pool, const tdm_allocator *a) {
    if (!pool) return;
    for (int i = 0; i < pool->n; i++) stage_destroy(pool->s[i], a);
    pthread_mutex_destroy(&pool->mu);
    tdm_free(a, pool);
}

/* ---- per run ---- */

tdm_status *tdm_xfer_begin(tdm_plan *p, const tdm_allocator *a, size_t n_values, tdm_xfer **out) {
    *out = NULL;
    if (tdm_xfer_forced_sync(p->settings)) return NULL;
    bool any = false;
    for (int i = 0; i < p->n_devices; i++) any |= tdm_xfer_device_async(p->devices[i]);
    if (!any) return NULL;
    pthread_mutex_lock(&p->mem_mu);
    if (!p->staging) {
        tdm_xfer_pool *pool = tdm_calloc(p->alloc, 1, sizeof *pool);
        if (pool) pthread_mutex_init(&pool->mu, NULL);
        p->staging = pool;
    }
    tdm_xfer_pool *pool = p->staging;
    pthread_mutex_unlock(&p->mem_mu);
    tdm_xfer *x = pool ? tdm_calloc(a, 1, sizeof *x) : NULL;
    if (x) x->v = tdm_calloc(a, n_values + 1, sizeof *x->v);
    if (!x || !x->v) {
        if (x) tdm_free(a, x);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory starting a run");
    }
    x->a = a;
    x->pool = pool;
    x->n = n_values;
    pthread_mutex_init(&x->mu, NULL);
    *out = x;
    return NULL;
}

/* Value's download done with: its event and staging block go (takes the pool lock). */
static tdm_status *release_val(tdm_xfer *x, xfer_val *xv) {
    tdm_status *st = NULL;
    if (xv->event) {
        if (xv->done || !xv->stage) {
            tdm_device_event_free(xv->owner, xv->event);
        } else { /* nobody waited on the host: the block is reused only after the download */
            pthread_mutex_lock(&x->pool->mu);
            st = stage_fence(xv->stage, xv->owner, xv->event);
            pthread_mutex_unlock(&x->pool->mu);
        }
    }
    if (xv->stage) st = keep_first(st, stage_put(x->pool, x->a, xv->stage, NULL, NULL));
    memset(xv, 0, sizeof *xv);
    return st;
}

tdm_status *tdm_xfer_end(tdm_xfer *x) {
    if (!x) return NULL;
    tdm_status *first = NULL;
    for (int i = 0; i < x->n_fences; i++) {
        tdm_device *d = x->fence_dev[i];
        first = keep_first(first, tdm_device_event_sync(d, x->fence[i]));
        tdm_device_event_free(d, x->fence[i]);
    }
    for (size_t v = 0; v < x->n; v++)
        if (x->v[v].stage) first = keep_first(first, release_val(x, &x->v[v]));
    pthread_mutex_destroy(&x->mu);
    tdm_free(x->a, x->fence_dev);
    tdm_free(x->a, x->fence);
    tdm_free(x->a, x->v);
    tdm_free(x->a, x);
    return first;
}

void tdm_xfer_drop(tdm_xfer *x, int v) {
    if (!x || v < 0 || (size_t)v >= x->n || !x->v[v].stage) return;
    tdm_status_free(release_val(x, &x->v[v])); /* an error shows at the reader's wait */
}

tdm_status *tdm_xfer_download(tdm_xfer *x, int v, const tdm_tensor *t, tdm_tensor **host) {
    tdm_device *owner = t->device;
    if (v < 0 || (size_t)v >= x->n || x->v[v].stage)
        return TDM_ERR(TDM_ERR_INTERNAL, "download of value %d started twice", v);
    xfer_stage *s = NULL;
    TDM_TRY(stage_get(x->pool, x->a, owner, t->nbytes, &s));
    tdm_tensor *view = NULL;
    void *ev = NULL;
    int64_t t0 = tdm_now_ns();
    tdm_status *st = tdm_tensor_new_view(x->a, t->dtype, t->rank, t->dims, s->ptr, &view);
    if (!st) st = tdm_device_download_async(owner, s->ptr, t->data, t->nbytes, &ev);
    if (st) {
        tdm_tensor_destroy(view);
        tdm_status_free(stage_put(x->pool, x->a, s, NULL, NULL));
        return tdm_status_wrap(st, "download from %s: ", owner->name);
    }
    xfer_val *xv = &x->v[v];
    xv->stage = s;
    xv->owner = owner;
    xv->event = ev;
    xv->t_issue = t0;
    *host = view;
    return NULL;
}

bool tdm_xfer_has_download(const tdm_xfer *x, int v) {
    return x && v >= 0 && (size_t)v < x->n && x->v[v].stage;
}

tdm_status *tdm_xfer_wait(tdm_xfer *x, int v, int64_t *t0, int64_t *t1, bool *first) {
    if (first) *first = false;
    if (!tdm_xfer_has_download(x, v)) return NULL;
    xfer_val *xv = &x->v[v];
    pthread_mutex_lock(&x->mu);
    bool done = xv->done;
    pthread_mutex_unlock(&x->mu);
    if (!done) {
        tdm_status *st = tdm_device_event_sync(xv->owner, xv->event);
        if (st) return tdm_status_wrap(st, "download from %s: ", xv->owner->name);
    }
    pthread_mutex_lock(&x->mu);
    if (!xv->done) {
        xv->done = true;
        xv->t_done = tdm_now_ns();
    }
    if (first && !xv->traced) {
        xv->traced = true;
        *first = true;
    }
    if (t0) *t0 = xv->t_issue;
    if (t1) *t1 = xv->t_done;
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

static tdm_status *run_fence(tdm_xfer *x, tdm_device *dev, void *ev) {
    pthread_mutex_lock(&x->mu);
    if (x->n_fences == x->cap_fences) {
        int cap = x->cap_fences ? x->cap_fences * 2 : 16;
        tdm_device **nd = tdm_calloc(x->a, (size_t)cap, sizeof *nd);
        void **ne = tdm_calloc(x->a, (size_t)cap, sizeof *ne);
        if (nd && ne && x->n_fences) {
            memcpy(nd, x->fence_dev, (size_t)x->n_fences * sizeof *nd);
            memcpy(ne, x->fence, (size_t)x->n_fences * sizeof *ne);
        }
        if (nd && ne) {
            tdm_free(x->a, x->fence_dev);
            tdm_free(x->a, x->fence);
            x->fence_dev = nd;
            x->fence = ne;
        } else {
            tdm_free(x->a, nd);
            tdm_free(x->a, ne);
            pthread_mutex_unlock(&x->mu);
            tdm_status *st = tdm_device_event_sync(dev, ev); /* no room: wait now */
            tdm_device_event_free(dev, ev);
            return st;
        }
        x->cap_fences = cap;
    }
    x->fence_dev[x->n_fences] = dev;
    x->fence[x->n_fences++] = ev;
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

tdm_status *tdm_xfer_upload(tdm_xfer *x, tdm_device *dev, int v, const tdm_tensor *src,
                            bool lives, tdm_tensor **out) {
    tdm_tensor *t = NULL;
    TDM_TRY(tdm_device_tensor_new(dev, x->a, src->dtype, src->rank, src->dims, &t));
    size_t n = src->nbytes;
    tdm_status *st = NULL;
    void *ev = NULL;
    xfer_val *xv = v >= 0 && (size_t)v < x->n ? &x->v[v] : NULL;
    if (n == 0) {
        /* nothing to copy */
    } else if (xv && xv->stage && xv->stage->ptr == src->data) {
        /* downloaded from another device into staging: this device's queue waits for it */
        pthread_mutex_lock(&x->mu);
        bool done = xv->done;
        pthread_mutex_unlock(&x->mu);
        if (!done) st = tdm_device_event_wait(dev, xv->owner, xv->event);
        if (!st) st = tdm_device_upload(dev, t->data, src->data, n);
        if (!st) st = tdm_device_event_record(dev, &ev);
        if (!st) {
            pthread_mutex_lock(&x->pool->mu);
            st = stage_fence(xv->stage, dev, ev);
            pthread_mutex_unlock(&x->pool->mu);
        }
    } else if (lives) { /* the caller's memory outlives the run */
        st = tdm_device_upload(dev, t->data, src->data, n);
        if (!st) st = tdm_device_event_record(dev, &ev);
        if (!st) st = run_fence(x, dev, ev);
    } else { /* the source may be freed at once: through staging memory */
        xfer_stage *s = NULL;
        st = stage_get(x->pool, x->a, dev, n, &s);
        if (!st) {
            memcpy(s->ptr, src->data, n);
            st = tdm_device_upload(dev, t->data, s->ptr, n);
            if (!st && (st = tdm_device_event_record(dev, &ev))) {
                ev = NULL; /* no fence: the block is reused only after the copy */
                tdm_status_free(tdm_device_synchronize(dev));
            }
            st = keep_first(st, stage_put(x->pool, x->a, s, dev, ev));
        }
    }
    if (st) {
        tdm_tensor_destroy(t);
        return tdm_status_wrap(st, "upload to %s: ", dev->name);
    }
    *out = t;
    return NULL;
}

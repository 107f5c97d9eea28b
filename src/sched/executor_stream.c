/* Streamed weights for the executor (executor_internal.h; residency in sched/budget.h).
 *
 * A weight the fit pass marked streamed for a device stays in host memory; each run uploads
 * it into a device buffer before its first reader there and gives the buffer back after its
 * last reader. Before each node the run prefetches: the streamed weights of the next k
 * weight-reading nodes (units) of the node's device, k the plan's window. On a device with
 * a copy queue (backend.h version 7) an upload waits only for the kernels issued before it
 * (the buffer's earlier readers) and the kernel that reads the weight waits on the upload's
 * event, so uploads for the next k units run while the device computes; elsewhere the
 * upload is the device's ordinary one, ordered with its kernels. Buffers come from
 * the plan's pool (the ring), which reuses a freed buffer of the same size and never holds
 * more than the ring's bytes (handed out + kept), so the device's memory stays under its
 * budget. A buffer is reused only by an upload ordered after the kernels that read its
 * previous weight. One streamed run of a plan at a time (the ring is sized for
 * one run): concurrent runs wait on the pool's lock.
 *
 * Pinned host memory: on a device that registers host memory (backend.h version 8) the
 * streamed weights are registered for their device when a run first streams them (and
 * released with the pool), so their uploads are DMA from page-locked memory instead of a host
 * copy through staging buffers; such uploads count as bytes_uploaded_pinned in the monitor.
 * Registration is by page: weights whose pages touch (neighbours in one loaded buffer) are
 * registered as one region, since a device refuses overlapping registrations. A registration
 * the device refuses (e.g. pages already registered by another session) leaves its weights
 * pageable and is not retried. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "graph/clone.h"
#include "graph/infer.h"
#include "sched/budget.h"
#include "sched/plan.h"
#include "sched/executor_internal.h"
#include "sched/stream.h"

#define POOL_MAX_FREE 64

typedef struct pool_buf {
    void *buf;
    size_t size;
} pool_buf;

struct tdm_stream_pool {
    pthread_mutex_t run_mu;
    unsigned char *pinned; /* [v * D + d]: 0 not tried, 1 registered, 2 refused */
    size_t n_pinned;       /* entries of pinned */
    struct pin_region {    /* registered regions, to release */
        void *lo;
        int d;
    } *regions;
    size_t n_regions, cap_regions;
    pool_buf free_[TDM_MAX_DEVICES][POOL_MAX_FREE];
    int n_free[TDM_MAX_DEVICES];
    int64_t pooled[TDM_MAX_DEVICES], held[TDM_MAX_DEVICES];
};

struct tdm_stream_run {
    tdm_stream_pool *pool;
    tdm_tensor **slot;    /* [v * D + d] the weight's device copy in this run */
    uint64_t *flow;       /* [v * D + d] its upload's trace flow */
    void **done;          /* [v * D + d] its upload's event on a copy queue, until waited for */
    int64_t *issued;      /* [v * D + d] when the upload was issued (traced runs) */
    int next_unit[TDM_MAX_DEVICES]; /* units prefetched so far per device */
};

void tdm_stream_pool_free(tdm_plan *p) {
    tdm_stream_pool *sp = p ? p->stream_pool : NULL;
    if (!sp) return;
    for (int d = 0; d < p->n_devices && d < TDM_MAX_DEVICES; d++)
        for (int k = 0; k < sp->n_free[d]; k++) tdm_device_buffer_free(p->devices[d], sp->free_[d][k].buf);
    for (size_t k = 0; k < sp->n_regions; k++)
        tdm_device_host_unregister(p->devices[sp->regions[k].d], sp->regions[k].lo);
    tdm_free(p->alloc, sp->regions);
    tdm_free(p->alloc, sp->pinned);
    pthread_mutex_destroy(&sp->run_mu);
    tdm_free(p->alloc, sp);
    p->stream_pool = NULL;
}

static void pool_drop(const frame *f, int d, int k) {
    tdm_stream_pool *sp = f->stream->pool;
    tdm_device *dev = f->plan->devices[d];
    tdm_device_buffer_free(dev, sp->free_[d][k].buf);
    sp->pooled[d] -= (int64_t)sp->free_[d][k].size;
    if (tdm_exec_mon(f)) tdm_monitor_memory(tdm_exec_mon(f), dev->index, -(int64_t)sp->free_[d][k].size);
    sp->free_[d][k] = sp->free_[d][--sp->n_free[d]];
}

/* A device buffer of `size` bytes from the ring of plan device d. */
static tdm_status *pool_get(const frame *f, int d, size_t size, void **buf) {
    tdm_stream_pool *sp = f->stream->pool;
    int64_t cap = f->plan->budget->ring[d];
    for (int k = 0; k < sp->n_free[d]; k++)
        if (sp->free_[d][k].size == size) {
            *buf = sp->free_[d][k].buf;
            sp->pooled[d] -= (int64_t)size;
            sp->free_[d][k] = sp->free_[d][--sp->n_free[d]];
            sp->held[d] += (int64_t)size;
            return NULL;
        }
    while (sp->n_free[d] > 0 && sp->held[d] + sp->pooled[d] + (int64_t)size > cap) {
        int big = 0; /* kept buffers of other sizes make room, the largest first */
        for (int k = 1; k < sp->n_free[d]; k++)
            if (sp->free_[d][k].size > sp->free_[d][big].size) big = k;
        pool_drop(f, d, big);
    }
    tdm_device *dev = f->plan->devices[d];
    TDM_TRY(tdm_device_buffer_alloc(dev, size, buf));
    sp->held[d] += (int64_t)size;
    if (tdm_exec_mon(f)) tdm_monitor_memory(tdm_exec_mon(f), dev->index, (int64_t)size);
    return NULL;
}

static void pool_put(const frame *f, int d, void *buf, size_t size) {
    tdm_stream_pool *sp = f->stream->pool;
    sp->held[d] -= (int64_t)size;
    if (sp->n_free[d] < POOL_MAX_FREE &&
        sp->held[d] + sp->pooled[d] + (int64_t)size <= f->plan->budget->ring[d]) {
        sp->free_[d][sp->n_free[d]++] = (pool_buf){buf, size};
        sp->pooled[d] += (int64_t)size;
        return;
    }
    tdm_device *dev = f->plan->devices[d];
    tdm_device_buffer_free(dev, buf);
    if (tdm_exec_mon(f)) tdm_monitor_memory(tdm_exec_mon(f), dev->index, -(int64_t)size);
}

/* A budget on a device with memory of its own. */
static bool device_budget(const tdm_plan *p) {
    for (int d = 0; d < p->n_devices && d < TDM_MAX_DEVICES; d++)
        if (p->budget->budget[d] > 0 && !p->devices[d]->host_memory) return true;
    return false;
}

/* Constant folding on the CPU (shape chains of the budget check below). */
typedef struct fold_cpu {
    tdm_device *cpu;
    const tdm_allocator *a;
} fold_cpu;

static tdm_status *fold_eval(void *user, const tdm_node *n, const tdm_tensor *const *ins,
                             tdm_tensor **outs) {
    fold_cpu *fc = user;
    return tdm_eval_node(fc->cpu, fc->a, n, ins, outs);
}

/* The activations of these input shapes (unknown dims are 1 in the plan's estimate): a copy
 * of the graph without its weights takes the run's input shapes, static shapes again give
 * the peaks; more than the fit counted makes it fit again (more weights streamed), and the
 * device copies of weights that are streamed now are freed. */
static tdm_status *check_shapes(frame *f, const tdm_tensor *const *inputs) {
    tdm_plan *p = (tdm_plan *)f->plan;
    const tdm_graph *g = p->graph;
    tdm_budget_plan *b = p->budget;
    bool *keep = tdm_calloc(f->a, g->n_values + 1, sizeof *keep);
    if (!keep) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory checking the memory budget");
    for (size_t v = 0; v < g->n_values; v++) /* shape-like constants only */
        keep[v] = g->values[v].data && g->values[v].data->nbytes <= 4096;
    tdm_graph *c = NULL;
    tdm_status *st = tdm_graph_clone(g, keep, &c);
    tdm_free(f->a, keep);
    if (st) return st;
    for (size_t i = 0; i < c->n_inputs; i++) {
        const tdm_tensor *t = inputs[i] ? inputs[i] : g->values[g->inputs[i]].data;
        tdm_value *val = &c->values[c->inputs[i]];
        if (!t) continue;
        val->rank = t->rank;
        memcpy(val->dims, t->dims, (size_t)t->rank * sizeof *t->dims);
    }
    int64_t act[TDM_MAX_DEVICES] = {0};
    tdm_status *inf = tdm_graph_infer_shapes(c);
    /* shapes computed in the graph (Shape -> Gather -> Concat -> Expand / Reshape): fold
     * those chains on the CPU with these input shapes, so such values get their sizes */
    tdm_device *cpu = NULL;
    for (int d = 0; d < p->n_devices && !cpu; d++)
        if (p->devices[d]->host_memory) cpu = p->devices[d];
    for (int round = 0; !inf && cpu && round < 8; round++) {
        int folded = 0;
        fold_cpu fc = {cpu, f->a};
        inf = tdm_graph_fold_constants(c, fold_eval, &fc, &folded);
        if (!inf && folded) inf = tdm_graph_infer_shapes(c);
        if (!folded) break;
    }
    if (!inf) st = tdm_budget_activations(f->a, c, g, p->n_devices, act);
    tdm_status_free(inf); /* shapes not inferred: the plan's estimate stands */
    tdm_graph_free(c);
    if (st) return st;
    bool more = false;
    tdm_budget_options o = b->options;
    for (int d = 0; d < p->n_devices; d++) {
        if (act[d] > o.min_activations[d]) o.min_activations[d] = act[d];
        more |= b->budget[d] > 0 && !p->devices[d]->host_memory && act[d] > b->activations[d];
    }
    if (!more) return NULL;
    int *moved = NULL;
    pthread_mutex_lock(&p->mem_mu);
    st = tdm_budget_fit(p, &o, true, &moved);
    tdm_free(p->alloc, moved);
    if (!st) {
        b = p->budget;
        for (size_t v = 0; v < g->n_values; v++)
            for (int d = 0; b->residency && b->residency[v] == TDM_RES_STREAMED && d < p->n_devices; d++) {
                tdm_tensor **slot = &p->const_on_device[v * (size_t)p->n_devices + (size_t)d];
                if (!*slot) continue;
                tdm_exec_mon_hold(f, *slot, -1);
                tdm_tensor_destroy(*slot);
                *slot = NULL;
            }
    }
    pthread_mutex_unlock(&p->mem_mu);
    if (st) return tdm_status_wrap(st, "with the activations of these input shapes: ");
    return NULL;
}

#define PIN_PAGE ((uintptr_t)4096)

typedef struct pin_item {
    uintptr_t lo, hi; /* page-rounded */
    size_t v;
} pin_item;

static int pin_cmp(const void *a, const void *b) {
    const pin_item *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Registers the streamed weights of plan device d not tried yet: their page ranges sorted,
 * touching ones merged into one region each (run lock held). */
static tdm_status *pin_device(const tdm_plan *p, tdm_stream_pool *sp, size_t d) {
    const tdm_budget_plan *b = p->budget;
    size_t D = (size_t)p->n_devices, n = 0;
    tdm_device *dev = p->devices[d];
    for (size_t v = 0; v < p->graph->n_values; v++) {
        tdm_tensor *w = p->graph->values[v].data;
        n += b->residency[v] == TDM_RES_STREAMED && !sp->pinned[v * D + d] && w && w->nbytes &&
             b->last_reader[v * D + d] >= 0;
    }
    if (!n) return NULL;
    pin_item *it = tdm_calloc(p->alloc, n, sizeof *it);
    if (!it) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory starting a run");
    n = 0;
    for (size_t v = 0; v < p->graph->n_values; v++) {
        tdm_tensor *w = p->graph->values[v].data;
        if (b->residency[v] != TDM_RES_STREAMED || sp->pinned[v * D + d] || !w || !w->nbytes ||
            b->last_reader[v * D + d] < 0)
            continue;
        uintptr_t a0 = (uintptr_t)w->data;
        it[n++] = (pin_item){a0 & ~(PIN_PAGE - 1), (a0 + w->nbytes + PIN_PAGE - 1) & ~(PIN_PAGE - 1), v};
    }
    qsort(it, n, sizeof *it, pin_cmp);
    tdm_status *st = NULL;
    for (size_t i = 0; i < n && !st;) {
        size_t j = i + 1;
        uintptr_t hi = it[i].hi;
        while (j < n && it[j].lo <= hi) {
            if (it[j].hi > hi) hi = it[j].hi;
            j++;
        }
        if (sp->n_regions == sp->cap_regions) {
            size_t cap = sp->cap_regions ? 2 * sp->cap_regions : 16;
            struct pin_region *r = tdm_calloc(p->alloc, cap, sizeof *r);
            if (!r) {
                st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory starting a run");
                break;
            }
            if (sp->n_regions) memcpy(r, sp->regions, sp->n_regions * sizeof *r);
            tdm_free(p->alloc, sp->regions);
            sp->regions = r;
            sp->cap_regions = cap;
        }
        void *lo = (void *)it[i].lo;
        tdm_status *rs = tdm_device_host_register(dev, lo, (size_t)(hi - it[i].lo));
        if (!rs) sp->regions[sp->n_regions++] = (struct pin_region){lo, (int)d};
        for (size_t k = i; k < j; k++) sp->pinned[it[k].v * D + d] = rs ? 2 : 1;
        tdm_status_free(rs); /* stays pageable: uploads go through staging */
        i = j;
    }
    tdm_free(p->alloc, it);
    return st;
}

/* Registers the streamed weights not tried yet with the devices they stream to. */
static tdm_status *pin_streamed(frame *f) {
    const tdm_plan *p = f->plan;
    const tdm_budget_plan *b = p->budget;
    tdm_stream_pool *sp = f->stream->pool;
    if (!b->any_streamed) return NULL;
    size_t D = (size_t)p->n_devices, n = p->graph->n_values * D;
    if (!sp->pinned) {
        if (!(sp->pinned = tdm_calloc(p->alloc, n + 1, 1)))
            return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory starting a run");
        sp->n_pinned = n;
    }
    for (size_t d = 0; d < D; d++) {
        tdm_device *dev = p->devices[d];
        if (dev->host_memory || !b->n_units[d]) continue;
        if (!tdm_device_has_host_register(dev)) {
            for (size_t v = 0; v < p->graph->n_values; v++)
                if (!sp->pinned[v * D + d]) sp->pinned[v * D + d] = 2;
            continue;
        }
        TDM_TRY(pin_device(p, sp, d));
    }
    return NULL;
}

tdm_status *tdm_stream_begin(frame *f, const tdm_tensor *const *inputs) {
    tdm_plan *p = (tdm_plan *)f->plan;
    if (!p || !p->budget || !device_budget(p)) return NULL;
    pthread_mutex_lock(&p->mem_mu);
    if (!p->stream_pool && (p->stream_pool = tdm_calloc(p->alloc, 1, sizeof *p->stream_pool)))
        pthread_mutex_init(&p->stream_pool->run_mu, NULL);
    tdm_stream_pool *sp = p->stream_pool;
    pthread_mutex_unlock(&p->mem_mu);
    if (!sp) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory starting a run");
    size_t n = p->graph->n_values * (size_t)p->n_devices + 1;
    tdm_stream_run *r = tdm_calloc(f->a, 1, sizeof *r);
    if (r) r->slot = tdm_calloc(f->a, n, sizeof *r->slot);
    if (r && r->slot) r->flow = tdm_calloc(f->a, n, sizeof *r->flow);
    if (r && r->flow) r->done = tdm_calloc(f->a, n, sizeof *r->done);
    if (r && r->done) r->issued = tdm_calloc(f->a, n, sizeof *r->issued);
    if (!r || !r->issued) {
        if (r) {
            tdm_free(f->a, r->slot);
            tdm_free(f->a, r->flow);
            tdm_free(f->a, r->done);
        }
        tdm_free(f->a, r);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory starting a run");
    }
    r->pool = sp;
    /* one run at a time: the ring and the activations under the budget are one run's */
    pthread_mutex_lock(&sp->run_mu);
    f->stream = r;
    uint64_t key = tdm_exec_shapes_key(p->graph, inputs);
    if (key != p->budget->shapes_key) {
        TDM_TRY(check_shapes(f, inputs));
        p->budget->shapes_key = key;
    }
    return pin_streamed(f);
}

/* Gives value v's buffer on plan device d back to the ring. */
static void stream_drop(frame *f, int v, int d) {
    size_t k = (size_t)v * (size_t)f->plan->n_devices + (size_t)d;
    tdm_tensor *t = f->stream->slot[k];
    if (!t) return;
    if (f->stream->done[k]) { /* never waited for (a failed run): the copy ends first */
        tdm_device *dev = f->plan->devices[d];
        tdm_status_free(tdm_device_event_sync(dev, f->stream->done[k]));
        tdm_device_event_free(dev, f->stream->done[k]);
        f->stream->done[k] = NULL;
    }
    pool_put(f, d, t->data, t->nbytes);
    t->data = NULL;
    tdm_tensor_destroy(t);
    f->stream->slot[k] = NULL;
}

void tdm_stream_end(frame *f) {
    tdm_stream_run *r = f->stream;
    if (!r) return;
    const tdm_plan *p = f->plan;
    for (size_t v = 0; v < p->graph->n_values; v++)
        for (int d = 0; d < p->n_devices; d++) stream_drop(f, (int)v, d);
    pthread_mutex_unlock(&r->pool->run_mu);
    tdm_free(f->a, r->slot);
    tdm_free(f->a, r->flow);
    tdm_free(f->a, r->done);
    tdm_free(f->a, r->issued);
    tdm_free(f->a, r);
    f->stream = NULL;
}

/* Uploads weight v into a ring buffer of plan device d (once per run). `for_node`: the
 * reader it is prefetched for (the trace names it). */
static tdm_status *stream_upload(frame *f, int v, int d, size_t for_node) {
    const tdm_plan *p = f->plan;
    size_t k = (size_t)v * (size_t)p->n_devices + (size_t)d;
    if (f->stream->slot[k]) return NULL;
    tdm_device *dev = p->devices[d];
    const tdm_tensor *w = p->graph->values[v].data;
    tdm_trace *tr = p->trace;
    int64_t t0 = tr ? tdm_now_ns() : 0;
    void *buf = NULL;
    TDM_TRY(pool_get(f, d, w->nbytes, &buf));
    tdm_tensor *t = NULL;
    tdm_status *st = tdm_tensor_new_view(f->a, w->dtype, w->rank, w->dims, buf, &t);
    bool queued = tdm_device_has_copy_queue(dev);
    if (!st && w->nbytes && queued) {
        /* on the copy queue, after the kernels issued so far (the buffer's last readers, and a
         * new buffer's allocation); the reader waits on its event (tdm_stream_input) */
        void *after = NULL;
        st = tdm_device_event_record(dev, &after);
        if (!st) st = tdm_device_upload_queued(dev, buf, w->data, w->nbytes, after, &f->stream->done[k]);
        tdm_device_event_free(dev, after);
    } else if (!st && w->nbytes) {
        st = tdm_device_upload(dev, buf, w->data, w->nbytes);
    }
    if (st) {
        if (t) t->data = NULL;
        tdm_tensor_destroy(t);
        pool_put(f, d, buf, w->nbytes);
        return st;
    }
    t->device = dev;
    f->stream->slot[k] = t;
    tdm_exec_mon_copy(f, dev, true, w->nbytes, v);
    if (tdm_exec_mon(f) && f->stream->pool->pinned && f->stream->pool->pinned[k] == 1)
        tdm_monitor_copy_pinned(tdm_exec_mon(f), dev->index, (int64_t)w->nbytes);
    if (tr && queued) { /* traced when its reader waits for it */
        f->stream->issued[k] = t0;
        f->stream->flow[k] = tdm_trace_flow_id(tr);
    } else if (tr) {
        tdm_device_synchronize(dev); /* traced runs time every step where it is spent */
        char track[64], name[160], args[200];
        snprintf(track, sizeof track, "%s copies", dev->name);
        snprintf(name, sizeof name, "stream %s", p->graph->values[v].name);
        snprintf(args, sizeof args, "\"bytes\":%zu,\"to\":\"%s\",\"streamed\":true,\"for_node\":%zu",
                 w->nbytes, dev->name, for_node);
        uint64_t id = tdm_trace_flow_id(tr);
        tdm_trace_event(tr, track, name, "copy", t0, tdm_now_ns(), args, id, 0);
        f->stream->flow[k] = id;
    }
    return NULL;
}

/* Streamed weights of node i read on plan device d: uploaded. */
static tdm_status *stream_node(frame *f, size_t i, int d) {
    const tdm_budget_plan *b = f->plan->budget;
    const tdm_node *n = &f->plan->graph->nodes[i];
    for (int j = 0; j < n->n_inputs; j++) {
        int v = n->inputs[j];
        if (v >= 0 && b->residency[v] == TDM_RES_STREAMED) TDM_TRY(stream_upload(f, v, d, i));
    }
    return NULL;
}

tdm_status *tdm_stream_prefetch(frame *f, size_t i) {
    if (!f->stream || !f->plan->budget->any_streamed) return NULL;
    const tdm_plan *p = f->plan;
    const tdm_budget_plan *b = p->budget;
    int d = p->graph->nodes[i].device;
    if (d < 0 || d >= p->n_devices || !b->n_units[d]) return NULL;
    int from = b->unit_pos[i], to = from + b->window[d];
    if (to >= b->n_units[d]) to = b->n_units[d] - 1;
    if (f->stream->next_unit[d] > from) from = f->stream->next_unit[d];
    for (int u = from; u <= to; u++) TDM_TRY(stream_node(f, (size_t)b->units[d][u], d));
    if (to + 1 > f->stream->next_unit[d]) f->stream->next_unit[d] = to + 1;
    return NULL;
}

bool tdm_stream_applies(const frame *f, int v, const tdm_device *dev) {
    return f->stream && !dev->host_memory && f->plan->budget->any_streamed &&
           f->plan->budget->residency[v] == TDM_RES_STREAMED;
}

tdm_status *tdm_stream_input(frame *f, int v, tdm_device *dev, const tdm_tensor **out,
                             uint64_t *flow) {
    int d = tdm_exec_device_index(f, dev);
    if (d < 0) return TDM_ERR(TDM_ERR_INTERNAL, "unknown device %s", dev->name);
    size_t k = (size_t)v * (size_t)f->plan->n_devices + (size_t)d;
    if (!f->stream->slot[k]) TDM_TRY(stream_upload(f, v, d, 0)); /* not prefetched */
    if (f->stream->done[k]) { /* on the copy queue: the reader waits for it */
        tdm_trace *tr = f->plan->trace;
        int64_t w0 = tr ? tdm_now_ns() : 0;
        tdm_status *st = tdm_device_event_wait(dev, dev, f->stream->done[k]);
        tdm_device_event_free(dev, f->stream->done[k]);
        f->stream->done[k] = NULL;
        if (st) return st;
        if (tr) {
            int64_t w1 = tdm_now_ns();
            char track[64], name[160], args[200];
            const tdm_value *val = &f->plan->graph->values[v];
            snprintf(track, sizeof track, "%s copies", dev->name);
            snprintf(name, sizeof name, "stream %s", val->name);
            snprintf(args, sizeof args, "\"bytes\":%zu,\"to\":\"%s\",\"streamed\":true,"
                     "\"copy_queue\":true", val->data->nbytes, dev->name);
            /* from its issue to the end of the reader's wait (the host's view) */
            tdm_trace_event(tr, track, name, "copy", f->stream->issued[k], w1, args,
                            f->stream->flow[k], 0);
            if (w1 - w0 > 1000) {
                snprintf(track, sizeof track, "%s waits", dev->name);
                snprintf(name, sizeof name, "wait %s", val->name);
                tdm_trace_event(tr, track, name, "wait", w0, w1, NULL, 0, 0);
            }
        }
    }
    *out = f->stream->slot[k];
    if (flow) *flow = f->stream->flow[k];
    return NULL;
}

void tdm_stream_after(frame *f, size_t i) {
    if (!f->stream || !f->plan->budget->any_streamed) return;
    const tdm_plan *p = f->plan;
    const tdm_budget_plan *b = p->budget;
    const tdm_node *n = &p->graph->nodes[i];
    int d = n->device;
    for (int j = 0; j < n->n_inputs; j++) {
        int v = n->inputs[j];
        if (v >= 0 && b->residency[v] == TDM_RES_STREAMED &&
            b->last_reader[(size_t)v * (size_t)p->n_devices + (size_t)d] == (int)i)
            stream_drop(f, v, d);
    }
}

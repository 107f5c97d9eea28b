/* Multi-device runs for the executor (executor_internal.h). */
#include <pthread.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "sched/budget.h"
#include "sched/cost.h"
#include "sched/executor_internal.h"

/* ---- several devices at once ------------------------------------------------------
 * When a plan spreads over several devices, one host thread per device works through the
 * nodes placed on that device as soon as their inputs exist, so independent branches on
 * different devices run at the same time. Values are released when their last reader is
 * done (a count, since readers may finish in any order). The arena of the memory plan is
 * not used here: its offsets assume one node at a time. */

typedef struct par_state {
    frame *f;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int *pending;    /* per node: producers not finished */
    int *readers;    /* per value: readers not finished */
    unsigned char *state; /* per node: 0 waiting, 1 running, 2 done */
    size_t n_done;
    tdm_status *err;
} par_state;

typedef struct par_worker {
    par_state *ps;
    int device; /* plan device position */
} par_worker;

static void par_finish_value(par_state *ps, int v) {
    frame *f = ps->f;
    if (v < 0 || --ps->readers[v] > 0) return;
    if (f->g->values[v].is_output) return;
    tdm_exec_drop_replicas(f, v);
    if (f->owned[v]) {
        tdm_exec_mon_hold(f, f->vals[v], -1);
        tdm_tensor_destroy((tdm_tensor *)f->vals[v]);
        f->vals[v] = NULL;
        f->owned[v] = false;
    }
}

/* Asynchronous copies in a multi-device run (sched/xfer.h). */

/* Before node n's inputs are gathered (lock held): a reader that needs host data waits for
 * the downloads of its inputs with the lock released, so other devices go on meanwhile. */
static tdm_status *xfer_prewait(par_state *ps, const tdm_node *n, tdm_device *dev) {
    frame *f = ps->f;
    if (!f->xfer || (!dev->host_memory && tdm_xfer_device_async(dev))) return NULL;
    bool any = false;
    for (int k = 0; k < n->n_inputs && !any; k++) any = tdm_xfer_has_download(f->xfer, n->inputs[k]);
    if (!any) return NULL;
    tdm_status *st = NULL;
    pthread_mutex_unlock(&ps->mu);
    for (int k = 0; k < n->n_inputs && !st; k++) /* the first reader's wait is traced later */
        st = tdm_xfer_wait(f->xfer, n->inputs[k], NULL, NULL, NULL);
    pthread_mutex_lock(&ps->mu);
    return st;
}

/* Node `pick` was just queued on plan device `di` (lock held): downloads of its outputs that
 * a reader on another device or the caller needs start now, so they overlap whatever the
 * device does next. */
static tdm_status *xfer_eager_downloads(frame *f, size_t pick, int di) {
    const tdm_graph *g = f->g;
    const tdm_node *n = &g->nodes[pick];
    if (!f->xfer) return NULL;
    for (int k = 0; k < n->n_outputs; k++) {
        int v = n->outputs[k];
        const tdm_tensor *t = v >= 0 ? f->vals[v] : NULL;
        if (!t || !t->device || !tdm_xfer_device_async(t->device)) continue;
        bool need = g->values[v].is_output;
        for (size_t c = pick + 1; c < g->n_nodes && !need; c++) {
            if (g->nodes[c].device == di) continue;
            for (int j = 0; j < g->nodes[c].n_inputs && !need; j++) need = g->nodes[c].inputs[j] == v;
        }
        if (!need) continue;
        TDM_TRY(tdm_exec_replicas(f));
        TDM_TRY(tdm_exec_host_copy(f, v, &f->replicas[(size_t)v * (1 + TDM_MAX_DEVICES)]));
    }
    return NULL;
}

static void *par_worker_main(void *arg) {
    par_worker *w = arg;
    par_state *ps = w->ps;
    frame *f = ps->f;
    const tdm_graph *g = f->g;
    const tdm_plan *p = f->plan;
    size_t max_in = 1, max_out = 1;
    for (size_t i = 0; i < g->n_nodes; i++) {
        if ((size_t)g->nodes[i].n_inputs > max_in) max_in = (size_t)g->nodes[i].n_inputs;
        if ((size_t)g->nodes[i].n_outputs > max_out) max_out = (size_t)g->nodes[i].n_outputs;
    }
    const tdm_tensor **ins = tdm_calloc(f->a, max_in, sizeof *ins);
    tdm_tensor **outs = tdm_calloc(f->a, max_out, sizeof *outs);
    tdm_device *seg_dev = NULL; /* the open launch window (executor.c), if any */
    size_t seg_last = 0;
    pthread_mutex_lock(&ps->mu);
    if (!ins || !outs) {
        if (!ps->err) ps->err = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory starting a run");
        pthread_cond_broadcast(&ps->cv);
    }
    /* a device under a memory budget runs its nodes in the graph's order: the budget's
     * activation estimate (sched/budget.c) assumes that order, and a later node run ahead
     * (while an earlier one waits for another device) would hold its output longer */
    bool in_order = p->budget && w->device < TDM_MAX_DEVICES && p->budget->budget[w->device] > 0 &&
                    !p->devices[w->device]->host_memory;
    while (!ps->err && ps->n_done < g->n_nodes) {
        size_t pick = g->n_nodes;
        bool mine_left = false;
        for (size_t i = 0; i < g->n_nodes; i++) {
            if (g->nodes[i].device != w->device || ps->state[i]) continue;
            mine_left = true;
            if (ps->pending[i] == 0) {
                pick = i;
                break;
            }
            if (in_order) break;
        }
        if (!mine_left) break;
        if (pick == g->n_nodes) {
            pthread_cond_wait(&ps->cv, &ps->mu);
            continue;
        }
        const tdm_node *n = &g->nodes[pick];
        ps->state[pick] = 1;
        tdm_device *dev = p->devices[w->device];
        tdm_status *st = tdm_exec_between_nodes(f, pick);
        if (!st) st = xfer_prewait(ps, n, dev);
        if (!st) st = tdm_stream_prefetch(f, pick); /* streamed weights (budgets) */
        /* copies end the open window first */
        if (seg_dev && !st && tdm_exec_node_moves(f, n, dev)) {
            tdm_device *end = seg_dev;
            seg_dev = NULL;
            pthread_mutex_unlock(&ps->mu);
            st = tdm_device_segment_end(end, true);
            pthread_mutex_lock(&ps->mu);
        }
        uint64_t flows[4];
        int n_flows = 0;
        /* inputs in this device's memory (copies are made under the lock: they touch the
         * frame's shared copy table) */
        for (int k = 0; k < n->n_inputs && !st; k++) {
            int v = n->inputs[k];
            ins[k] = NULL;
            if (v < 0) continue;
            if (!f->vals[v])
                st = TDM_ERR(TDM_ERR_INTERNAL, "%s node '%s' reads '%s', which is not available",
                             n->op_type, n->name, g->values[v].name);
            else {
                uint64_t flow = 0;
                st = tdm_exec_input_at(f, n, k, dev, &ins[k], &flow);
                if (flow && n_flows < 4) flows[n_flows++] = flow;
                if (st) st = tdm_status_wrap(st, "%s node '%s': ", n->op_type, n->name);
            }
        }
        bool win = tdm_exec_windowed(f, pick);
        bool goes_on = seg_dev && !st && pick == seg_last + 1 && win; /* the open window */
        uint64_t seg_key = win && !goes_on ? tdm_exec_segment_key(f, pick) : 0;
        pthread_mutex_unlock(&ps->mu);
        if (seg_dev && !goes_on) { /* the window ends */
            tdm_device *end = seg_dev;
            seg_dev = NULL;
            tdm_status *e = tdm_device_segment_end(end, !st);
            if (!st) st = e;
            else tdm_status_free(e);
        }
        if (!st && !seg_dev && win && !(st = tdm_device_segment_begin(dev, seg_key))) seg_dev = dev;
        seg_last = pick;
        int64_t t0 = f->times || p->trace ? tdm_now_ns() : 0;
        if (!st) {
            if (p->monitor) tdm_monitor_node_begin(p->monitor, dev->index);
            st = tdm_exec_run_node(dev, p->nodes[pick].kernel, p->nodes[pick].state, f->a, f->pool, n,
                          (const tdm_tensor *const *)ins, outs, f);
            if (p->monitor) tdm_monitor_node_end(p->monitor, dev->index);
        }
        if (!st && (f->times || p->trace)) {
            tdm_device_synchronize(dev);
            int64_t t1 = tdm_now_ns();
            if (f->times) f->times[pick] += (double)(t1 - t0) / 1e6;
            tdm_exec_note_run(f, pick, n, (const tdm_tensor *const *)ins, outs);
            if (p->trace) tdm_exec_trace_kernel(p->trace, dev, n, pick, t0, t1, flows, n_flows);
        }
        if (seg_dev && (st || pick + 1 >= g->n_nodes || g->nodes[pick + 1].device != w->device)) {
            tdm_device *end = seg_dev; /* the next node is another device's: the window ends */
            seg_dev = NULL;
            tdm_status *e = tdm_device_segment_end(end, !st);
            if (!st) st = e;
            else tdm_status_free(e);
        }
        pthread_mutex_lock(&ps->mu);
        if (st) {
            if (!ps->err) ps->err = st;
            else tdm_status_free(st);
            pthread_cond_broadcast(&ps->cv);
            break;
        }
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0) {
                tdm_tensor_destroy(outs[k]);
                continue;
            }
            f->vals[v] = outs[k];
            f->owned[v] = true;
            tdm_exec_mon_hold(f, outs[k], 1);
            if (ps->readers[v] == 0) { /* nobody reads it */
                ps->readers[v] = 1;
                par_finish_value(ps, v);
            }
        }
        for (int k = 0; k < n->n_inputs; k++) par_finish_value(ps, n->inputs[k]);
        for (int k = 0; k < n->n_implicit; k++) par_finish_value(ps, n->implicit[k]);
        tdm_stream_after(f, pick);
        if ((st = xfer_eager_downloads(f, pick, w->device))) {
            if (!ps->err) ps->err = st;
            else tdm_status_free(st);
            pthread_cond_broadcast(&ps->cv);
            break;
        }
        ps->state[pick] = 2;
        ps->n_done++;
        /* wake the consumers */
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            for (size_t c = pick + 1; c < g->n_nodes; c++) {
                const tdm_node *m = &g->nodes[c];
                for (int j = 0; j < m->n_inputs; j++)
                    if (m->inputs[j] == v) ps->pending[c]--;
                for (int j = 0; j < m->n_implicit; j++)
                    if (m->implicit[j] == v) ps->pending[c]--;
            }
        }
        pthread_cond_broadcast(&ps->cv);
    }
    pthread_mutex_unlock(&ps->mu);
    if (seg_dev) tdm_status_free(tdm_device_segment_end(seg_dev, false)); /* the run failed */
    tdm_free(f->a, ins);
    tdm_free(f->a, outs);
    return NULL;
}

tdm_status *tdm_exec_parallel(frame *f) {
    const tdm_graph *g = f->g;
    const tdm_plan *p = f->plan;
    par_state ps = {.f = f};
    ps.pending = tdm_calloc(f->a, g->n_nodes + 1, sizeof *ps.pending);
    ps.readers = tdm_calloc(f->a, g->n_values + 1, sizeof *ps.readers);
    ps.state = tdm_calloc(f->a, g->n_nodes + 1, sizeof *ps.state);
    par_worker workers[TDM_MAX_DEVICES];
    pthread_t threads[TDM_MAX_DEVICES];
    int n_threads = 0;
    tdm_status *st = NULL;
    if (!ps.pending || !ps.readers || !ps.state) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory starting a run");
        goto out;
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0) continue;
            ps.readers[v]++;
            if (g->values[v].producer >= 0) ps.pending[i]++;
        }
        for (int k = 0; k < n->n_implicit; k++) {
            ps.readers[n->implicit[k]]++;
            if (g->values[n->implicit[k]].producer >= 0) ps.pending[i]++;
        }
    }
    pthread_mutex_init(&ps.mu, NULL);
    pthread_cond_init(&ps.cv, NULL);
    for (int d = 1; d < p->n_devices && d < TDM_MAX_DEVICES; d++) {
        workers[d] = (par_worker){&ps, d};
        if (pthread_create(&threads[n_threads], NULL, par_worker_main, &workers[d]) != 0) {
            pthread_mutex_lock(&ps.mu);
            if (!ps.err) ps.err = TDM_ERR(TDM_ERR_RUNTIME, "cannot start a device thread");
            pthread_cond_broadcast(&ps.cv);
            pthread_mutex_unlock(&ps.mu);
            break;
        }
        n_threads++;
    }
    workers[0] = (par_worker){&ps, 0};
    par_worker_main(&workers[0]); /* the calling thread serves the first device */
    for (int t = 0; t < n_threads; t++) pthread_join(threads[t], NULL);
    st = ps.err;
    if (!st && ps.n_done != g->n_nodes)
        st = TDM_ERR(TDM_ERR_INTERNAL, "the run stopped with %zu of %zu nodes done", ps.n_done,
                     g->n_nodes);
    pthread_mutex_destroy(&ps.mu);
    pthread_cond_destroy(&ps.cv);
out:
    tdm_free(f->a, ps.pending);
    tdm_free(f->a, ps.readers);
    tdm_free(f->a, ps.state);
    return st;
}
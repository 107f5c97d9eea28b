/* Values in other memories for the executor (executor_internal.h): the copy table of a
 * frame, blocking copies between host and devices, the asynchronous path through
 * sched/xfer.c, and the device memory/copy counters of sched/monitor.h. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "sched/cost.h"
#include "sched/executor_internal.h"

int tdm_exec_device_index(const frame *f, const tdm_device *dev) {
    if (!f->plan) return -1;
    for (int i = 0; i < f->plan->n_devices; i++)
        if (f->plan->devices[i] == dev) return i;
    return -1;
}

/* ---- device counters (sched/monitor.h; issue 9 monitoring) -------------------------
 * Memory a frame of a plan holds: device tensors count on their device, host tensors that
 * own their data on the plan's host-memory device; arena headers (pooled) are counted as the
 * whole arena when a run takes it. Subgraph frames (no plan) count nothing: what they hand
 * back is counted when the parent stores it. */
tdm_monitor *tdm_exec_mon(const frame *f) { return f->plan ? f->plan->monitor : NULL; }

int tdm_exec_mon_host_slot(const tdm_plan *p) {
    for (int i = 0; i < p->n_devices; i++)
        if (p->devices[i]->host_memory) return p->devices[i]->index;
    return -1;
}

void tdm_exec_mon_hold(const frame *f, const tdm_tensor *t, int sign) {
    tdm_monitor *m = tdm_exec_mon(f);
    if (!m || !t || t->pooled || (!t->device && !t->owns_data)) return;
    int slot = t->device ? ((const tdm_device *)t->device)->index : tdm_exec_mon_host_slot(f->plan);
    tdm_monitor_memory(m, slot, sign * (int64_t)t->nbytes);
}

/* A copy of value v into (upload) or out of the memory of `dev` (the KV cache's counted
 * apart too). */
void tdm_exec_mon_copy(const frame *f, const tdm_device *dev, bool upload, size_t bytes, int v) {
    if (!tdm_exec_mon(f) || !dev) return;
    tdm_monitor_copy(tdm_exec_mon(f), dev->index, upload, (int64_t)bytes);
    if (v >= 0 && f->g->values[v].kv_layer)
        tdm_monitor_copy_kv(tdm_exec_mon(f), dev->index, upload, (int64_t)bytes);
}

/* A copy on the timeline: on the device side's copy track, with an arrow to its reader. */
static void trace_copy(tdm_trace *tr, frame *f, int v, tdm_device *from, tdm_device *to, int64_t t0,
                       uint64_t *flow) {
    char track[64], name[120], args[96];
    tdm_device *side = from ? from : to;
    snprintf(track, sizeof track, "%s copies", side ? side->name : "host");
    snprintf(name, sizeof name, "%s %s", from ? "download" : "upload", f->g->values[v].name);
    snprintf(args, sizeof args, "\"bytes\":%zu,\"from\":\"%s\",\"to\":\"%s\"", f->vals[v]->nbytes,
             from ? from->name : "host", to ? to->name : "host");
    uint64_t id = tdm_trace_flow_id(tr);
    tdm_trace_event(tr, track, name, "copy", t0, tdm_now_ns(), args, id, 0);
    if (flow) *flow = id;
}

/* ---- asynchronous copies (sched/xfer.h) ---------------------------------------------
 * For devices with the version 3 members (events, download_async, host_alloc) when the run
 * has an xfer: downloads go to staging memory and their readers wait on the download's
 * event; uploads are queued without blocking. Devices without them (cpu, testdev) and runs
 * with the sync_copies setting take the blocking path in tdm_exec_input_for. */

tdm_status *tdm_exec_replicas(frame *f) {
    if (f->replicas) return NULL;
    f->replicas = tdm_calloc(f->a, f->g->n_values * (1 + TDM_MAX_DEVICES) + 1, sizeof *f->replicas);
    return f->replicas ? NULL : TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory copying a tensor");
}

/* A copy whose end is known (an asynchronous download ends when its first reader's wait
 * returns), with an arrow to its reader. */
static void trace_copy_span(tdm_trace *tr, frame *f, int v, tdm_device *from, int64_t t0,
                            int64_t t1, uint64_t *flow) {
    char track[64], name[120], args[96];
    snprintf(track, sizeof track, "%s copies", from->name);
    snprintf(name, sizeof name, "download %s", f->g->values[v].name);
    snprintf(args, sizeof args, "\"bytes\":%zu,\"from\":\"%s\",\"to\":\"host\",\"async\":true",
             f->vals[v]->nbytes, from->name);
    uint64_t id = tdm_trace_flow_id(tr);
    tdm_trace_event(tr, track, name, "copy", t0, t1, args, id, 0);
    if (flow) *flow = id;
}

/* The blocking path's uploads may return early on a version 3 device: wait for them there,
 * since the source's host memory may go as soon as its reader is queued. */
static tdm_status *xfer_sync_upload(const frame *f, tdm_device *dev) {
    return !f->xfer && tdm_xfer_device_async(dev) ? tdm_device_synchronize(dev) : NULL;
}

/* Whether the copy of value v for `dev` takes the asynchronous path. */
static bool xfer_applies(const frame *f, const tdm_tensor *t, const tdm_device *dev) {
    if (!f->xfer || !f->plan) return false;
    bool want_host = !dev || dev->host_memory;
    return want_host ? tdm_xfer_device_async(t->device) : tdm_xfer_device_async(dev);
}

/* Starts (asynchronous source) or makes (blocking source) the host copy of device value v. */
tdm_status *tdm_exec_host_copy(frame *f, int v, tdm_tensor **host) {
    const tdm_tensor *t = f->vals[v];
    if (*host) return NULL;
    if (tdm_xfer_device_async(t->device)) TDM_TRY(tdm_xfer_download(f->xfer, v, t, host));
    else TDM_TRY(tdm_device_to_host(f->a, t, host));
    tdm_exec_mon_copy(f, t->device, false, t->nbytes, v);
    tdm_exec_mon_hold(f, *host, 1);
    return NULL;
}

/* Waits for value v's download (if one is running); the first reader traces the copy and,
 * when it had to wait, the wait on its own track. */
static tdm_status *xfer_wait_host(frame *f, int v, const tdm_device *reader, uint64_t *flow) {
    tdm_trace *tr = f->plan ? f->plan->trace : NULL;
    int64_t t0 = 0, t1 = 0, w0 = tr ? tdm_now_ns() : 0;
    bool first = false;
    TDM_TRY(tdm_xfer_wait(f->xfer, v, &t0, &t1, tr ? &first : NULL));
    if (tr && first) {
        int64_t w1 = tdm_now_ns();
        trace_copy_span(tr, f, v, (tdm_device *)f->vals[v]->device, t0, t1, flow);
        if (w1 - w0 > 1000) {
            char track[64], name[120];
            snprintf(track, sizeof track, "%s waits", reader && !reader->host_memory ? reader->name : "host");
            snprintf(name, sizeof name, "wait %s", f->g->values[v].name);
            tdm_trace_event(tr, track, name, "wait", w0, w1, NULL, 0, 0);
        }
    }
    return NULL;
}

/* tdm_exec_input_for on the asynchronous path (host is the value's host-copy slot). */
static tdm_status *xfer_input_for(frame *f, int v, tdm_device *dev, tdm_tensor **host,
                                  const tdm_tensor **out, uint64_t *flow) {
    const tdm_tensor *t = f->vals[v];
    tdm_trace *tr = f->plan->trace;
    if (!dev || dev->host_memory) {
        TDM_TRY(tdm_exec_host_copy(f, v, host));
        TDM_TRY(xfer_wait_host(f, v, dev, flow));
        *out = *host;
        return NULL;
    }
    int di = tdm_exec_device_index(f, dev);
    if (di < 0 || di >= TDM_MAX_DEVICES) return TDM_ERR(TDM_ERR_INTERNAL, "unknown device %s", dev->name);
    const tdm_value *val = &f->g->values[v];
    bool constant = val->data && t == val->data;
    pthread_mutex_t *mu = NULL;
    tdm_tensor **slot = constant ? tdm_plan_const_slot((tdm_plan *)f->plan, v, di, &mu)
                                 : &f->replicas[(size_t)v * (1 + TDM_MAX_DEVICES) + 1 + (size_t)di];
    if (mu) pthread_mutex_lock(mu);
    tdm_status *st = NULL;
    if (!*slot) {
        const tdm_tensor *src = t;
        if (t->device) { /* device to device goes through host staging memory */
            st = tdm_exec_host_copy(f, v, host);
            if (!st && tr) st = xfer_wait_host(f, v, dev, NULL); /* traced: show it done */
            src = *host;
        }
        int64_t t0 = tr ? tdm_now_ns() : 0;
        /* graph inputs and constants outlive the run: uploaded from where they are */
        bool lives = constant || (!t->device && !f->owned[v]);
        if (!st && !(st = tdm_xfer_upload(f->xfer, dev, v, src, lives, slot))) {
            tdm_exec_mon_copy(f, dev, true, src->nbytes, v);
            tdm_exec_mon_hold(f, *slot, 1);
        }
        if (!st && tr) {
            tdm_device_synchronize(dev); /* traced runs time every step where it is spent */
            trace_copy(tr, f, v, NULL, dev, t0, flow);
        }
    }
    if (mu) pthread_mutex_unlock(mu);
    if (st) return st;
    *out = *slot;
    return NULL;
}

/* take_outputs: the output's host copy when an asynchronous download made one (waited for
 * here), else NULL. */
tdm_status *tdm_exec_staged_output(frame *f, int v, const tdm_tensor **ready) {
    *ready = NULL;
    if (!f->xfer || !f->replicas || !tdm_xfer_has_download(f->xfer, v)) return NULL;
    tdm_tensor *h = f->replicas[(size_t)v * (1 + TDM_MAX_DEVICES)];
    if (!h) return NULL;
    TDM_TRY(xfer_wait_host(f, v, NULL, NULL));
    *ready = h;
    return NULL;
}

/* End of a run: waits for the uploads still queued and returns the staging memory; on a
 * failure there the outputs already handed out are taken back. */
tdm_status *tdm_exec_finish(frame *f, tdm_status *st, tdm_tensor **outputs, size_t n_out) {
    tdm_status *xst = tdm_xfer_end(f->xfer);
    f->xfer = NULL;
    if (!xst) return st;
    if (st) {
        tdm_status_free(xst);
        return st;
    }
    for (size_t j = 0; j < n_out; j++) {
        tdm_tensor_destroy(outputs[j]);
        outputs[j] = NULL;
    }
    return xst;
}

bool tdm_exec_input_moves(const frame *f, int v, const tdm_device *dev) {
    const tdm_tensor *t = f->vals[v];
    if (!t) return false;
    bool want_host = !dev || dev->host_memory;
    if (want_host ? t->device == NULL : t->device == dev) return false;
    if (want_host) return !(f->replicas && f->replicas[(size_t)v * (1 + TDM_MAX_DEVICES)]);
    int di = tdm_exec_device_index(f, dev);
    if (di < 0 || di >= TDM_MAX_DEVICES || !f->plan) return true;
    const tdm_value *val = &f->g->values[v];
    if (val->data && t == val->data) { /* a constant: uploaded once per plan */
        pthread_mutex_t *mu;
        tdm_tensor **slot = tdm_plan_const_slot((tdm_plan *)f->plan, v, di, &mu);
        pthread_mutex_lock(mu);
        bool there = *slot != NULL;
        pthread_mutex_unlock(mu);
        return !there;
    }
    return !(f->replicas && f->replicas[(size_t)v * (1 + TDM_MAX_DEVICES) + 1 + (size_t)di]);
}

/* The plan's entry of node n when n is a node of the plan's graph, else NULL. */
static const tdm_plan_node *plan_node_of(const frame *f, const tdm_node *n) {
    const tdm_plan *p = f->plan;
    if (!p || p->graph != f->g || n < f->g->nodes || n >= f->g->nodes + f->g->n_nodes) return NULL;
    return &p->nodes[n - f->g->nodes];
}

bool tdm_exec_reads_on_host(const frame *f, const tdm_node *n, int k) {
    const tdm_plan_node *pn = plan_node_of(f, n);
    return pn && TDM_KF_HOST_READ(pn->kflags, k);
}

/* tdm_node_reads_shape_only, from the plan's entry where there is one (no string compares). */
static bool reads_shape_only(const frame *f, const tdm_node *n, int k) {
    const tdm_plan_node *pn = plan_node_of(f, n);
    return pn ? k == 0 && pn->shape_only0 : tdm_node_reads_shape_only(n, k);
}

bool tdm_exec_node_moves(const frame *f, const tdm_node *n, const tdm_device *dev) {
    for (int k = 0; k < n->n_inputs; k++) {
        int v = n->inputs[k];
        if (v < 0 || reads_shape_only(f, n, k)) continue;
        if (tdm_exec_reads_on_host(f, n, k)) { /* (where it is: host or dev; else to the host) */
            const tdm_tensor *t = f->vals[v];
            if (t && t->device && t->device != dev && tdm_exec_input_moves(f, v, NULL)) return true;
            continue;
        }
        if (tdm_exec_input_moves(f, v, dev)) return true;
    }
    return false;
}

tdm_status *tdm_exec_input_at(frame *f, const tdm_node *n, int k, tdm_device *dev,
                              const tdm_tensor **out, uint64_t *flow) {
    int v = n->inputs[k];
    const tdm_tensor *t = f->vals[v];
    if (reads_shape_only(f, n, k)) { /* the tensor where it is: Shape reads its dims */
        *out = t;
        return NULL;
    }
    if (tdm_exec_reads_on_host(f, n, k)) {
        if (!t->device || t->device == dev) {
            *out = t;
            return NULL;
        }
        dev = NULL; /* another device's: to the host */
    }
    return tdm_exec_input_for(f, v, dev, out, flow);
}

/* The tensor of value v in the memory `dev` works on (host for host-memory devices):
 * the value itself when it is already there, else a copy made once per run (constants: once
 * per plan) and reused by every later consumer on that device. */
tdm_status *tdm_exec_input_for(frame *f, int v, tdm_device *dev, const tdm_tensor **out,
                                   uint64_t *flow) {
    const tdm_tensor *t = f->vals[v];
    tdm_trace *tr = f->plan ? f->plan->trace : NULL;
    if (flow) *flow = 0;
    bool want_host = !dev || dev->host_memory;
    if (want_host ? t->device == NULL : t->device == dev) {
        *out = t;
        return NULL;
    }
    if (!want_host && t == f->g->values[v].data && tdm_stream_applies(f, v, dev))
        return tdm_stream_input(f, v, dev, out, flow); /* a streamed weight (budgets) */
    if (!f->replicas) {
        if (!f->plan && !want_host) return TDM_ERR(TDM_ERR_INTERNAL, "device copy outside a plan");
        f->replicas = tdm_calloc(f->a, f->g->n_values * (1 + TDM_MAX_DEVICES) + 1,
                                 sizeof *f->replicas);
        if (!f->replicas) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory copying a tensor");
    }
    tdm_tensor **host = &f->replicas[(size_t)v * (1 + TDM_MAX_DEVICES)];
    if (xfer_applies(f, t, dev)) return xfer_input_for(f, v, dev, host, out, flow);
    if (want_host) {
        if (!*host) {
            int64_t t0 = tr ? tdm_now_ns() : 0;
            TDM_TRY(tdm_device_to_host(f->a, t, host));
            tdm_exec_mon_copy(f, t->device, false, t->nbytes, v);
            tdm_exec_mon_hold(f, *host, 1);
            if (tr) trace_copy(tr, f, v, (tdm_device *)t->device, NULL, t0, flow);
        }
        *out = *host;
        return NULL;
    }
    int di = tdm_exec_device_index(f, dev);
    if (di < 0 || di >= TDM_MAX_DEVICES) return TDM_ERR(TDM_ERR_INTERNAL, "unknown device %s", dev->name);
    const tdm_value *val = &f->g->values[v];
    bool constant = val->data && t == val->data && f->plan;
    pthread_mutex_t *mu = NULL;
    tdm_tensor **slot = constant ? tdm_plan_const_slot((tdm_plan *)f->plan, v, di, &mu)
                                 : &f->replicas[(size_t)v * (1 + TDM_MAX_DEVICES) + 1 + (size_t)di];
    if (mu) pthread_mutex_lock(mu);
    tdm_status *st = NULL;
    if (!*slot) {
        const tdm_tensor *src = t;
        if (t->device) { /* device to device goes through the host */
            int64_t t0 = tr ? tdm_now_ns() : 0;
            if (!*host && !(st = tdm_device_to_host(f->a, t, host))) {
                tdm_exec_mon_copy(f, t->device, false, t->nbytes, v);
                tdm_exec_mon_hold(f, *host, 1);
            }
            if (!st && tr) trace_copy(tr, f, v, (tdm_device *)t->device, NULL, t0, NULL);
            src = *host;
        }
        int64_t t0 = tr ? tdm_now_ns() : 0;
        if (!st && !(st = tdm_device_to_device(dev, f->a, src, slot))) {
            tdm_exec_mon_copy(f, dev, true, src->nbytes, v);
            tdm_exec_mon_hold(f, *slot, 1); /* constants stay for the plan's life */
        }
        if (!st) st = xfer_sync_upload(f, dev);
        if (!st && tr) {
            tdm_device_synchronize(dev);
            trace_copy(tr, f, v, NULL, dev, t0, flow);
        }
    }
    if (mu) pthread_mutex_unlock(mu);
    if (st) return st;
    *out = *slot;
    return NULL;
}

void tdm_exec_drop_replicas(frame *f, int v) {
    if (!f->replicas || v < 0) return;
    for (int i = 0; i < 1 + TDM_MAX_DEVICES; i++) {
        tdm_tensor **r = &f->replicas[(size_t)v * (1 + TDM_MAX_DEVICES) + (size_t)i];
        if (i == 0) tdm_xfer_drop(f->xfer, v); /* staging memory back (sched/xfer.h) */
        tdm_exec_mon_hold(f, *r, -1);
        tdm_tensor_destroy(*r);
        *r = NULL;
    }
}

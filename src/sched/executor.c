/* Runs plans node by node. Each node: shapes from the schema's infer on the real inputs,
 * outputs allocated, kernel executed on the node's device; values are released after their
 * last reader. Subgraphs (If/Loop/Scan bodies) run through the same loop in a child frame
 * whose outer-scope names resolve in the enclosing frames. */
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/trace.h"

#include "core/alloc.h"
#include "graph/infer.h"
#include "ops/op.h"
#include "sched/monitor.h"
#include "sched/plan.h"
#include "sched/xfer.h"

#define MAX_IO 4096

typedef struct frame frame;
struct frame {
    const tdm_graph *g;
    const tdm_tensor **vals; /* per value: the tensor, borrowed or owned */
    bool *owned;
    const int *release_after; /* per value: last reader's node index (-1 = keep) */
    const frame *parent;
    const tdm_plan *plan;     /* main graph only: devices, kernels */
    tdm_device *dev;          /* subgraphs: the device of the control-flow node */
    const tdm_allocator *a;
    tdm_threadpool *pool;
    tdm_memplan *mp;          /* arena for this run's intermediates, or NULL */
    size_t *record;           /* first run with new shapes: bytes of each value, or NULL */
    /* copies of values in other memories: [v * (1 + TDM_REPLICA_DEVS) + 0] host copy,
     * [... + 1 + i] copy on the plan's device i; owned, freed with the value */
    tdm_tensor **replicas;
    double *times;            /* per node ms of this run (profiling), or NULL */
    tdm_xfer *xfer;           /* asynchronous copies of this run (sched/xfer.h), or NULL */
};

#define TDM_REPLICA_DEVS 16

static int plan_device_index(const frame *f, const tdm_device *dev) {
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
static tdm_monitor *mon_of(const frame *f) { return f->plan ? f->plan->monitor : NULL; }

static int mon_host_slot(const tdm_plan *p) {
    for (int i = 0; i < p->n_devices; i++)
        if (p->devices[i]->host_memory) return p->devices[i]->index;
    return -1;
}

static void mon_hold(const frame *f, const tdm_tensor *t, int sign) {
    tdm_monitor *m = mon_of(f);
    if (!m || !t || t->pooled || (!t->device && !t->owns_data)) return;
    int slot = t->device ? ((const tdm_device *)t->device)->index : mon_host_slot(f->plan);
    tdm_monitor_memory(m, slot, sign * (int64_t)t->nbytes);
}

/* A copy into (upload) or out of the memory of `dev`. */
static void mon_copy(const frame *f, const tdm_device *dev, bool upload, size_t bytes) {
    if (mon_of(f) && dev) tdm_monitor_copy(mon_of(f), dev->index, upload, (int64_t)bytes);
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
 * with TANDEM_SYNC_COPIES=1 take the blocking path in frame_input_for. */

static tdm_status *xfer_replicas(frame *f) {
    if (f->replicas) return NULL;
    f->replicas = tdm_calloc(f->a, f->g->n_values * (1 + TDM_REPLICA_DEVS) + 1, sizeof *f->replicas);
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
static tdm_status *xfer_host_copy(frame *f, int v, tdm_tensor **host) {
    const tdm_tensor *t = f->vals[v];
    if (*host) return NULL;
    if (tdm_xfer_device_async(t->device)) TDM_TRY(tdm_xfer_download(f->xfer, v, t, host));
    else TDM_TRY(tdm_device_to_host(f->a, t, host));
    mon_copy(f, t->device, false, t->nbytes);
    mon_hold(f, *host, 1);
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

/* frame_input_for on the asynchronous path (host is the value's host-copy slot). */
static tdm_status *xfer_input_for(frame *f, int v, tdm_device *dev, tdm_tensor **host,
                                  const tdm_tensor **out, uint64_t *flow) {
    const tdm_tensor *t = f->vals[v];
    tdm_trace *tr = f->plan->trace;
    if (!dev || dev->host_memory) {
        TDM_TRY(xfer_host_copy(f, v, host));
        TDM_TRY(xfer_wait_host(f, v, dev, flow));
        *out = *host;
        return NULL;
    }
    int di = plan_device_index(f, dev);
    if (di < 0 || di >= TDM_REPLICA_DEVS) return TDM_ERR(TDM_ERR_INTERNAL, "unknown device %s", dev->name);
    const tdm_value *val = &f->g->values[v];
    bool constant = val->data && t == val->data;
    tdm_plan *p = (tdm_plan *)f->plan;
    tdm_tensor **slot = constant ? &p->const_on_device[(size_t)v * (size_t)p->n_devices + (size_t)di]
                                 : &f->replicas[(size_t)v * (1 + TDM_REPLICA_DEVS) + 1 + (size_t)di];
    if (constant) pthread_mutex_lock(&p->mem_mu);
    tdm_status *st = NULL;
    if (!*slot) {
        const tdm_tensor *src = t;
        if (t->device) { /* device to device goes through host staging memory */
            st = xfer_host_copy(f, v, host);
            if (!st && tr) st = xfer_wait_host(f, v, dev, NULL); /* traced: show it done */
            src = *host;
        }
        int64_t t0 = tr ? tdm_now_ns() : 0;
        /* graph inputs and constants outlive the run: uploaded from where they are */
        bool lives = constant || (!t->device && !f->owned[v]);
        if (!st && !(st = tdm_xfer_upload(f->xfer, dev, v, src, lives, slot))) {
            mon_copy(f, dev, true, src->nbytes);
            mon_hold(f, *slot, 1);
        }
        if (!st && tr) {
            tdm_device_synchronize(dev); /* traced runs time every step where it is spent */
            trace_copy(tr, f, v, NULL, dev, t0, flow);
        }
    }
    if (constant) pthread_mutex_unlock(&p->mem_mu);
    if (st) return st;
    *out = *slot;
    return NULL;
}

/* take_outputs: the output's host copy when an asynchronous download made one (waited for
 * here), else NULL. */
static tdm_status *xfer_staged_output(frame *f, int v, const tdm_tensor **ready) {
    *ready = NULL;
    if (!f->xfer || !f->replicas || !tdm_xfer_has_download(f->xfer, v)) return NULL;
    tdm_tensor *h = f->replicas[(size_t)v * (1 + TDM_REPLICA_DEVS)];
    if (!h) return NULL;
    TDM_TRY(xfer_wait_host(f, v, NULL, NULL));
    *ready = h;
    return NULL;
}

/* End of a run: waits for the uploads still queued and returns the staging memory; on a
 * failure there the outputs already handed out are taken back. */
static tdm_status *xfer_finish(frame *f, tdm_status *st, tdm_tensor **outputs, size_t n_out) {
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

/* The tensor of value v in the memory `dev` works on (host for host-memory devices):
 * the value itself when it is already there, else a copy made once per run (constants: once
 * per plan) and reused by every later consumer on that device. */
static tdm_status *frame_input_for(frame *f, int v, tdm_device *dev, const tdm_tensor **out,
                                   uint64_t *flow) {
    const tdm_tensor *t = f->vals[v];
    tdm_trace *tr = f->plan ? f->plan->trace : NULL;
    if (flow) *flow = 0;
    bool want_host = !dev || dev->host_memory;
    if (want_host ? t->device == NULL : t->device == dev) {
        *out = t;
        return NULL;
    }
    if (!f->replicas) {
        if (!f->plan && !want_host) return TDM_ERR(TDM_ERR_INTERNAL, "device copy outside a plan");
        f->replicas = tdm_calloc(f->a, f->g->n_values * (1 + TDM_REPLICA_DEVS) + 1,
                                 sizeof *f->replicas);
        if (!f->replicas) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory copying a tensor");
    }
    tdm_tensor **host = &f->replicas[(size_t)v * (1 + TDM_REPLICA_DEVS)];
    if (xfer_applies(f, t, dev)) return xfer_input_for(f, v, dev, host, out, flow);
    if (want_host) {
        if (!*host) {
            int64_t t0 = tr ? tdm_now_ns() : 0;
            TDM_TRY(tdm_device_to_host(f->a, t, host));
            mon_copy(f, t->device, false, t->nbytes);
            mon_hold(f, *host, 1);
            if (tr) trace_copy(tr, f, v, (tdm_device *)t->device, NULL, t0, flow);
        }
        *out = *host;
        return NULL;
    }
    int di = plan_device_index(f, dev);
    if (di < 0 || di >= TDM_REPLICA_DEVS) return TDM_ERR(TDM_ERR_INTERNAL, "unknown device %s", dev->name);
    const tdm_value *val = &f->g->values[v];
    bool constant = val->data && t == val->data && f->plan;
    tdm_tensor **slot = constant ? &f->plan->const_on_device[(size_t)v * (size_t)f->plan->n_devices + (size_t)di]
                                 : &f->replicas[(size_t)v * (1 + TDM_REPLICA_DEVS) + 1 + (size_t)di];
    if (constant) pthread_mutex_lock(&((tdm_plan *)f->plan)->mem_mu);
    tdm_status *st = NULL;
    if (!*slot) {
        const tdm_tensor *src = t;
        if (t->device) { /* device to device goes through the host */
            int64_t t0 = tr ? tdm_now_ns() : 0;
            if (!*host && !(st = tdm_device_to_host(f->a, t, host))) {
                mon_copy(f, t->device, false, t->nbytes);
                mon_hold(f, *host, 1);
            }
            if (!st && tr) trace_copy(tr, f, v, (tdm_device *)t->device, NULL, t0, NULL);
            src = *host;
        }
        int64_t t0 = tr ? tdm_now_ns() : 0;
        if (!st && !(st = tdm_device_to_device(dev, f->a, src, slot))) {
            mon_copy(f, dev, true, src->nbytes);
            mon_hold(f, *slot, 1); /* constants stay for the plan's life */
        }
        if (!st) st = xfer_sync_upload(f, dev);
        if (!st && tr) {
            tdm_device_synchronize(dev);
            trace_copy(tr, f, v, NULL, dev, t0, flow);
        }
    }
    if (constant) pthread_mutex_unlock(&((tdm_plan *)f->plan)->mem_mu);
    if (st) return st;
    *out = *slot;
    return NULL;
}

static void frame_drop_replicas(frame *f, int v) {
    if (!f->replicas || v < 0) return;
    for (int i = 0; i < 1 + TDM_REPLICA_DEVS; i++) {
        tdm_tensor **r = &f->replicas[(size_t)v * (1 + TDM_REPLICA_DEVS) + (size_t)i];
        if (i == 0) tdm_xfer_drop(f->xfer, v); /* staging memory back (sched/xfer.h) */
        mon_hold(f, *r, -1);
        tdm_tensor_destroy(*r);
        *r = NULL;
    }
}

/* Output tensor for value v: a view into the arena when the memory plan has a slot of this
 * exact size, else a heap tensor. Zeroed either way (kernels may rely on it). */
static tdm_status *frame_new_output(frame *f, tdm_device *dev, int v, tdm_dtype dtype, int rank,
                                    const int64_t *dims, tdm_tensor **out) {
    if (dev && !dev->host_memory) return tdm_device_tensor_new(dev, f ? f->a : NULL, dtype, rank, dims, out);
    if (f && f->mp && v >= 0 && f->mp->offset[v] >= 0 && dtype != TDM_STRING) {
        int64_t count;
        size_t nbytes;
        tdm_status *st = tdm_shape_count(rank, dims, dtype, "output", &count, &nbytes);
        if (st) return st;
        if (nbytes == f->mp->size[v]) {
            tdm_tensor *t = &f->mp->headers[v];
            memset(t, 0, sizeof *t);
            t->dtype = dtype;
            t->rank = rank;
            memcpy(t->dims, dims, (size_t)rank * sizeof *dims);
            t->count = count;
            t->nbytes = nbytes;
            t->data = f->mp->arena + f->mp->offset[v];
            t->alloc = f->a;
            t->pooled = true;
            memset(t->data, 0, nbytes);
            *out = t;
            return NULL;
        }
    }
    TDM_TRY(tdm_tensor_new(f ? f->a : NULL, dtype, rank, dims, out));
    if (f && f->record && v >= 0 && dtype != TDM_STRING) f->record[v] = (*out)->nbytes;
    return NULL;
}

static tdm_status *run_subgraph(tdm_kernel_ctx *ctx, const tdm_graph *body, int n_in,
                                const tdm_tensor *const *in, int n_out, tdm_tensor **out);

static tdm_status *kctx_alloc_output(tdm_kernel_ctx *ctx, int i, tdm_dtype dtype, int rank,
                                     const int64_t *dims) {
    if (i < 0 || i >= ctx->n_out)
        return TDM_ERR(TDM_ERR_INTERNAL, "alloc_output: output %d out of range", i);
    if (ctx->out[i]) {
        tdm_tensor_destroy(ctx->out[i]);
        ctx->out[i] = NULL;
    }
    tdm_status *st = ctx->device && !ctx->device->host_memory
                         ? tdm_device_tensor_new(ctx->device, ctx->alloc, dtype, rank, dims, &ctx->out[i])
                         : tdm_tensor_new(ctx->alloc, dtype, rank, dims, &ctx->out[i]);
    return st ? tdm_status_wrap(st, "%s node '%s' output %d: ", ctx->node->op_type,
                                ctx->node->name, i)
              : NULL;
}

static tdm_status *run_node(tdm_device *dev, const tdm_kernel_def *k, void *state,
                            const tdm_allocator *a, tdm_threadpool *pool, const tdm_node *n,
                            const tdm_tensor *const *ins, tdm_tensor **outs, frame *f) {
    if (!n->schema)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "operator %s%s%s (node '%s') is not supported",
                       n->domain[0] ? n->domain : "", n->domain[0] ? "." : "", n->op_type, n->name);
    if (n->n_inputs > MAX_IO || n->n_outputs > MAX_IO)
        return TDM_ERR(TDM_ERR_LIMIT, "node '%s' has too many inputs or outputs", n->name);
    tdm_value_info in_stack[16], out_stack[16];
    tdm_value_info *in = in_stack, *out = out_stack;
    tdm_dtype types_stack[16], *types = types_stack;
    tdm_status *st = NULL;
    void *own_state = NULL; /* prepare() made here, for this run only */
    bool heap = n->n_inputs > 16 || n->n_outputs > 16;
    if (heap) {
        in = tdm_calloc(a, (size_t)n->n_inputs + 1, sizeof *in);
        out = tdm_calloc(a, (size_t)n->n_outputs + 1, sizeof *out);
        types = tdm_calloc(a, (size_t)n->n_inputs + 1, sizeof *types);
        if (!in || !out || !types) {
            st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory running node '%s'", n->name);
            goto done;
        }
    }
    for (int i = 0; i < n->n_inputs; i++) {
        tdm_value_info *vi = &in[i];
        memset(vi, 0, sizeof *vi);
        const tdm_tensor *t = ins[i];
        types[i] = TDM_UNDEFINED;
        if (!t) {
            vi->rank = -1;
            continue;
        }
        vi->present = true;
        vi->dtype = t->dtype;
        vi->rank = t->rank;
        memcpy(vi->dims, t->dims, sizeof t->dims);
        vi->data = t->device ? NULL : t;
        if (t->device && f && (n->schema->shape_inputs & (1u << (i & 31))) && n->inputs[i] >= 0) {
            const tdm_tensor *h = NULL;
            if ((st = frame_input_for(f, n->inputs[i], NULL, &h, NULL))) goto done;
            vi->data = h;
        }
        types[i] = t->dtype;
    }
    for (int i = 0; i < n->n_outputs; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].rank = -1;
        out[i].present = n->outputs[i] >= 0;
        outs[i] = NULL;
    }
    if (n->schema->infer) {
        tdm_infer_ctx ictx = {n, n->opset, n->n_inputs, in, n->n_outputs, out};
        if ((st = n->schema->infer(&ictx))) goto done;
    }
    if (!k || (k->type_input >= 0 && (k->type_input >= n->n_inputs ||
                                       !(k->types & TDM_T(types[k->type_input]))))) {
        k = tdm_device_find_kernel(dev, n, types, n->n_inputs);
        state = NULL;
        if (!k) {
            st = TDM_ERR(TDM_ERR_UNSUPPORTED,
                         "%s node '%s': device %s has no kernel for input type %s (opset %d)",
                         n->op_type, n->name, dev->name,
                         n->n_inputs ? tdm_dtype_name(types[0]) : "-", n->opset);
            goto done;
        }
        if (k->prepare) {
            /* no plan-time state here (subgraph bodies, constant folding, dtypes unknown at
             * plan time): prepared for this run only, no input taken as constant */
            const tdm_tensor **none = tdm_calloc(a, (size_t)n->n_inputs + 1, sizeof *none);
            if (!none) {
                st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory running node '%s'", n->name);
                goto done;
            }
            st = k->prepare(n, n->opset, n->n_inputs, none, a, &own_state);
            tdm_free(a, none);
            if (st) {
                st = tdm_status_wrap(st, "%s node '%s': ", n->op_type, n->name);
                goto done;
            }
            state = own_state;
        }
    }
    if (!(n->schema->flags & TDM_OP_DATA_DEPENDENT)) {
        for (int i = 0; i < n->n_outputs; i++) {
            if (n->outputs[i] < 0 && !out[i].present) continue;
            if (out[i].dtype == TDM_UNDEFINED || out[i].rank < 0) {
                st = TDM_ERR(TDM_ERR_INTERNAL, "%s node '%s': output %d shape was not inferred",
                             n->op_type, n->name, i);
                goto done;
            }
            st = f ? frame_new_output(f, dev, n->outputs[i], out[i].dtype, out[i].rank, out[i].dims,
                                      &outs[i])
                   : tdm_tensor_new(a, out[i].dtype, out[i].rank, out[i].dims, &outs[i]);
            if (st) {
                st = tdm_status_wrap(st, "%s node '%s' output %d: ", n->op_type, n->name, i);
                goto done;
            }
        }
    }
    {
        tdm_kernel_ctx kctx = {
            .node = n, .opset = n->opset, .n_in = n->n_inputs, .in = ins,
            .n_out = n->n_outputs, .out = outs, .pool = pool, .alloc = a, .state = state,
            .alloc_output = kctx_alloc_output, .run_subgraph = run_subgraph, .exec = f,
            .device = dev,
        };
        st = tdm_device_execute(dev, k, &kctx);
    }
    if (!st)
        for (int i = 0; i < n->n_outputs; i++)
            if (n->outputs[i] >= 0 && !outs[i]) {
                st = TDM_ERR(TDM_ERR_INTERNAL, "%s node '%s': kernel produced no output %d",
                             n->op_type, n->name, i);
                break;
            }
done:
    if (own_state && k && k->release) k->release(own_state, a);
    if (st)
        for (int i = 0; i < n->n_outputs; i++) {
            tdm_tensor_destroy(outs[i]);
            outs[i] = NULL;
        }
    if (heap) {
        tdm_free(a, in);
        tdm_free(a, out);
        tdm_free(a, types);
    }
    return st;
}

tdm_status *tdm_eval_node(tdm_device *cpu, const tdm_allocator *a, const tdm_node *n,
                          const tdm_tensor *const *ins, tdm_tensor **outs) {
    return run_node(cpu, NULL, NULL, a, NULL, n, ins, outs, NULL);
}

static void trace_kernel(tdm_trace *tr, tdm_device *dev, const tdm_node *n, size_t i, int64_t t0,
                         int64_t t1, const uint64_t *flows, int n_flows) {
    char args[160];
    snprintf(args, sizeof args, "\"op\":\"%s\",\"node\":%zu,\"device\":\"%s\"", n->op_type, i,
             dev ? dev->name : "cpu");
    tdm_trace_event_flows(tr, dev ? dev->name : "cpu", n->name, n->op_type, t0, t1, args, 0, flows,
                          n_flows);
}

static void release(frame *f, int v, int node) {
    if (v >= 0 && f->release_after[v] == node) frame_drop_replicas(f, v);
    if (v >= 0 && f->owned[v] && f->release_after[v] == node) {
        mon_hold(f, f->vals[v], -1);
        tdm_tensor_destroy((tdm_tensor *)f->vals[v]);
        f->vals[v] = NULL;
        f->owned[v] = false;
    }
}

/* Runs every node of f->g in order. f->vals holds the inputs and constants. */
static tdm_status *exec_frame(frame *f) {
    const tdm_graph *g = f->g;
    size_t max_in = 1, max_out = 1;
    for (size_t i = 0; i < g->n_nodes; i++) {
        if ((size_t)g->nodes[i].n_inputs > max_in) max_in = (size_t)g->nodes[i].n_inputs;
        if ((size_t)g->nodes[i].n_outputs > max_out) max_out = (size_t)g->nodes[i].n_outputs;
    }
    const tdm_tensor **ins = tdm_calloc(f->a, max_in, sizeof *ins);
    tdm_tensor **outs = tdm_calloc(f->a, max_out, sizeof *outs);
    tdm_status *st = NULL;
    if (!ins || !outs) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory starting a run");
        goto done;
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        tdm_device *dev = f->dev;
        const tdm_kernel_def *k = NULL;
        void *state = NULL;
        uint64_t flows[4];
        int n_flows = 0;
        if (f->plan) {
            dev = f->plan->devices[n->device >= 0 ? n->device : 0];
            k = f->plan->nodes[i].kernel;
            state = f->plan->nodes[i].state;
        }
        for (int k2 = 0; k2 < n->n_inputs; k2++) {
            int v = n->inputs[k2];
            ins[k2] = NULL;
            if (v < 0) continue;
            if (!f->vals[v]) {
                st = TDM_ERR(TDM_ERR_INTERNAL, "%s node '%s' reads '%s', which is not available",
                             n->op_type, n->name, g->values[v].name);
                goto done;
            }
            uint64_t flow = 0;
            st = frame_input_for(f, v, dev, &ins[k2], &flow);
            if (flow && n_flows < 4) flows[n_flows++] = flow;
            if (st) {
                st = tdm_status_wrap(st, "%s node '%s': ", n->op_type, n->name);
                goto done;
            }
        }
        tdm_trace *tr = f->plan ? f->plan->trace : NULL;
        int64_t t0 = f->times || tr ? tdm_now_ns() : 0;
        if (mon_of(f)) tdm_monitor_node_begin(mon_of(f), dev->index);
        st = run_node(dev, k, state, f->a, f->pool, n, (const tdm_tensor *const *)ins, outs, f);
        if (mon_of(f)) tdm_monitor_node_end(mon_of(f), dev->index);
        if (st) goto done;
        if (f->times || tr) {
            tdm_device_synchronize(dev); /* a queued device's time counts where it is spent */
            int64_t t1 = tdm_now_ns();
            if (f->times) f->times[i] += (double)(t1 - t0) / 1e6;
            if (tr) trace_kernel(tr, dev, n, i, t0, t1, flows, n_flows);
        }
        for (int k2 = 0; k2 < n->n_outputs; k2++) {
            int v = n->outputs[k2];
            if (v < 0) {
                tdm_tensor_destroy(outs[k2]);
                continue;
            }
            if (f->owned[v]) {
                mon_hold(f, f->vals[v], -1);
                tdm_tensor_destroy((tdm_tensor *)f->vals[v]);
            }
            f->vals[v] = outs[k2];
            f->owned[v] = true;
            mon_hold(f, outs[k2], 1);
        }
        for (int k2 = 0; k2 < n->n_inputs; k2++) release(f, n->inputs[k2], (int)i);
        for (int k2 = 0; k2 < n->n_implicit; k2++) release(f, n->implicit[k2], (int)i);
        for (int k2 = 0; k2 < n->n_outputs; k2++) release(f, n->outputs[k2], (int)i);
    }
done:
    tdm_free(f->a, ins);
    tdm_free(f->a, outs);
    return st;
}

static void frame_clear(frame *f) {
    if (f->replicas) {
        for (size_t i = 0; i < f->g->n_values * (1 + TDM_REPLICA_DEVS); i++) {
            mon_hold(f, f->replicas[i], -1);
            tdm_tensor_destroy(f->replicas[i]);
        }
        tdm_free(f->a, f->replicas);
        f->replicas = NULL;
    }
    if (f->vals && f->owned)
        for (size_t v = 0; v < f->g->n_values; v++)
            if (f->owned[v]) {
                mon_hold(f, f->vals[v], -1);
                tdm_tensor_destroy((tdm_tensor *)f->vals[v]);
            }
    tdm_free(f->a, f->vals);
    tdm_free(f->a, f->owned);
}

/* Moves (or copies) the values listed in `which` out of the frame. */
static tdm_status *take_outputs(frame *f, const int *which, size_t n, tdm_tensor **out) {
    size_t handed = 0;
    tdm_status *st = NULL;
    for (size_t j = 0; j < n; j++, handed++) {
        int v = which[j];
        if (!f->vals[v]) {
            st = TDM_ERR(TDM_ERR_INTERNAL, "output '%s' was not computed", f->g->values[v].name);
            break;
        }
        const tdm_tensor *staged = NULL;
        if ((st = xfer_staged_output(f, v, &staged))) break;
        if (staged) { /* downloaded while the run went on */
            if ((st = tdm_tensor_clone(f->a, staged, &out[j]))) break;
        } else if (f->vals[v]->device) { /* results go to the caller in host memory */
            if ((st = tdm_device_to_host(f->a, f->vals[v], &out[j]))) break;
            mon_copy(f, f->vals[v]->device, false, f->vals[v]->nbytes);
        } else if (f->owned[v]) {
            mon_hold(f, f->vals[v], -1); /* handed to the caller */
            out[j] = (tdm_tensor *)f->vals[v];
            f->owned[v] = false; /* moved; a second mention of the same value is copied */
        } else if ((st = tdm_tensor_clone(f->a, f->vals[v], &out[j]))) {
            break;
        }
    }
    if (st) /* the caller gets nothing on failure */
        for (size_t j = 0; j < handed; j++) {
            tdm_tensor_destroy(out[j]);
            out[j] = NULL;
        }
    return st;
}

static const tdm_tensor *lookup_outer(const frame *f, const char *name) {
    for (; f; f = f->parent) {
        int v = tdm_graph_find_value(f->g, name);
        if (v >= 0 && f->vals[v]) return f->vals[v];
    }
    return NULL;
}

static tdm_status *run_subgraph(tdm_kernel_ctx *ctx, const tdm_graph *body, int n_in,
                                const tdm_tensor *const *in, int n_out, tdm_tensor **out) {
    const frame *parent = ctx->exec;
    if (!parent)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "%s node '%s': subgraphs cannot run here",
                       ctx->node->op_type, ctx->node->name);
    if ((size_t)n_in != body->n_inputs && (size_t)n_in > body->n_inputs)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s node '%s': the body takes %zu inputs, got %d",
                       ctx->node->op_type, ctx->node->name, body->n_inputs, n_in);
    if ((size_t)n_out != body->n_outputs)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s node '%s': the body has %zu outputs, need %d",
                       ctx->node->op_type, ctx->node->name, body->n_outputs, n_out);
    frame f = {.g = body, .parent = parent, .dev = ctx->device, .a = ctx->alloc, .pool = ctx->pool};
    size_t nv = body->n_values ? body->n_values : 1;
    f.vals = tdm_calloc(f.a, nv, sizeof *f.vals);
    f.owned = tdm_calloc(f.a, nv, sizeof *f.owned);
    int *rel = tdm_calloc(f.a, nv, sizeof *rel);
    tdm_status *st = NULL;
    if (!f.vals || !f.owned || !rel) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory running a subgraph");
        goto done;
    }
    f.release_after = rel;
    for (size_t v = 0; v < body->n_values; v++) {
        rel[v] = -1;
        const tdm_value *val = &body->values[v];
        if (val->data) f.vals[v] = val->data;
        if (val->is_outer && !(f.vals[v] = lookup_outer(parent, val->name))) {
            st = TDM_ERR(TDM_ERR_INTERNAL, "%s node '%s': outer value '%s' is not available",
                         ctx->node->op_type, ctx->node->name, val->name);
            goto done;
        }
    }
    for (int i = 0; i < n_in; i++) f.vals[body->inputs[i]] = in[i];
    for (size_t i = 0; i < body->n_nodes; i++) {
        const tdm_node *n = &body->nodes[i];
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) rel[n->inputs[k]] = (int)i;
        for (int k = 0; k < n->n_implicit; k++) rel[n->implicit[k]] = (int)i;
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0 && rel[n->outputs[k]] < (int)i) rel[n->outputs[k]] = (int)i;
    }
    for (size_t o = 0; o < body->n_outputs; o++) rel[body->outputs[o]] = -1;
    if ((st = exec_frame(&f))) goto done;
    st = take_outputs(&f, body->outputs, (size_t)n_out, out);
done:
    frame_clear(&f);
    tdm_free(ctx->alloc, rel);
    return st ? tdm_status_wrap(st, "in the body of %s node '%s': ", ctx->node->op_type,
                                ctx->node->name)
              : NULL;
}

static tdm_status *check_input(const tdm_value *v, const tdm_tensor *t) {
    if (v->dtype != TDM_UNDEFINED && t->dtype != v->dtype)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "input '%s' must be %s, got %s", v->name,
                       tdm_dtype_name(v->dtype), tdm_dtype_name(t->dtype));
    if (v->rank >= 0 && t->rank != v->rank)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "input '%s' must have rank %d, got rank %d",
                       v->name, v->rank, t->rank);
    if (v->rank >= 0)
        for (int d = 0; d < v->rank; d++)
            if (v->dims[d] >= 0 && v->dims[d] != t->dims[d]) {
                char a[160], b[160];
                return TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                               "input '%s' has shape %s, but the model requires dimension %d = %lld "
                               "(model shape %s)", v->name, tdm_shape_str(t->rank, t->dims, a, sizeof a),
                               d, (long long)v->dims[d], tdm_shape_str(v->rank, v->dims, b, sizeof b));
            }
    return NULL;
}

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
    frame_drop_replicas(f, v);
    if (f->owned[v]) {
        mon_hold(f, f->vals[v], -1);
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
        TDM_TRY(xfer_replicas(f));
        TDM_TRY(xfer_host_copy(f, v, &f->replicas[(size_t)v * (1 + TDM_REPLICA_DEVS)]));
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
    pthread_mutex_lock(&ps->mu);
    if (!ins || !outs) {
        if (!ps->err) ps->err = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory starting a run");
        pthread_cond_broadcast(&ps->cv);
    }
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
        }
        if (!mine_left) break;
        if (pick == g->n_nodes) {
            pthread_cond_wait(&ps->cv, &ps->mu);
            continue;
        }
        const tdm_node *n = &g->nodes[pick];
        ps->state[pick] = 1;
        tdm_device *dev = p->devices[w->device];
        tdm_status *st = xfer_prewait(ps, n, dev);
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
                st = frame_input_for(f, v, dev, &ins[k], &flow);
                if (flow && n_flows < 4) flows[n_flows++] = flow;
                if (st) st = tdm_status_wrap(st, "%s node '%s': ", n->op_type, n->name);
            }
        }
        pthread_mutex_unlock(&ps->mu);
        int64_t t0 = f->times || p->trace ? tdm_now_ns() : 0;
        if (!st) {
            if (p->monitor) tdm_monitor_node_begin(p->monitor, dev->index);
            st = run_node(dev, p->nodes[pick].kernel, p->nodes[pick].state, f->a, f->pool, n,
                          (const tdm_tensor *const *)ins, outs, f);
            if (p->monitor) tdm_monitor_node_end(p->monitor, dev->index);
        }
        if (!st && (f->times || p->trace)) {
            tdm_device_synchronize(dev);
            int64_t t1 = tdm_now_ns();
            if (f->times) f->times[pick] += (double)(t1 - t0) / 1e6;
            if (p->trace) trace_kernel(p->trace, dev, n, pick, t0, t1, flows, n_flows);
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
            mon_hold(f, outs[k], 1);
            if (ps->readers[v] == 0) { /* nobody reads it */
                ps->readers[v] = 1;
                par_finish_value(ps, v);
            }
        }
        for (int k = 0; k < n->n_inputs; k++) par_finish_value(ps, n->inputs[k]);
        for (int k = 0; k < n->n_implicit; k++) par_finish_value(ps, n->implicit[k]);
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
    tdm_free(f->a, ins);
    tdm_free(f->a, outs);
    return NULL;
}

static tdm_status *exec_frame_parallel(frame *f) {
    const tdm_graph *g = f->g;
    const tdm_plan *p = f->plan;
    par_state ps = {.f = f};
    ps.pending = tdm_calloc(f->a, g->n_nodes + 1, sizeof *ps.pending);
    ps.readers = tdm_calloc(f->a, g->n_values + 1, sizeof *ps.readers);
    ps.state = tdm_calloc(f->a, g->n_nodes + 1, sizeof *ps.state);
    par_worker workers[16];
    pthread_t threads[16];
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
    for (int d = 1; d < p->n_devices && d < 16; d++) {
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

static uint64_t shapes_key(const tdm_graph *g, const tdm_tensor *const *inputs) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < g->n_inputs; i++) {
        const tdm_tensor *t = inputs[i];
        uint64_t parts[2 + TDM_MAX_RANK] = {t ? (uint64_t)t->dtype : 0, t ? (uint64_t)t->rank : 0};
        for (int d = 0; t && d < t->rank; d++) parts[2 + d] = (uint64_t)t->dims[d];
        for (int k = 0; k < 2 + (t ? t->rank : 0); k++) h = (h ^ parts[k]) * 1099511628211ull;
    }
    return h;
}

/* Takes the arena planned for these shapes if it is free; otherwise the run uses the heap
 * (and records sizes when no plan exists yet). */
static void acquire_memplan(tdm_plan *p, uint64_t key, frame *f, size_t nv) {
    pthread_mutex_lock(&p->mem_mu);
    p->mem_clock++;
    for (int i = 0; i < TDM_PLAN_MEM_SLOTS; i++) {
        tdm_memplan *mp = p->mem[i];
        if (mp && mp->key == key) {
            if (!mp->busy) {
                mp->busy = true;
                mp->last_use = p->mem_clock;
                f->mp = mp;
                if (p->monitor) /* the run holds the whole arena */
                    tdm_monitor_memory(p->monitor, mon_host_slot(p), (int64_t)mp->arena_bytes);
            }
            pthread_mutex_unlock(&p->mem_mu);
            return;
        }
    }
    pthread_mutex_unlock(&p->mem_mu);
    f->record = tdm_calloc(f->a, nv, sizeof *f->record);
}

static void release_memplan(tdm_plan *p, frame *f, uint64_t key, bool ok) {
    if (f->mp) {
        pthread_mutex_lock(&p->mem_mu);
        f->mp->busy = false;
        if (p->monitor) tdm_monitor_memory(p->monitor, mon_host_slot(p), -(int64_t)f->mp->arena_bytes);
        pthread_mutex_unlock(&p->mem_mu);
        return;
    }
    if (!f->record) return;
    tdm_graph *g = p->graph;
    for (size_t o = 0; o < g->n_outputs; o++) f->record[g->outputs[o]] = 0; /* handed out */
    tdm_memplan *mp = NULL;
    if (ok) {
        int *last = tdm_calloc(f->a, g->n_values + 1, sizeof *last);
        if (last) {
            for (size_t v = 0; v < g->n_values; v++)
                last[v] = p->release_after[v] < 0 ? (int)g->n_nodes : p->release_after[v];
            tdm_status *st =
                tdm_memplan_build(f->a, g->n_values, f->record, p->first_use, last, key, &mp);
            tdm_status_free(st); /* without a plan the heap keeps working */
            tdm_free(f->a, last);
        }
    }
    if (mp) {
        pthread_mutex_lock(&p->mem_mu);
        int slot = -1;
        for (int i = 0; i < TDM_PLAN_MEM_SLOTS && slot < 0; i++)
            if (p->mem[i] && p->mem[i]->key == key) slot = -2; /* another run got there first */
        if (slot == -1) {
            uint64_t oldest = UINT64_MAX;
            for (int i = 0; i < TDM_PLAN_MEM_SLOTS; i++) {
                if (!p->mem[i]) {
                    slot = i;
                    break;
                }
                if (!p->mem[i]->busy && p->mem[i]->last_use < oldest) {
                    oldest = p->mem[i]->last_use;
                    slot = i;
                }
            }
        }
        if (slot >= 0) {
            tdm_memplan_free(f->a, p->mem[slot]);
            mp->last_use = ++p->mem_clock;
            p->mem[slot] = mp;
            mp = NULL;
        }
        pthread_mutex_unlock(&p->mem_mu);
        tdm_memplan_free(f->a, mp);
    }
    tdm_free(f->a, f->record);
    f->record = NULL;
}

size_t tdm_plan_arena_bytes(tdm_plan *p) {
    size_t bytes = 0;
    uint64_t newest = 0;
    pthread_mutex_lock(&p->mem_mu);
    for (int i = 0; i < TDM_PLAN_MEM_SLOTS; i++)
        if (p->mem[i] && p->mem[i]->last_use >= newest) {
            newest = p->mem[i]->last_use;
            bytes = p->mem[i]->arena_bytes;
        }
    pthread_mutex_unlock(&p->mem_mu);
    return bytes;
}

tdm_status *tdm_plan_run(tdm_plan *p, const tdm_tensor *const *inputs, tdm_tensor **outputs) {
    tdm_graph *g = p->graph;
    size_t nv = g->n_values ? g->n_values : 1;
    frame f = {.g = g, .release_after = p->release_after, .plan = p, .a = p->alloc,
               .pool = p->pool};
    f.vals = tdm_calloc(f.a, nv, sizeof *f.vals);
    f.owned = tdm_calloc(f.a, nv, sizeof *f.owned);
    tdm_status *st = NULL;
    uint64_t key = shapes_key(g, inputs);
    int64_t run_t0 = p->trace ? tdm_now_ns() : 0;
    int mon_devs[TDM_MONITOR_SLOTS], n_mon = 0; /* runs in flight per device */
    for (int d = 0; p->monitor && d < p->n_devices && n_mon < TDM_MONITOR_SLOTS; d++)
        mon_devs[n_mon++] = p->devices[d]->index;
    tdm_monitor_runs(p->monitor, mon_devs, n_mon, 1);
    if (!f.vals || !f.owned) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory starting a run");
        goto done;
    }
    if (!p->multi_device) acquire_memplan(p, key, &f, nv);
    if ((st = tdm_xfer_begin(p, f.a, nv, &f.xfer))) goto done; /* asynchronous copies */
    if (p->measured_ms && !(f.times = tdm_calloc(f.a, g->n_nodes + 1, sizeof *f.times))) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory starting a run");
        goto done;
    }
    for (size_t v = 0; v < g->n_values; v++)
        if (g->values[v].data) f.vals[v] = g->values[v].data;
    for (size_t i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        if (inputs[i]) {
            if ((st = check_input(&g->values[v], inputs[i]))) goto done;
            f.vals[v] = inputs[i];
        } else if (!g->values[v].data) {
            st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "input '%s' was not given", g->values[v].name);
            goto done;
        }
    }
    if ((st = p->multi_device ? exec_frame_parallel(&f) : exec_frame(&f))) goto done;
    st = take_outputs(&f, g->outputs, g->n_outputs, outputs);
done:
    if (f.times) {
        if (!st) {
            pthread_mutex_lock(&p->mem_mu);
            for (size_t i = 0; i < g->n_nodes; i++) p->measured_ms[i] += f.times[i];
            p->measured_runs++;
            pthread_mutex_unlock(&p->mem_mu);
        }
        tdm_free(f.a, f.times);
    }
    frame_clear(&f);
    st = xfer_finish(&f, st, outputs, g->n_outputs);
    release_memplan(p, &f, key, st == NULL);
    tdm_monitor_runs(p->monitor, mon_devs, n_mon, -1);
    if (p->trace) {
        char args[64];
        snprintf(args, sizeof args, "\"ok\":%s", st ? "false" : "true");
        tdm_trace_event(p->trace, "runs", "run", "run", run_t0, tdm_now_ns(), args, 0, 0);
    }
    return st;
}

/* Pipeline mode (TDM_MODE_PIPELINE): the model is cut into consecutive stages, stage k on
 * device k of the session's list, and micro-batches flow through them over a tandem user
 * pipeline (bounded queues, one worker per stage, output in order).
 *
 * How a stage is made: the model is loaded again and every node outside the stage's range
 * (positions in the model's topological order, before graph passes) is removed; the values
 * the stage reads from earlier stages become its graph inputs and the values later stages
 * (or the caller) need become its outputs. That graph is planned like any session's (passes,
 * placement on the stage's device with the CPU behind it for what the device cannot run),
 * so a stage is a sub-plan with its own memory plan and weights on its device. A value that
 * skips a stage rides along on the item.
 *
 * The cut: user cut points (options.pipeline_cuts: node names or #positions where a stage
 * starts), or the auto cut, which bisects on the slowest stage time T: stages are filled in
 * order while their predicted time (the cost model's per-node time on the stage's device)
 * stays within T; the smallest feasible T gives max(T_stage) close to T_total / N. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/pipeline_impl.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "graph/infer.h"
#include "sched/cost.h"
#include "sched/profile.h"
#include "tandem/pipeline.h"

typedef struct pm_stage {
    tdm_pipe_mode *pm;
    tdm_plan *plan;
    tdm_device *device;
    int begin, end;     /* node positions in the unoptimised graph */
    double predicted_ms;
    char **drop;        /* item tensors no later stage and no caller needs after this one */
    size_t n_drop;
    int64_t runs, items;
    double busy_ms;
} pm_stage;

struct tdm_pipe_mode {
    tdm_session *s;
    const tdm_allocator *a;
    int n_stages;
    pm_stage stages[TDM_MAX_DEVICES];
    tdm_pipeline *pipe;
    int micro_batch; /* 0 = batch / stages */
    pthread_mutex_t mu;
    bool imbalance_said; /* the measured imbalance was logged */
};

/* One run's state, shared by its micro-batches. */
typedef struct pm_request {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int remaining;
    tdm_pipeline_item **done; /* per micro-batch, in order */
    const tdm_run_ctl *ctl;   /* the run's stop request (cancel, deadline), or NULL */
} pm_request;

typedef struct pm_part {
    pm_request *req;
    int index;
} pm_part;

/* ---- the cut ---- */

static tdm_status *load_graph(tdm_session *s, const void *data, size_t size, const char *base_dir,
                              tdm_graph **out) {
    tdm_onnx_model *m = NULL;
    TDM_TRY(tdm_onnx_load_buffer(data, size, base_dir, s->env->alloc, &m));
    tdm_graph *g = m->graph;
    m->graph = NULL;
    tdm_onnx_model_free(m);
    tdm_status *st = tdm_graph_infer_shapes(g);
    if (st) {
        tdm_graph_free(g);
        return st;
    }
    *out = g;
    return NULL;
}

/* costs[k * n + i]: predicted ms of node i on device k (dynamic dims count as 1). */
static tdm_status *node_costs(tdm_session *s, const tdm_graph *g, int K, double *costs) {
    size_t n = g->n_nodes;
    for (int k = 0; k < K; k++) {
        tdm_device_profile prof;
        TDM_TRY(tdm_profile_device(s->devices[k], s->env->alloc, tdm_threadpool_size(s->pool), false, &prof));
        for (size_t i = 0; i < n; i++) costs[(size_t)k * n + i] = tdm_cost_node_ms(g, &g->nodes[i], &prof);
    }
    return NULL;
}

/* Fills stages in order while each stays within T; returns the stages used, 0 if T is too
 * small. starts[k] = first node of stage k. */
static int fill(const double *c, size_t n, int K, double T, int *starts) {
    int k = 0;
    double sum = 0;
    starts[0] = 0;
    for (size_t i = 0; i < n; i++) {
        double x = c[(size_t)k * n + i];
        if (sum + x > T && sum > 0) {
            if (++k >= K) return 0;
            starts[k] = (int)i;
            sum = 0;
            x = c[(size_t)k * n + i];
        }
        if (x > T) return 0;
        sum += x;
    }
    return k + 1;
}

/* The auto cut: the smallest slowest-stage time T that fill() can meet. */
static int auto_cut(const double *c, size_t n, int K, int *starts, double *stage_ms) {
    double hi = 0;
    for (size_t i = 0; i < n; i++) hi += c[i]; /* everything on stage 0 always fits */
    double lo = 0;
    for (int it = 0; it < 60 && hi - lo > 1e-9 * (hi + 1e-12); it++) {
        double mid = 0.5 * (lo + hi);
        if (fill(c, n, K, mid, starts)) hi = mid;
        else lo = mid;
    }
    int used = fill(c, n, K, hi * (1 + 1e-12) + 1e-15, starts);
    if (!used) { /* cannot happen (hi fits), but stay safe */
        starts[0] = 0;
        used = 1;
    }
    for (int k = 0; k < used; k++) {
        size_t e = k + 1 < used ? (size_t)starts[k + 1] : n;
        stage_ms[k] = 0;
        for (size_t i = (size_t)starts[k]; i < e; i++) stage_ms[k] += c[(size_t)k * n + i];
    }
    return used;
}

/* User cut points: "name,#12,..." where stages 2, 3, ... start. */
static tdm_status *user_cut(const tdm_graph *g, const char *cuts, int K, int *starts, int *used) {
    char buf[1024];
    if (strlen(cuts) >= sizeof buf) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "pipeline_cuts is too long");
    snprintf(buf, sizeof buf, "%s", cuts);
    int k = 0;
    starts[0] = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        size_t len = strlen(tok);
        while (len && tok[len - 1] == ' ') tok[--len] = 0;
        if (!len) continue;
        long pos = -1;
        if (tok[0] == '#') {
            char *end = NULL;
            pos = strtol(tok + 1, &end, 10);
            if (!end || *end || end == tok + 1) pos = -2;
        } else {
            for (size_t i = 0; i < g->n_nodes; i++)
                if (g->nodes[i].name && !strcmp(g->nodes[i].name, tok)) pos = (long)i;
        }
        if (pos == -2 || pos == -1)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "pipeline cut '%s' is not %s", tok,
                           pos == -2 ? "a #position" : "a node name of the model");
        if (pos <= starts[k] || pos >= (long)g->n_nodes)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                           "pipeline cut '%s' (node #%ld) must come after the previous cut and before "
                           "the last node (#%zu)", tok, pos, g->n_nodes ? g->n_nodes - 1 : 0);
        if (k + 1 >= K)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%d pipeline cuts need %d devices; the session has %d",
                           k + 1, k + 2, K);
        starts[++k] = (int)pos;
    }
    *used = k + 1;
    return NULL;
}

/* Restricts g (a fresh copy of the model) to nodes [b, e): see the file comment. drop
 * receives the stage inputs that nothing after the stage needs. */
static tdm_status *restrict_graph(tdm_graph *g, int b, int e, pm_stage *ps, const tdm_allocator *a) {
    size_t nv = g->n_values;
    unsigned char *use = tdm_calloc(a, nv ? nv : 1, 1); /* 1: read here, 2: read later */
    int *ins = tdm_calloc(a, nv + 1, sizeof *ins), *outs = tdm_calloc(a, nv + 1, sizeof *outs);
    ps->drop = tdm_calloc(a, nv + 1, sizeof *ps->drop);
    tdm_status *st = NULL;
    if (!use || !ins || !outs || !ps->drop) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory cutting the model");
        goto done;
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        unsigned char bit = (int)i >= b && (int)i < e ? 1 : (int)i >= e ? 2 : 0;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) use[n->inputs[k]] |= bit;
        for (int k = 0; k < n->n_implicit; k++)
            if (n->implicit[k] >= 0) use[n->implicit[k]] |= bit;
    }
    for (size_t o = 0; o < g->n_outputs; o++) use[g->outputs[o]] |= 2;
    size_t ni = 0, no = 0;
    for (size_t v = 0; v < nv; v++) {
        tdm_value *val = &g->values[v];
        bool outside = (val->producer >= 0 && val->producer < b) || (val->producer < 0 && val->is_input);
        bool here = val->producer >= b && val->producer < e;
        bool is_in = (use[v] & 1) && outside, is_out = here && (use[v] & 2);
        if (is_in) ins[ni++] = (int)v;
        if (is_out) outs[no++] = (int)v;
        if (is_in && !(use[v] & 2) && !(ps->drop[ps->n_drop++] = tdm_strdup(a, val->name))) {
            st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory cutting the model");
            goto done;
        }
        val->is_input = is_in;
        val->is_output = is_out;
    }
    for (size_t i = 0; i < g->n_nodes; i++) g->nodes[i].dead = (int)i < b || (int)i >= e;
    tdm_free(g->alloc, g->inputs);
    tdm_free(g->alloc, g->outputs);
    g->inputs = ins;
    g->outputs = outs;
    g->n_inputs = ni;
    g->n_outputs = no;
    ins = outs = NULL;
    st = tdm_graph_compact(g);
done:
    tdm_free(a, use);
    tdm_free(a, ins);
    tdm_free(a, outs);
    return st;
}

/* ---- running ---- */

static size_t find_name(tdm_pipeline_item *it, const char *name) {
    for (size_t i = 0; i < tdm_pipeline_item_tensor_count(it); i++)
        if (!strcmp(tdm_pipeline_item_tensor_name(it, i), name)) return i;
    return SIZE_MAX;
}

static tdm_status *stage_fn(void *user, tdm_pipeline_item *it) {
    pm_stage *ps = user;
    const tdm_graph *g = ps->plan->graph;
    const tdm_allocator *a = ps->pm->a;
    const tdm_tensor **ins = tdm_calloc(a, g->n_inputs + 1, sizeof *ins);
    tdm_tensor **outs = tdm_calloc(a, g->n_outputs + 1, sizeof *outs);
    tdm_status *st = NULL;
    if (!ins || !outs) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in a pipeline stage");
    int64_t rows = 1;
    for (size_t i = 0; i < g->n_inputs && !st; i++) {
        const char *name = g->values[g->inputs[i]].name;
        ins[i] = find_name(it, name) == SIZE_MAX ? NULL : tdm_pipeline_item_tensor(it, name);
        if (i == 0 && ins[i] && ins[i]->rank > 0) rows = ins[i]->dims[0];
    }
    const pm_part *part = tdm_pipeline_item_user(it); /* a cancelled run stops at each stage */
    int64_t t0 = tdm_now_ns();
    if (!st) st = tdm_plan_run_ctl(ps->plan, ins, outs, part ? part->req->ctl : NULL);
    double ms = (double)(tdm_now_ns() - t0) / 1e6;
    for (size_t o = 0; o < g->n_outputs; o++) {
        if (!st && outs[o]) st = tdm_pipeline_item_set_tensor(it, g->values[g->outputs[o]].name, outs[o]);
        else tdm_tensor_destroy(outs[o]);
        outs[o] = NULL;
    }
    if (!st)
        for (size_t d = 0; d < ps->n_drop; d++) tdm_tensor_destroy(tdm_pipeline_item_take_tensor(it, ps->drop[d]));
    pthread_mutex_lock(&ps->pm->mu);
    ps->runs++;
    if (!st) ps->items += rows;
    ps->busy_ms += ms;
    pthread_mutex_unlock(&ps->pm->mu);
    tdm_free(a, ins);
    tdm_free(a, outs);
    return st ? tdm_status_wrap(st, "%s: ", ps->device->name) : NULL;
}

static void on_output(void *user, tdm_pipeline_item *it) {
    (void)user;
    pm_part *part = tdm_pipeline_item_user(it);
    pm_request *r = part->req;
    pthread_mutex_lock(&r->mu);
    r->done[part->index] = it;
    if (--r->remaining == 0) pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* ---- creation ---- */

tdm_status *tdm_pipe_mode_create(tdm_session *s, const void *data, size_t size, const char *base_dir,
                                 const tdm_session_options *o, tdm_pipe_mode **out) {
    const tdm_allocator *a = s->env->alloc;
    tdm_pipe_mode *pm = tdm_calloc(a, 1, sizeof *pm);
    if (!pm) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a pipeline");
    pm->s = s;
    pm->a = a;
    pm->micro_batch = o->micro_batch > 0 ? o->micro_batch : 0;
    pthread_mutex_init(&pm->mu, NULL);
    tdm_graph *g = NULL;
    double *costs = NULL;
    int starts[TDM_MAX_DEVICES] = {0}, used = 0;
    double stage_ms[TDM_MAX_DEVICES] = {0};
    tdm_status *st = load_graph(s, data, size, base_dir, &g);
    size_t n = g ? g->n_nodes : 0;
    if (!st && n == 0) st = TDM_ERR(TDM_ERR_INVALID_MODEL, "the model has no nodes to cut into stages");
    if (!st && o->pipeline_cuts && o->pipeline_cuts[0]) {
        st = user_cut(g, o->pipeline_cuts, s->n_devices, starts, &used);
        if (!st) tdm_log(&s->env->log, TDM_LOG_INFO, "pipeline: %d stages at the user's cut points", used);
    } else if (!st) {
        costs = tdm_calloc(a, n * (size_t)s->n_devices, sizeof *costs);
        if (!costs) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory cutting the model");
        if (!st) st = node_costs(s, g, s->n_devices, costs);
        if (!st) {
            used = auto_cut(costs, n, s->n_devices, starts, stage_ms);
            double total = 0, slowest = 0;
            for (size_t i = 0; i < n; i++) total += costs[i];
            for (int k = 0; k < used; k++) slowest = stage_ms[k] > slowest ? stage_ms[k] : slowest;
            tdm_log(&s->env->log, TDM_LOG_INFO,
                    "pipeline: auto cut into %d stages; slowest stage %.3f ms predicted (all on %s: %.3f ms)",
                    used, slowest, s->devices[0]->name, total);
        }
    }
    tdm_graph_free(g);
    tdm_free(a, costs);
    tdm_device *cpu = NULL;
    for (int d = 0; d < s->n_devices; d++)
        if (s->devices[d]->host_memory) cpu = s->devices[d];
    for (int k = 0; k < used && !st; k++) {
        pm_stage *ps = &pm->stages[k];
        ps->pm = pm;
        ps->device = s->devices[k];
        ps->begin = starts[k];
        ps->end = k + 1 < used ? starts[k + 1] : (int)n;
        ps->predicted_ms = stage_ms[k];
        tdm_graph *sg = NULL;
        st = load_graph(s, data, size, base_dir, &sg);
        if (!st) st = restrict_graph(sg, ps->begin, ps->end, ps, a);
        if (st) {
            tdm_graph_free(sg);
            break;
        }
        tdm_device *devs[2] = {ps->device, cpu};
        int nd = cpu && cpu != ps->device && !o->no_fallback ? 2 : 1;
        tdm_plan_options po = {o->no_fallback, o->opt_level, ps->device->name, NULL,
                               tdm_threadpool_size(s->pool), false, 0};
        st = tdm_plan_create(a, sg, devs, nd, s->pool, &po, &ps->plan); /* takes sg */
        if (st) st = tdm_status_wrap(st, "pipeline stage %d (nodes #%d-#%d on %s): ", k, ps->begin,
                                     ps->end - 1, ps->device->name);
        else pm->n_stages++;
        if (!st)
            tdm_log(&s->env->log, TDM_LOG_INFO, "pipeline stage %d: nodes #%d-#%d on %s (%.3f ms predicted)",
                    k, ps->begin, ps->end - 1, ps->device->name, ps->predicted_ms);
    }
    /* the stages over a pipeline: one worker each (a device runs one micro-batch at a time),
     * two slots per queue: the next micro-batch waits staged while the current one runs */
    tdm_pipeline_options po = {TDM_API_VERSION, 2, on_output, pm};
    if (!st) st = tdm_pipeline_create(s->env, &po, &pm->pipe);
    for (int k = 0; k < pm->n_stages && !st; k++)
        st = tdm_pipeline_add_callback_stage(pm->pipe, pm->stages[k].device->name, 1, stage_fn, &pm->stages[k]);
    if (!st) st = tdm_pipeline_start(pm->pipe);
    if (st) {
        tdm_pipe_mode_free(pm);
        return st;
    }
    *out = pm;
    return NULL;
}

void tdm_pipe_mode_free(tdm_pipe_mode *pm) {
    if (!pm) return;
    if (pm->pipe) tdm_pipeline_drain(pm->pipe, -1);
    tdm_pipeline_free(pm->pipe);
    for (int k = 0; k < TDM_MAX_DEVICES; k++) {
        pm_stage *ps = &pm->stages[k];
        tdm_plan_free(ps->plan);
        for (size_t d = 0; d < ps->n_drop; d++) tdm_free(pm->a, ps->drop[d]);
        tdm_free(pm->a, ps->drop);
    }
    pthread_mutex_destroy(&pm->mu);
    tdm_free(pm->a, pm);
}

size_t tdm_pipe_mode_stage_count(const tdm_pipe_mode *pm) { return pm ? (size_t)pm->n_stages : 0; }

void tdm_pipe_mode_stats(tdm_pipe_mode *pm, size_t index, tdm_device_stats *out) {
    pthread_mutex_lock(&pm->mu);
    const pm_stage *ps = &pm->stages[index];
    *out = (tdm_device_stats){ps->device->name, ps->runs, ps->items, ps->busy_ms, 1.0,
                              ps->items ? ps->busy_ms / (double)ps->items : 0};
    pthread_mutex_unlock(&pm->mu);
}

/* ---- a run: micro-batches in, outputs joined ---- */

/* Rows [begin, begin + count) of a host tensor along its leading dim, as a view. */
static tdm_status *rows_view(const tdm_allocator *a, const tdm_tensor *t, int64_t begin, int64_t count,
                             tdm_tensor **out) {
    int64_t dims[TDM_MAX_RANK];
    memcpy(dims, t->dims, sizeof dims);
    dims[0] = count;
    size_t row = t->dims[0] ? t->nbytes / (size_t)t->dims[0] : 0;
    return tdm_tensor_new_view(a, t->dtype, t->rank, dims, (char *)t->data + (size_t)begin * row, out);
}

/* The batch size when every given input is a host tensor with the same leading dim and the
 * model's batch dim is dynamic (s->splittable); otherwise -1 (one micro-batch). */
static int64_t batch_rows(const tdm_session *s, const tdm_tensor **by_input) {
    if (!s->splittable) return -1;
    const tdm_graph *g = s->plan->graph;
    int64_t n = -1;
    for (size_t i = 0; i < g->n_inputs; i++) {
        const tdm_tensor *t = by_input[i];
        if (!t) continue;
        if (t->rank < 1 || t->dtype == TDM_STRING || t->device) return -1;
        if (n >= 0 && t->dims[0] != n) return -1;
        n = t->dims[0];
    }
    return n;
}

/* Joins the parts' tensors `name` along the leading dim into a new tensor. */
static tdm_status *join_rows(const tdm_allocator *a, tdm_pipeline_item **parts, int np, const char *name,
                             tdm_tensor **out) {
    const tdm_tensor *f0 = tdm_pipeline_item_tensor(parts[0], name);
    if (!f0) return TDM_ERR(TDM_ERR_INTERNAL, "pipeline: output '%s' is missing", name);
    if (np == 1) return tdm_tensor_clone(a, f0, out);
    int64_t dims[TDM_MAX_RANK];
    memcpy(dims, f0->dims, sizeof dims);
    dims[0] = 0;
    for (int q = 0; q < np; q++) {
        const tdm_tensor *t = tdm_pipeline_item_tensor(parts[q], name);
        bool same = t && t->dtype == f0->dtype && t->rank == f0->rank && t->rank >= 1 && !t->device &&
                    t->dtype != TDM_STRING;
        for (int d = 1; same && d < t->rank; d++) same = t->dims[d] == f0->dims[d];
        if (!same) return TDM_ERR(TDM_ERR_RUNTIME, "output '%s' cannot be joined along the batch dim", name);
        dims[0] += t->dims[0];
    }
    TDM_TRY(tdm_tensor_new(a, f0->dtype, f0->rank, dims, out));
    size_t off = 0;
    for (int q = 0; q < np; q++) {
        const tdm_tensor *t = tdm_pipeline_item_tensor(parts[q], name);
        memcpy((char *)(*out)->data + off, t->data, t->nbytes);
        off += t->nbytes;
    }
    return NULL;
}

/* After some runs, says once (log) when the measured stage times are far apart: the cut
 * came from the cost model, and the slowest stage sets the pipeline's pace. */
static void check_balance(tdm_pipe_mode *pm) {
    char msg[600];
    msg[0] = 0;
    pthread_mutex_lock(&pm->mu);
    double lo = INFINITY, hi = 0;
    int slow = 0;
    bool enough = !pm->imbalance_said;
    for (int k = 0; k < pm->n_stages && enough; k++) {
        const pm_stage *ps = &pm->stages[k];
        enough = ps->runs >= 16 && ps->items > 0;
        double per = enough ? ps->busy_ms / (double)ps->items : 0;
        if (per < lo) lo = per;
        if (per > hi) {
            hi = per;
            slow = k;
        }
    }
    if (enough && lo > 0 && hi > 2 * lo) {
        pm->imbalance_said = true;
        snprintf(msg, sizeof msg,
                 "pipeline: measured stage times are unbalanced: stage %d on %s takes %.3f ms per row, "
                 "%.1fx the fastest stage; the pipeline runs at its pace (set pipeline_cuts to move "
                 "work off it, or use throughput mode)",
                 slow, pm->stages[slow].device->name, hi, hi / lo);
    }
    pthread_mutex_unlock(&pm->mu);
    if (msg[0]) tdm_log(&pm->s->env->log, TDM_LOG_INFO, "%s", msg);
}

tdm_status *tdm_pipe_mode_run(tdm_pipe_mode *pm, const tdm_tensor **by_input, tdm_tensor **all,
                              const tdm_run_ctl *ctl) {
    tdm_session *s = pm->s;
    const tdm_graph *g = s->plan->graph;
    const tdm_allocator *a = pm->a;
    int64_t n = batch_rows(s, by_input);
    int64_t mb = n < 1 ? 1 : pm->micro_batch > 0 ? pm->micro_batch : (n + pm->n_stages - 1) / pm->n_stages;
    int np = n < 1 ? 1 : (int)((n + mb - 1) / mb);
    pm_request r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    r.ctl = ctl;
    pm_part *parts = tdm_calloc(a, (size_t)np, sizeof *parts);
    r.done = tdm_calloc(a, (size_t)np, sizeof *r.done);
    tdm_status *st = parts && r.done ? NULL : TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory splitting a run");
    int submitted = 0;
    for (int q = 0; q < np && !st; q++) {
        tdm_pipeline_item *it = NULL;
        if ((st = tdm_run_ctl_check(ctl))) break; /* cancelled: submit no more micro-batches */
        parts[q] = (pm_part){&r, q};
        if ((st = tdm_pipeline_item_create(pm->pipe, &parts[q], &it))) break;
        for (size_t i = 0; i < g->n_inputs && !st; i++) {
            const tdm_tensor *t = by_input[i];
            if (!t) continue;
            tdm_tensor *view = NULL;
            if (n >= 1) st = rows_view(a, t, (int64_t)q * mb, q == np - 1 ? n - (int64_t)q * mb : mb, &view);
            else st = tdm_tensor_new_view(a, t->dtype, t->rank, t->dims, t->data, &view);
            if (!st && t->device) { /* a device tensor goes as it is: the stage plan reads it */
                tdm_tensor_destroy(view);
                view = NULL;
                st = TDM_ERR(TDM_ERR_UNSUPPORTED, "pipeline mode takes host tensors only");
            }
            if (!st) st = tdm_pipeline_item_set_tensor(it, g->values[g->inputs[i]].name, view);
        }
        pthread_mutex_lock(&r.mu);
        r.remaining++;
        pthread_mutex_unlock(&r.mu);
        if (!st) st = tdm_pipeline_submit(pm->pipe, it, -1, NULL);
        if (st) {
            pthread_mutex_lock(&r.mu);
            r.remaining--;
            pthread_mutex_unlock(&r.mu);
            tdm_pipeline_item_free(it);
            break;
        }
        submitted++;
    }
    /* wait for every submitted part, also after a failure (they reference the inputs) */
    pthread_mutex_lock(&r.mu);
    while (r.remaining > 0) pthread_cond_wait(&r.cv, &r.mu);
    pthread_mutex_unlock(&r.mu);
    for (int q = 0; q < submitted && !st; q++) {
        const tdm_status *ps = tdm_pipeline_item_status(r.done[q]);
        if (ps) st = tdm_status_new(tdm_status_code(ps), "%s", tdm_status_message(ps));
    }
    for (size_t o = 0; o < g->n_outputs && !st; o++)
        st = join_rows(a, r.done, np, g->values[g->outputs[o]].name, &all[o]);
    if (st)
        for (size_t o = 0; o < g->n_outputs; o++) {
            tdm_tensor_destroy(all[o]);
            all[o] = NULL;
        }
    for (int q = 0; q < submitted; q++) tdm_pipeline_item_free(r.done[q]);
    if (!st) check_balance(pm);
    tdm_free(a, r.done);
    tdm_free(a, parts);
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);
    return st;
}

/* ---- throughput mode's choice ---- */

bool tdm_pipe_mode_preferred(tdm_session *s, const void *data, size_t size, const char *base_dir,
                             char *why, size_t why_size) {
    const tdm_allocator *a = s->env->alloc;
    tdm_graph *g = NULL;
    tdm_status *st = load_graph(s, data, size, base_dir, &g);
    double *costs = NULL;
    size_t n = g ? g->n_nodes : 0;
    bool pipe = false;
    /* a dynamic leading dim on every input and output: split mode divides batches */
    bool split = g != NULL;
    size_t dyn = 0;
    for (size_t i = 0; g && i < g->n_inputs; i++) {
        const tdm_value *v = &g->values[g->inputs[i]];
        if (v->data) continue;
        split &= v->rank >= 1 && v->dims[0] < 0;
        dyn++;
    }
    for (size_t o = 0; g && o < g->n_outputs; o++) {
        const tdm_value *v = &g->values[g->outputs[o]];
        split &= v->rank >= 1 && v->dims[0] < 0;
    }
    if (split && dyn) {
        snprintf(why, why_size, "split: every input and output has a dynamic batch dim, so batches are "
                 "divided between a replica per device (and single requests go to the replica "
                 "predicted to finish first)");
    } else if (!st && n && !(costs = tdm_calloc(a, n * (size_t)s->n_devices, sizeof *costs))) {
        snprintf(why, why_size, "replicas: out of memory estimating a pipeline");
    } else if (st || !n || (st = node_costs(s, g, s->n_devices, costs))) {
        snprintf(why, why_size, "replicas: no cost estimate for a pipeline (%s)",
                 st ? tdm_status_message(st) : "no nodes");
    } else {
        /* replicas: every device runs whole requests, throughput = sum of 1 / T_device;
         * pipeline: throughput = 1 / slowest stage */
        double rate = 0, best = INFINITY;
        for (int k = 0; k < s->n_devices; k++) {
            double t = 0;
            for (size_t i = 0; i < n; i++) t += costs[(size_t)k * n + i];
            if (t > 0) rate += 1.0 / t;
            if (t < best) best = t;
        }
        int starts[TDM_MAX_DEVICES];
        double stage_ms[TDM_MAX_DEVICES];
        int used = auto_cut(costs, n, s->n_devices, starts, stage_ms);
        double slowest = 0;
        for (int k = 0; k < used; k++) slowest = stage_ms[k] > slowest ? stage_ms[k] : slowest;
        double pipe_rate = slowest > 0 ? 1.0 / slowest : 0;
        /* a pipeline must win clearly: it pays a copy at every cut that the model ignores */
        pipe = used > 1 && pipe_rate > 1.15 * rate;
        snprintf(why, why_size,
                 "%s: predicted %.1f requests/s as a %d-stage pipeline (slowest stage %.3f ms) vs %.1f/s "
                 "with a replica per device (fastest alone %.3f ms)",
                 pipe ? "pipeline" : "replicas", pipe_rate * 1e3, used, slowest, rate * 1e3, best);
    }
    tdm_status_free(st);
    tdm_free(a, costs);
    tdm_graph_free(g);
    return pipe;
}

void tdm_pipe_mode_set_monitor(tdm_pipe_mode *pm, struct tdm_monitor *mon) {
    for (int k = 0; k < pm->n_stages; k++)
        if (pm->stages[k].plan) pm->stages[k].plan->monitor = mon;
}

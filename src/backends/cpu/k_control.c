/* CPU kernels: control flow. Bodies run through ctx->run_subgraph, in the executor, so that
 * every op of a body uses the same kernels and checks as the main graph. */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/settings.h"

/* Bounds of one run of a Loop or Scan node (documented in include/tandem/tandem.h, "Resource
 * limits"): a Loop stops with TDM_ERR_LIMIT after loop_max_iterations iterations (0 = no
 * bound), and a Loop or Scan after loop_timeout_ms milliseconds (0 = no bound): the session's
 * options, else the environment's settings (TANDEM_LOOP_MAX_ITERATIONS,
 * TANDEM_LOOP_TIMEOUT_MS), given to the kernel as ctx->loop. */
typedef struct loop_limits {
    int64_t max_iter;    /* 0 = none */
    int64_t timeout_ms;  /* 0 = none */
    int64_t deadline_ns; /* when timeout_ms > 0 */
} loop_limits;

static tdm_status *limits_get(const tdm_kernel_ctx *ctx, loop_limits *l) {
    l->max_iter = ctx->loop ? ctx->loop->max_iterations : TDM_LOOP_MAX_ITERATIONS_DEFAULT;
    l->timeout_ms = ctx->loop ? ctx->loop->timeout_ms : 0;
    int64_t ns;
    if (__builtin_mul_overflow(l->timeout_ms, (int64_t)1000000, &ns) ||
        __builtin_add_overflow(tdm_now_ns(), ns, &l->deadline_ns))
        l->timeout_ms = 0; /* beyond the clock's range: no bound */
    return NULL;
}

/* Before iteration `trip` (0-based). `iterative`: the iteration count applies (Loop). Also
 * where a cancelled run stops (ctx->run_ctl). */
static tdm_status *limits_check(const tdm_kernel_ctx *ctx, const loop_limits *l, int64_t trip,
                                bool iterative) {
    if (iterative && l->max_iter && trip >= l->max_iter)
        return tdm_node_error(ctx->node, TDM_ERR_LIMIT,
                              "the loop did not end after %lld iterations (the limit; "
                              "loop_max_iterations or TANDEM_LOOP_MAX_ITERATIONS sets it)",
                              (long long)l->max_iter);
    if (l->timeout_ms && tdm_now_ns() > l->deadline_ns)
        return tdm_node_error(ctx->node, TDM_ERR_LIMIT,
                              "the loop ran longer than %lld ms after %lld iterations (the limit; "
                              "loop_timeout_ms or TANDEM_LOOP_TIMEOUT_MS sets it)",
                              (long long)l->timeout_ms, (long long)trip);
    /* tdm_session_cancel or the run's deadline (tdm_run_options): TDM_ERR_CANCELLED */
    tdm_status *st = tdm_run_ctl_check(ctx->run_ctl);
    if (st) return tdm_status_wrap(st, "%s node '%s' after %lld iterations: ", ctx->node->op_type,
                                   ctx->node->name, (long long)trip);
    return NULL;
}

static tdm_status *k_if(tdm_kernel_ctx *ctx) {
    const tdm_tensor *c = ctx->in[0];
    if (!c || c->count < 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "cond is empty");
    bool cond = ((const uint8_t *)c->data)[0] != 0;
    const tdm_attr *br = tdm_node_attr(ctx->node, cond ? "then_branch" : "else_branch");
    return ctx->run_subgraph(ctx, br->g, 0, NULL, ctx->n_out, ctx->out);
}

/* Stacks `n` tensors of equal dtype/shape along a new axis `axis` (0..rank). */
static tdm_status *stack(tdm_kernel_ctx *ctx, int oi, tdm_tensor **items, int64_t n, int axis,
                         bool reverse, const tdm_graph *body, int body_out) {
    if (n == 0) { /* no iteration: shape from the body's declaration if known, else [0] */
        const tdm_value *v = &body->values[body->outputs[body_out]];
        int64_t dims[TDM_MAX_RANK] = {0};
        int rank = 1;
        if (v->rank >= 0 && v->rank < TDM_MAX_RANK) {
            rank = v->rank + 1;
            for (int d = 0; d < v->rank; d++) dims[d + 1] = v->dims[d] < 0 ? 0 : v->dims[d];
        }
        return ctx->alloc_output(ctx, oi, v->dtype ? v->dtype : TDM_FLOAT, rank, dims);
    }
    const tdm_tensor *f = items[0];
    if (f->dtype == TDM_STRING)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "string scan outputs are not supported");
    if (f->rank + 1 > TDM_MAX_RANK)
        return tdm_node_error(ctx->node, TDM_ERR_LIMIT, "scan output rank too large");
    if (axis < 0) axis += f->rank + 1;
    if (axis < 0 || axis > f->rank)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "scan output axis out of range");
    for (int64_t i = 1; i < n; i++) {
        bool same = items[i]->dtype == f->dtype && items[i]->rank == f->rank;
        for (int d = 0; same && d < f->rank; d++) same = items[i]->dims[d] == f->dims[d];
        if (!same)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "scan output %d changes shape between iterations", oi);
    }
    int64_t dims[TDM_MAX_RANK];
    for (int d = 0, s = 0; d <= f->rank; d++) dims[d] = d == axis ? n : f->dims[s++];
    TDM_TRY(ctx->alloc_output(ctx, oi, f->dtype, f->rank + 1, dims));
    size_t es = tdm_dtype_elem_size(f->dtype);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= f->dims[d];
    for (int d = axis; d < f->rank; d++) inner *= f->dims[d];
    char *dst = ctx->out[oi]->data;
    for (int64_t i = 0; i < n; i++) {
        const char *src = items[reverse ? n - 1 - i : i]->data;
        for (int64_t o = 0; o < outer; o++)
            memcpy(dst + ((size_t)(o * n + i) * (size_t)inner) * es, src + (size_t)(o * inner) * es,
                   (size_t)inner * es);
    }
    return NULL;
}

static tdm_status *new_scalar(tdm_kernel_ctx *ctx, tdm_dtype dt, tdm_tensor **out) {
    return tdm_tensor_new(ctx->alloc, dt, 0, NULL, out);
}

typedef struct scan_list {
    tdm_tensor **items;
    int64_t n, cap;
} scan_list;

static tdm_status *list_push(const tdm_allocator *a, scan_list *l, tdm_tensor *t) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? l->cap * 2 : 16;
        tdm_tensor **n = tdm_alloc(a, (size_t)cap * sizeof *n);
        if (!n) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in a loop");
        if (l->n) memcpy(n, l->items, (size_t)l->n * sizeof *n);
        tdm_free(a, l->items);
        l->items = n;
        l->cap = cap;
    }
    l->items[l->n++] = t;
    return NULL;
}

static void list_free(const tdm_allocator *a, scan_list *l, int k) {
    for (int j = 0; j < k; j++) {
        for (int64_t i = 0; i < l[j].n; i++) tdm_tensor_destroy(l[j].items[i]);
        tdm_free(a, l[j].items);
    }
    tdm_free(a, l);
}

static tdm_status *k_loop(tdm_kernel_ctx *ctx) {
    const tdm_graph *body = tdm_node_attr(ctx->node, "body")->g;
    const tdm_allocator *a = ctx->alloc;
    int n_carried = ctx->n_in - 2, n_scan = (int)body->n_outputs - 1 - n_carried;
    if (n_scan < 0) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "bad body outputs");
    int64_t max_trip = INT64_MAX;
    if (ctx->in[0]) {
        if (ctx->in[0]->count < 1) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "M is empty");
        max_trip = tdm_tensor_get_i64(ctx->in[0], 0);
    }
    bool cond = true;
    if (ctx->in[1]) {
        if (ctx->in[1]->count < 1) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "cond is empty");
        cond = ((const uint8_t *)ctx->in[1]->data)[0] != 0;
    }
    int nb = (int)body->n_outputs;
    tdm_tensor **carried = tdm_calloc(a, (size_t)n_carried + 1, sizeof *carried);
    tdm_tensor **bout = tdm_calloc(a, (size_t)nb + 1, sizeof *bout);
    const tdm_tensor **bin = tdm_calloc(a, (size_t)n_carried + 2, sizeof *bin);
    scan_list *scans = tdm_calloc(a, (size_t)n_scan + 1, sizeof *scans);
    tdm_tensor *iter = NULL, *cin = NULL;
    tdm_status *st = NULL;
    if (!carried || !bout || !bin || !scans) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in Loop");
        goto done;
    }
    for (int i = 0; i < n_carried && !st; i++) {
        if (!ctx->in[2 + i]) {
            st = tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "loop-carried input %d missing", i);
            break;
        }
        st = tdm_tensor_clone(a, ctx->in[2 + i], &carried[i]);
    }
    if (st) goto done;
    if ((st = new_scalar(ctx, TDM_INT64, &iter)) || (st = new_scalar(ctx, TDM_BOOL, &cin))) goto done;
    loop_limits lim;
    if ((st = limits_get(ctx, &lim))) goto done;
    for (int64_t trip = 0; trip < max_trip && cond; trip++) {
        if ((st = limits_check(ctx, &lim, trip, true))) goto done;
        *(int64_t *)iter->data = trip;
        *(uint8_t *)cin->data = cond;
        bin[0] = iter;
        bin[1] = cin;
        for (int i = 0; i < n_carried; i++) bin[2 + i] = carried[i];
        if ((st = ctx->run_subgraph(ctx, body, n_carried + 2, bin, nb, bout))) goto done;
        if (bout[0]->count < 1) {
            st = tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "body condition is empty");
            for (int j = 0; j < nb; j++) tdm_tensor_destroy(bout[j]);
            goto done;
        }
        cond = tdm_tensor_get_i64(bout[0], 0) != 0;
        tdm_tensor_destroy(bout[0]);
        for (int i = 0; i < n_carried; i++) {
            tdm_tensor_destroy(carried[i]);
            carried[i] = bout[1 + i];
        }
        for (int k = 0; k < n_scan; k++) {
            tdm_tensor *t = bout[1 + n_carried + k];
            if ((st = list_push(a, &scans[k], t))) {
                tdm_tensor_destroy(t);
                for (int j = k + 1; j < n_scan; j++) tdm_tensor_destroy(bout[1 + n_carried + j]);
                goto done;
            }
        }
    }
    for (int i = 0; i < n_carried && i < ctx->n_out; i++) {
        tdm_tensor_destroy(ctx->out[i]);
        ctx->out[i] = carried[i];
        carried[i] = NULL;
    }
    for (int k = 0; k < n_scan && !st; k++)
        if (n_carried + k < ctx->n_out)
            st = stack(ctx, n_carried + k, scans[k].items, scans[k].n, 0, false, body, 1 + n_carried + k);
done:
    for (int i = 0; carried && i < n_carried; i++) tdm_tensor_destroy(carried[i]);
    tdm_free(a, carried);
    tdm_free(a, bout);
    tdm_free(a, bin);
    if (scans) list_free(a, scans, n_scan);
    tdm_tensor_destroy(iter);
    tdm_tensor_destroy(cin);
    return st;
}

/* Slice t at index i along axis (that axis removed). */
static tdm_status *take_slice(tdm_kernel_ctx *ctx, const tdm_tensor *t, int axis, int64_t i,
                              tdm_tensor **out) {
    int64_t dims[TDM_MAX_RANK];
    for (int d = 0, s = 0; d < t->rank; d++)
        if (d != axis) dims[s++] = t->dims[d];
    TDM_TRY(tdm_tensor_new(ctx->alloc, t->dtype, t->rank - 1, dims, out));
    size_t es = tdm_dtype_elem_size(t->dtype);
    int64_t outer = 1, inner = 1, L = t->dims[axis];
    for (int d = 0; d < axis; d++) outer *= t->dims[d];
    for (int d = axis + 1; d < t->rank; d++) inner *= t->dims[d];
    for (int64_t o = 0; o < outer; o++)
        memcpy((char *)(*out)->data + (size_t)(o * inner) * es,
               (const char *)t->data + ((size_t)((o * L + i) * inner)) * es, (size_t)inner * es);
    return NULL;
}

/* One scan over inputs in[0..n_state+n_scan) (opset 9 layout). */
static tdm_status *scan_once(tdm_kernel_ctx *ctx, const tdm_tensor *const *in, int n_state,
                             int n_scan, tdm_tensor **state_out, scan_list *scans, int n_scan_out) {
    const tdm_graph *body = tdm_node_attr(ctx->node, "body")->g;
    const tdm_allocator *a = ctx->alloc;
    size_t cnt;
    const int64_t *in_axes = tdm_attr_ints(ctx->node, "scan_input_axes", &cnt);
    if (in_axes && cnt != (size_t)n_scan) in_axes = NULL;
    const int64_t *in_dirs = tdm_attr_ints(ctx->node, "scan_input_directions", &cnt);
    if (in_dirs && cnt != (size_t)n_scan) in_dirs = NULL;
    int64_t L = -1;
    int axes[64];
    if (n_scan > 64) return tdm_node_error(ctx->node, TDM_ERR_LIMIT, "too many scan inputs");
    for (int i = 0; i < n_state; i++) /* the body takes every state variable: none is optional */
        if (!in[i])
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "state variable %d (an empty input name) is missing", i);
    for (int j = 0; j < n_scan; j++) {
        const tdm_tensor *t = in[n_state + j];
        if (!t || t->rank < 1) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "scan input %d has no axis", j);
        TDM_TRY(tdm_norm_axis(ctx->node, in_axes ? in_axes[j] : 0, t->rank, &axes[j]));
        int64_t len = t->dims[axes[j]];
        if (L >= 0 && len != L)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "scan inputs differ in length");
        L = len;
    }
    int nb = (int)body->n_outputs;
    tdm_tensor **state = tdm_calloc(a, (size_t)n_state + 1, sizeof *state);
    tdm_tensor **slices = tdm_calloc(a, (size_t)n_scan + 1, sizeof *slices);
    tdm_tensor **bout = tdm_calloc(a, (size_t)nb + 1, sizeof *bout);
    const tdm_tensor **bin = tdm_calloc(a, (size_t)(n_state + n_scan) + 1, sizeof *bin);
    tdm_status *st = NULL;
    if (!state || !slices || !bout || !bin) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in Scan");
        goto done;
    }
    for (int i = 0; i < n_state && !st; i++) st = tdm_tensor_clone(a, in[i], &state[i]);
    loop_limits lim;
    if (!st) st = limits_get(ctx, &lim);
    for (int64_t t = 0; t < L && !st; t++) {
        if ((st = limits_check(ctx, &lim, t, false))) break;
        for (int j = 0; j < n_scan && !st; j++) {
            int64_t idx = in_dirs && in_dirs[j] ? L - 1 - t : t;
            tdm_tensor_destroy(slices[j]);
            slices[j] = NULL;
            st = take_slice(ctx, in[n_state + j], axes[j], idx, &slices[j]);
        }
        if (st) break;
        for (int i = 0; i < n_state; i++) bin[i] = state[i];
        for (int j = 0; j < n_scan; j++) bin[n_state + j] = slices[j];
        if ((st = ctx->run_subgraph(ctx, body, n_state + n_scan, bin, nb, bout))) break;
        for (int i = 0; i < n_state; i++) {
            tdm_tensor_destroy(state[i]);
            state[i] = bout[i];
        }
        for (int k = 0; k < n_scan_out; k++) {
            if (st) {
                tdm_tensor_destroy(bout[n_state + k]);
                continue;
            }
            st = list_push(a, &scans[k], bout[n_state + k]);
            if (st) tdm_tensor_destroy(bout[n_state + k]);
        }
    }
    if (!st)
        for (int i = 0; i < n_state; i++) {
            state_out[i] = state[i];
            state[i] = NULL;
        }
done:
    for (int i = 0; state && i < n_state; i++) tdm_tensor_destroy(state[i]);
    for (int j = 0; slices && j < n_scan; j++) tdm_tensor_destroy(slices[j]);
    tdm_free(a, state);
    tdm_free(a, slices);
    tdm_free(a, bout);
    tdm_free(a, bin);
    return st;
}

static tdm_status *k_scan(tdm_kernel_ctx *ctx) {
    const tdm_graph *body = tdm_node_attr(ctx->node, "body")->g;
    const tdm_allocator *a = ctx->alloc;
    int first = ctx->opset < 9 ? 1 : 0;
    int n_scan = (int)tdm_attr_int(ctx->node, "num_scan_inputs", 1);
    int n_state = ctx->n_in - first - n_scan;
    int n_scan_out = ctx->n_out - n_state;
    if (n_state < 0 || n_scan_out < 0)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "inputs do not match num_scan_inputs");
    size_t cnt;
    const int64_t *out_axes = tdm_attr_ints(ctx->node, "scan_output_axes", &cnt);
    if (out_axes && cnt != (size_t)n_scan_out) out_axes = NULL;
    const int64_t *out_dirs = tdm_attr_ints(ctx->node, "scan_output_directions", &cnt);
    if (out_dirs && cnt != (size_t)n_scan_out) out_dirs = NULL;
    if (first == 0) {
        scan_list *scans = tdm_calloc(a, (size_t)n_scan_out + 1, sizeof *scans);
        if (!scans) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in Scan");
        tdm_status *st = scan_once(ctx, ctx->in, n_state, n_scan, ctx->out, scans, n_scan_out);
        for (int k = 0; k < n_scan_out && !st; k++)
            st = stack(ctx, n_state + k, scans[k].items, scans[k].n, out_axes ? (int)out_axes[k] : 0,
                       out_dirs && out_dirs[k], body, n_state + k);
        list_free(a, scans, n_scan_out);
        return st;
    }
    /* opset 8: a leading batch axis on every state and scan input, sequence_lens optional */
    if (ctx->in[0])
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "Scan-8 sequence_lens is not supported");
    int64_t B = ctx->in[1] ? ctx->in[1]->dims[0] : 0;
    tdm_status *st = NULL;
    tdm_tensor ***state_b = tdm_calloc(a, (size_t)n_state + 1, sizeof *state_b);
    tdm_tensor ***scan_b = tdm_calloc(a, (size_t)n_scan_out + 1, sizeof *scan_b);
    const tdm_tensor **ins = tdm_calloc(a, (size_t)(n_state + n_scan) + 1, sizeof *ins);
    tdm_tensor **own = tdm_calloc(a, (size_t)(n_state + n_scan) + 1, sizeof *own);
    if (!state_b || !scan_b || !ins || !own) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in Scan");
        goto done8;
    }
    for (int i = 0; i < n_state && !st; i++)
        if (!(state_b[i] = tdm_calloc(a, (size_t)B + 1, sizeof(tdm_tensor *))))
            st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    for (int k = 0; k < n_scan_out && !st; k++)
        if (!(scan_b[k] = tdm_calloc(a, (size_t)B + 1, sizeof(tdm_tensor *))))
            st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    for (int64_t b = 0; b < B && !st; b++) {
        for (int i = 0; i < n_state + n_scan && !st; i++) {
            const tdm_tensor *t = ctx->in[first + i];
            if (!t || t->rank < 1 || t->dims[0] != B) {
                st = tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "batch dims differ");
                break;
            }
            tdm_tensor_destroy(own[i]);
            own[i] = NULL;
            st = take_slice(ctx, t, 0, b, &own[i]);
            ins[i] = own[i];
        }
        if (st) break;
        scan_list *scans = tdm_calloc(a, (size_t)n_scan_out + 1, sizeof *scans);
        tdm_tensor **so = tdm_calloc(a, (size_t)n_state + 1, sizeof *so);
        if (!scans || !so) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        if (!st) st = scan_once(ctx, ins, n_state, n_scan, so, scans, n_scan_out);
        for (int i = 0; !st && i < n_state; i++) state_b[i][b] = so[i];
        for (int k = 0; !st && k < n_scan_out; k++) {
            /* stack this batch entry's scan outputs along axis 0 into a temporary */
            tdm_tensor *save = ctx->out[n_state + k];
            ctx->out[n_state + k] = NULL;
            st = stack(ctx, n_state + k, scans[k].items, scans[k].n, 0, out_dirs && out_dirs[k],
                       body, n_state + k);
            scan_b[k][b] = ctx->out[n_state + k];
            ctx->out[n_state + k] = save;
        }
        if (scans) list_free(a, scans, n_scan_out);
        tdm_free(a, so);
    }
    for (int i = 0; i < n_state && !st; i++) st = stack(ctx, i, state_b[i], B, 0, false, body, i);
    for (int k = 0; k < n_scan_out && !st; k++)
        st = stack(ctx, n_state + k, scan_b[k], B, 0, false, body, n_state + k);
done8:
    for (int i = 0; state_b && i < n_state; i++) {
        for (int64_t b = 0; state_b[i] && b < B; b++) tdm_tensor_destroy(state_b[i][b]);
        tdm_free(a, state_b[i]);
    }
    for (int k = 0; scan_b && k < n_scan_out; k++) {
        for (int64_t b = 0; scan_b[k] && b < B; b++) tdm_tensor_destroy(scan_b[k][b]);
        tdm_free(a, scan_b[k]);
    }
    for (int i = 0; own && i < n_state + n_scan; i++) tdm_tensor_destroy(own[i]);
    tdm_free(a, state_b);
    tdm_free(a, scan_b);
    tdm_free(a, ins);
    tdm_free(a, own);
    return st;
}

const tdm_kernel_def tdm_cpu_kernels_control[] = {
    {"", "If", 1, 0, 0, TDM_T(TDM_BOOL), k_if, NULL, NULL},
    {"", "Loop", 1, 0, -1, 0, k_loop, NULL, NULL},
    {"", "Scan", 8, 0, -1, 0, k_scan, NULL, NULL},
};
const int tdm_cpu_kernels_control_count =
    (int)(sizeof tdm_cpu_kernels_control / sizeof tdm_cpu_kernels_control[0]);

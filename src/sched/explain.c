/* Explaining a plan: where each node runs and why, the copies between memories, predicted
 * (and measured) times against each single device. Text, segments, JSON and Graphviz. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "sched/budget.h"
#include "sched/cost.h"
#include "sched/place.h"
#include "sched/plan.h"
#include "sched/profile.h"

typedef struct sbuf {
    const tdm_allocator *a;
    char *s;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) TDM_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t need = b->len + (size_t)n + 1;
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < need) cap *= 2;
        char *s = tdm_alloc(b->a, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        if (b->s) memcpy(s, b->s, b->len + 1);
        else s[0] = 0;
        tdm_free(b->a, b->s);
        b->s = s;
        b->cap = cap;
    }
}

/* JSON string escaping for names. */
static void sb_json_str(sbuf *b, const char *s) {
    sb_printf(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') sb_printf(b, "\\%c", c);
        else if (c < 0x20) sb_printf(b, "\\u%04x", c);
        else sb_printf(b, "%c", c);
    }
    sb_printf(b, "\"");
}

/* memory space of a device: -1 = host memory, else its position */
static int space(const tdm_plan *p, int d) { return p->devices[d]->host_memory ? -1 : d; }

typedef struct copy_rec {
    int value, from, to; /* from/to: device positions; -1 from = graph input in host memory */
    double bytes;
} copy_rec;

/* Copies the executor will make: a value read on a device whose memory differs from where
 * it was produced, once per (value, destination memory). Constants are uploaded once per
 * plan and listed too (marked). */
static size_t list_copies(const tdm_plan *p, copy_rec *out, size_t max) {
    const tdm_graph *g = p->graph;
    size_t n = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *nd = &g->nodes[i];
        int dst = nd->device;
        for (int k = 0; k < nd->n_inputs; k++) {
            int v = nd->inputs[k];
            if (v < 0 || tdm_node_reads_shape_only(nd, k)) continue; /* no copy (Shape) */
            const tdm_value *val = &g->values[v];
            int src = val->producer >= 0 ? g->nodes[val->producer].device : -1;
            int ss = src >= 0 ? space(p, src) : -1;
            if (ss == space(p, dst)) continue;
            bool dup = false;
            for (size_t c = 0; c < n && !dup; c++)
                dup = out[c].value == v && space(p, out[c].to) == space(p, dst);
            if (dup || n == max) continue;
            out[n++] = (copy_rec){v, src, dst, tdm_value_bytes(val)};
        }
    }
    for (size_t o = 0; o < g->n_outputs; o++) {
        int v = g->outputs[o];
        int src = g->values[v].producer >= 0 ? g->nodes[g->values[v].producer].device : -1;
        if (src >= 0 && space(p, src) != -1 && n < max)
            out[n++] = (copy_rec){v, src, -1, tdm_value_bytes(&g->values[v])};
    }
    return n;
}

static const char *dev_name(const tdm_plan *p, int d) { return d < 0 ? "host" : p->devices[d]->name; }

typedef struct op_agg {
    const char *op;
    int nodes;
    double ms, flops;
} op_agg;

/* Measured profile: per op type, the slowest nodes, copies, the critical path. */
static void explain_profile(tdm_plan *p, sbuf *b, int64_t runs, const copy_rec *copies, size_t nc) {
    const tdm_graph *g = p->graph;
    size_t N = g->n_nodes;
    if (!runs) {
        sb_printf(b, "nothing measured: the session must be created with profiling on and run\n");
        return;
    }
    double total = 0;
    for (size_t i = 0; i < N; i++) total += p->measured_ms[i] / (double)runs;
    tdm_device_profile prof[TDM_MAX_DEVICES];
    bool have_prof[TDM_MAX_DEVICES] = {false};
    for (int d = 0; d < p->n_devices && d < TDM_MAX_DEVICES; d++) {
        tdm_status *st = tdm_profile_device(p->devices[d], NULL, p->settings, tdm_threadpool_size(p->pool), false, &prof[d]);
        have_prof[d] = st == NULL;
        tdm_status_free(st);
    }
    sb_printf(b, "measured over %lld runs: %.4f ms per run in %zu nodes\n\n", (long long)runs, total, N);
    op_agg agg[256];
    int na = 0;
    for (size_t i = 0; i < N; i++) {
        int k = 0;
        while (k < na && strcmp(agg[k].op, g->nodes[i].op_type)) k++;
        if (k == na) {
            if (na == 256) continue;
            agg[na++] = (op_agg){g->nodes[i].op_type, 0, 0, 0};
        }
        agg[k].nodes++;
        agg[k].ms += p->measured_ms[i] / (double)runs;
        agg[k].flops += p->measured_flops[i] / (double)runs;
    }
    for (int x = 0; x < na; x++) /* by time, descending */
        for (int y = x + 1; y < na; y++)
            if (agg[y].ms > agg[x].ms) {
                op_agg t = agg[x];
                agg[x] = agg[y];
                agg[y] = t;
            }
    /* the op columns fit the longest op type name (SkipSimplifiedLayerNormalization: 32): the
     * op type table's at least 22 wide, the node table's at least 16 */
    int lw = 0;
    for (int k = 0; k < na; k++) {
        int l = (int)strlen(agg[k].op);
        lw = l > lw ? l : lw;
    }
    int ow = lw > 22 ? lw : 22, nw = lw > 16 ? lw : 16;
    sb_printf(b, "%-*s %6s %10s %7s %10s\n", ow, "op type", "nodes", "ms", "share", "GFLOP/s");
    for (int k = 0; k < na; k++)
        sb_printf(b, "%-*s %6d %10.4f %6.1f%% %10.2f\n", ow, agg[k].op, agg[k].nodes, agg[k].ms,
                  total > 0 ? 100 * agg[k].ms / total : 0, agg[k].ms > 0 ? agg[k].flops / agg[k].ms / 1e6 : 0);
    sb_printf(b, "\n%-5s %-28s %-*s %-9s %9s %6s %9s %7s %8s %7s\n", "#", "node", nw, "op", "device", "ms",
              "share", "GFLOP/s", "%peak", "GB/s", "%bw");
    bool *shown = tdm_calloc(NULL, N + 1, sizeof *shown);
    for (int row = 0; row < 25 && shown; row++) {
        size_t best = N;
        for (size_t i = 0; i < N; i++)
            if (!shown[i] && (best == N || p->measured_ms[i] > p->measured_ms[best])) best = i;
        if (best == N) break;
        shown[best] = true;
        const tdm_node *n = &g->nodes[best];
        double ms = p->measured_ms[best] / (double)runs;
        double gf = ms > 0 ? p->measured_flops[best] / (double)runs / ms / 1e6 : 0;
        double gb = ms > 0 ? p->measured_bytes[best] / (double)runs / ms / 1e6 : 0;
        int d = n->device;
        double peak = have_prof[d] ? (strstr(n->op_type, "Conv") ? prof[d].conv_gflops : prof[d].gemm_gflops) : 0;
        double bw = have_prof[d] ? prof[d].mem_gbps : 0;
        sb_printf(b, "%-5zu %-28.28s %-*.*s %-9s %9.4f %5.1f%% %9.2f %6.0f%% %8.2f %6.0f%%\n", best, n->name,
                  nw, nw, n->op_type, p->devices[d]->name, ms, total > 0 ? 100 * ms / total : 0, gf,
                  peak > 0 ? 100 * gf / peak : 0, gb, bw > 0 ? 100 * gb / bw : 0);
    }
    tdm_free(NULL, shown);
    double bytes = 0;
    size_t per_run = 0;
    for (size_t c = 0; c < nc; c++) {
        const tdm_value *val = &g->values[copies[c].value];
        if (val->data && !val->is_input) continue;
        bytes += copies[c].bytes;
        per_run++;
    }
    sb_printf(b, "\ncopies per run: %zu (%.0f bytes)\n", per_run, bytes);
    /* critical path: the longest chain of measured node times through the DAG */
    double *fin = tdm_calloc(NULL, N + 1, sizeof *fin);
    int *from = tdm_calloc(NULL, N + 1, sizeof *from);
    if (fin && from && N) {
        size_t end = 0;
        for (size_t i = 0; i < N; i++) {
            const tdm_node *n = &g->nodes[i];
            double start = 0;
            from[i] = -1;
            for (int k = 0; k < n->n_inputs; k++) {
                int v = n->inputs[k];
                if (v < 0 || g->values[v].producer < 0) continue;
                int pr = g->values[v].producer;
                if (fin[pr] > start) {
                    start = fin[pr];
                    from[i] = pr;
                }
            }
            fin[i] = start + p->measured_ms[i] / (double)runs;
            if (fin[i] > fin[end]) end = i;
        }
        sb_printf(b, "critical path: %.4f ms of %.4f ms:", fin[end], total);
        int chain[64], len = 0;
        for (int i = (int)end; i >= 0 && len < 64; i = from[i]) chain[len++] = i;
        for (int k = len - 1; k >= 0; k--) sb_printf(b, " %s%s", g->nodes[chain[k]].name, k ? " ->" : "");
        sb_printf(b, "\n");
    }
    tdm_free(NULL, fin);
    tdm_free(NULL, from);
}

/* Plans placed without the cost model get its predictions when explained. */
static void predict_now(tdm_plan *p) {
    const tdm_graph *g = p->graph;
    int D = p->n_devices;
    tdm_device_profile prof[TDM_MAX_DEVICES];
    for (int d = 0; d < D && d < TDM_MAX_DEVICES; d++) {
        tdm_status *st = tdm_profile_device(p->devices[d], NULL, p->settings, tdm_threadpool_size(p->pool), false, &prof[d]);
        if (st) {
            tdm_status_free(st);
            return;
        }
    }
    double *ms = tdm_calloc(p->alloc, g->n_nodes * (size_t)D + 1, sizeof *ms);
    if (!ms) return;
    for (size_t i = 0; i < g->n_nodes; i++)
        for (int d = 0; d < D; d++) ms[i * (size_t)D + (size_t)d] = tdm_cost_node_ms(g, &g->nodes[i], &prof[d]);
    pthread_mutex_lock(&p->mem_mu);
    if (!p->node_ms) {
        p->node_ms = ms;
        ms = NULL;
        p->measured_used = tdm_measured_apply(p);
    }
    pthread_mutex_unlock(&p->mem_mu);
    tdm_free(p->alloc, ms);
}

/* What every format reports: the copies, the predicted and the measured totals. */
typedef struct explain_sums {
    copy_rec *copies;
    size_t nc;
    double copy_bytes;
    int64_t runs;
    double measured_total, predicted_sum, abs_err;
    int err_n;
} explain_sums;

/* The layer group of a weight for explanations: its name up to the number after "layers." /
 * "layer." / "blocks." / "h." (e.g. "model.layers.3"), else the name without its last
 * dotted or slashed part. */
static void layer_group(const char *name, char *out, size_t size) {
    static const char *const keys[] = {"layers.", "layer.", "blocks.", "h.", "layers/", "layer/"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const char *at = strstr(name, keys[k]);
        if (!at) continue;
        const char *e = at + strlen(keys[k]);
        while (*e >= '0' && *e <= '9') e++;
        if (e == at + strlen(keys[k])) continue;
        snprintf(out, size, "%.*s", (int)(e - name), name);
        return;
    }
    const char *last = strrchr(name, '.');
    const char *slash = strrchr(name, '/');
    if (slash && (!last || slash > last)) last = slash;
    if (last && last != name) snprintf(out, size, "%.*s", (int)(last - name), name);
    else snprintf(out, size, "%s", name);
}

/* The device a weight is read on (its first reader's), or -1. */
static int weight_device(const tdm_plan *p, int v) {
    const tdm_graph *g = p->graph;
    for (size_t i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++)
            if (g->nodes[i].inputs[j] == v) return g->nodes[i].device;
    return -1;
}

static void sb_ms_or_null(sbuf *b, double ms) {
    if (isinf(ms) || !(ms > 0)) sb_printf(b, "null");
    else sb_printf(b, "%.6g", ms);
}

/* Budgets and residency (sched/budget.h) in the JSON explanation: per device the budget and
 * its parts, per weight its residency, and the plan's totals. */
static void explain_budget_json(const tdm_plan *p, sbuf *b) {
    const tdm_budget_plan *bp = p->budget;
    const tdm_graph *g = p->graph;
    double streamed = 0;
    sb_printf(b, ",\"budget\":{");
    if (bp) {
        sb_printf(b, "\"choice\":\"%s\",\"reason\":", bp->choice == TDM_FIT_STREAMED ? "streamed"
                  : bp->choice == TDM_FIT_LAYERS ? "layers" : "resident");
        sb_json_str(b, bp->why);
        sb_printf(b, ",\"devices\":{");
        for (int d = 0; d < p->n_devices; d++) {
            streamed += (double)bp->streamed[d];
            sb_printf(b, "%s", d ? "," : "");
            sb_json_str(b, p->devices[d]->name);
            sb_printf(b, ":{\"budget_bytes\":%lld,\"weights_bytes\":%lld,\"resident_bytes\":%lld,"
                      "\"streamed_bytes\":%lld,\"ring_bytes\":%lld,\"activation_bytes\":%lld,"
                      "\"reserved_bytes\":%lld,\"window\":%d}", (long long)bp->budget[d],
                      (long long)bp->weights[d], (long long)bp->resident[d], (long long)bp->streamed[d],
                      (long long)bp->ring[d], (long long)bp->activations[d], (long long)bp->reserve[d],
                      bp->window[d]);
        }
        sb_printf(b, "},\"predicted_streamed_ms\":");
        sb_ms_or_null(b, bp->predicted_streamed_ms);
        sb_printf(b, ",\"predicted_layers_ms\":");
        sb_ms_or_null(b, bp->predicted_layers_ms);
        sb_printf(b, ",");
    }
    sb_printf(b, "\"predicted_ms_per_run\":%.6g,\"bytes_streamed_per_run\":%.0f}",
              bp && bp->predicted_ms > 0 ? bp->predicted_ms : p->predicted_ms, streamed);
    sb_printf(b, ",\"weights\":[");
    bool first = true;
    for (size_t v = 0; v < g->n_values; v++) {
        const tdm_value *val = &g->values[v];
        if (!val->data || val->is_input) continue;
        int d = weight_device(p, (int)v);
        if (d < 0) continue;
        tdm_residency r = bp && bp->residency ? (tdm_residency)bp->residency[v]
                          : tdm_tensor_is_mapped(val->data) ? TDM_RES_MAPPED : TDM_RES_RESIDENT;
        if (r == TDM_RES_NONE) r = TDM_RES_RESIDENT;
        char grp[160];
        layer_group(val->name, grp, sizeof grp);
        sb_printf(b, "%s{\"name\":", first ? "" : ",");
        sb_json_str(b, val->name);
        sb_printf(b, ",\"group\":");
        sb_json_str(b, grp);
        sb_printf(b, ",\"device\":");
        sb_json_str(b, p->devices[d]->name);
        sb_printf(b, ",\"residency\":\"%s\",\"bytes\":%zu}", tdm_residency_name(r), val->data->nbytes);
        first = false;
    }
    sb_printf(b, "]");
}

/* The KV cache placement (sched/budget.h tdm_kv_plan) in the JSON explanation: per layer
 * where its cache lives, and the copies per decode step that the host layers cost. */
static void explain_kv_json(const tdm_plan *p, sbuf *b) {
    const tdm_kv_plan *k = p->kv;
    if (!k) return;
    sb_printf(b, ",\"kv_cache\":{\"layers\":[");
    for (int l = 0; l < k->n_layers; l++) {
        int d = k->device[l];
        sb_printf(b, "%s{\"layer\":%d,\"place\":\"%s\",\"device\":", l ? "," : "", l,
                  tdm_kv_place_name(k->place[l]));
        sb_json_str(b, d >= 0 && d < p->n_devices ? p->devices[d]->name : "?");
        sb_printf(b, ",\"bytes\":%lld}", (long long)k->bytes[l]);
    }
    sb_printf(b, "],\"bytes_on_device\":{");
    for (int d = 0; d < p->n_devices; d++) {
        sb_printf(b, "%s", d ? "," : "");
        sb_json_str(b, p->devices[d]->name);
        sb_printf(b, ":%lld", (long long)k->on_device[d]);
    }
    sb_printf(b, "},\"bytes_uploaded_per_token\":%lld,\"bytes_downloaded_per_token\":%lld,"
              "\"fed_back\":%s,\"reason\":", (long long)k->uploaded_per_token,
              (long long)k->downloaded_per_token, k->fed_back ? "true" : "false");
    sb_json_str(b, k->why);
    sb_printf(b, "}");
}

/* The KV cache placement in the text explanation: runs of layers with the same place. */
static void explain_kv_text(const tdm_plan *p, sbuf *b) {
    const tdm_kv_plan *k = p->kv;
    if (!k) return;
    sb_printf(b, "\nKV cache: %s; copies per token: %.2f MiB up, %.2f MiB down%s\n", k->why,
              (double)k->uploaded_per_token / 1048576, (double)k->downloaded_per_token / 1048576,
              k->fed_back ? " (at the full context)" : "");
    for (int l = 0; l < k->n_layers;) {
        int e = l;
        double bytes = 0;
        while (e < k->n_layers && k->place[e] == k->place[l] && k->device[e] == k->device[l])
            bytes += (double)k->bytes[e++];
        int d = k->device[l];
        sb_printf(b, "  layers %d-%d: %s (attention on %s), %.2f MiB\n", l, e - 1,
                  tdm_kv_place_name(k->place[l]), d >= 0 && d < p->n_devices ? p->devices[d]->name : "?",
                  bytes / 1048576);
        l = e;
    }
}

/* Budgets in the text explanation: the decision, then the weights grouped by layer. */
static void explain_budget_text(const tdm_plan *p, sbuf *b) {
    const tdm_budget_plan *bp = p->budget;
    if (!bp) return;
    const tdm_graph *g = p->graph;
    sb_printf(b, "\nmemory budgets: %s\n", bp->why);
    for (int d = 0; d < p->n_devices; d++)
        if (bp->budget[d] > 0)
            sb_printf(b, "  %s: budget %.1f MiB: resident weights %.1f + ring %.1f (window k=%d) + "
                      "activations %.1f + reserved %.1f MiB; streamed %.1f MiB per run\n",
                      p->devices[d]->name, (double)bp->budget[d] / 1048576,
                      (double)bp->resident[d] / 1048576, (double)bp->ring[d] / 1048576, bp->window[d],
                      (double)bp->activations[d] / 1048576, (double)bp->reserve[d] / 1048576,
                      (double)bp->streamed[d] / 1048576);
    if (!bp->residency) return;
    sb_printf(b, "  %-40s %-10s %10s %10s %10s\n", "layer group", "device", "resident", "streamed",
              "mapped");
    char cur[160] = "";
    int cur_dev = -1;
    double sums[4] = {0};
    for (size_t v = 0; v <= g->n_values; v++) {
        char grp[160] = "";
        int d = -1;
        bool end = v == g->n_values;
        if (!end) {
            const tdm_value *val = &g->values[v];
            if (!val->data || val->is_input || !bp->residency[v]) continue;
            d = weight_device(p, (int)v);
            if (d < 0) continue;
            layer_group(val->name, grp, sizeof grp);
        }
        if (end || strcmp(grp, cur) || d != cur_dev) {
            if (cur[0] && cur_dev >= 0)
                sb_printf(b, "  %-40.40s %-10s %9.2fM %9.2fM %9.2fM\n", cur, p->devices[cur_dev]->name,
                          sums[TDM_RES_RESIDENT] / 1048576, sums[TDM_RES_STREAMED] / 1048576,
                          sums[TDM_RES_MAPPED] / 1048576);
            snprintf(cur, sizeof cur, "%s", grp);
            cur_dev = d;
            memset(sums, 0, sizeof sums);
        }
        if (!end) sums[bp->residency[v] & 3] += (double)g->values[v].data->nbytes;
    }
}

/* The JSON explanation (TDM_EXPLAIN_JSON). */
static void explain_json(tdm_plan *p, sbuf *b, const explain_sums *x) {
    const tdm_graph *g = p->graph;
    int D = p->n_devices;
    const copy_rec *copies = x->copies;
    size_t nc = x->nc;
    int64_t runs = x->runs;
    sb_printf(b, "{\"devices\":[");
    for (int d = 0; d < D; d++) {
        sb_printf(b, "%s", d ? "," : "");
        sb_json_str(b, p->devices[d]->name);
    }
    sb_printf(b, "],\"nodes\":[");
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        sb_printf(b, "%s{\"index\":%zu,\"name\":", i ? "," : "", i);
        sb_json_str(b, n->name);
        sb_printf(b, ",\"op\":");
        sb_json_str(b, n->op_type);
        sb_printf(b, ",\"device\":");
        sb_json_str(b, p->devices[n->device]->name);
        /* what implements it (oneDNN's implementation name, "tandem"; "" before a run) */
        char impl[128];
        tdm_device_kernel_impl(p->devices[n->device], p->nodes[i].kernel, p->nodes[i].state, impl,
                               sizeof impl);
        sb_printf(b, ",\"impl\":");
        sb_json_str(b, impl);
        double pm = p->node_ms ? p->node_ms[i * (size_t)D + (size_t)n->device] : 0;
        sb_printf(b, ",\"predicted_ms\":%.6g,\"predicted_ms_by_device\":{", pm);
        for (int d = 0; d < D; d++) {
            sb_printf(b, "%s", d ? "," : "");
            sb_json_str(b, p->devices[d]->name);
            if (!p->supported[i * (size_t)D + (size_t)d]) sb_printf(b, ":null");
            else sb_printf(b, ":%.6g", p->node_ms ? p->node_ms[i * (size_t)D + (size_t)d] : 0);
        }
        sb_printf(b, "},\"reason\":");
        sb_json_str(b, tdm_place_reason_text((tdm_place_reason)p->reason[i]));
        if (runs) sb_printf(b, ",\"measured_ms\":%.6g", p->measured_ms[i] / (double)runs);
        double fl = runs ? p->measured_flops[i] / (double)runs : tdm_node_flops(g, n);
        double by = runs ? p->measured_bytes[i] / (double)runs : tdm_node_bytes(g, n);
        sb_printf(b, ",\"flops\":%.0f,\"bytes\":%.0f}", fl, by); /* measured runs: their shapes */
    }
    sb_printf(b, "],\"copies\":[");
    for (size_t c = 0; c < nc; c++) {
        const tdm_value *val = &g->values[copies[c].value];
        sb_printf(b, "%s{\"value\":", c ? "," : "");
        sb_json_str(b, val->name);
        sb_printf(b, ",\"from\":");
        sb_json_str(b, dev_name(p, copies[c].from));
        sb_printf(b, ",\"to\":");
        sb_json_str(b, dev_name(p, copies[c].to));
        sb_printf(b, ",\"bytes\":%.0f,\"once_per_plan\":%s}", copies[c].bytes,
                  val->data && !val->is_input ? "true" : "false");
    }
    sb_printf(b, "],\"predicted_total_ms\":%.6g,\"predicted_copy_ms\":%.6g,\"copy_bytes_per_run\":%.0f",
              p->has_prediction ? p->predicted_ms : x->predicted_sum, p->predicted_copy_ms, x->copy_bytes);
    sb_printf(b, ",\"predicted_single_device_ms\":{");
    for (int d = 0; d < D; d++) {
        sb_printf(b, "%s", d ? "," : "");
        sb_json_str(b, p->devices[d]->name);
        if (!p->has_prediction || isinf(p->single_ms[d])) sb_printf(b, ":null");
        else sb_printf(b, ":%.6g", p->single_ms[d]);
    }
    sb_printf(b, "},\"measured_node_times_used\":%d", p->measured_used);
    if (runs) {
        sb_printf(b, ",\"measured_runs\":%lld,\"measured_total_ms\":%.6g", (long long)runs, x->measured_total);
        if (x->err_n) sb_printf(b, ",\"cost_model_mean_abs_error\":%.4f", x->abs_err / x->err_n);
    }
    /* memory plan (sched/memplan.h): arena vs all intermediates, weights per device */
    tdm_memory_figures mf;
    tdm_plan_memory_figures(p, &mf);
    sb_printf(b, ",\"memory\":{\"planned\":%s,\"arena_bytes\":%zu,\"intermediate_bytes\":%zu,"
              "\"peak_live_bytes\":%zu,\"inplace_values\":%zu,\"weights_bytes\":{",
              mf.planned ? "true" : "false", mf.arena_bytes, mf.intermediate_bytes,
              mf.peak_live_bytes, mf.inplace_values);
    for (int d = 0; d < D && d < TDM_MAX_DEVICES; d++) {
        sb_printf(b, "%s", d ? "," : "");
        sb_json_str(b, p->devices[d]->name);
        sb_printf(b, ":%zu", mf.weights_bytes[d]);
    }
    sb_printf(b, "}}");
    explain_budget_json(p, b);
    explain_kv_json(p, b);
    sb_printf(b, "}\n");
}

/* The Graphviz explanation (TDM_EXPLAIN_DOT): nodes coloured by device, copies in red. */
static void explain_dot(tdm_plan *p, sbuf *b) {
    const tdm_graph *g = p->graph;
    static const char *const colors[] = {"lightblue", "orange", "palegreen", "plum", "khaki", "salmon"};
    sb_printf(b, "digraph plan {\n  rankdir=TB;\n  node [shape=box, style=filled];\n");
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        sb_printf(b, "  n%zu [label=\"%s\\n%s\\n%s\", fillcolor=%s];\n", i, n->op_type,
                  n->name, p->devices[n->device]->name, colors[n->device % 6]);
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0 || g->values[v].producer < 0) continue;
            int src = g->values[v].producer;
            bool cross = space(p, g->nodes[src].device) != space(p, n->device);
            if (cross)
                sb_printf(b, "  n%d -> n%zu [color=red, style=bold, label=\"copy %.0f B\"];\n", src,
                          i, tdm_value_bytes(&g->values[v]));
            else
                sb_printf(b, "  n%d -> n%zu;\n", src, i);
        }
    }
    sb_printf(b, "}\n");
}

/* The table explanation (TDM_EXPLAIN_TEXT per node, TDM_EXPLAIN_SEGMENTS per segment). */
static void explain_table(tdm_plan *p, sbuf *b, int format, const explain_sums *x) {
    const tdm_graph *g = p->graph;
    int D = p->n_devices;
    const copy_rec *copies = x->copies;
    size_t nc = x->nc;
    int64_t runs = x->runs;
    bool seg = format == TDM_EXPLAIN_SEGMENTS;
    sb_printf(b, "%-5s %-28s %-18s %-10s", seg ? "seg" : "#", seg ? "nodes" : "node", seg ? "ops" : "op",
              "device");
    for (int d = 0; d < D; d++) sb_printf(b, " %10s", p->devices[d]->name);
    if (runs) sb_printf(b, " %10s", "measured");
    sb_printf(b, "  reason\n");
    size_t i = 0, segno = 0;
    while (i < g->n_nodes) {
        size_t j = i + 1;
        if (seg)
            while (j < g->n_nodes && g->nodes[j].device == g->nodes[i].device) j++;
        double pred[TDM_MAX_DEVICES] = {0}, meas = 0;
        for (size_t k = i; k < j; k++) {
            for (int d = 0; d < D; d++)
                pred[d] += !p->supported[k * (size_t)D + (size_t)d] ? INFINITY
                           : p->node_ms ? p->node_ms[k * (size_t)D + (size_t)d] : 0;
            if (runs) meas += p->measured_ms[k] / (double)runs;
        }
        const tdm_node *n = &g->nodes[i];
        char label[64];
        if (seg) snprintf(label, sizeof label, "%zu..%zu (%zu)", i, j - 1, j - i);
        else snprintf(label, sizeof label, "%.28s", n->name);
        sb_printf(b, "%-5zu %-28s %-18.18s %-10s", seg ? segno : i, label,
                  seg ? (j - i > 1 ? "..." : n->op_type) : n->op_type, p->devices[n->device]->name);
        for (int d = 0; d < D; d++) {
            if (isinf(pred[d])) sb_printf(b, " %10s", "-");
            else if (!p->node_ms) sb_printf(b, " %10s", "?");
            else sb_printf(b, " %10.4f", pred[d]);
        }
        if (runs) sb_printf(b, " %10.4f", meas);
        sb_printf(b, "  %s\n", seg ? "" : tdm_place_reason_text((tdm_place_reason)p->reason[i]));
        i = j;
        segno++;
    }
    sb_printf(b, "\ncopies: %zu", nc);
    for (size_t c = 0; c < nc; c++)
        sb_printf(b, "%s%s %s -> %s (%.0f bytes%s)", c ? "; " : " ", g->values[copies[c].value].name,
                  dev_name(p, copies[c].from), dev_name(p, copies[c].to), copies[c].bytes,
                  g->values[copies[c].value].data && !g->values[copies[c].value].is_input ? ", once per plan" : "");
    sb_printf(b, "\npredicted: %.4f ms (copies %.4f ms, %.0f bytes per run)",
              p->has_prediction ? p->predicted_ms : x->predicted_sum, p->predicted_copy_ms, x->copy_bytes);
    if (p->has_prediction) {
        sb_printf(b, "; each device alone:");
        for (int d = 0; d < D; d++) {
            if (isinf(p->single_ms[d])) sb_printf(b, " %s cannot", p->devices[d]->name);
            else sb_printf(b, " %s %.4f ms", p->devices[d]->name, p->single_ms[d]);
        }
    }
    if (runs) {
        sb_printf(b, "\nmeasured: %.4f ms per run over %lld runs", x->measured_total, (long long)runs);
        if (x->err_n && p->node_ms) sb_printf(b, "; cost model mean absolute error %.1f%% per node", 100 * x->abs_err / x->err_n);
        double pt = p->has_prediction ? p->predicted_ms : x->predicted_sum;
        if (x->measured_total > 0 && pt > 0)
            sb_printf(b, "; total predicted %.4f ms, error %+.1f%%", pt,
                      100 * (pt - x->measured_total) / x->measured_total);
    }
    sb_printf(b, "\n");
    explain_budget_text(p, b);
    explain_kv_text(p, b);
}

/* The copies of the plan and the totals over its nodes (x->copies allocated with a). */
static tdm_status *explain_sum(tdm_plan *p, const tdm_allocator *a, explain_sums *x) {
    const tdm_graph *g = p->graph;
    int D = p->n_devices;
    memset(x, 0, sizeof *x);
    size_t max_copies = g->n_values * (size_t)(D + 1) + 1;
    x->copies = tdm_calloc(a, max_copies, sizeof *x->copies);
    if (!x->copies) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory explaining the plan");
    x->nc = list_copies(p, x->copies, max_copies);
    for (size_t c = 0; c < x->nc; c++) {
        const tdm_value *v = &g->values[x->copies[c].value];
        if (!(v->data && !v->is_input)) x->copy_bytes += x->copies[c].bytes;
    }
    pthread_mutex_lock(&p->mem_mu);
    x->runs = p->measured_runs;
    pthread_mutex_unlock(&p->mem_mu);
    for (size_t i = 0; i < g->n_nodes; i++) {
        double pm = p->node_ms ? p->node_ms[i * (size_t)D + (size_t)g->nodes[i].device] : 0;
        x->predicted_sum += pm;
        if (x->runs) {
            double m = p->measured_ms[i] / (double)x->runs;
            x->measured_total += m;
            if (p->node_ms && m > 0.01) {
                x->abs_err += fabs(pm - m) / m;
                x->err_n++;
            }
        }
    }
    return NULL;
}

tdm_status *tdm_plan_explain(tdm_plan *p, int format, const tdm_allocator *a, char **out) {
    if (!p->node_ms && p->n_devices <= TDM_MAX_DEVICES) predict_now(p);
    sbuf b = {a, NULL, 0, 0, false};
    explain_sums x;
    TDM_TRY(explain_sum(p, a, &x));
    if (format == TDM_EXPLAIN_PROFILE) explain_profile(p, &b, x.runs, x.copies, x.nc);
    else if (format == TDM_EXPLAIN_JSON) explain_json(p, &b, &x);
    else if (format == TDM_EXPLAIN_DOT) explain_dot(p, &b);
    else explain_table(p, &b, format, &x);
    tdm_free(a, x.copies);
    if (b.oom || !b.s) {
        tdm_free(a, b.s);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory explaining the plan");
    }
    *out = b.s;
    return NULL;
}

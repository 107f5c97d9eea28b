/* Explaining a plan: where each node runs and why, the copies between memories, predicted
 * (and measured) times against each single device. Text, segments, JSON and Graphviz. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "sched/cost.h"
#include "sched/place.h"
#include "sched/plan.h"

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
            if (v < 0) continue;
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

tdm_status *tdm_plan_explain(tdm_plan *p, int format, const tdm_allocator *a, char **out) {
    const tdm_graph *g = p->graph;
    int D = p->n_devices;
    sbuf b = {a, NULL, 0, 0, false};
    size_t max_copies = g->n_values * (size_t)(D + 1) + 1;
    copy_rec *copies = tdm_calloc(a, max_copies, sizeof *copies);
    if (!copies) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory explaining the plan");
    size_t nc = list_copies(p, copies, max_copies);
    double copy_bytes = 0;
    for (size_t c = 0; c < nc; c++)
        if (!(g->values[copies[c].value].data && !g->values[copies[c].value].is_input)) copy_bytes += copies[c].bytes;
    pthread_mutex_lock(&p->mem_mu);
    int64_t runs = p->measured_runs;
    pthread_mutex_unlock(&p->mem_mu);
    double measured_total = 0, predicted_sum = 0, abs_err = 0;
    int err_n = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        double pm = p->node_ms ? p->node_ms[i * (size_t)D + (size_t)g->nodes[i].device] : 0;
        predicted_sum += pm;
        if (runs) {
            double m = p->measured_ms[i] / (double)runs;
            measured_total += m;
            if (p->node_ms && m > 0.01) {
                abs_err += fabs(pm - m) / m;
                err_n++;
            }
        }
    }
    if (format == TDM_EXPLAIN_JSON) {
        sb_printf(&b, "{\"devices\":[");
        for (int d = 0; d < D; d++) {
            sb_printf(&b, "%s", d ? "," : "");
            sb_json_str(&b, p->devices[d]->name);
        }
        sb_printf(&b, "],\"nodes\":[");
        for (size_t i = 0; i < g->n_nodes; i++) {
            const tdm_node *n = &g->nodes[i];
            sb_printf(&b, "%s{\"index\":%zu,\"name\":", i ? "," : "", i);
            sb_json_str(&b, n->name);
            sb_printf(&b, ",\"op\":");
            sb_json_str(&b, n->op_type);
            sb_printf(&b, ",\"device\":");
            sb_json_str(&b, p->devices[n->device]->name);
            double pm = p->node_ms ? p->node_ms[i * (size_t)D + (size_t)n->device] : 0;
            sb_printf(&b, ",\"predicted_ms\":%.6g,\"predicted_ms_by_device\":{", pm);
            for (int d = 0; d < D; d++) {
                sb_printf(&b, "%s", d ? "," : "");
                sb_json_str(&b, p->devices[d]->name);
                if (!p->supported[i * (size_t)D + (size_t)d]) sb_printf(&b, ":null");
                else sb_printf(&b, ":%.6g", p->node_ms ? p->node_ms[i * (size_t)D + (size_t)d] : 0);
            }
            sb_printf(&b, "},\"reason\":");
            sb_json_str(&b, tdm_place_reason_text((tdm_place_reason)p->reason[i]));
            if (runs) sb_printf(&b, ",\"measured_ms\":%.6g", p->measured_ms[i] / (double)runs);
            sb_printf(&b, "}");
        }
        sb_printf(&b, "],\"copies\":[");
        for (size_t c = 0; c < nc; c++) {
            const tdm_value *val = &g->values[copies[c].value];
            sb_printf(&b, "%s{\"value\":", c ? "," : "");
            sb_json_str(&b, val->name);
            sb_printf(&b, ",\"from\":");
            sb_json_str(&b, dev_name(p, copies[c].from));
            sb_printf(&b, ",\"to\":");
            sb_json_str(&b, dev_name(p, copies[c].to));
            sb_printf(&b, ",\"bytes\":%.0f,\"once_per_plan\":%s}", copies[c].bytes,
                      val->data && !val->is_input ? "true" : "false");
        }
        sb_printf(&b, "],\"predicted_total_ms\":%.6g,\"predicted_copy_ms\":%.6g,\"copy_bytes_per_run\":%.0f",
                  p->has_prediction ? p->predicted_ms : predicted_sum, p->predicted_copy_ms, copy_bytes);
        sb_printf(&b, ",\"predicted_single_device_ms\":{");
        for (int d = 0; d < D; d++) {
            sb_printf(&b, "%s", d ? "," : "");
            sb_json_str(&b, p->devices[d]->name);
            if (!p->has_prediction || isinf(p->single_ms[d])) sb_printf(&b, ":null");
            else sb_printf(&b, ":%.6g", p->single_ms[d]);
        }
        sb_printf(&b, "}");
        if (runs) {
            sb_printf(&b, ",\"measured_runs\":%lld,\"measured_total_ms\":%.6g", (long long)runs, measured_total);
            if (err_n) sb_printf(&b, ",\"cost_model_mean_abs_error\":%.4f", abs_err / err_n);
        }
        sb_printf(&b, "}\n");
    } else if (format == TDM_EXPLAIN_DOT) {
        static const char *const colors[] = {"lightblue", "orange", "palegreen", "plum", "khaki", "salmon"};
        sb_printf(&b, "digraph plan {\n  rankdir=TB;\n  node [shape=box, style=filled];\n");
        for (size_t i = 0; i < g->n_nodes; i++) {
            const tdm_node *n = &g->nodes[i];
            sb_printf(&b, "  n%zu [label=\"%s\\n%s\\n%s\", fillcolor=%s];\n", i, n->op_type,
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
                    sb_printf(&b, "  n%d -> n%zu [color=red, style=bold, label=\"copy %.0f B\"];\n", src,
                              i, tdm_value_bytes(&g->values[v]));
                else
                    sb_printf(&b, "  n%d -> n%zu;\n", src, i);
            }
        }
        sb_printf(&b, "}\n");
    } else {
        bool seg = format == TDM_EXPLAIN_SEGMENTS;
        sb_printf(&b, "%-5s %-28s %-18s %-10s", seg ? "seg" : "#", seg ? "nodes" : "node", seg ? "ops" : "op",
                  "device");
        for (int d = 0; d < D; d++) sb_printf(&b, " %10s", p->devices[d]->name);
        if (runs) sb_printf(&b, " %10s", "measured");
        sb_printf(&b, "  reason\n");
        size_t i = 0, segno = 0;
        while (i < g->n_nodes) {
            size_t j = i + 1;
            if (seg)
                while (j < g->n_nodes && g->nodes[j].device == g->nodes[i].device) j++;
            double pred[16] = {0}, meas = 0;
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
            sb_printf(&b, "%-5zu %-28s %-18.18s %-10s", seg ? segno : i, label,
                      seg ? (j - i > 1 ? "..." : n->op_type) : n->op_type, p->devices[n->device]->name);
            for (int d = 0; d < D; d++) {
                if (isinf(pred[d])) sb_printf(&b, " %10s", "-");
                else if (!p->node_ms) sb_printf(&b, " %10s", "?");
                else sb_printf(&b, " %10.4f", pred[d]);
            }
            if (runs) sb_printf(&b, " %10.4f", meas);
            sb_printf(&b, "  %s\n", seg ? "" : tdm_place_reason_text((tdm_place_reason)p->reason[i]));
            i = j;
            segno++;
        }
        sb_printf(&b, "\ncopies: %zu", nc);
        for (size_t c = 0; c < nc; c++)
            sb_printf(&b, "%s%s %s -> %s (%.0f bytes%s)", c ? "; " : " ", g->values[copies[c].value].name,
                      dev_name(p, copies[c].from), dev_name(p, copies[c].to), copies[c].bytes,
                      g->values[copies[c].value].data && !g->values[copies[c].value].is_input ? ", once per plan" : "");
        sb_printf(&b, "\npredicted: %.4f ms (copies %.4f ms, %.0f bytes per run)",
                  p->has_prediction ? p->predicted_ms : predicted_sum, p->predicted_copy_ms, copy_bytes);
        if (p->has_prediction) {
            sb_printf(&b, "; each device alone:");
            for (int d = 0; d < D; d++) {
                if (isinf(p->single_ms[d])) sb_printf(&b, " %s cannot", p->devices[d]->name);
                else sb_printf(&b, " %s %.4f ms", p->devices[d]->name, p->single_ms[d]);
            }
        }
        if (runs) {
            sb_printf(&b, "\nmeasured: %.4f ms per run over %lld runs", measured_total, (long long)runs);
            if (err_n && p->node_ms) sb_printf(&b, "; cost model mean absolute error %.1f%% per node", 100 * abs_err / err_n);
        }
        sb_printf(&b, "\n");
    }
    tdm_free(a, copies);
    if (b.oom || !b.s) {
        tdm_free(a, b.s);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory explaining the plan");
    }
    *out = b.s;
    return NULL;
}

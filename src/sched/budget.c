/* Memory budgets and weight residency (sched/budget.h): parsing, the fit pass, its two
 * candidate plans and their predicted times. */
#include "sched/budget.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "sched/cost.h"
#include "sched/plan.h"
#include "sched/profile.h"

/* The widest prefetch window tried. */
#define FIT_MAX_WINDOW 8

static const char *const res_names[] = {"none", "resident", "streamed", "mapped"};

const char *tdm_residency_name(tdm_residency r) {
    return (unsigned)r < sizeof res_names / sizeof res_names[0] ? res_names[r] : "?";
}

/* ---- parsing -------------------------------------------------------------------------- */

tdm_status *tdm_size_parse(const char *text, const char *what, tdm_budget_spec *out) {
    static const struct {
        const char *unit;
        double mult;
    } units[] = {
        {"", 1},          {"B", 1},          {"K", 1024.0},     {"KiB", 1024.0},
        {"KB", 1e3},      {"M", 1048576.0},  {"MiB", 1048576.0}, {"MB", 1e6},
        {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"GB", 1e9}, {"T", 1099511627776.0},
        {"TiB", 1099511627776.0}, {"TB", 1e12}, {"%", -1},
    };
    const char *s = text ? text : "";
    while (*s == ' ') s++;
    char *end = NULL;
    double x = strtod(s, &end);
    if (end == s || !isdigit((unsigned char)s[0]))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s: '%s' is not a size (a number with a unit such "
                       "as 512MiB, 8GiB, 1.5G, or a percentage of the weights such as 25%%)", what,
                       text ? text : "");
    char unit[16];
    size_t ul = strlen(end);
    while (ul && end[ul - 1] == ' ') ul--;
    if (ul >= sizeof unit)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s: unknown unit '%s' in '%s' (use B, KiB, MiB, "
                       "GiB, TiB, KB, MB, GB, TB, K, M, G, T or %%)", what, end, text);
    memcpy(unit, end, ul);
    unit[ul] = 0;
    double mult = 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(unit, units[i].unit)) mult = units[i].mult;
    if (mult == 0)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s: unknown unit '%s' in '%s' (use B, KiB, MiB, "
                       "GiB, TiB, KB, MB, GB, TB, K, M, G, T or %%)", what, unit, text);
    if (!(x > 0) || !isfinite(x))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s: the size '%s' must be more than zero", what, text);
    memset(out, 0, sizeof *out);
    if (mult < 0) {
        if (x > 1000)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s: '%s' is more than 1000%% of the weights",
                           what, text);
        out->percent = x;
        return NULL;
    }
    double bytes = x * mult;
    if (bytes >= 9.2e18)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s: the size '%s' is too large", what, text);
    if (bytes < 1)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "%s: the size '%s' is less than one byte", what, text);
    out->bytes = (int64_t)bytes;
    return NULL;
}

tdm_status *tdm_budget_parse(const char *spec, tdm_device *const *devs, int n_devices,
                             tdm_budget_spec *out) {
    if (!spec || !spec[0]) return NULL;
    char buf[1024];
    if (strlen(spec) >= sizeof buf)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "device memory budgets: the text is too long");
    snprintf(buf, sizeof buf, "%s", spec);
    bool seen[TDM_MAX_DEVICES] = {false};
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        if (!*tok) continue;
        char *eq = strrchr(tok, '=');
        if (!eq || eq == tok || !eq[1])
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "device memory budget '%s' is not DEVICE=SIZE "
                           "(e.g. cuda:0=8GiB)", tok);
        *eq = 0;
        int d = -1;
        for (int k = 0; k < n_devices; k++)
            if (!strcmp(devs[k]->name, tok)) d = k;
        if (d < 0) {
            char have[256] = "";
            size_t pos = 0;
            for (int k = 0; k < n_devices && pos < sizeof have; k++)
                pos += (size_t)snprintf(have + pos, sizeof have - pos, "%s%s", k ? ", " : "", devs[k]->name);
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "device memory budget for '%s': the session "
                           "does not use that device (its devices: %s)", tok, have);
        }
        if (seen[d])
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "device memory budget for '%s' is given twice", tok);
        seen[d] = true;
        char what[96];
        snprintf(what, sizeof what, "device memory budget for '%s'", tok);
        TDM_TRY(tdm_size_parse(eq + 1, what, &out[d]));
    }
    return NULL;
}

/* ---- the fit pass --------------------------------------------------------------------- */

void tdm_budget_plan_free(const tdm_allocator *a, tdm_budget_plan *b) {
    if (!b) return;
    tdm_free(a, b->residency);
    for (int d = 0; d < TDM_MAX_DEVICES; d++) tdm_free(a, b->units[d]);
    tdm_free(a, b->unit_pos);
    tdm_free(a, b->last_reader);
    tdm_free(a, b);
}

static bool is_weight(const tdm_value *v) { return v->data && !v->is_input; }

static double mib(double bytes) { return bytes / 1048576.0; }

/* Working state of one fit. */
typedef struct fit {
    tdm_plan *p;
    const tdm_graph *g;
    int D, host;                 /* host: a host-memory plan device, or -1 */
    size_t N, V;
    int *dev;                    /* per node: the device (candidates edit a copy) */
    int *first_reader;           /* [v * D + d] */
    int *last_reader;            /* [v * D + d] */
    double *ms;                  /* [i * D + d] predicted or measured node times */
    tdm_device_profile prof[TDM_MAX_DEVICES];
    bool async[TDM_MAX_DEVICES]; /* uploads overlap compute (copy queue) */
    /* candidate scratch */
    bool *streamed;              /* per value */
    int *unit_of;                /* per node: unit position on the fitted device, or -1 */
    double *diff;                /* per unit + 1 */
    double *unit_start;
} fit;

static int64_t weight_bytes(const fit *f, int v) {
    const tdm_tensor *t = f->g->values[v].data;
    return t ? (int64_t)t->nbytes : 0;
}

/* Readers of each weight per device, under the assignment f->dev. */
static void readers(fit *f) {
    for (size_t k = 0; k < f->V * (size_t)f->D; k++) f->first_reader[k] = f->last_reader[k] = -1;
    for (size_t i = 0; i < f->N; i++) {
        const tdm_node *n = &f->g->nodes[i];
        int d = f->dev[i];
        for (int j = 0; j < n->n_inputs; j++) {
            int v = n->inputs[j];
            if (v < 0 || !is_weight(&f->g->values[v])) continue;
            size_t k = (size_t)v * (size_t)f->D + (size_t)d;
            if (f->first_reader[k] < 0) f->first_reader[k] = (int)i;
            f->last_reader[k] = (int)i;
        }
    }
}

/* Bytes of weights device d reads (mapped ones excluded on host devices: page cache). */
static int64_t weights_on(const fit *f, int d, bool count_mapped) {
    int64_t sum = 0;
    for (size_t v = 0; v < f->V; v++)
        if (f->first_reader[v * (size_t)f->D + (size_t)d] >= 0) {
            const tdm_tensor *t = f->g->values[v].data;
            if (!count_mapped && tdm_tensor_is_mapped(t)) continue;
            sum += weight_bytes(f, (int)v);
        }
    return sum;
}

/* Peak bytes of activations held on device d at once, from static shapes: a value is held
 * from its producer (or its first reader on d, for a copy) until its last reader anywhere
 * (the executor frees copies with the value); outputs to the end. */
static double graph_activation_peak(const tdm_allocator *a, const tdm_graph *g, const tdm_graph *wg,
                                    const int *dev, int d) {
    size_t N = g->n_nodes;
    double *delta = tdm_calloc(a, N + 2, sizeof *delta);
    if (!delta) return 0;
    for (size_t v = 0; v < g->n_values; v++) {
        const tdm_value *val = &g->values[v];
        if (is_weight(&wg->values[v]) || wg->values[v].kv_state) continue; /* (caches: reserve) */
        int start = -1, last = -1;
        if (val->producer >= 0 && dev[val->producer] == d) start = val->producer;
        for (size_t i = 0; i < N; i++) {
            const tdm_node *n = &g->nodes[i];
            bool reads = false;
            for (int j = 0; j < n->n_inputs && !reads; j++) reads = n->inputs[j] == (int)v;
            for (int j = 0; j < n->n_implicit && !reads; j++) reads = n->implicit[j] == (int)v;
            if (!reads) continue;
            last = (int)i;
            if (start < 0 && dev[i] == d) start = (int)i;
        }
        if (start < 0) continue;
        /* graph inputs go to the device when the run starts (the executor uploads the
         * caller's tensors ahead of their readers), not at their first reader */
        if (val->is_input && val->producer < 0) start = 0;
        if (val->is_output || last < start) last = val->is_output ? (int)N - 1 : start;
        double bytes = tdm_value_bytes(val);
        /* a dim left unknown (e.g. GroupQueryAttention's present, whose length comes from a
         * computed total_sequence_length) counts as 1 above: take at least the largest input
         * of the same rank and type of its producer (the past it extends) */
        bool unknown = val->rank < 0;
        for (int k = 0; k < val->rank && !unknown; k++) unknown = val->dims[k] < 0;
        if (unknown && val->producer >= 0) {
            const tdm_node *pn = &g->nodes[val->producer];
            for (int j = 0; j < pn->n_inputs; j++) {
                if (pn->inputs[j] < 0) continue;
                const tdm_value *in = &g->values[pn->inputs[j]];
                if (in->rank == val->rank && in->dtype == val->dtype && tdm_value_bytes(in) > bytes)
                    bytes = tdm_value_bytes(in);
            }
        }
        delta[start] += bytes;
        delta[last + 1] -= bytes;
    }
    double live = 0, peak = 0;
    for (size_t i = 0; i <= N; i++) {
        live += delta[i];
        if (live > peak) peak = live;
    }
    tdm_free(a, delta);
    return peak;
}

static double activation_peak(const fit *f, int d) {
    return graph_activation_peak(f->p->alloc, f->g, f->g, f->dev, d);
}

tdm_status *tdm_budget_activations(const tdm_allocator *a, const tdm_graph *g,
                                   const tdm_graph *weights_of, int n_devices, int64_t *out) {
    int *dev = tdm_calloc(a, g->n_nodes + 1, sizeof *dev);
    if (!dev) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory estimating activations");
    for (size_t i = 0; i < g->n_nodes; i++) dev[i] = g->nodes[i].device >= 0 ? g->nodes[i].device : 0;
    for (int d = 0; d < n_devices && d < TDM_MAX_DEVICES; d++)
        out[d] = (int64_t)graph_activation_peak(a, g, weights_of, dev, d);
    tdm_free(a, dev);
    return NULL;
}

/* Predicted milliseconds of the copies between memories under the assignment `dev` (values
 * produced in one memory and read in another, graph inputs in, outputs out). */
static double crossing_ms(const fit *f, const int *dev) {
    const tdm_graph *g = f->g;
    double ms = 0;
    for (size_t v = 0; v < f->V; v++) {
        const tdm_value *val = &g->values[v];
        if (is_weight(val)) continue;
        int src = val->producer >= 0 ? dev[val->producer] : -1;
        bool src_host = src < 0 || f->p->devices[src]->host_memory;
        bool done[TDM_MAX_DEVICES] = {false};
        double bytes = tdm_value_bytes(val);
        for (size_t i = 0; i < f->N; i++) {
            const tdm_node *n = &g->nodes[i];
            int d = dev[i];
            if (done[d] || d == src) continue;
            bool reads = false;
            for (int j = 0; j < n->n_inputs && !reads; j++) reads = n->inputs[j] == (int)v;
            if (!reads) continue;
            done[d] = true;
            bool dst_host = f->p->devices[d]->host_memory;
            if (src_host && dst_host) continue;
            ms += tdm_cost_copy_ms(bytes, src_host ? NULL : &f->prof[src], dst_host ? NULL : &f->prof[d]);
        }
        if (val->is_output && !src_host) ms += tdm_cost_copy_ms(bytes, &f->prof[src], NULL);
    }
    return ms;
}

/* Units (nodes on d reading a streamed weight) in order: f->unit_of; returns their count. */
static int make_units(fit *f, int d) {
    int u = 0;
    for (size_t i = 0; i < f->N; i++) {
        f->unit_of[i] = -1;
        if (f->dev[i] != d) continue;
        const tdm_node *n = &f->g->nodes[i];
        bool any = false;
        for (int j = 0; j < n->n_inputs && !any; j++) any = n->inputs[j] >= 0 && f->streamed[n->inputs[j]];
        if (any) f->unit_of[i] = u++;
    }
    return u;
}

/* Device memory of the ring for window k: the most streamed bytes held at once when, before
 * unit u runs, units u..u+k are uploaded and a weight is freed after its last reader. */
static double ring_bytes(fit *f, int d, int n_units, int k) {
    if (n_units == 0) return 0;
    for (int u = 0; u <= n_units; u++) f->diff[u] = 0;
    for (size_t v = 0; v < f->V; v++) {
        if (!f->streamed[v]) continue;
        size_t key = v * (size_t)f->D + (size_t)d;
        int fu = f->unit_of[f->first_reader[key]], lu = f->unit_of[f->last_reader[key]];
        if (fu < 0 || lu < 0) continue;
        int from = fu - k > 0 ? fu - k : 0;
        f->diff[from] += (double)weight_bytes(f, (int)v);
        f->diff[lu + 1] -= (double)weight_bytes(f, (int)v);
    }
    double live = 0, peak = 0;
    for (int u = 0; u < n_units; u++) {
        live += f->diff[u];
        if (live > peak) peak = live;
    }
    return peak;
}

/* Predicted time of one run with the streamed set on device d and window k: nodes in order;
 * the uploads of unit u's first-read weights are issued when unit u-k starts (the executor's
 * prefetch) and, on a device that copies asynchronously, run on the copy queue meanwhile;
 * elsewhere they block the host. */
static double streamed_ms(fit *f, int d, int n_units, int k, double *bytes_out) {
    double t = 0, copy_free = 0, bytes = 0;
    for (size_t i = 0; i < f->N; i++) {
        double c = f->ms[i * (size_t)f->D + (size_t)f->dev[i]];
        int u = f->unit_of[i];
        if (u < 0) {
            t += c;
            continue;
        }
        const tdm_node *n = &f->g->nodes[i];
        double up = 0;
        for (int j = 0; j < n->n_inputs; j++) {
            int v = n->inputs[j];
            if (v < 0 || !f->streamed[v] || f->first_reader[(size_t)v * (size_t)f->D + (size_t)d] != (int)i)
                continue;
            bool dup = false;
            for (int j2 = 0; j2 < j; j2++) dup |= n->inputs[j2] == v;
            if (dup) continue;
            up += tdm_cost_copy_ms((double)weight_bytes(f, v), NULL, &f->prof[d]);
            bytes += (double)weight_bytes(f, v);
        }
        double start;
        if (f->async[d]) {
            double issue = u - k >= 0 && k > 0 ? f->unit_start[u - k] : k > 0 ? 0 : t;
            double s0 = issue > copy_free ? issue : copy_free;
            copy_free = s0 + up;
            start = t > copy_free ? t : copy_free;
        } else {
            start = t + up;
        }
        f->unit_start[u] = start;
        t = start + c;
    }
    if (bytes_out) *bytes_out = bytes;
    return t + crossing_ms(f, f->dev);
}

typedef struct stream_pick {
    bool ok;
    int k;
    double ms, ring, resident, streamed_bytes;
    int n_streamed, n_resident;
} stream_pick;

/* Candidate (a): weights on d streamed, the smallest made resident first while resident +
 * ring(k) fit in `avail`, for each window k; the fastest predicted (the smallest k among
 * equals). Leaves f->streamed as chosen. */
static void stream_candidate(fit *f, int d, double avail, int force_k, stream_pick *best) {
    size_t V = f->V, D = (size_t)f->D;
    int *order = tdm_calloc(f->p->alloc, V + 1, sizeof *order);
    bool *choice = tdm_calloc(f->p->alloc, V + 1, sizeof *choice);
    memset(best, 0, sizeof *best);
    if (!order || !choice) goto out;
    size_t nw = 0;
    for (size_t v = 0; v < V; v++)
        if (f->first_reader[v * D + (size_t)d] >= 0) order[nw++] = (int)v;
    for (size_t x = 1; x < nw; x++) /* by size, ascending (insertion sort: stable) */
        for (size_t y = x; y > 0 && weight_bytes(f, order[y]) < weight_bytes(f, order[y - 1]); y--) {
            int t = order[y];
            order[y] = order[y - 1];
            order[y - 1] = t;
        }
    int k_lo = force_k > 0 ? force_k : 0, k_hi = force_k > 0 ? force_k : FIT_MAX_WINDOW;
    for (int k = k_lo; k <= k_hi; k++) {
        for (size_t x = 0; x < nw; x++) f->streamed[order[x]] = true;
        double resident = 0;
        int nu = make_units(f, d);
        if (resident + ring_bytes(f, d, nu, k) > avail) continue; /* not even all streamed */
        for (size_t x = 0; x < nw; x++) {
            int v = order[x];
            f->streamed[v] = false;
            int nu2 = make_units(f, d);
            if (resident + (double)weight_bytes(f, v) + ring_bytes(f, d, nu2, k) <= avail) {
                resident += (double)weight_bytes(f, v);
                nu = nu2;
            } else {
                f->streamed[v] = true;
            }
        }
        nu = make_units(f, d);
        double bytes = 0, ms = streamed_ms(f, d, nu, k, &bytes);
        if (!best->ok || ms < best->ms * 0.99) {
            best->ok = true;
            best->k = k;
            best->ms = ms;
            best->ring = ring_bytes(f, d, nu, k);
            best->resident = resident;
            best->streamed_bytes = bytes;
            best->n_streamed = best->n_resident = 0;
            for (size_t x = 0; x < nw; x++) {
                choice[order[x]] = f->streamed[order[x]];
                if (f->streamed[order[x]]) best->n_streamed++;
                else best->n_resident++;
            }
        }
    }
    for (size_t x = 0; x < nw; x++) f->streamed[order[x]] = best->ok && choice[order[x]];
out:
    tdm_free(f->p->alloc, order);
    tdm_free(f->p->alloc, choice);
}

/* Candidate (b): the nodes of d, in order, stay while their weights fit in `avail`; the rest
 * go to the host device (those it cannot run stay, and must fit too). *moved_dev gets the
 * assignment; returns the predicted ms (INFINITY: impossible). */
static double layers_candidate(fit *f, int d, double avail, int *moved_dev, int *kept) {
    const tdm_plan *p = f->p;
    size_t D = (size_t)f->D;
    memcpy(moved_dev, f->dev, f->N * sizeof *moved_dev);
    *kept = 0;
    if (f->host < 0) return INFINITY;
    bool *counted = tdm_calloc(p->alloc, f->V + 1, sizeof *counted);
    if (!counted) return INFINITY;
    double used = 0;
    bool full = false;
    for (size_t i = 0; i < f->N; i++) {
        if (f->dev[i] != d) continue;
        const tdm_node *n = &f->g->nodes[i];
        double add = 0;
        for (int j = 0; j < n->n_inputs; j++) {
            int v = n->inputs[j];
            if (v >= 0 && is_weight(&f->g->values[v]) && !counted[v]) add += (double)weight_bytes(f, v);
        }
        bool host_ok = p->supported[i * D + (size_t)f->host];
        if (!full && used + add <= avail) {
            used += add;
            (*kept)++;
        } else if (host_ok) {
            full = true;
            moved_dev[i] = f->host;
            continue;
        } else {
            used += add; /* only this device runs it */
        }
        for (int j = 0; j < n->n_inputs; j++) {
            int v = n->inputs[j];
            if (v >= 0 && is_weight(&f->g->values[v])) counted[v] = true;
        }
    }
    tdm_free(p->alloc, counted);
    if (used > avail) return INFINITY;
    double t = 0;
    for (size_t i = 0; i < f->N; i++) t += f->ms[i * D + (size_t)moved_dev[i]];
    return t + crossing_ms(f, moved_dev);
}

static tdm_status *fit_setup(fit *f, tdm_plan *p) {
    const tdm_allocator *a = p->alloc;
    f->p = p;
    f->g = p->graph;
    f->D = p->n_devices;
    f->N = f->g->n_nodes;
    f->V = f->g->n_values;
    f->host = -1;
    for (int d = 0; d < f->D && f->host < 0; d++)
        if (p->devices[d]->host_memory) f->host = d;
    size_t N = f->N, V = f->V, D = (size_t)f->D;
    f->dev = tdm_calloc(a, N + 1, sizeof *f->dev);
    f->first_reader = tdm_calloc(a, V * D + 1, sizeof *f->first_reader);
    f->last_reader = tdm_calloc(a, V * D + 1, sizeof *f->last_reader);
    f->ms = tdm_calloc(a, N * D + 1, sizeof *f->ms);
    f->streamed = tdm_calloc(a, V + 1, sizeof *f->streamed);
    f->unit_of = tdm_calloc(a, N + 1, sizeof *f->unit_of);
    f->diff = tdm_calloc(a, N + 2, sizeof *f->diff);
    f->unit_start = tdm_calloc(a, N + 1, sizeof *f->unit_start);
    if (!f->dev || !f->first_reader || !f->last_reader || !f->ms || !f->streamed || !f->unit_of ||
        !f->diff || !f->unit_start)
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory fitting the plan into its budgets");
    for (size_t i = 0; i < N; i++) f->dev[i] = f->g->nodes[i].device >= 0 ? f->g->nodes[i].device : 0;
    for (int d = 0; d < f->D; d++) {
        TDM_TRY(tdm_profile_device(p->devices[d], a, p->settings, tdm_threadpool_size(p->pool), false,
                                   &f->prof[d]));
        /* uploads overlap compute on a copy queue (backend.h version 7); the device's
         * ordinary upload orders its next kernels after it */
        f->async[d] = !p->devices[d]->host_memory && tdm_device_has_copy_queue(p->devices[d]);
    }
    for (size_t i = 0; i < N; i++)
        for (size_t d = 0; d < D; d++)
            f->ms[i * D + d] = p->node_ms ? p->node_ms[i * D + d]
                                          : tdm_cost_node_ms(f->g, &f->g->nodes[i], &f->prof[d]);
    readers(f);
    return NULL;
}

static void fit_free(fit *f) {
    const tdm_allocator *a = f->p->alloc;
    tdm_free(a, f->dev);
    tdm_free(a, f->first_reader);
    tdm_free(a, f->last_reader);
    tdm_free(a, f->ms);
    tdm_free(a, f->streamed);
    tdm_free(a, f->unit_of);
    tdm_free(a, f->diff);
    tdm_free(a, f->unit_start);
}

/* The largest bytes of weights one node on d reads (what the ring must hold at least), the
 * largest single weight there and a node that reads it (-1 when none). */
static double largest_node_weights(const fit *f, int d, int *largest_v, int *reader) {
    double most = 0, one = 0;
    *largest_v = *reader = -1;
    for (size_t i = 0; i < f->N; i++) {
        if (f->dev[i] != d) continue;
        const tdm_node *n = &f->g->nodes[i];
        double sum = 0;
        for (int j = 0; j < n->n_inputs; j++) {
            int v = n->inputs[j];
            if (v < 0 || !is_weight(&f->g->values[v])) continue;
            bool dup = false;
            for (int j2 = 0; j2 < j; j2++) dup |= n->inputs[j2] == v;
            if (dup) continue;
            sum += (double)weight_bytes(f, v);
            if ((double)weight_bytes(f, v) > one) {
                one = (double)weight_bytes(f, v);
                *largest_v = v;
                *reader = (int)i;
            }
        }
        if (sum > most) most = sum;
    }
    return most;
}

/* ---- KV cache placement (before the weights' fit; sched/budget.h) ---- */

/* The plan device of the first node reading value v under the assignment dev, or -1. */
int tdm_budget_first_reader_dev(const tdm_graph *g, const int *dev, int v) {
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        for (int j = 0; j < n->n_inputs; j++)
            if (n->inputs[j] == v) return dev ? dev[i] : (n->device >= 0 ? n->device : 0);
    }
    return -1;
}

/* Marks layer l's past and present values as kept in place on the device (or not). */
static void kv_mark(tdm_graph *g, int l, bool state) {
    for (size_t v = 0; v < g->n_values; v++)
        if (g->values[v].kv_layer == l + 1) g->values[v].kv_state = state;
}

/* Moves the attention of layer l (the nodes on d reading its past) to the host device when
 * it runs them there; false when it cannot (the cache is then copied each token). */
static bool kv_move_attention(fit *f, int d, int l) {
    if (f->host < 0) return false;
    const tdm_graph *g = f->g;
    size_t D = (size_t)f->D;
    for (size_t i = 0; i < f->N; i++) {
        if (f->dev[i] != d) continue;
        const tdm_node *n = &g->nodes[i];
        for (int j = 0; j < n->n_inputs; j++)
            if (n->inputs[j] >= 0 && g->values[n->inputs[j]].kv_layer == l + 1 &&
                g->values[n->inputs[j]].is_input && !f->p->supported[i * D + (size_t)f->host])
                return false;
    }
    for (size_t i = 0; i < f->N; i++) {
        if (f->dev[i] != d) continue;
        const tdm_node *n = &g->nodes[i];
        for (int j = 0; j < n->n_inputs; j++)
            if (n->inputs[j] >= 0 && g->values[n->inputs[j]].kv_layer == l + 1 &&
                g->values[n->inputs[j]].is_input)
                f->dev[i] = f->host;
    }
    return true;
}

/* Decides which layers' caches stay on each budgeted device (the first ones in layer order)
 * and adds their bytes to the device's reserve; the attention of the other layers goes to
 * the CPU with their caches (before the first placement is redone: *moved_any), or, where
 * the CPU cannot run it or the placement is final, stays with its cache in host memory. The
 * activations are then counted without the kept caches. Layers read on devices with memory
 * of their own only (host-memory devices read the caches where they are). */
static tdm_status *kv_fit(fit *f, tdm_budget_plan *b, const tdm_budget_options *o, bool moved,
                          bool *moved_any) {
    tdm_graph *g = f->p->graph;
    *moved_any = false;
    int L = 0;
    for (size_t v = 0; v < f->V; v++) {
        int l = abs(g->values[v].kv_layer);
        if (l > L) L = l;
    }
    if (!L) return NULL;
    int *ldev = tdm_calloc(f->p->alloc, (size_t)L, sizeof *ldev);
    int64_t *lbytes = tdm_calloc(f->p->alloc, (size_t)L, sizeof *lbytes);
    if (!ldev || !lbytes) {
        tdm_free(f->p->alloc, ldev);
        tdm_free(f->p->alloc, lbytes);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory placing the KV cache");
    }
    for (int l = 0; l < L; l++) ldev[l] = -1;
    for (size_t v = 0; v < f->V; v++) {
        const tdm_value *val = &g->values[v];
        if (val->kv_layer <= 0 || !val->is_input) continue; /* fed back: host memory */
        int l = val->kv_layer - 1, d = tdm_budget_first_reader_dev(g, f->dev, (int)v);
        if (ldev[l] < 0) ldev[l] = d;
        lbytes[l] += val->kv_bytes;
    }
    for (int l = 0; l < L; l++) kv_mark(g, l, false);
    char *w = b->kv_why;
    size_t cap = sizeof b->kv_why, pos = 0;
    for (int d = 0; d < f->D; d++) {
        if (f->p->devices[d]->host_memory) continue;
        int n = 0;
        int64_t all = 0;
        for (int l = 0; l < L; l++)
            if (ldev[l] == d) {
                n++;
                all += lbytes[l];
            }
        b->kv_layers[d] = n;
        if (!n) continue;
        int keep = n;
        const char *how = "no budget";
        if (o->kv_decided) {
            keep = o->kv_keep[d] < n ? o->kv_keep[d] : n;
            how = "as decided";
        } else if (o->kv_force == TDM_KV_DEVICE) {
            how = "kv=device";
        } else if (o->kv_force == TDM_KV_HOST || o->kv_force == TDM_KV_CPU) {
            keep = 0;
            how = o->kv_force == TDM_KV_HOST ? "kv=host" : "kv=cpu";
        } else if (o->spec[d].percent > 0) {
            how = "a share of the weights holds the caches on top";
        } else if (b->budget[d] > 0) {
            for (int l = 0; l < L; l++) kv_mark(g, l, ldev[l] == d);
            int64_t act = (int64_t)activation_peak(f, d);
            if (o->min_activations[d] > act) act = o->min_activations[d];
            how = "the weights, activations and every cache fit";
            if (b->weights[d] + act + b->reserve[d] + all > b->budget[d]) {
                for (int l = 0; l < L; l++) kv_mark(g, l, false);
                act = (int64_t)activation_peak(f, d);
                if (o->min_activations[d] > act) act = o->min_activations[d];
                int lv, rd;
                double room = (double)b->budget[d] - (double)act - (double)b->reserve[d] -
                              2 * largest_node_weights(f, d, &lv, &rd);
                double sum = 0;
                keep = 0;
                for (int l = 0; l < L; l++) {
                    if (ldev[l] != d) continue;
                    if (sum + (double)lbytes[l] > room) break;
                    sum += (double)lbytes[l];
                    keep++;
                }
                how = keep ? "split: the first layers' caches fit next to the activations and a "
                             "ring of two nodes' weights"
                           : "not one cache fits next to the activations and a ring of two nodes' "
                             "weights";
            }
        }
        int64_t kept = 0;
        int to_cpu = 0;
        for (int l = 0, k = 0; l < L; l++) {
            if (ldev[l] != d) continue;
            bool on = k++ < keep;
            kv_mark(g, l, on);
            if (on) kept += lbytes[l];
            /* the others: their attention on the CPU next to the cache (kv=host keeps it) */
            else if (!moved && o->kv_force != TDM_KV_HOST && kv_move_attention(f, d, l)) to_cpu++;
        }
        if (to_cpu) {
            *moved_any = true;
            readers(f);
        }
        b->kv_keep[d] = keep;
        b->reserve[d] += kept;
        /* the weights and activations without the moved attention and the kept caches */
        b->weights[d] = weights_on(f, d, true);
        b->resident[d] = b->weights[d];
        b->activations[d] = (int64_t)activation_peak(f, d);
        if (o->min_activations[d] > b->activations[d]) b->activations[d] = o->min_activations[d];
        if (o->spec[d].percent > 0) b->budget[d] = b->share[d] + b->activations[d] + b->reserve[d];
        if (pos < cap)
            pos += (size_t)snprintf(w + pos, cap - pos, "%s%s: KV cache of %d of %d layers on the "
                                    "device (%.2f of %.2f MiB; %s)%s", pos ? "; " : "",
                                    f->p->devices[d]->name, keep, n, mib((double)kept),
                                    mib((double)all), how,
                                    to_cpu ? ", the other layers' attention on the CPU with their "
                                             "caches" : "");
    }
    tdm_free(f->p->alloc, ldev);
    tdm_free(f->p->alloc, lbytes);
    return NULL;
}

/* Per-executor tables of the chosen streamed set (units per device, positions, readers). */
static tdm_status *executor_tables(fit *f, tdm_budget_plan *b) {
    const tdm_allocator *a = f->p->alloc;
    size_t N = f->N, V = f->V, D = (size_t)f->D;
    b->unit_pos = tdm_calloc(a, N + 1, sizeof *b->unit_pos);
    b->last_reader = tdm_calloc(a, V * D + 1, sizeof *b->last_reader);
    if (!b->unit_pos || !b->last_reader)
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory fitting the plan");
    memcpy(b->last_reader, f->last_reader, V * D * sizeof *b->last_reader);
    for (int d = 0; d < f->D; d++) {
        int cnt = 0;
        /* a host-memory device reads a streamed weight where it is (one that devices share,
         * such as a rotary table read by layers on both) */
        if (f->p->devices[d]->host_memory) continue;
        for (size_t i = 0; i < N; i++) {
            if (f->dev[i] != d) continue;
            const tdm_node *n = &f->g->nodes[i];
            bool any = false;
            for (int j = 0; j < n->n_inputs && !any; j++)
                any = n->inputs[j] >= 0 && b->residency[n->inputs[j]] == TDM_RES_STREAMED;
            if (any) cnt++;
        }
        if (!cnt) continue;
        b->units[d] = tdm_calloc(a, (size_t)cnt, sizeof *b->units[d]);
        if (!b->units[d]) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory fitting the plan");
        for (size_t i = 0; i < N; i++) {
            if (f->dev[i] != d) continue;
            const tdm_node *n = &f->g->nodes[i];
            bool any = false;
            for (int j = 0; j < n->n_inputs && !any; j++)
                any = n->inputs[j] >= 0 && b->residency[n->inputs[j]] == TDM_RES_STREAMED;
            if (any) b->units[d][b->n_units[d]++] = (int)i;
        }
    }
    for (size_t i = 0; i < N; i++) {
        int d = f->dev[i], pos = 0;
        while (pos < b->n_units[d] && b->units[d][pos] < (int)i) pos++;
        b->unit_pos[i] = pos;
    }
    return NULL;
}

/* How device d's budget resolved, for messages: "25% of the 1234 B of weights placed on it +
 * activations 56 B" or "given as 1234 B". */
static void budget_origin(const fit *f, const tdm_budget_plan *b, const tdm_budget_options *o, int d,
                          char *out, size_t cap) {
    (void)f;
    if (o->spec[d].percent > 0)
        snprintf(out, cap, "%.4g%% of the %lld B of weights placed on it = %lld B, + activations "
                 "%lld B%s", o->spec[d].percent, (long long)b->weights[d], (long long)b->share[d],
                 (long long)b->activations[d], b->reserve[d] ? " + reserved (KV cache)" : "");
    else
        snprintf(out, cap, "given as %lld B", (long long)b->budget[d]);
}

/* The error of a budget that cannot run the plan on device d: the device, the budget in
 * bytes and how it resolved, the largest weight (and its reader), and the least budget that
 * runs (the largest node's weights streamed through the ring, next to the activations and
 * the reserve); `what`: what does not fit. */
static tdm_status *budget_limit_error(const fit *f, const tdm_budget_plan *b, const tdm_budget_options *o,
                                      int d, const char *what) {
    const char *name = f->p->devices[d]->name;
    char origin[200];
    budget_origin(f, b, o, d, origin, sizeof origin);
    int largest_v, reader;
    double unit = largest_node_weights(f, d, &largest_v, &reader);
    int64_t least = (int64_t)unit + b->activations[d] + b->reserve[d];
    char fits[200] = "";
    if (o->spec[d].percent > 0 && b->weights[d] > 0)
        snprintf(fits, sizeof fits, ", i.e. a share of at least %.1f%%",
                 ceil(1000.0 * unit / (double)b->weights[d]) / 10);
    char big[400] = "it reads no weights";
    if (largest_v >= 0)
        snprintf(big, sizeof big, "the largest single weight there is '%s' (%lld B, read by node "
                 "'%s')", f->g->values[largest_v].name, (long long)weight_bytes(f, largest_v),
                 f->g->nodes[reader].name ? f->g->nodes[reader].name : "?");
    return TDM_ERR(TDM_ERR_LIMIT, "%s: the memory budget of %lld B (%.2f MiB; %s) cannot hold %s; "
                   "%s; a budget of at least %lld B (%.2f MiB%s: the largest node's weights %lld B + "
                   "activations %lld B%s) would run it streamed, or run on the CPU",
                   name, (long long)b->budget[d], mib((double)b->budget[d]), origin, what, big,
                   (long long)least, mib((double)least), fits, (long long)unit,
                   (long long)b->activations[d], b->reserve[d] ? " + reserved" : "");
}

/* Nodes on d whose own weights exceed `avail` (the budget less the activations and reserve:
 * not even the ring can hold them) go to the host device where it runs them; f->dev and the
 * readers follow. Returns how many moved (the note says which and why). */
static int move_oversize(fit *f, int d, double avail, char *note, size_t cap) {
    if (f->host < 0) return 0;
    const tdm_plan *p = f->p;
    int moved = 0, first = -1, big_v = -1;
    double moved_bytes = 0;
    bool *counted = tdm_calloc(p->alloc, f->V + 1, sizeof *counted);
    if (!counted) return 0;
    for (size_t i = 0; i < f->N; i++) {
        if (f->dev[i] != d || !p->supported[i * (size_t)f->D + (size_t)f->host]) continue;
        const tdm_node *n = &f->g->nodes[i];
        double sum = 0;
        int top = -1;
        for (int j = 0; j < n->n_inputs; j++) {
            int v = n->inputs[j];
            if (v < 0 || !is_weight(&f->g->values[v])) continue;
            bool dup = false;
            for (int j2 = 0; j2 < j; j2++) dup |= n->inputs[j2] == v;
            if (dup) continue;
            sum += (double)weight_bytes(f, v);
            if (top < 0 || weight_bytes(f, v) > weight_bytes(f, top)) top = v;
        }
        if (top < 0 || sum <= avail) continue; /* (activations alone over: not for this) */
        f->dev[i] = f->host;
        if (first < 0) first = (int)i;
        if (top >= 0 && (big_v < 0 || weight_bytes(f, top) > weight_bytes(f, big_v))) big_v = top;
        for (int j = 0; j < n->n_inputs; j++) {
            int v = n->inputs[j];
            if (v >= 0 && is_weight(&f->g->values[v]) && !counted[v]) {
                counted[v] = true;
                moved_bytes += (double)weight_bytes(f, v);
            }
        }
        moved++;
    }
    tdm_free(p->alloc, counted);
    if (!moved) return 0;
    readers(f);
    snprintf(note, cap, "%d node%s ('%s'%s) read%s more weights than %s can hold next to the "
             "activations (%lld B available; '%s' alone is %lld B), so not even streaming fits "
             "them: on %s with their %lld B of weights", moved, moved > 1 ? "s" : "",
             f->g->nodes[first].name ? f->g->nodes[first].name : "?", moved > 1 ? ", ..." : "",
             moved > 1 ? "" : "s", p->devices[d]->name, (long long)avail,
             big_v >= 0 ? f->g->values[big_v].name : "?", big_v >= 0 ? (long long)weight_bytes(f, big_v) : 0LL,
             p->devices[f->host]->name, (long long)moved_bytes);
    return moved;
}

/* Fits one budgeted device with memory of its own that is over its budget. */
static tdm_status *fit_device(fit *f, tdm_budget_plan *b, const tdm_budget_options *o, int d,
                              bool moved, bool kv_moved, int **keep) {
    tdm_plan *p = f->p;
    const char *name = p->devices[d]->name;
    double need_other = (double)b->activations[d] + (double)b->reserve[d];
    double avail = (double)b->budget[d] - need_other;
    int largest_v = -1, reader_v = -1;
    double unit_min = largest_node_weights(f, d, &largest_v, &reader_v);
    bool oversize = false;
    if (avail < unit_min && avail > 0 && !moved &&
        move_oversize(f, d, avail, b->moved_note, sizeof b->moved_note) > 0) {
        /* the rest of the plan as it now is: its weights, activations, and a share's budget */
        oversize = true;
        b->weights[d] = weights_on(f, d, true);
        b->resident[d] = b->weights[d];
        b->activations[d] = (int64_t)activation_peak(f, d);
        if (o->min_activations[d] > b->activations[d]) b->activations[d] = o->min_activations[d];
        if (o->spec[d].percent > 0) b->budget[d] = b->share[d] + b->activations[d] + b->reserve[d];
        need_other = (double)b->activations[d] + (double)b->reserve[d];
        avail = (double)b->budget[d] - need_other;
        unit_min = largest_node_weights(f, d, &largest_v, &reader_v);
        if (avail >= unit_min && (double)b->weights[d] <= avail) { /* the rest fits */
            b->choice = TDM_FIT_LAYERS;
            snprintf(b->why, sizeof b->why, "the rest fits in %s's budget", name);
            *keep = tdm_calloc(p->alloc, f->N + 1, sizeof **keep);
            if (!*keep) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory fitting the plan");
            memcpy(*keep, f->dev, f->N * sizeof **keep);
            return NULL;
        }
    }
    if (avail < unit_min) {
        char what[300];
        const char *why_here = moved ? ""
                               : f->host < 0 ? " (the session has no CPU to take the nodes that do not fit)"
                                             : " (nodes that the CPU cannot run)";
        if (need_other >= (double)b->budget[d])
            snprintf(what, sizeof what, "the activations (%lld B)%s alone", (long long)b->activations[d],
                     b->reserve[d] ? " and the reserved memory (KV cache)" : "");
        else if (largest_v >= 0 && (double)weight_bytes(f, largest_v) + need_other > (double)b->budget[d])
            snprintf(what, sizeof what, "its largest weight plus the activations%s", why_here);
        else
            snprintf(what, sizeof what, "the weights of its largest node (%.0f B) plus the "
                     "activations%s", unit_min, why_here);
        return budget_limit_error(f, b, o, d, what);
    }
    stream_pick sp;
    memset(&sp, 0, sizeof sp);
    if (o->force != TDM_FIT_LAYERS) stream_candidate(f, d, avail, o->window, &sp);
    double layers = INFINITY;
    int kept = 0;
    int *moved_dev = NULL;
    /* streaming forced but its ring does not fit: the layers plan instead, when the CPU can
     * take what does not fit (said in the reason) */
    bool fallback = o->force == TDM_FIT_STREAMED && !sp.ok;
    if (!moved && (o->force != TDM_FIT_STREAMED || fallback)) {
        moved_dev = tdm_calloc(p->alloc, f->N + 1, sizeof *moved_dev);
        if (!moved_dev) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory fitting the plan");
        layers = layers_candidate(f, d, avail, moved_dev, &kept);
    }
    b->predicted_streamed_ms = sp.ok ? sp.ms : INFINITY;
    b->predicted_layers_ms = layers;
    int n_on = 0;
    for (size_t i = 0; i < f->N; i++) n_on += f->dev[i] == d;
    char head[300];
    snprintf(head, sizeof head, "%s: weights %.1f MiB + activations %.1f MiB%s exceed the budget "
             "%.1f MiB", name, mib((double)b->weights[d]), mib((double)b->activations[d]),
             b->reserve[d] ? " + reserved" : "", mib((double)b->budget[d]));
    if (!sp.ok && isinf(layers)) {
        tdm_free(p->alloc, moved_dev);
        char what[300];
        snprintf(what, sizeof what, "a plan: streaming needs a larger ring than the %lld B left for "
                 "weights%s", (long long)avail,
                 f->host < 0 ? ", and the session has no CPU to take the nodes that do not fit"
                 : moved     ? "" : ", and the CPU cannot run the nodes that do not fit");
        return budget_limit_error(f, b, o, d, what);
    }
    char sdesc[300] = "streaming not considered", ldesc[300] = "layers on the CPU not considered";
    if (sp.ok)
        snprintf(sdesc, sizeof sdesc, "streamed (%d weights resident %.1f MiB, %d streamed %.1f MiB "
                 "per run, window k=%d, ring %.1f MiB%s) predicted %.3f ms/run", sp.n_resident,
                 mib(sp.resident), sp.n_streamed, mib(sp.streamed_bytes), sp.k, mib(sp.ring),
                 f->async[d] ? "" : ", uploads block: the device has no copy queue", sp.ms);
    else if (o->force != TDM_FIT_LAYERS)
        snprintf(sdesc, sizeof sdesc, "streaming does not fit");
    if (!isinf(layers))
        snprintf(ldesc, sizeof ldesc, "layers (the first %d of %d nodes on %s, the rest on %s) "
                 "predicted %.3f ms/run", kept, n_on, name, p->devices[f->host]->name, layers);
    else if (moved_dev)
        snprintf(ldesc, sizeof ldesc, "layers on the CPU impossible");
    bool take_layers = !isinf(layers) && (!sp.ok || layers < sp.ms);
    snprintf(b->why, sizeof b->why, "%s; %s vs %s: %s %s", head, sdesc, ldesc,
             take_layers ? "layers" : "streamed",
             fallback && take_layers ? "(streaming was asked for but does not fit)"
             : o->force ? "(forced)" : take_layers ? (sp.ok ? "is faster" : "is the only plan")
                                                 : (isinf(layers) ? "is the only plan" : "is faster"));
    if (take_layers) {
        b->choice = TDM_FIT_LAYERS;
        b->predicted_ms = layers;
        for (size_t v = 0; v < f->V; v++) f->streamed[v] = false;
        *keep = moved_dev;
        return NULL;
    }
    tdm_free(p->alloc, moved_dev);
    b->choice = TDM_FIT_STREAMED;
    if (oversize || kv_moved) { /* placed again with nodes moved to the CPU, then streamed */
        *keep = tdm_calloc(p->alloc, f->N + 1, sizeof **keep);
        if (!*keep) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory fitting the plan");
        memcpy(*keep, f->dev, f->N * sizeof **keep);
        return NULL;
    }
    b->predicted_ms = sp.ms;
    b->window[d] = sp.k;
    b->ring[d] = (int64_t)sp.ring;
    b->resident[d] = (int64_t)sp.resident;
    b->streamed[d] = (int64_t)sp.streamed_bytes;
    for (size_t v = 0; v < f->V; v++)
        if (f->streamed[v]) b->residency[v] = TDM_RES_STREAMED;
    return NULL;
}

tdm_status *tdm_budget_fit(tdm_plan *p, const tdm_budget_options *o, bool moved, int **keep) {
    *keep = NULL;
    /* after a move: the decision that made it, for the explanation */
    tdm_budget_plan prev;
    memset(&prev, 0, sizeof prev);
    if (p->budget) prev = *p->budget; /* budgets stay as first resolved (shares of weights) */
    tdm_budget_plan_free(p->alloc, p->budget);
    p->budget = NULL;
    bool any = false;
    for (int d = 0; d < p->n_devices && d < TDM_MAX_DEVICES; d++)
        any |= o->spec[d].bytes > 0 || o->spec[d].percent > 0 || o->reserve[d] > 0;
    if (!any && !o->kv_force) return NULL;
    tdm_budget_plan *b = tdm_calloc(p->alloc, 1, sizeof *b);
    if (!b) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory fitting the plan");
    fit f;
    memset(&f, 0, sizeof f);
    tdm_status *st = NULL;
    if (!(b->residency = tdm_calloc(p->alloc, p->graph->n_values + 1, sizeof *b->residency))) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory fitting the plan");
        goto out;
    }
    if ((st = fit_setup(&f, p))) goto out;
    for (size_t v = 0; v < f.V; v++) {
        bool read = false;
        for (int d = 0; d < f.D && !read; d++) read = f.first_reader[v * (size_t)f.D + (size_t)d] >= 0;
        if (read) b->residency[v] = tdm_tensor_is_mapped(p->graph->values[v].data) ? TDM_RES_MAPPED
                                                                                   : TDM_RES_RESIDENT;
    }
    snprintf(b->why, sizeof b->why, "everything fits in the budgets");
    for (int d = 0; d < f.D; d++) {
        b->reserve[d] = o->reserve[d];
        b->weights[d] = weights_on(&f, d, !p->devices[d]->host_memory);
        b->resident[d] = b->weights[d];
        b->activations[d] = (int64_t)activation_peak(&f, d);
        if (o->min_activations[d] > b->activations[d]) b->activations[d] = o->min_activations[d];
        /* a share: of the weights (of the first placement), on top of the activations (of
         * the shapes seen) and the reserve */
        b->share[d] = prev.share[d] > 0 ? prev.share[d]
                      : o->spec[d].percent > 0 ? (int64_t)(o->spec[d].percent / 100 * (double)b->weights[d])
                                               : 0;
        b->budget[d] = o->spec[d].percent > 0 ? b->share[d] + b->activations[d] + b->reserve[d]
                                              : o->spec[d].bytes;
    }
    bool kv_moved = false; /* attention moved to the CPU with its cache: placed again */
    if ((st = kv_fit(&f, b, o, moved, &kv_moved))) goto out; /* the caches take the room first */
    for (int d = 0; d < f.D && !st; d++) {
        if (b->budget[d] <= 0) continue;
        int64_t need = b->weights[d] + b->activations[d] + b->reserve[d];
        if (need <= b->budget[d]) continue;
        if (p->devices[d]->host_memory) {
            st = TDM_ERR(TDM_ERR_LIMIT, "%s: weights %.1f MiB + activations %.1f MiB%s exceed the "
                         "memory budget of %.1f MiB (%lld B needed, %lld B given; weights mapped "
                         "from external data do not count: load with mapped residency)",
                         p->devices[d]->name, mib((double)b->weights[d]),
                         mib((double)b->activations[d]), b->reserve[d] ? " + reserved (KV cache)" : "",
                         mib((double)b->budget[d]), (long long)need, (long long)b->budget[d]);
            break;
        }
        st = fit_device(&f, b, o, d, moved, kv_moved, keep);
        if (*keep) break;
    }
    if (!st && kv_moved && !*keep) { /* placed again with the moved attention on the CPU */
        if (!(*keep = tdm_calloc(p->alloc, f.N + 1, sizeof **keep)))
            st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory fitting the plan");
        else
            memcpy(*keep, f.dev, f.N * sizeof **keep);
    }
    if (!st && !*keep) {
        for (size_t v = 0; v < f.V; v++) b->any_streamed |= b->residency[v] == TDM_RES_STREAMED;
        if (b->any_streamed) st = executor_tables(&f, b);
    }
    if (!st && o->kv_decided && prev.kv_why[0]) { /* a run-time refit: placed as before */
        memcpy(b->kv_why, prev.kv_why, sizeof b->kv_why);
    } else if (!st && moved && prev.kv_why[0] && strcmp(prev.kv_why, b->kv_why) != 0) {
        /* the caches as placed before the move, then as the final placement keeps them */
        char why[2 * sizeof b->kv_why + 20];
        snprintf(why, sizeof why, "%s%s%s", prev.kv_why, b->kv_why[0] ? "; placed again: " : "",
                 b->kv_why);
        size_t n = strlen(why) < sizeof b->kv_why ? strlen(why) : sizeof b->kv_why - 1;
        memcpy(b->kv_why, why, n);
        b->kv_why[n] = 0;
    }
    if (!st && moved && prev.moved_note[0] && !b->moved_note[0])
        memcpy(b->moved_note, prev.moved_note, sizeof b->moved_note);
    if (!st && moved && prev.choice && b->choice == TDM_FIT_NONE) {
        b->choice = prev.choice;
        b->predicted_ms = prev.predicted_ms;
        b->predicted_streamed_ms = prev.predicted_streamed_ms;
        b->predicted_layers_ms = prev.predicted_layers_ms;
        memcpy(b->why, prev.why, sizeof b->why);
    }
    if (!st && b->moved_note[0] && strncmp(b->why, b->moved_note, strlen(b->moved_note)) != 0) {
        char why[sizeof b->why + sizeof b->moved_note + 4];
        snprintf(why, sizeof why, "%s; %s", b->moved_note, b->why);
        size_t n = strlen(why) < sizeof b->why ? strlen(why) : sizeof b->why - 1;
        memcpy(b->why, why, n);
        b->why[n] = 0;
    }
out:
    fit_free(&f);
    if (st) {
        tdm_budget_plan_free(p->alloc, b);
        return st;
    }
    b->options = *o;
    b->options.kv_decided = true; /* run-time refits keep the caches where they are */
    memcpy(b->options.kv_keep, b->kv_keep, sizeof b->kv_keep);
    p->budget = b; /* after a move: the decision only (the tables come with the next fit) */
    return NULL;
}

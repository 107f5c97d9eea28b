/* KV cache placement of a generator's plan (sched/budget.h tdm_kv_plan): per layer where its
 * cache lives, read back from the fit's marks (graph values' kv_state) and the placement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "sched/budget.h"
#include "sched/plan.h"

static const char *const kv_names[] = {"none", "device", "host", "cpu"};

const char *tdm_kv_place_name(int place) {
    return place >= 0 && (unsigned)place < sizeof kv_names / sizeof kv_names[0] ? kv_names[place] : "?";
}

void tdm_kv_plan_free(const tdm_allocator *a, tdm_kv_plan *k) {
    if (!k) return;
    tdm_free(a, k->place);
    tdm_free(a, k->device);
    tdm_free(a, k->bytes);
    tdm_free(a, k);
}

tdm_status *tdm_kv_plan_build(tdm_plan *p) {
    tdm_graph *g = p->graph;
    tdm_kv_plan_free(p->alloc, p->kv);
    p->kv = NULL;
    int L = 0;
    for (size_t v = 0; v < g->n_values; v++) {
        int l = abs(g->values[v].kv_layer);
        if (l > L) L = l;
    }
    if (!L) return NULL;
    tdm_kv_plan *k = tdm_calloc(p->alloc, 1, sizeof *k);
    if (!k || !(k->place = tdm_calloc(p->alloc, (size_t)L, 1)) ||
        !(k->device = tdm_calloc(p->alloc, (size_t)L, 1)) ||
        !(k->bytes = tdm_calloc(p->alloc, (size_t)L, sizeof *k->bytes))) {
        tdm_kv_plan_free(p->alloc, k);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory placing the KV cache");
    }
    k->n_layers = L;
    for (int l = 0; l < L; l++) k->device[l] = -1;
    /* per layer: the device of its attention (the first reader of its past), its bytes */
    for (size_t v = 0; v < g->n_values; v++) {
        const tdm_value *val = &g->values[v];
        if (!val->kv_layer || !val->is_input) continue;
        int l = abs(val->kv_layer) - 1;
        if (k->device[l] < 0) k->device[l] = (signed char)tdm_budget_first_reader_dev(g, NULL, (int)v);
        k->bytes[l] += val->kv_bytes;
        k->fed_back |= val->kv_layer < 0;
    }
    for (int l = 0; l < L; l++) {
        int d = k->device[l];
        bool shared = true;
        for (size_t v = 0; v < g->n_values; v++)
            if (abs(g->values[v].kv_layer) == l + 1) shared &= g->values[v].kv_layer > 0;
        if (d < 0 || d >= p->n_devices || p->devices[d]->host_memory) {
            k->place[l] = TDM_KV_CPU;
            for (size_t v = 0; v < g->n_values; v++)
                if (abs(g->values[v].kv_layer) == l + 1) g->values[v].kv_state = false;
            continue;
        }
        bool state = false;
        if (!p->budget && shared) { /* no budget: every cache on the device of its attention */
            for (size_t v = 0; v < g->n_values; v++)
                if (g->values[v].kv_layer == l + 1) g->values[v].kv_state = true;
        }
        for (size_t v = 0; v < g->n_values; v++)
            if (abs(g->values[v].kv_layer) == l + 1) state |= g->values[v].kv_state;
        k->place[l] = state ? TDM_KV_DEVICE : TDM_KV_HOST;
        if (state) k->on_device[d] += k->bytes[l];
        else {
            k->uploaded_per_token += k->bytes[l];
            k->downloaded_per_token += k->bytes[l];
        }
    }
    if (p->budget && p->budget->kv_why[0])
        snprintf(k->why, sizeof k->why, "%s", p->budget->kv_why);
    else
        snprintf(k->why, sizeof k->why, "%s", k->fed_back
                 ? "fed-back caches (a new present each step) stay in host memory"
                 : "no budget: every cache stays on the device of its attention");
    p->kv = k;
    return NULL;
}

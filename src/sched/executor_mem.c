/* Memory of runs for the executor (executor_internal.h): the memory plans per input-shape
 * signature (sched/memplan.h) that a run takes its intermediates and scratch from, the
 * shapes inferred per node cached with them, and the plan's memory figures. */
#include <pthread.h>
#include <string.h>

#include "core/alloc.h"
#include "core/hash.h"
#include "ops/op.h"
#include "sched/executor_internal.h"

/* ---- inferred shapes per input-shape signature ---------------------------------------
 * A memory plan (one per input shapes, held by one run at a time) carries, per node of the
 * main graph, the input shapes its infer saw and the output shapes it gave. A later run with
 * the same input shapes reuses them instead of calling infer. Only nodes whose infer reads
 * no input values other than constants are cached, and the node's inputs are compared every
 * time, so a shape that changes inside the graph (after a data-dependent op) still infers. */
typedef struct shape_sig {
    int32_t dtype, rank; /* rank -1: absent */
    int64_t dims[TDM_MAX_RANK];
} shape_sig;

struct tdm_shape_cache {
    size_t *off;          /* per node: first sig (its inputs, then its outputs) */
    unsigned char *state; /* per node: 0 empty, 1 filled */
    shape_sig *sig;
};

void tdm_shape_cache_free(const tdm_allocator *a, struct tdm_shape_cache *sc) {
    if (!sc) return;
    tdm_free(a, sc->off);
    tdm_free(a, sc->state);
    tdm_free(a, sc->sig);
    tdm_free(a, sc);
}

static struct tdm_shape_cache *tdm_exec_shape_cache_new(const tdm_allocator *a, const tdm_graph *g) {
    struct tdm_shape_cache *sc = tdm_calloc(a, 1, sizeof *sc);
    if (!sc) return NULL;
    size_t total = 0;
    sc->off = tdm_calloc(a, g->n_nodes + 1, sizeof *sc->off);
    sc->state = tdm_calloc(a, g->n_nodes + 1, 1);
    for (size_t i = 0; sc->off && i < g->n_nodes; i++) {
        sc->off[i] = total;
        total += (size_t)g->nodes[i].n_inputs + (size_t)g->nodes[i].n_outputs;
    }
    sc->sig = tdm_calloc(a, total + 1, sizeof *sc->sig);
    if (!sc->off || !sc->state || !sc->sig) {
        tdm_shape_cache_free(a, sc);
        return NULL;
    }
    return sc;
}

/* The cache of node n when the run has one and n's shapes depend only on input shapes. */
struct tdm_shape_cache *tdm_exec_shape_cache_of(const frame *f, const tdm_node *n,
                                              const tdm_tensor *const *ins, size_t *node) {
    if (!f || !(f->plan || f->body) || !f->mp || !f->mp->shapes || !n->schema->infer ||
        (n->schema->flags & TDM_OP_DATA_DEPENDENT) || n < f->g->nodes ||
        n >= f->g->nodes + f->g->n_nodes)
        return NULL;
    for (int i = 0; i < n->n_inputs; i++) {
        if (!(n->schema->shape_inputs & (1u << (i & 31))) || !ins[i]) continue;
        int v = n->inputs[i];
        if (v < 0 || !f->g->values[v].data || ins[i] != f->g->values[v].data) return NULL;
    }
    *node = (size_t)(n - f->g->nodes);
    return f->mp->shapes;
}

/* Asks for the lines of node i's cached shapes (tdm_exec_ahead): stage 0 the node's slots,
 * stage 1 its signatures. */
void tdm_exec_shape_cache_prefetch(const struct tdm_shape_cache *sc, size_t i, int stage,
                                   size_t n_sigs) {
    if (stage == 0) {
        __builtin_prefetch(&sc->off[i]);
        __builtin_prefetch(&sc->state[i]);
        return;
    }
    const char *s = (const char *)&sc->sig[sc->off[i]];
    for (size_t b = 0; b < n_sigs * sizeof(shape_sig); b += 64) __builtin_prefetch(s + b);
}

/* Inputs are compared as tensors (absent: dtype and rank -1). */
static void sig_of_tensor(shape_sig *s, const tdm_tensor *t) {
    s->dtype = t ? (int32_t)t->dtype : -1;
    s->rank = t ? t->rank : -1;
    if (s->rank > 0) memcpy(s->dims, t->dims, (size_t)s->rank * sizeof *s->dims);
}

static bool sig_same_tensor(const shape_sig *s, const tdm_tensor *t) {
    if (!t) return s->rank == -1 && s->dtype == -1;
    if (s->dtype != (int32_t)t->dtype || s->rank != t->rank) return false;
    for (int d = 0; d < t->rank; d++)
        if (s->dims[d] != t->dims[d]) return false;
    return true;
}

/* Output shapes of node `i` from the cache when its inputs match; true on a hit. */
bool tdm_exec_shape_cache_get(const struct tdm_shape_cache *sc, size_t i, const tdm_node *n,
                            const tdm_tensor *const *ins, tdm_value_info *out) {
    if (!sc->state[i]) return false;
    const shape_sig *s = &sc->sig[sc->off[i]];
    for (int k = 0; k < n->n_inputs; k++)
        if (!sig_same_tensor(&s[k], ins[k])) return false;
    s += n->n_inputs;
    for (int k = 0; k < n->n_outputs; k++) {
        if (s[k].dtype < 0) continue; /* left as prefilled */
        out[k].dtype = (tdm_dtype)s[k].dtype;
        out[k].rank = s[k].rank;
        if (s[k].rank > 0) memcpy(out[k].dims, s[k].dims, (size_t)s[k].rank * sizeof *s[k].dims);
    }
    return true;
}

void tdm_exec_shape_cache_put(struct tdm_shape_cache *sc, size_t i, const tdm_node *n,
                            const tdm_tensor *const *ins, const tdm_value_info *out) {
    shape_sig *s = &sc->sig[sc->off[i]];
    for (int k = 0; k < n->n_inputs; k++) sig_of_tensor(&s[k], ins[k]);
    s += n->n_inputs;
    for (int k = 0; k < n->n_outputs; k++) {
        bool known = out[k].present && out[k].rank >= 0 && out[k].dtype != TDM_UNDEFINED;
        s[k].dtype = known ? (int32_t)out[k].dtype : -1;
        s[k].rank = known ? out[k].rank : -1;
        if (s[k].rank > 0) memcpy(s[k].dims, out[k].dims, (size_t)s[k].rank * sizeof *s[k].dims);
    }
    sc->state[i] = 1;
}

uint64_t tdm_exec_shapes_key(const tdm_graph *g, const tdm_tensor *const *inputs) {
    uint64_t h = TDM_HASH_INIT;
    for (size_t i = 0; i < g->n_inputs; i++) {
        const tdm_tensor *t = inputs[i];
        uint64_t parts[2 + TDM_MAX_RANK] = {t ? (uint64_t)t->dtype : 0, t ? (uint64_t)t->rank : 0};
        for (int d = 0; t && d < t->rank; d++) parts[2 + d] = (uint64_t)t->dims[d];
        for (int k = 0; k < 2 + (t ? t->rank : 0); k++) h = tdm_hash_u64(h, parts[k]);
    }
    return h;
}

/* Takes the arena planned for these shapes if it is free; otherwise the run uses the heap
 * (and records sizes when no plan exists yet). */
void tdm_exec_acquire_memplan(tdm_plan *p, uint64_t key, frame *f, size_t nv) {
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
                    tdm_monitor_memory(p->monitor, tdm_exec_mon_host_slot(p), (int64_t)mp->arena_bytes);
            }
            pthread_mutex_unlock(&p->mem_mu);
            return;
        }
    }
    pthread_mutex_unlock(&p->mem_mu);
    f->record = tdm_calloc(f->a, nv, sizeof *f->record);
}

bool tdm_exec_memplan_scratch(const tdm_allocator *a, const tdm_graph *g, tdm_memplan *mp) {
    size_t nv = g->n_values ? g->n_values : 1, max_io = 1;
    for (size_t i = 0; i < g->n_nodes; i++) {
        if ((size_t)g->nodes[i].n_inputs > max_io) max_io = (size_t)g->nodes[i].n_inputs;
        if ((size_t)g->nodes[i].n_outputs > max_io) max_io = (size_t)g->nodes[i].n_outputs;
    }
    mp->vals = tdm_calloc(a, nv, sizeof *mp->vals);
    mp->owned = tdm_calloc(a, nv, sizeof *mp->owned);
    mp->ins = tdm_calloc(a, max_io, sizeof *mp->ins);
    mp->outs = tdm_calloc(a, max_io, sizeof *mp->outs);
    mp->shapes = tdm_exec_shape_cache_new(a, g);
    return mp->vals && mp->owned && mp->ins && mp->outs && mp->shapes;
}

/* Which outputs may take an input's memory (alias[v] = u, else -1): those the plan allows
 * (tdm_plan_node.inplace_in) whose two values were made with the same size (record). */
static void inplace_requests(const tdm_plan *p, const size_t *record, int *alias) {
    const tdm_graph *g = p->graph;
    for (size_t v = 0; v < g->n_values; v++) alias[v] = -1;
    for (size_t i = 0; i < g->n_nodes; i++) {
        int k = p->nodes[i].inplace_in;
        if (k < 0) continue;
        int u = g->nodes[i].inputs[k], v = g->nodes[i].outputs[0];
        if (record[u] && record[u] == record[v]) alias[v] = u;
    }
}

void tdm_exec_release_memplan(tdm_plan *p, frame *f, uint64_t key, bool ok) {
    if (f->mp) {
        pthread_mutex_lock(&p->mem_mu);
        f->mp->busy = false;
        if (p->monitor) tdm_monitor_memory(p->monitor, tdm_exec_mon_host_slot(p), -(int64_t)f->mp->arena_bytes);
        pthread_mutex_unlock(&p->mem_mu);
        return;
    }
    if (!f->record) return;
    tdm_graph *g = p->graph;
    for (size_t o = 0; o < g->n_outputs; o++) f->record[g->outputs[o]] = 0; /* handed out */
    tdm_memplan *mp = NULL;
    if (ok) {
        int *last = tdm_calloc(f->a, g->n_values + 1, sizeof *last);
        int *alias = tdm_calloc(f->a, g->n_values + 1, sizeof *alias);
        if (last && alias) {
            for (size_t v = 0; v < g->n_values; v++)
                last[v] = p->release_after[v] < 0 ? (int)g->n_nodes : p->release_after[v];
            inplace_requests(p, f->record, alias);
            tdm_status *st = tdm_memplan_build(f->a, g->n_values, f->record, p->first_use, last,
                                               alias, key, &mp);
            tdm_status_free(st); /* without a plan the heap keeps working */
        }
        tdm_free(f->a, last);
        tdm_free(f->a, alias);
    }
    if (mp && !tdm_exec_memplan_scratch(f->a, g, mp)) {
        tdm_memplan_free(f->a, mp); /* without it the heap keeps working */
        mp = NULL;
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

void tdm_plan_memory_figures(tdm_plan *p, tdm_memory_figures *out) {
    memset(out, 0, sizeof *out);
    uint64_t newest = 0;
    pthread_mutex_lock(&p->mem_mu);
    for (int i = 0; i < TDM_PLAN_MEM_SLOTS; i++)
        if (p->mem[i] && p->mem[i]->last_use >= newest) {
            newest = p->mem[i]->last_use;
            out->planned = true;
            out->arena_bytes = p->mem[i]->arena_bytes;
            out->intermediate_bytes = p->mem[i]->total_bytes;
            out->peak_live_bytes = p->mem[i]->peak_live_bytes;
            out->inplace_values = p->mem[i]->n_inplace;
        }
    pthread_mutex_unlock(&p->mem_mu);
    const tdm_graph *g = p->graph;
    unsigned *seen = tdm_calloc(p->alloc, g->n_values + 1, sizeof *seen); /* devices reading v */
    for (size_t i = 0; seen && i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        int d = n->device >= 0 ? n->device : 0;
        if (d >= TDM_MAX_DEVICES) continue;
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            const tdm_value *val = v >= 0 ? &g->values[v] : NULL;
            if (!val || !val->data || val->is_input || (seen[v] & (1u << d))) continue;
            seen[v] |= 1u << d;
            out->weights_bytes[d] += val->data->nbytes;
        }
    }
    tdm_free(p->alloc, seen);
}

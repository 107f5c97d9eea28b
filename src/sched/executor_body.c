/* Control-flow bodies planned once (executor_internal.h): what a body of an If, Loop or Scan
 * keeps between its runs, per (plan, body, device).
 *
 * Without it every run of a body looked up each node's kernel in the kernel table, prepared
 * the kernels that have plan-time state (oneDNN primitives for a Conv, built again on every
 * run), inferred every node's shapes and took every intermediate from the heap. A body now
 * has, from its first run on:
 *   - per node: the kernel found for the types seen, its state prepared with the body's
 *     constants, and the kernel's WRITES_ALL flag (planned outputs are then not zeroed);
 *   - its last-reader table;
 *   - a memory plan for the shapes of its inputs and outer values (tdm_memplan: an arena for
 *     the intermediates, the run scratch and the shapes inferred per node), built from the
 *     sizes recorded by the second run with the same shapes (a Loop whose carried values
 *     grow never builds one). Outputs of the body stay on the heap: they are handed to the
 *     control-flow node.
 * A run takes the body's cache for itself (busy); a second run of the same body at the same
 * time (another session thread) runs it the old way. The plan owns the caches. */
#include <pthread.h>
#include <string.h>

#include "core/alloc.h"
#include "core/hash.h"
#include "sched/executor_internal.h"

struct tdm_body {
    tdm_body *next;
    const tdm_graph *g;
    size_t n_nodes;             /* g's (body_free may run after g is gone) */
    tdm_device *dev;
    bool busy;
    int *rel;                   /* per value: last reader (-1 = kept: the body's outputs) */
    int *first;                 /* per value: producer node (-1 = input, constant, outer) */
    const tdm_kernel_def **k;   /* per node, once looked up (tried) */
    void **state;               /* per node: prepared with the body's constants, or NULL */
    unsigned *kflags;           /* per node: TDM_KF_WRITES_ALL of k */
    bool *tried;
    const tdm_tensor **probe;   /* per value: scratch for the run's inputs and outer values */
    /* the values the body reads from enclosing graphs: value, how many graphs out the name
     * is defined (the frame to read it from), its index there */
    int n_outer;
    int *outer_v, *outer_up, *outer_idx;
    tdm_memplan *mp;            /* for the input / outer shapes of mp->key, or NULL */
    uint64_t seen_key;          /* the last run's key without a memory plan */
    bool seen;
};

static void body_free(const tdm_allocator *a, tdm_body *b) {
    if (!b) return;
    for (size_t i = 0; b->k && b->state && i < b->n_nodes; i++)
        if (b->state[i] && b->k[i] && b->k[i]->release) b->k[i]->release(b->state[i], a);
    tdm_free(a, b->rel);
    tdm_free(a, b->first);
    tdm_free(a, b->k);
    tdm_free(a, b->state);
    tdm_free(a, b->kflags);
    tdm_free(a, b->tried);
    tdm_free(a, b->probe);
    tdm_free(a, b->outer_v);
    tdm_free(a, b->outer_up);
    tdm_free(a, b->outer_idx);
    tdm_memplan_free(a, b->mp);
    tdm_free(a, b);
}

static tdm_body *body_new(const tdm_allocator *a, const tdm_graph *g, tdm_device *dev) {
    tdm_body *b = tdm_calloc(a, 1, sizeof *b);
    if (!b) return NULL;
    b->g = g;
    b->n_nodes = g->n_nodes;
    b->dev = dev;
    size_t nv = g->n_values ? g->n_values : 1, nn = g->n_nodes ? g->n_nodes : 1;
    b->rel = tdm_calloc(a, nv, sizeof *b->rel);
    b->first = tdm_calloc(a, nv, sizeof *b->first);
    b->k = tdm_calloc(a, nn, sizeof *b->k);
    b->state = tdm_calloc(a, nn, sizeof *b->state);
    b->kflags = tdm_calloc(a, nn, sizeof *b->kflags);
    b->tried = tdm_calloc(a, nn, sizeof *b->tried);
    b->probe = tdm_calloc(a, nv, sizeof *b->probe);
    b->outer_v = tdm_calloc(a, nv, sizeof *b->outer_v);
    b->outer_up = tdm_calloc(a, nv, sizeof *b->outer_up);
    b->outer_idx = tdm_calloc(a, nv, sizeof *b->outer_idx);
    if (!b->rel || !b->first || !b->k || !b->state || !b->kflags || !b->tried || !b->probe ||
        !b->outer_v || !b->outer_up || !b->outer_idx) {
        body_free(a, b);
        return NULL;
    }
    for (size_t v = 0; v < g->n_values; v++) b->rel[v] = b->first[v] = -1;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) b->rel[n->inputs[k]] = (int)i;
        for (int k = 0; k < n->n_implicit; k++) b->rel[n->implicit[k]] = (int)i;
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0) {
                if (b->rel[n->outputs[k]] < (int)i) b->rel[n->outputs[k]] = (int)i;
                b->first[n->outputs[k]] = (int)i;
            }
    }
    for (size_t o = 0; o < g->n_outputs; o++) b->rel[g->outputs[o]] = -1;
    for (size_t v = 0; v < g->n_values; v++) {
        if (!g->values[v].is_outer) continue;
        int up = 1, u = -1;
        const tdm_graph *p = g->parent;
        for (; p && (u = tdm_graph_find_value(p, g->values[v].name)) < 0; p = p->parent) up++;
        b->outer_v[b->n_outer] = (int)v;
        b->outer_up[b->n_outer] = p ? up : 0; /* 0: not found, looked up by name per run */
        b->outer_idx[b->n_outer++] = u;
    }
    return b;
}

tdm_body *tdm_exec_body_acquire(tdm_plan *p, const tdm_graph *body, tdm_device *dev) {
    pthread_mutex_lock(&p->mem_mu);
    tdm_body *b = p->bodies;
    while (b && !(b->g == body && b->dev == dev)) b = b->next;
    if (!b && (b = body_new(p->alloc, body, dev))) {
        b->next = p->bodies;
        p->bodies = b;
    }
    if (b && b->busy) b = NULL; /* held by another run: that one runs uncached */
    if (b) b->busy = true;
    pthread_mutex_unlock(&p->mem_mu);
    return b;
}

void tdm_exec_body_release(tdm_plan *p, tdm_body *b) {
    pthread_mutex_lock(&p->mem_mu);
    b->busy = false;
    pthread_mutex_unlock(&p->mem_mu);
}

void tdm_exec_bodies_free(tdm_plan *p) {
    for (tdm_body *b = p->bodies, *next; b; b = next) {
        next = b->next;
        body_free(p->alloc, b);
    }
    p->bodies = NULL;
}

const int *tdm_exec_body_release_after(const tdm_body *b) { return b->rel; }

const tdm_tensor **tdm_exec_body_probe(tdm_body *b) { return b->probe; }

void tdm_exec_body_outer(const tdm_body *b, const frame *parent, const tdm_tensor **probe) {
    for (int j = 0; j < b->n_outer; j++) {
        int v = b->outer_v[j];
        const frame *f = parent;
        for (int up = b->outer_up[j]; f && up > 1; up--) f = f->parent;
        const tdm_tensor *t = NULL;
        if (f && b->outer_up[j] > 0) { /* the frame of the graph that defines the name */
            const tdm_graph *want = b->g;
            for (int up = b->outer_up[j]; want && up > 0; up--) want = want->parent;
            if (f->g == want) t = f->vals[b->outer_idx[j]];
        }
        probe[v] = t ? t : tdm_exec_lookup_outer(parent, b->g->values[v].name);
    }
}

/* The constant behind value v of body g, or NULL: its own data, or for a value the body
 * reads from an enclosing graph, the constant of the graph that defines the name (an
 * overridable graph input or a computed value is no constant). */
static const tdm_tensor *body_const(const tdm_graph *g, int v) {
    const tdm_value *val = &g->values[v];
    if (!val->data && val->is_outer) val = tdm_graph_outer_def(g, val->name);
    return val && val->data && !val->is_input ? val->data : NULL;
}

/* Looks up node i's kernel for the input types of this run and prepares its state with the
 * body's constants (and the enclosing graphs' constants it reads, such as a main graph's
 * weights read by an If branch's convolutions), once. A failure leaves the node to the
 * per-run path of tdm_exec_run_node. */
void tdm_exec_body_kernel(tdm_body *b, size_t i, const tdm_tensor *const *ins,
                          const tdm_allocator *a, const tdm_kernel_def **k, void **state) {
    const tdm_node *n = &b->g->nodes[i];
    if (!b->tried[i] && n->schema && n->n_inputs <= 64) {
        b->tried[i] = true;
        tdm_dtype types[64];
        const tdm_tensor *consts[64];
        for (int j = 0; j < n->n_inputs; j++) {
            int v = n->inputs[j];
            types[j] = ins[j] ? ins[j]->dtype : TDM_UNDEFINED;
            consts[j] = v >= 0 ? body_const(b->g, v) : NULL;
        }
        const tdm_kernel_def *kd = tdm_device_find_kernel(b->dev, n, types, n->n_inputs);
        void *st = NULL;
        if (kd && kd->prepare) {
            tdm_status *e = kd->prepare(n, n->opset, n->n_inputs, consts, a, &st);
            if (e) {
                tdm_status_free(e);
                kd = NULL, st = NULL;
            }
        }
        b->k[i] = kd;
        b->state[i] = st;
        b->kflags[i] = kd && !(n->schema->flags & TDM_OP_DATA_DEPENDENT)
                           ? tdm_device_kernel_flags(b->dev, kd, n) & TDM_KF_WRITES_ALL
                           : 0;
    }
    *k = b->k[i];
    *state = b->state[i];
}

unsigned tdm_exec_body_kflags(const tdm_body *b, const tdm_node *n, const tdm_kernel_def *k) {
    const tdm_graph *g = b->g;
    if (n < g->nodes || n >= g->nodes + g->n_nodes) return 0;
    size_t i = (size_t)(n - g->nodes);
    return b->tried[i] && b->k[i] == k ? b->kflags[i] : 0;
}

/* Hash of the dtypes and shapes of the values a body's intermediate sizes can depend on: its
 * inputs and the outer values it reads (f->vals filled). */
uint64_t tdm_exec_body_key(const frame *f) {
    uint64_t h = TDM_HASH_INIT;
    const tdm_graph *g = f->g;
    for (size_t v = 0; v < g->n_values; v++) {
        if (!g->values[v].is_input && !g->values[v].is_outer) continue;
        const tdm_tensor *t = f->vals[v];
        uint64_t parts[3 + TDM_MAX_RANK] = {v, t ? (uint64_t)t->dtype + 1 : 0,
                                            t ? (uint64_t)t->rank : 0};
        for (int d = 0; t && d < t->rank; d++) parts[3 + d] = (uint64_t)t->dims[d];
        for (int k = 0; k < 3 + (t ? t->rank : 0); k++) h = tdm_hash_u64(h, parts[k]);
    }
    return h;
}

tdm_memplan *tdm_exec_body_memplan(tdm_body *b, uint64_t key, bool *record) {
    if (b->mp && b->mp->key == key) {
        *record = false;
        return b->mp;
    }
    *record = b->seen && b->seen_key == key; /* shapes seen twice in a row: worth a plan */
    b->seen = true;
    b->seen_key = key;
    return NULL;
}

void tdm_exec_body_record(tdm_body *b, const tdm_allocator *a, size_t *record, uint64_t key) {
    const tdm_graph *g = b->g;
    for (size_t o = 0; o < g->n_outputs; o++) record[g->outputs[o]] = 0; /* handed out */
    int *last = tdm_calloc(a, g->n_values + 1, sizeof *last);
    tdm_memplan *mp = NULL;
    if (last) {
        for (size_t v = 0; v < g->n_values; v++)
            last[v] = b->rel[v] < 0 ? (int)g->n_nodes : b->rel[v];
        tdm_status *st = tdm_memplan_build(a, g->n_values, record, b->first, last, NULL, key, &mp);
        tdm_status_free(st); /* without a plan the heap keeps working */
        tdm_free(a, last);
    }
    if (mp && !tdm_exec_memplan_scratch(a, g, mp)) {
        tdm_memplan_free(a, mp);
        mp = NULL;
    }
    if (mp) {
        tdm_memplan_free(a, b->mp);
        b->mp = mp;
    }
}

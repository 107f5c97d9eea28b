/* I/O binding (tandem.h "I/O binding"): a run's inputs named once, outputs written into the
 * caller's tensors. The binding keeps, per graph input and output of the session's plan, the
 * tensors the run reads and writes, plus the scratch a run needs (the outputs' slots and the
 * headers of the bound views), so a run with every output bound allocates nothing here. */
#include <string.h>

#include "api/api_impl.h"
#include "core/alloc.h"
#include "core/tensor.h"

struct tdm_io_binding {
    tdm_session *s;
    const tdm_graph *g;        /* the session's plan's graph (names) */
    const tdm_tensor **inputs; /* per graph input (NULL = not bound: its initializer) */
    tdm_tensor **bound;        /* per graph output: the caller's tensor, or NULL */
    bool *keep;                /* per graph output: keep what the run makes */
    tdm_tensor **kept;         /* per graph output: kept from the last run (owned) */
    tdm_tensor **all;          /* per graph output: the run's results (scratch) */
    tdm_tensor *hdr;           /* per graph output: header storage of the bound views */
    bool ran;                  /* the last run succeeded */
};

static void drop_kept(tdm_io_binding *b) {
    for (size_t j = 0; j < b->g->n_outputs; j++) {
        tdm_tensor_destroy(b->kept[j]);
        b->kept[j] = NULL;
    }
    b->ran = false;
}

tdm_status *tdm_io_binding_create(tdm_session *s, tdm_io_binding **out) {
    if (!s || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_io_binding_create: NULL argument");
    const tdm_allocator *a = s->env->alloc;
    tdm_io_binding *b = tdm_calloc(a, 1, sizeof *b);
    if (!b) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating an I/O binding");
    b->s = s;
    b->g = tdm_session_graph(s);
    size_t ni = b->g->n_inputs + 1, no = b->g->n_outputs + 1;
    b->inputs = tdm_calloc(a, ni, sizeof *b->inputs);
    b->bound = tdm_calloc(a, no, sizeof *b->bound);
    b->keep = tdm_calloc(a, no, sizeof *b->keep);
    b->kept = tdm_calloc(a, no, sizeof *b->kept);
    b->all = tdm_calloc(a, no, sizeof *b->all);
    b->hdr = tdm_calloc(a, no, sizeof *b->hdr);
    if (!b->inputs || !b->bound || !b->keep || !b->kept || !b->all || !b->hdr) {
        tdm_io_binding_free(b);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating an I/O binding");
    }
    *out = b;
    return NULL;
}

void tdm_io_binding_free(tdm_io_binding *b) {
    if (!b) return;
    const tdm_allocator *a = b->s->env->alloc;
    if (b->kept) drop_kept(b);
    tdm_free(a, b->inputs);
    tdm_free(a, b->bound);
    tdm_free(a, b->keep);
    tdm_free(a, b->kept);
    tdm_free(a, b->all);
    tdm_free(a, b->hdr);
    tdm_free(a, b);
}

static int find_name(const tdm_graph *g, const int *list, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(g->values[list[i]].name, name) == 0) return (int)i;
    return -1;
}

tdm_status *tdm_io_binding_bind_input(tdm_io_binding *b, const char *name, const tdm_tensor *t) {
    if (!b || !name || !t)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_io_binding_bind_input: NULL argument");
    int i = find_name(b->g, b->g->inputs, b->g->n_inputs, name);
    if (i < 0) return TDM_ERR(TDM_ERR_NOT_FOUND, "the model has no input named '%s'", name);
    b->inputs[i] = t;
    return NULL;
}

tdm_status *tdm_io_binding_bind_output(tdm_io_binding *b, const char *name, tdm_tensor *t) {
    if (!b || !name) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_io_binding_bind_output: NULL argument");
    int j = find_name(b->g, b->g->outputs, b->g->n_outputs, name);
    if (j < 0) return TDM_ERR(TDM_ERR_NOT_FOUND, "the model has no output named '%s'", name);
    /* (a tensor in a device's memory comes from the plan: a state, sched/plan.h) */
    if (t && tdm_dtype_has_ptrs(t->dtype))
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "output '%s': only numeric tensors can be bound", name);
    b->bound[j] = t;
    b->keep[j] = t == NULL;
    return NULL;
}

void tdm_io_binding_clear(tdm_io_binding *b) {
    if (!b) return;
    drop_kept(b);
    memset(b->inputs, 0, b->g->n_inputs * sizeof *b->inputs);
    memset(b->bound, 0, b->g->n_outputs * sizeof *b->bound);
    memset(b->keep, 0, b->g->n_outputs * sizeof *b->keep);
}

tdm_status *tdm_session_run_bound(tdm_session *s, tdm_io_binding *b, const tdm_run_options *o) {
    if (!s || !b) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_session_run_bound: NULL argument");
    if (b->s != s)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_session_run_bound: the binding belongs to "
                       "another session");
    tdm_run_ctl ctl;
    bool has_ctl = false;
    TDM_TRY(tdm_session_run_ctl(o, &ctl, &has_ctl));
    const tdm_graph *g = b->g;
    drop_kept(b);
    bool any = false;
    for (size_t j = 0; j < g->n_outputs; j++) any = any || b->bound[j];
    memset(b->all, 0, g->n_outputs * sizeof *b->all);
    tdm_status *st = tdm_strategy_run_bound(s->strategy, b->inputs, any ? b->bound : NULL,
                                            b->hdr, b->all, has_ctl ? &ctl : NULL);
    for (size_t j = 0; j < g->n_outputs; j++) {
        if (!st && b->keep[j]) b->kept[j] = b->all[j];
        else tdm_tensor_destroy(b->all[j]);
        b->all[j] = NULL;
    }
    b->ran = st == NULL;
    return st;
}

tdm_tensor *tdm_io_binding_output(const tdm_io_binding *b, const char *name) {
    if (!b || !name || !b->ran) return NULL;
    int j = find_name(b->g, b->g->outputs, b->g->n_outputs, name);
    if (j < 0) return NULL;
    return b->bound[j] ? b->bound[j] : b->kept[j];
}

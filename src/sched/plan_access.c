/* Plan accessors for the API layer (sched/plan_access.h). */
#include "sched/plan_access.h"

#include <string.h>

#include "core/trace.h"

tdm_graph *tdm_plan_graph(const tdm_plan *p) { return p ? p->graph : NULL; }

tdm_status *tdm_plan_trace_start(tdm_plan *p) {
    if (p->trace) return NULL;
    return tdm_trace_create(p->alloc, &p->trace);
}

tdm_status *tdm_plan_trace_stop(tdm_plan *p, const char *path) {
    tdm_trace *t = p->trace;
    if (!t) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tracing was not started");
    p->trace = NULL;
    tdm_status *st = path ? tdm_trace_write(t, path) : NULL;
    tdm_trace_free(t);
    return st;
}

void tdm_plan_trace_discard(tdm_plan *p) {
    if (!p || !p->trace) return;
    tdm_trace_free(p->trace);
    p->trace = NULL;
}

void tdm_plan_reset_measurements(tdm_plan *p) {
    if (!p || !p->measured_ms) return;
    pthread_mutex_lock(&p->mem_mu);
    memset(p->measured_ms, 0, p->graph->n_nodes * sizeof *p->measured_ms);
    memset(p->measured_flops, 0, p->graph->n_nodes * sizeof *p->measured_flops);
    memset(p->measured_bytes, 0, p->graph->n_nodes * sizeof *p->measured_bytes);
    p->measured_runs = 0;
    pthread_mutex_unlock(&p->mem_mu);
}

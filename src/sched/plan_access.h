/* What the API layer (src/api) may ask of a plan: it reads and writes no tdm_plan field
 * itself. Thread safety as the fields': the trace is switched between runs, measurements are
 * reset under the plan's lock. */
#ifndef TDM_SCHED_PLAN_ACCESS_H
#define TDM_SCHED_PLAN_ACCESS_H

#include "sched/plan.h"

/* The plan's (optimised) graph, owned by the plan. */
tdm_graph *tdm_plan_graph(const tdm_plan *p);
/* Starts recording a trace of the plan's runs (nothing when it records already). */
tdm_status *tdm_plan_trace_start(tdm_plan *p);
/* Stops recording and writes the trace to path (NULL: drops it); an error when not started. */
tdm_status *tdm_plan_trace_stop(tdm_plan *p, const char *path);
/* Drops a trace being recorded, if any. */
void tdm_plan_trace_discard(tdm_plan *p);
/* Forgets the per-node times measured so far (options.profile). */
void tdm_plan_reset_measurements(tdm_plan *p);

#endif

/* Streamed weights (sched/budget.h residency "streamed"): the plan's pool of device buffers
 * (the ring) kept across runs; the per-run part is in executor_stream.c
 * (executor_internal.h). */
#ifndef TDM_SCHED_STREAM_H
#define TDM_SCHED_STREAM_H

struct tdm_plan;

/* Frees the plan's stream pool and its device buffers (NULL-safe; tdm_plan_free). */
void tdm_stream_pool_free(struct tdm_plan *p);

#endif

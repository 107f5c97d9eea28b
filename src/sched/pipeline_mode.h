/* The pipeline strategy (src/sched/pipeline_mode.c): the model cut into stages, one per
 * device, run over a tandem user pipeline (src/api/pipeline.c). Made by
 * tdm_pipeline_strategy_create (sched/strategy.h); what follows are its queries. */
#ifndef TDM_SCHED_PIPELINE_MODE_H
#define TDM_SCHED_PIPELINE_MODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sched/strategy.h"

typedef struct tdm_pipe_mode tdm_pipe_mode;

/* The pipeline state of a strategy, or NULL when st is not a pipeline. */
tdm_pipe_mode *tdm_pipe_mode_of(const tdm_strategy *st);

/* The current stages (thread-safe): returns their count; stage k runs nodes [begin[k],
 * end[k]) of the unoptimised graph on the session's device device[k]. Arrays of
 * TDM_MAX_DEVICES entries, each may be NULL. */
int tdm_pipe_mode_layout(tdm_pipe_mode *pm, int *device, int *begin, int *end);
/* The rebalancer's decisions so far (returned), the new stages it installed (*replans, may
 * be NULL) and the last decision's log line (buf, may be NULL). */
int64_t tdm_pipe_mode_last_decision(tdm_pipe_mode *pm, int64_t *replans, char *buf, size_t size);
/* The micro-batch size (rows) a run of `rows` rows would use now (thread-safe); *changes
 * (may be NULL): the changes of the size logged so far; buf (may be NULL): the last one's
 * log line. */
int64_t tdm_pipe_mode_micro_batch(tdm_pipe_mode *pm, int64_t rows, int64_t *changes, char *buf, size_t size);

/* Throughput mode's choice for the session's devices and the loaded graph g (shapes
 * inferred): true when the cost model predicts a pipeline over the devices to beat
 * replicas; `why` receives the reason. */
bool tdm_pipe_mode_preferred(const tdm_strategy_setup *su, const tdm_graph *g, char *why, size_t why_size);

#endif

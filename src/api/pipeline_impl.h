/* Pipeline mode of a session (src/api/pipeline_mode.c): the model cut into stages, one per
 * device, run over a tandem user pipeline (src/api/pipeline.c). */
#ifndef TDM_API_PIPELINE_IMPL_H
#define TDM_API_PIPELINE_IMPL_H

#include "api/api_impl.h"

typedef struct tdm_pipe_mode tdm_pipe_mode;

/* Builds the stages of a pipeline-mode session from the model bytes: cut points from
 * o->pipeline_cuts, else the auto cut from the cost model. */
tdm_status *tdm_pipe_mode_create(tdm_session *s, const void *data, size_t size, const char *base_dir,
                                 const tdm_session_options *o, tdm_pipe_mode **out);
void tdm_pipe_mode_free(tdm_pipe_mode *pm);
struct tdm_monitor;
/* Makes every stage's plan count into the session's device counters (sched/monitor.h). */
void tdm_pipe_mode_set_monitor(tdm_pipe_mode *pm, struct tdm_monitor *mon);
/* A run: micro-batches through the stages (by_input: per graph input of s->plan); ctl (may be
 * NULL) stops it between stages. */
tdm_status *tdm_pipe_mode_run(tdm_pipe_mode *pm, const tdm_tensor **by_input, tdm_tensor **all_outputs,
                              const tdm_run_ctl *ctl);
size_t tdm_pipe_mode_stage_count(const tdm_pipe_mode *pm);
void tdm_pipe_mode_stats(tdm_pipe_mode *pm, size_t index, tdm_device_stats *out);

/* Throughput mode's choice for a model whose batch cannot be split: true when the cost model
 * predicts a pipeline over the devices to beat replicas; `why` receives the reason. */
bool tdm_pipe_mode_preferred(tdm_session *s, const void *data, size_t size, const char *base_dir,
                             char *why, size_t why_size);

#endif

/* Pipeline mode of a session (src/sched/pipeline_mode.c): the model cut into stages, one per
 * device, run over a tandem user pipeline (src/api/pipeline.c). */
#ifndef TDM_SCHED_PIPELINE_MODE_H
#define TDM_SCHED_PIPELINE_MODE_H

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
/* Statistics entries: one per device of the session (index = its place in the device list;
 * the stages a device ran, summed over every cut it had). */
size_t tdm_pipe_mode_stage_count(const tdm_pipe_mode *pm);
void tdm_pipe_mode_stats(tdm_pipe_mode *pm, size_t index, tdm_device_stats *out);

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

/* Throughput mode's choice for a model whose batch cannot be split: true when the cost model
 * predicts a pipeline over the devices to beat replicas; `why` receives the reason. */
bool tdm_pipe_mode_preferred(tdm_session *s, const void *data, size_t size, const char *base_dir,
                             char *why, size_t why_size);

#endif

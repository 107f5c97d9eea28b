/* Pipeline mode's cut (src/sched/pipeline_mode_cut.c): the cost model per node, user cut points, a stage's graph, and throughput mode's choice of a pipeline. */
#ifndef TDM_SCHED_PIPELINE_MODE_CUT_H
#define TDM_SCHED_PIPELINE_MODE_CUT_H

#include "sched/strategy.h"

/* costs[k * n + i]: predicted ms of node i of g on the session's device k, k < K (dynamic
 * dims count as 1). */
tdm_status *tdm_pm_node_costs(const tdm_strategy_setup *su, const tdm_graph *g, int K, double *costs);
/* User cut points ("name,#12,..." where stages 2, 3, ... start) into starts; *used: stages. */
tdm_status *tdm_pm_user_cut(const tdm_graph *g, const char *cuts, int K, int *starts, int *used);
/* Restricts g (a fresh copy of the model) to nodes [b, e): nodes outside are removed, the
 * values read from earlier stages become inputs and those needed later (or by the caller)
 * outputs. *drop (n_drop names, allocated with a, freed by the caller also on failure):
 * the stage inputs that nothing after the stage needs. */
tdm_status *tdm_pm_restrict_graph(tdm_graph *g, int b, int e, char ***drop, size_t *n_drop,
                                  const tdm_allocator *a);
/* The graph of the stage that runs nodes [b, e) of g (the loaded model, shapes inferred): a
 * copy of g with only the constants those nodes read (graph/clone.h), restricted as above. */
tdm_status *tdm_pm_stage_graph(const tdm_graph *g, int b, int e, char ***drop, size_t *n_drop,
                               const tdm_allocator *a, tdm_graph **out);

#endif

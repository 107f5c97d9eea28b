/* Pipeline mode's rebalancer (src/sched/pipeline_mode_rebalance.c): the stage cut from the
 * cost model, corrected by measurements.
 *
 * The pipeline mode (pipeline_mode.c) measures every configuration in windows of runs; at
 * the end of a window it hands the measurements here, and tdm_pm_decide says whether to keep
 * the configuration or to install another one (a moved cut, or one stage on one device).
 * Not thread-safe: the caller lets one thread decide at a time. */
#ifndef TDM_SCHED_PIPELINE_MODE_REBALANCE_H
#define TDM_SCHED_PIPELINE_MODE_REBALANCE_H

#include <stdbool.h>
#include <stddef.h>

#include "sched/strategy.h"

/* A configuration: stage k runs nodes [start[k], start[k + 1]) (the last up to the model's
 * last node) on the session's device device[k]. One stage = every node on one device. */
typedef struct tdm_pm_config {
    int n_stages;
    int device[TDM_MAX_DEVICES];
    int start[TDM_MAX_DEVICES];
} tdm_pm_config;

/* What one window of runs measured on a configuration. */
typedef struct tdm_pm_window {
    double ms_per_row[TDM_MAX_DEVICES];     /* per stage: busy time per batch row */
    double ref_ms_per_row[TDM_MAX_DEVICES]; /* per stage: the same in the configuration's first window */
    double rows_per_ms;                     /* rows finished per ms while runs were in flight */
    bool first;                             /* the configuration's first window */
    bool whole;                             /* every run of the window was one micro-batch */
} tdm_pm_window;

typedef enum tdm_pm_verdict {
    TDM_PM_NOTHING = 0, /* nothing to say: no drift since the configuration's first window */
    TDM_PM_KEEP = 1,    /* a decision to keep the configuration (msg says why) */
    TDM_PM_INSTALL = 2, /* install *next (msg says why) */
} tdm_pm_verdict;

typedef struct tdm_pm_rebal tdm_pm_rebal;

/* raw[k * n + i]: the cost model's ms of node i on device k (copied); names: the devices'
 * names (borrowed, must outlive the rebalancer). */
tdm_status *tdm_pm_rebal_create(const tdm_allocator *a, int K, size_t n, const double *raw,
                                const char *const *names, tdm_pm_rebal **out);
void tdm_pm_rebal_free(tdm_pm_rebal *rb);
/* The corrected predicted ms per row of stage k of c. */
double tdm_pm_predict(const tdm_pm_rebal *rb, const tdm_pm_config *c, int k);
/* The model's node count n given at creation. */
size_t tdm_pm_node_count(const tdm_pm_rebal *rb);

/* The measurements of a window on `cur` (see the file comment of the .c for the policy). */
tdm_pm_verdict tdm_pm_decide(tdm_pm_rebal *rb, const tdm_pm_config *cur, const tdm_pm_window *w,
                             tdm_pm_config *next, char *msg, size_t msg_size);

/* The auto cut: stage k on device k, filled in order; the smallest slowest-stage time.
 * c[k * n + i]: ms of node i on device k. Returns the stages used (>= 1); starts[k] and
 * stage_ms[k] for each. */
int tdm_pm_auto_cut(const double *c, size_t n, int K, int *starts, double *stage_ms);

#endif

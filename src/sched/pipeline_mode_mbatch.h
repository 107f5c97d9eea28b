/* Pipeline mode's micro-batch size (src/sched/pipeline_mode_mbatch.c): from what the stages
 * measured per micro-batch, a fixed cost and a per-row cost per stage, and the micro-batch
 * size that minimises the predicted run time of a batch.
 *
 * A run of n rows cut into m micro-batches of b = ceil(n / m) rows over stages with fixed
 * cost F_k and per-row cost r_k is predicted to take
 *     T(m) = sum_k (F_k + b r_k) + (m - 1) max_k (F_k + b r_k)
 * (the first micro-batch crosses every stage, each later one adds the slowest stage): more
 * micro-batches fill the pipeline sooner, fewer pay the fixed costs fewer times.
 * Pure functions on plain data; the caller (pipeline_mode.c) locks. */
#ifndef TDM_SCHED_PIPELINE_MODE_MBATCH_H
#define TDM_SCHED_PIPELINE_MODE_MBATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sched/strategy.h"

/* Least-squares sums of (rows, ms) samples of one stage: one sample per micro-batch. */
typedef struct tdm_pm_mb_acc {
    double n, sx, sy, sxx, sxy;
    double x_min, x_max; /* rows seen (x_min > x_max: none) */
} tdm_pm_mb_acc;

/* The fitted costs of a generation's stages; valid = false: no fit (the default size). */
typedef struct tdm_pm_mb_model {
    bool valid;
    int n_stages;
    double fixed_ms[TDM_MAX_DEVICES];   /* F_k: ms per micro-batch */
    double row_ms[TDM_MAX_DEVICES];     /* r_k: ms per row */
} tdm_pm_mb_model;

/* Adds one micro-batch of `rows` rows that took ms to acc. */
void tdm_pm_mb_add(tdm_pm_mb_acc *acc, int64_t rows, double ms);

/* Fits F_k and r_k (both >= 0) for stages [0, n_stages) from acc. Returns false (m
 * untouched) when a stage has fewer than 4 samples or saw one micro-batch size only. */
bool tdm_pm_mb_fit(const tdm_pm_mb_acc *acc, int n_stages, tdm_pm_mb_model *m);

/* The default micro-batch size of an n-row run over n_stages stages: ceil(n / n_stages). */
int64_t tdm_pm_mb_default(int64_t n, int n_stages);

/* T(parts) of an n-row run in parts micro-batches under m (ms). */
double tdm_pm_mb_predict(const tdm_pm_mb_model *m, int64_t n, int64_t parts);

/* The micro-batch size for an n-row run: the default unless m (valid) predicts another
 * size 5% faster, then the fastest (at most 64 micro-batches are considered). */
int64_t tdm_pm_mb_choose(const tdm_pm_mb_model *m, int64_t n);

/* "per micro-batch 3.100 ms + 0.010 ms/row on test:0, ..." (names: per stage). */
void tdm_pm_mb_describe(const tdm_pm_mb_model *m, const char *const *names, char *buf, size_t size);

#endif

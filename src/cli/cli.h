/* The tandem command: shared pieces. Uses the public API only. */
#ifndef TDM_CLI_H
#define TDM_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "tandem/tandem.h"

int cmd_run(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_conformance(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_profile(int argc, char **argv);

/* Prints "tandem: <message>" to stderr, frees the status and returns 1. */
int cli_fail(tdm_status *st, const char *context);

/* .npy files (C order, little-endian numeric and bool dtypes). */
/* Return 0, or -1 with a message in why. */
int npy_read(tdm_env *env, const char *path, tdm_tensor **out, char *why, size_t why_size);
int npy_write(const char *path, const tdm_tensor *t, char *why, size_t why_size);

/* Fills a tensor with deterministic pseudo-random values suited to its dtype. */
void cli_fill_random(tdm_tensor *t, unsigned long long seed);
/* One-line summary: dtype, shape, min/max/mean and the first values. */
void cli_print_summary(FILE *f, const char *name, const tdm_tensor *t);
/* Element-wise comparison; writes a reason on mismatch. Returns true when equal within
 * tolerance (rtol, atol apply to floating types; integers, bools and strings must match). */
bool cli_compare(const tdm_tensor *got, const tdm_tensor *want, double rtol, double atol,
                 char *why, size_t why_size);
/* Shape as "[1,3,224,224]". */
const char *cli_shape_str(int rank, const int64_t *dims, char *buf, size_t size);
/* Runs the session once on random inputs (dynamic dims 1 or from NAME:DIMS specs); 0 or an
 * exit code after printing the error. */
int cli_run_random(tdm_env *env, tdm_session *s, int n_shapes, const char *const *shape_names,
                   const char *const *shape_dims, unsigned long long seed);
/* Parses "a,b,c" positive integers; returns count or -1. */
int cli_parse_dims(const char *s, int64_t *dims, int max);

#endif

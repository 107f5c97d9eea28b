/* The tandem command: shared pieces. Uses the public API only. */
#ifndef TDM_CLI_H
#define TDM_CLI_H

#include <stdbool.h>
#include <stdint.h>
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

/* .npy files (C order, little-endian numeric and bool dtypes). Sequences, maps and optionals
 * are folders (npy.c: a sequence's items are DIR/0.npy, DIR/1.npy, ...; a map DIR/keys.npy or
 * keys.txt and DIR/values.npy): npy_read takes a folder for PATH, npy_write writes PATH.npy's
 * container as the folder PATH. */
/* Return 0, or -1 with a message in why. */
int npy_read(tdm_env *env, const char *path, tdm_tensor **out, char *why, size_t why_size);
int npy_write(const char *path, const tdm_tensor *t, char *why, size_t why_size);

/* Fills a tensor with deterministic pseudo-random values suited to its dtype: floats in
 * [-1, 1), float16/bfloat16 0.5, integers in `range` ([lo, hi], clamped to the dtype; NULL:
 * small defaults per dtype, see cli_random_values). */
void cli_fill_random(tdm_tensor *t, unsigned long long seed, const int64_t *range);
/* What cli_fill_random puts into a tensor of this dtype, as text ("in [0, 1]"). */
const char *cli_random_values(tdm_dtype dt, const int64_t *range, char *buf, size_t size);

/* ---- a model's inputs as commands take them (src/cli/inputs.c) ---- */
#define CLI_MAX_INPUTS 256
typedef struct cli_inputs {
    const char *file_names[CLI_MAX_INPUTS], *files[CLI_MAX_INPUTS]; /* --input NAME=FILE.npy */
    int n_files;
    const char *shape_names[CLI_MAX_INPUTS], *shape_dims[CLI_MAX_INPUTS]; /* --shape NAME:DIMS */
    int n_shapes;
    unsigned long long seed; /* --seed (default 1) */
    bool has_int_range;      /* --int-range LO,HI */
    int64_t int_range[2];
} cli_inputs;
void cli_inputs_init(cli_inputs *in);
/* Takes argv[*i] when it is --input, --shape, --seed or --int-range (advancing *i past its
 * value): 1; 0 when it is another option; -1 after printing why its value is bad. The
 * strings stay in argv (NAME=FILE and NAME:DIMS are split in place). */
int cli_inputs_option(cli_inputs *in, const char *cmd, int argc, char **argv, int *i);
/* 0 when every --input and --shape names an input of m, else 1 after a message. */
int cli_inputs_check(const cli_inputs *in, const char *cmd, const tdm_model *m);
/* Input `d` (the model's `index`-th): read from its --input file, else random with its
 * declared shape (a dynamic leading dimension = batch, other dynamic ones 1) or its --shape.
 * *random says which; *batch_used (may be NULL) is set when `batch` was used. 0 or an exit
 * code after a message. */
int cli_input_make(tdm_env *env, const cli_inputs *in, const char *cmd, const tdm_value_desc *d,
                   int64_t batch, unsigned long long index, tdm_tensor **out, bool *random,
                   bool *batch_used);
/* One line naming the random inputs and the values they took (nothing when none was). */
void cli_note_random(FILE *f, const cli_inputs *in, const tdm_model *m, const char *cmd);
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
/* One line per device of the session: its memory peak and bytes uploaded so far
 * (tdm_session_monitor), for runs with memory budgets. */
void cli_print_memory_peaks(FILE *f, tdm_session *s);
/* Parses "a,b,c" positive integers; returns count or -1. */
int cli_parse_dims(const char *s, int64_t *dims, int max);

#endif

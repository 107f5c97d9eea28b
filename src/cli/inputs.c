/* A model's inputs as the commands take them: from .npy files (--input NAME=FILE.npy) or
 * random (--shape, --seed, --int-range), with one description of what was random. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_inputs_init(cli_inputs *in) {
    memset(in, 0, sizeof *in);
    in->seed = 1;
}

static bool parse_i64(const char *s, char **end, int64_t *v) {
    errno = 0;
    long long x = strtoll(s, end, 10);
    if (errno || *end == s) return false;
    *v = (int64_t)x;
    return true;
}

int cli_inputs_option(cli_inputs *in, const char *cmd, int argc, char **argv, int *i) {
    const char *o = argv[*i];
    bool has_val = *i + 1 < argc;
    bool ours = !strcmp(o, "--input") || !strcmp(o, "--shape") || !strcmp(o, "--seed") ||
                !strcmp(o, "--int-range");
    if (!ours) return 0;
    if (!has_val) {
        fprintf(stderr, "tandem: %s: %s needs a value\n", cmd, o);
        return -1;
    }
    char *v = argv[++*i];
    if (!strcmp(o, "--input") || !strcmp(o, "--shape")) {
        bool input = !strcmp(o, "--input");
        char *sep = input ? strchr(v, '=') : strrchr(v, ':');
        int *n = input ? &in->n_files : &in->n_shapes;
        if (!sep || sep == v || !sep[1]) {
            fprintf(stderr, "tandem: %s: %s expects %s\n", cmd, o,
                    input ? "NAME=FILE.npy" : "NAME:d0,d1,...");
            return -1;
        }
        if (*n == CLI_MAX_INPUTS) {
            fprintf(stderr, "tandem: %s: more than %d %s options\n", cmd, CLI_MAX_INPUTS, o);
            return -1;
        }
        *sep = 0;
        if (input) in->file_names[*n] = v, in->files[*n] = sep + 1;
        else in->shape_names[*n] = v, in->shape_dims[*n] = sep + 1;
        ++*n;
        return 1;
    }
    char *end = NULL;
    if (!strcmp(o, "--seed")) {
        errno = 0;
        unsigned long long s = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-') {
            fprintf(stderr, "tandem: %s: --seed expects a non-negative integer, got '%s'\n", cmd, v);
            return -1;
        }
        in->seed = s;
        return 1;
    }
    int64_t lo, hi;
    if (!parse_i64(v, &end, &lo) || *end != ',' || !parse_i64(end + 1, &end, &hi) || *end ||
        lo > hi) {
        fprintf(stderr, "tandem: %s: --int-range expects LO,HI with LO <= HI, got '%s'\n", cmd, v);
        return -1;
    }
    in->has_int_range = true;
    in->int_range[0] = lo, in->int_range[1] = hi;
    return 1;
}

static bool model_has_input(const tdm_model *m, const char *name) {
    for (size_t i = 0; i < tdm_model_input_count(m); i++) {
        tdm_value_desc d;
        if (!tdm_model_input(m, i, &d) && !strcmp(d.name, name)) return true;
    }
    return false;
}

int cli_inputs_check(const cli_inputs *in, const char *cmd, const tdm_model *m) {
    for (int k = 0; k < in->n_files + in->n_shapes; k++) {
        const char *name = k < in->n_files ? in->file_names[k] : in->shape_names[k - in->n_files];
        if (!model_has_input(m, name)) {
            fprintf(stderr, "tandem: %s: the model has no input named '%s'\n", cmd, name);
            return 1;
        }
    }
    return 0;
}

int cli_input_make(tdm_env *env, const cli_inputs *in, const char *cmd, const tdm_value_desc *d,
                   int64_t batch, unsigned long long index, tdm_tensor **out, bool *random,
                   bool *batch_used) {
    char why[512];
    for (int k = 0; k < in->n_files; k++)
        if (!strcmp(in->file_names[k], d->name)) {
            if (npy_read(env, in->files[k], out, why, sizeof why)) {
                fprintf(stderr, "tandem: %s: input '%s': %s\n", cmd, d->name, why);
                return 1;
            }
            if (d->dtype == TDM_OPTIONAL && tdm_tensor_dtype(*out) != TDM_OPTIONAL) {
                tdm_tensor *opt = NULL;
                tdm_status *st = tdm_optional_create(env, *out, &opt);
                if (st) {
                    tdm_tensor_free(*out);
                    *out = NULL;
                    return cli_fail(st, d->name);
                }
                *out = opt;
            }
            *random = false;
            return 0;
        }
    if (d->dtype == TDM_SEQUENCE || d->dtype == TDM_MAP || d->dtype == TDM_OPTIONAL) {
        fprintf(stderr, "tandem: %s: input '%s' is a %s: give it with --input %s=DIR (a "
                "folder of 0.npy, 1.npy, ...)\n", cmd, d->name, tdm_dtype_name(d->dtype), d->name);
        return 1;
    }
    int64_t dims[TDM_MAX_RANK];
    int rank = d->rank < 0 ? 0 : d->rank;
    for (int j = 0; j < rank; j++) {
        dims[j] = d->dims[j] >= 0 ? d->dims[j] : j == 0 ? batch : 1;
        if (j == 0 && d->dims[j] < 0 && batch_used) *batch_used = true;
    }
    for (int k = 0; k < in->n_shapes; k++)
        if (!strcmp(in->shape_names[k], d->name)) {
            rank = cli_parse_dims(in->shape_dims[k], dims, TDM_MAX_RANK);
            if (rank < 0) {
                fprintf(stderr, "tandem: %s: bad --shape for '%s'\n", cmd, d->name);
                return 1;
            }
            if (rank > 0 && dims[0] == batch && batch_used) *batch_used = true;
        }
    tdm_status *st = tdm_tensor_create(env, d->dtype, rank, dims, out);
    if (st) return cli_fail(st, d->name);
    if (d->dtype == TDM_STRING) {
        for (int64_t e = 0; e < tdm_tensor_element_count(*out); e++)
            if ((st = tdm_tensor_set_string(*out, e, "tandem", 6))) {
                tdm_tensor_free(*out);
                *out = NULL;
                return cli_fail(st, d->name);
            }
    } else {
        cli_fill_random(*out, in->seed + index, in->has_int_range ? in->int_range : NULL);
    }
    *random = true;
    return 0;
}

void cli_note_random(FILE *f, const cli_inputs *in, const tdm_model *m, const char *cmd) {
    size_t n = tdm_model_input_count(m);
    int shown = 0;
    for (size_t i = 0; i < n; i++) {
        tdm_value_desc d;
        if (tdm_model_input(m, i, &d)) continue;
        bool from_file = false;
        for (int k = 0; k < in->n_files; k++) from_file |= !strcmp(in->file_names[k], d.name);
        if (from_file) continue;
        char vals[96];
        fprintf(f, "%s%s (%s %s)", shown++ ? ", " : "random inputs: ", d.name,
                tdm_dtype_name(d.dtype),
                cli_random_values(d.dtype, in->has_int_range ? in->int_range : NULL, vals,
                                  sizeof vals));
    }
    if (shown)
        fprintf(f, "; give real ones with --input NAME=FILE.npy%s (%s)\n",
                in->has_int_range ? "" : ", integer ranges with --int-range LO,HI", cmd);
    /* Dynamic dimensions past the batch were 1: a detector or OCR model rarely runs at 1x1,
     * and the error that follows (a Concat or a Reshape that does not fit) does not say why. */
    for (size_t i = 0; i < n; i++) {
        tdm_value_desc d;
        if (tdm_model_input(m, i, &d)) continue;
        bool given = false;
        for (int k = 0; k < in->n_files; k++) given |= !strcmp(in->file_names[k], d.name);
        for (int k = 0; k < in->n_shapes; k++) given |= !strcmp(in->shape_names[k], d.name);
        if (given) continue;
        int ones = 0;
        for (int j = 1; j < d.rank; j++)
            if (d.dims[j] < 0)
                fprintf(f, "%s%s", ones++ ? ", " : "dynamic dimensions set to 1: ",
                        d.dim_params[j] ? d.dim_params[j] : "?");
        if (ones)
            fprintf(f, " of %s; give its full shape with --shape %s:d0,d1,... (%s)\n", d.name,
                    d.name, cmd);
    }
}

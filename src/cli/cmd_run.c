#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

#define MAX_INPUTS 256

static void run_usage(FILE *f) {
    fprintf(f,
            "usage: tandem run MODEL [--input NAME=FILE.npy]... [--random] [--shape NAME:d0,d1,...]\n"
            "                  [--output-dir DIR] [--devices LIST] [--threads N] [--opt-level N]\n"
            "                  [--seed N] [--trace FILE]\n\n"
            "Runs MODEL once and prints each output's name, dtype, shape and a summary.\n"
            "  --input NAME=FILE  an input from a .npy file (repeatable)\n"
            "  --random           random data for inputs not given (dynamic dims = 1 or --shape)\n"
            "  --shape NAME:DIMS  shape of a random input with dynamic dims\n"
            "  --output-dir DIR   write each output as DIR/<name>.npy\n"
            "  --devices LIST     comma-separated devices in order of preference (default cpu)\n"
            "  --threads N        intra-op threads (default: all cores)\n"
            "  --opt-level N      0 = no graph passes, 1 = default\n"
            "  --precision P      accelerators' arithmetic: fp32 (default), tf32, fp16, bf16\n"
            "  --trace FILE       write a Chrome trace (Perfetto) of the run: kernels and copies\n"
            "                     per device on one timeline\n");
}

int cmd_run(int argc, char **argv) {
    const char *model = NULL, *outdir = NULL, *devices = NULL, *trace = NULL, *precision = NULL;
    const char *in_names[MAX_INPUTS], *in_files[MAX_INPUTS];
    const char *shape_names[MAX_INPUTS], *shape_dims[MAX_INPUTS];
    int n_in = 0, n_shapes = 0, threads = 0, opt = 1;
    bool random = false;
    unsigned long long seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            run_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--input") && has_val) {
            char *eq = strchr(argv[++i], '=');
            if (!eq || n_in == MAX_INPUTS) {
                fprintf(stderr, "tandem run: --input expects NAME=FILE.npy\n");
                return 2;
            }
            *eq = 0;
            in_names[n_in] = argv[i];
            in_files[n_in++] = eq + 1;
        } else if (!strcmp(a, "--shape") && has_val) {
            char *c = strrchr(argv[++i], ':');
            if (!c || n_shapes == MAX_INPUTS) {
                fprintf(stderr, "tandem run: --shape expects NAME:d0,d1,...\n");
                return 2;
            }
            *c = 0;
            shape_names[n_shapes] = argv[i];
            shape_dims[n_shapes++] = c + 1;
        } else if (!strcmp(a, "--trace") && has_val) {
            trace = argv[++i];
        } else if (!strcmp(a, "--random")) {
            random = true;
        } else if (!strcmp(a, "--output-dir") && has_val) {
            outdir = argv[++i];
        } else if (!strcmp(a, "--devices") && has_val) {
            devices = argv[++i];
        } else if (!strcmp(a, "--threads") && has_val) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(a, "--opt-level") && has_val) {
            opt = atoi(argv[++i]);
        } else if (!strcmp(a, "--precision") && has_val) {
            precision = argv[++i];
        } else if (!strcmp(a, "--seed") && has_val) {
            seed = strtoull(argv[++i], NULL, 10);
        } else if (a[0] == '-') {
            fprintf(stderr, "tandem run: unknown option '%s'\n", a);
            run_usage(stderr);
            return 2;
        } else if (!model) {
            model = a;
        } else {
            fprintf(stderr, "tandem run: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (!model) {
        run_usage(stderr);
        return 2;
    }
    tdm_env *env = NULL;
    tdm_session *s = NULL;
    tdm_status *st = tdm_env_create(NULL, &env);
    if (st) return cli_fail(st, "run");
    tdm_session_options so = {TDM_API_VERSION, devices, threads, opt, false};
    so.precision = precision;
    int rc = 0;
    size_t n_model_in = 0, n_out = 0;
    tdm_tensor **ins = NULL, **outs = NULL;
    const char **names = NULL, **out_names = NULL;
    char why[512];
    if ((st = tdm_session_create(env, model, &so, &s))) {
        rc = cli_fail(st, NULL);
        goto done;
    }
    const tdm_model *m = tdm_session_model(s);
    n_model_in = tdm_model_input_count(m);
    n_out = tdm_model_output_count(m);
    ins = calloc(n_model_in + 1, sizeof *ins);
    names = calloc(n_model_in + 1, sizeof *names);
    outs = calloc(n_out + 1, sizeof *outs);
    out_names = calloc(n_out + 1, sizeof *out_names);
    if (!ins || !names || !outs || !out_names) {
        fprintf(stderr, "tandem: out of memory\n");
        rc = 1;
        goto done;
    }
    for (int k = 0; k < n_in; k++) {
        bool found = false;
        for (size_t i = 0; i < n_model_in; i++) {
            tdm_value_desc d;
            tdm_model_input(m, i, &d);
            if (!strcmp(d.name, in_names[k])) found = true;
        }
        if (!found) {
            fprintf(stderr, "tandem: the model has no input named '%s'\n", in_names[k]);
            rc = 1;
            goto done;
        }
    }
    for (size_t i = 0; i < n_model_in; i++) {
        tdm_value_desc d;
        tdm_model_input(m, i, &d);
        names[i] = d.name;
        const char *file = NULL;
        for (int k = 0; k < n_in; k++)
            if (!strcmp(in_names[k], d.name)) file = in_files[k];
        if (file) {
            if (npy_read(env, file, &ins[i], why, sizeof why)) {
                fprintf(stderr, "tandem: input '%s': %s\n", d.name, why);
                rc = 1;
                goto done;
            }
            continue;
        }
        if (!random) {
            fprintf(stderr, "tandem: input '%s' was not given (use --input %s=FILE.npy or --random)\n",
                    d.name, d.name);
            rc = 1;
            goto done;
        }
        int64_t dims[TDM_MAX_RANK];
        int rank = d.rank < 0 ? 0 : d.rank;
        for (int j = 0; j < rank; j++) dims[j] = d.dims[j] < 0 ? 1 : d.dims[j];
        for (int k = 0; k < n_shapes; k++)
            if (!strcmp(shape_names[k], d.name)) {
                rank = cli_parse_dims(shape_dims[k], dims, TDM_MAX_RANK);
                if (rank < 0) {
                    fprintf(stderr, "tandem: bad --shape for '%s'\n", d.name);
                    rc = 1;
                    goto done;
                }
            }
        if ((st = tdm_tensor_create(env, d.dtype, rank, dims, &ins[i]))) {
            rc = cli_fail(st, d.name);
            goto done;
        }
        cli_fill_random(ins[i], seed + i);
    }
    for (size_t j = 0; j < n_out; j++) {
        tdm_value_desc d;
        tdm_model_output(m, j, &d);
        out_names[j] = d.name;
    }
    if (trace && (st = tdm_session_trace_start(s))) {
        rc = cli_fail(st, NULL);
        goto done;
    }
    st = tdm_session_run(s, n_model_in, names, (const tdm_tensor *const *)ins, n_out, out_names, outs);
    if (trace) {
        tdm_status *st2 = tdm_session_trace_stop(s, st ? NULL : trace);
        if (!st && st2) {
            rc = cli_fail(st2, "trace");
            goto done;
        }
        tdm_status_free(st2);
    }
    if (st) {
        rc = cli_fail(st, NULL);
        goto done;
    }
    if (outdir) mkdir(outdir, 0755);
    for (size_t j = 0; j < n_out; j++) {
        cli_print_summary(stdout, out_names[j], outs[j]);
        if (outdir) {
            char path[4096], safe[256];
            snprintf(safe, sizeof safe, "%s", out_names[j]);
            for (char *c = safe; *c; c++)
                if (*c == '/' || *c == '\\' || *c == ':') *c = '_';
            snprintf(path, sizeof path, "%s/%s.npy", outdir, safe);
            if (npy_write(path, outs[j], why, sizeof why)) {
                fprintf(stderr, "tandem: %s\n", why);
                rc = 1;
            }
        }
    }
done:
    for (size_t i = 0; ins && i < n_model_in; i++) tdm_tensor_free(ins[i]);
    for (size_t j = 0; outs && j < n_out; j++) tdm_tensor_free(outs[j]);
    free(ins);
    free(outs);
    free(names);
    free(out_names);
    tdm_session_free(s);
    tdm_env_free(env);
    return rc;
}

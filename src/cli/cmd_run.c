#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static void run_usage(FILE *f) {
    fprintf(f,
            "usage: tandem run MODEL [--input NAME=FILE.npy]... [--random] [--shape NAME:d0,d1,...]\n"
            "                  [--seed N] [--int-range LO,HI] [--output-dir DIR] [--devices LIST]\n"
            "                  [--threads N] [--opt-level N] [--precision P] [--trace FILE]\n"
            "                  [--device-memory DEV=SIZE[,DEV=SIZE]] [--residency LIST]\n"
            "                  [--placement auto|first|DEVICE]\n\n"
            "Runs MODEL once and prints each output's name, dtype, shape and a summary.\n"
            "  --input NAME=FILE  an input from a .npy file (repeatable)\n"
            "  --random           random data for inputs not given (dynamic dims = 1 or --shape)\n"
            "  --shape NAME:DIMS  shape of a random input with dynamic dims\n"
            "  --seed N           seed of the random inputs (default 1; input i uses N + i)\n"
            "  --int-range LO,HI  random integers in [LO, HI] (default: [0, 1] for int32/int64,\n"
            "                     [0, 7] for the other integers, [0, 255] for uint8); floats are\n"
            "                     in [-1, 1)\n"
            "  --output-dir DIR   write each output as DIR/FILE.npy, FILE being the output's name\n"
            "                     with '/', '\\\\' and ':' replaced by '_'; DIR/names.json maps\n"
            "                     each FILE.npy to its output's name. DIR and its parents are\n"
            "                     created before the model runs. String tensors are numpy 'U'\n"
            "                     arrays (UTF-32), in and out ('S' byte arrays are read too)\n"
            "  --devices LIST     comma-separated devices in order of preference (default cpu)\n"
            "  --threads N        intra-op threads (default: all cores)\n"
            "  --opt-level N      0 = no graph passes, 1 = default\n"
            "  --precision P      arithmetic: fp32 (default), tf32, fp16, bf16 (cpu: fp32,\n"
            "                     or bf16 with AVX512_BF16 / AMX)\n"
            "  --trace FILE       write a Chrome trace (Perfetto) of the run: kernels and copies\n"
            "                     per device on one timeline\n"
            "  --device-memory B  memory budgets, e.g. cuda:0=8GiB or test:0=24MiB or test:0=25%%\n"
            "                     (of the weights placed there): weights over it are streamed or\n"
            "                     their layers run on the CPU (see tandem plan); the device's\n"
            "                     memory peak is printed after the run\n"
            "  --placement P      auto (default: the cost model), first, or a device name (that\n"
            "                     device, the others only for what it cannot run)\n"
            "  --residency LIST   mapped (external data read from disk in place), streamed or\n"
            "                     layers (force the plan over a budget), window=K\n");
}

typedef struct run_args {
    const char *model, *outdir, *devices, *trace, *precision, *device_memory, *residency;
    const char *placement;
    cli_inputs in;
    int threads, opt;
    bool random;
} run_args;

/* Parses the command line; -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, run_args *a) {
    cli_inputs_init(&a->in);
    a->opt = 1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        bool has_val = i + 1 < argc;
        int took = cli_inputs_option(&a->in, "run", argc, argv, &i);
        if (took < 0) return 2;
        if (took) continue;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            run_usage(stdout);
            return 0;
        } else if (!strcmp(o, "--trace") && has_val) {
            a->trace = argv[++i];
        } else if (!strcmp(o, "--random")) {
            a->random = true;
        } else if (!strcmp(o, "--output-dir") && has_val) {
            a->outdir = argv[++i];
        } else if (!strcmp(o, "--devices") && has_val) {
            a->devices = argv[++i];
        } else if (!strcmp(o, "--threads") && has_val) {
            a->threads = atoi(argv[++i]);
        } else if (!strcmp(o, "--opt-level") && has_val) {
            a->opt = atoi(argv[++i]);
        } else if (!strcmp(o, "--precision") && has_val) {
            a->precision = argv[++i];
        } else if (!strcmp(o, "--device-memory") && has_val) {
            a->device_memory = argv[++i];
        } else if (!strcmp(o, "--residency") && has_val) {
            a->residency = argv[++i];
        } else if (!strcmp(o, "--placement") && has_val) {
            a->placement = argv[++i];
        } else if (o[0] == '-') {
            fprintf(stderr, "tandem run: unknown option '%s'\n", o);
            run_usage(stderr);
            return 2;
        } else if (!a->model) {
            a->model = o;
        } else {
            fprintf(stderr, "tandem run: unexpected argument '%s'\n", o);
            return 2;
        }
    }
    if (!a->model) {
        run_usage(stderr);
        return 2;
    }
    return -1;
}

/* mkdir -p: 0, or -1 with errno set. */
static int make_dirs(const char *path) {
    char buf[4096];
    int n = snprintf(buf, sizeof buf, "%s", path);
    if (n <= 0 || (size_t)n >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST) return -1;
    struct stat st;
    if (stat(buf, &st) || !S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* A JSON string (names.json). */
static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* Writes each output as DIR/FILE.npy and DIR/names.json. 0 or 1 after a message. */
static int write_outputs(const char *dir, size_t n, const char **names, tdm_tensor **outs) {
    char path[4096], why[512];
    snprintf(path, sizeof path, "%s/names.json", dir);
    FILE *map = fopen(path, "w");
    if (!map) {
        fprintf(stderr, "tandem: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    int rc = 0;
    fputc('{', map);
    for (size_t j = 0; j < n; j++) {
        char safe[256];
        snprintf(safe, sizeof safe, "%s", names[j]);
        for (char *c = safe; *c; c++)
            if (*c == '/' || *c == '\\' || *c == ':') *c = '_';
        snprintf(path, sizeof path, "%s/%s.npy", dir, safe);
        if (npy_write(path, outs[j], why, sizeof why)) {
            fprintf(stderr, "tandem: %s\n", why);
            rc = 1;
        }
        snprintf(path, sizeof path, "%s.npy", safe);
        fprintf(map, "%s\n  ", j ? "," : "");
        json_string(map, path);
        fputs(": ", map);
        json_string(map, names[j]);
    }
    fputs("\n}\n", map);
    if (fclose(map)) {
        fprintf(stderr, "tandem: cannot write %s/names.json\n", dir);
        rc = 1;
    }
    return rc;
}

/* Makes every input (file or random). 0 or an exit code after a message. */
static int make_inputs(tdm_env *env, const run_args *a, const tdm_model *m, const char **names,
                       tdm_tensor **ins) {
    if (cli_inputs_check(&a->in, "run", m)) return 1;
    for (size_t i = 0; i < tdm_model_input_count(m); i++) {
        tdm_value_desc d;
        tdm_model_input(m, i, &d);
        names[i] = d.name;
        bool given = false;
        for (int k = 0; k < a->in.n_files; k++) given |= !strcmp(a->in.file_names[k], d.name);
        if (!given && !a->random) {
            fprintf(stderr, "tandem: input '%s' was not given (use --input %s=FILE.npy or --random)\n",
                    d.name, d.name);
            return 1;
        }
        bool random;
        int rc = cli_input_make(env, &a->in, "run", &d, 1, i, &ins[i], &random, NULL);
        if (rc) return rc;
    }
    return 0;
}

/* Runs once (with a trace when asked). 0 or an exit code after a message. */
static int run_once(tdm_session *s, const run_args *a, size_t n_in, const char **names,
                    tdm_tensor **ins, size_t n_out, const char **out_names, tdm_tensor **outs) {
    tdm_status *st;
    if (a->trace && (st = tdm_session_trace_start(s))) return cli_fail(st, NULL);
    st = tdm_session_run(s, n_in, names, (const tdm_tensor *const *)ins, n_out, out_names, outs);
    if (a->trace) {
        tdm_status *st2 = tdm_session_trace_stop(s, st ? NULL : a->trace);
        if (!st && st2) return cli_fail(st2, "trace");
        tdm_status_free(st2);
    }
    if (st) {
        int rc = cli_fail(st, NULL);
        cli_note_random(stderr, &a->in, tdm_session_model(s), "run");
        return rc;
    }
    return 0;
}

int cmd_run(int argc, char **argv) {
    run_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    if (a.outdir && make_dirs(a.outdir)) { /* before the model runs: fail early */
        fprintf(stderr, "tandem: --output-dir '%s': %s\n", a.outdir, strerror(errno));
        return 1;
    }
    tdm_env *env = NULL;
    tdm_session *s = NULL;
    tdm_status *st = tdm_env_create(NULL, &env);
    if (st) return cli_fail(st, "run");
    tdm_session_options so = {TDM_API_VERSION, a.devices, a.threads, a.opt, false};
    so.precision = a.precision;
    so.device_memory = a.device_memory;
    so.residency = a.residency;
    so.placement = a.placement;
    rc = 0;
    size_t n_in = 0, n_out = 0;
    tdm_tensor **ins = NULL, **outs = NULL;
    const char **names = NULL, **out_names = NULL;
    if ((st = tdm_session_create(env, a.model, &so, &s))) {
        rc = cli_fail(st, NULL);
        goto done;
    }
    const tdm_model *m = tdm_session_model(s);
    n_in = tdm_model_input_count(m);
    n_out = tdm_model_output_count(m);
    ins = calloc(n_in + 1, sizeof *ins);
    names = calloc(n_in + 1, sizeof *names);
    outs = calloc(n_out + 1, sizeof *outs);
    out_names = calloc(n_out + 1, sizeof *out_names);
    if (!ins || !names || !outs || !out_names) {
        fprintf(stderr, "tandem: out of memory\n");
        rc = 1;
        goto done;
    }
    if ((rc = make_inputs(env, &a, m, names, ins))) goto done;
    for (size_t j = 0; j < n_out; j++) {
        tdm_value_desc d;
        tdm_model_output(m, j, &d);
        out_names[j] = d.name;
    }
    if ((rc = run_once(s, &a, n_in, names, ins, n_out, out_names, outs))) goto done;
    for (size_t j = 0; j < n_out; j++) cli_print_summary(stdout, out_names[j], outs[j]);
    if (a.device_memory) cli_print_memory_peaks(stderr, s);
    if (a.outdir) rc = write_outputs(a.outdir, n_out, out_names, outs);
done:
    for (size_t i = 0; ins && i < n_in; i++) tdm_tensor_free(ins[i]);
    for (size_t j = 0; outs && j < n_out; j++) tdm_tensor_free(outs[j]);
    free(ins);
    free(outs);
    free(names);
    free(out_names);
    tdm_session_free(s);
    tdm_env_free(env);
    return rc;
}

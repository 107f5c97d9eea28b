/* Runs ONNX backend node tests: DIR/test_NAME/model.onnx with test_data_set_N/input_N.pb and
 * output_N.pb. Each test runs in a child process so that a crash is reported as a failure of
 * that test and the run goes on. */
#include <dirent.h>
#include <regex.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

#define DEFAULT_DIR "/usr/share/libonnx-testdata/data/node"

typedef enum { R_PASS = 'P', R_FAIL = 'F', R_SKIP = 'S' } result;

typedef struct conf_opts {
    const char *devices;
    double rtol, atol;
    int opt_level;
    const char *placement;
    const char *precision;
} conf_opts;

static bool file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Replaces a uint16 tensor by a bfloat16 copy with the same bits. */
static void reinterpret_bf16(tdm_env *env, tdm_tensor **t) {
    tdm_tensor *n = NULL;
    if (tdm_tensor_create(env, TDM_BFLOAT16, tdm_tensor_rank(*t), tdm_tensor_dims(*t), &n)) return;
    memcpy(tdm_tensor_data(n), tdm_tensor_data(*t), tdm_tensor_byte_size(*t));
    tdm_tensor_free(*t);
    *t = n;
}

/* A test is skipped when its data is not tensors (sequence/optional/map protos): tandem runs
 * tensor graphs. Such files fail to parse as TensorProto with specific fields; we detect them
 * by the loader's answer. */
static result run_one(const char *dir, const conf_opts *o, char *why, size_t why_size) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    tdm_env *env = NULL;
    tdm_session *s = NULL;
    result r = R_PASS;
    tdm_status *st = tdm_env_create(NULL, &env);
    tdm_session_options so = {TDM_API_VERSION, o->devices, 1, o->opt_level,
                              o->devices && strchr(o->devices, ',') == NULL, o->placement};
    so.precision = o->precision;
    if (!st) st = tdm_session_create(env, path, &so, &s);
    if (st) {
        const char *msg = tdm_status_message(st);
        r = (strstr(msg, "sequence type") || strstr(msg, "optional type") || strstr(msg, "map type") ||
             strstr(msg, "sparse tensor type"))
                ? R_SKIP
                : R_FAIL;
        snprintf(why, why_size, "[%s] %s", tdm_code_name(tdm_status_code(st)), msg);
        tdm_status_free(st);
        tdm_env_free(env);
        return r;
    }
    const tdm_model *m = tdm_session_model(s);
    size_t n_in = tdm_model_input_count(m), n_out = tdm_model_output_count(m);
    int sets = 0;
    for (int set = 0; r == R_PASS; set++) {
        char sd[4096];
        snprintf(sd, sizeof sd, "%.4000s/test_data_set_%d", dir, set);
        if (!file_exists(sd)) break;
        sets++;
        tdm_tensor *ins[64] = {0}, *outs[64] = {0}, *want[64] = {0};
        const char *names[64], *onames[64];
        size_t given = 0;
        if (n_in > 64 || n_out > 64) {
            snprintf(why, why_size, "too many inputs/outputs");
            r = R_FAIL;
            break;
        }
        for (size_t i = 0; i < n_in && r == R_PASS; i++) {
            snprintf(path, sizeof path, "%.4000s/input_%zu.pb", sd, i);
            if (!file_exists(path)) continue; /* optional input left out */
            tdm_value_desc d;
            tdm_model_input(m, i, &d);
            if ((st = tdm_value_load_onnx(env, path, d.dtype, &ins[given]))) {
                snprintf(why, why_size, "input %zu: %s", i, tdm_status_message(st));
                tdm_status_free(st);
                r = R_SKIP; /* not a TensorProto (sequence/optional data) */
                break;
            }
            /* ONNX 1.12's test data stores bfloat16 tensors as uint16 (numpy has no bfloat16) */
            if (d.dtype == TDM_BFLOAT16 && tdm_tensor_dtype(ins[given]) == TDM_UINT16)
                reinterpret_bf16(env, &ins[given]);
            names[given++] = d.name;
        }
        for (size_t j = 0; j < n_out && r == R_PASS; j++) {
            tdm_value_desc d;
            tdm_model_output(m, j, &d);
            onames[j] = d.name;
            snprintf(path, sizeof path, "%.4000s/output_%zu.pb", sd, j);
            if ((st = tdm_value_load_onnx(env, path, d.dtype, &want[j]))) {
                snprintf(why, why_size, "output %zu: %s", j, tdm_status_message(st));
                tdm_status_free(st);
                r = R_SKIP;
            }
        }
        if (r == R_PASS) {
            st = tdm_session_run(s, given, names, (const tdm_tensor *const *)ins, n_out, onames, outs);
            if (st) {
                snprintf(why, why_size, "[%s] %s", tdm_code_name(tdm_status_code(st)),
                         tdm_status_message(st));
                tdm_status_free(st);
                r = R_FAIL;
            }
        }
        for (size_t j = 0; j < n_out && r == R_PASS; j++) {
            char w[400];
            if (tdm_tensor_dtype(outs[j]) == TDM_BFLOAT16 && tdm_tensor_dtype(want[j]) == TDM_UINT16)
                reinterpret_bf16(env, &want[j]);
            if (!cli_compare(outs[j], want[j], o->rtol, o->atol, w, sizeof w)) {
                snprintf(why, why_size, "output '%s': %s", onames[j], w);
                r = R_FAIL;
            }
        }
        for (size_t i = 0; i < 64; i++) {
            tdm_tensor_free(ins[i]);
            tdm_tensor_free(outs[i]);
            tdm_tensor_free(want[i]);
        }
    }
    if (r == R_PASS && sets == 0) {
        snprintf(why, why_size, "no test_data_set_*");
        r = R_SKIP;
    }
    tdm_session_free(s);
    tdm_env_free(env);
    return r;
}

static result run_forked(const char *dir, const conf_opts *o, int timeout_s, char *why,
                         size_t why_size) {
    int fds[2];
    if (pipe(fds) != 0) return run_one(dir, o, why, why_size);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return run_one(dir, o, why, why_size);
    }
    if (pid == 0) {
        close(fds[0]);
        alarm((unsigned)timeout_s);
        char msg[1024] = "";
        result r = run_one(dir, o, msg, sizeof msg);
        char c = (char)r;
        ssize_t w = write(fds[1], &c, 1);
        w = write(fds[1], msg, strlen(msg));
        (void)w;
        close(fds[1]);
        _exit(0);
    }
    close(fds[1]);
    char buf[1100];
    size_t got = 0;
    ssize_t n;
    while (got < sizeof buf - 1 && (n = read(fds[0], buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)n;
    close(fds[0]);
    buf[got] = 0;
    int status = 0;
    waitpid(pid, &status, 0);
    if (got == 0) {
        if (WIFSIGNALED(status))
            snprintf(why, why_size, "crashed (signal %d%s)", WTERMSIG(status),
                     WTERMSIG(status) == SIGALRM ? ": timed out" : "");
        else
            snprintf(why, why_size, "child exited with status %d and no result", WEXITSTATUS(status));
        return R_FAIL;
    }
    snprintf(why, why_size, "%s", buf + 1);
    if (WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0)) {
        snprintf(why, why_size, "crashed after reporting (%.900s)", buf + 1);
        return R_FAIL;
    }
    return (result)buf[0];
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void conf_usage(FILE *f) {
    fprintf(f,
            "usage: tandem conformance [DIR] [--devices LIST] [--filter REGEX] [--expect FILE]\n"
            "                          [--list-passing FILE] [--verbose] [--no-fork]\n"
            "                          [--rtol X] [--atol X] [--timeout S] [--opt-level N]\n"
            "                          [--placement auto|first|DEVICE]\n"
            "                          [--precision fp32|tf32|fp16|bf16]\n\n"
            "Runs the ONNX backend node tests in DIR (default %s):\n"
            "one line per failure, then 'N passed, N failed, N skipped'.\n"
            "  --devices LIST       devices to run on, in order of preference (default cpu)\n"
            "  --filter REGEX       only the tests whose folder name matches (extended regex)\n"
            "  --expect FILE        tests (one name a line) that must pass; any of them failing\n"
            "                       makes the exit status non-zero\n"
            "  --list-passing FILE  write the names of the passing tests\n"
            "  --verbose            also print a line for each passing and skipped test\n"
            "  --no-fork            run the tests in this process (default: each in a child, so\n"
            "                       that a crash or a hang fails one test)\n"
            "  --rtol X             relative tolerance: |got - want| <= atol + rtol * |want|\n"
            "                       (default 1e-3; float16/bfloat16 1e-2); integers are exact\n"
            "  --atol X             absolute tolerance (default 1e-5; float16/bfloat16 1e-3)\n"
            "  --timeout S          seconds a forked test may take (default 120)\n"
            "  --opt-level N        0 = no graph passes, 1 = default\n"
            "  --placement P        auto (cost model), first (the first device that can), or a\n"
            "                       device name\n"
            "  --precision P        arithmetic: fp32 (default), tf32, fp16, bf16 (cpu: fp32,\n"
            "                       or bf16 with AVX512_BF16 / AMX)\n",
            DEFAULT_DIR);
}

int cmd_conformance(int argc, char **argv) {
    const char *dir = DEFAULT_DIR, *filter = NULL, *expect = NULL, *list_out = NULL;
    conf_opts o = {"cpu", 1e-3, 1e-5, 1, NULL};
    bool verbose = false, fork_tests = true;
    int timeout_s = 120;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool v = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            conf_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--devices") && v) o.devices = argv[++i];
        else if (!strcmp(a, "--filter") && v) filter = argv[++i];
        else if (!strcmp(a, "--expect") && v) expect = argv[++i];
        else if (!strcmp(a, "--list-passing") && v) list_out = argv[++i];
        else if (!strcmp(a, "--rtol") && v) o.rtol = atof(argv[++i]);
        else if (!strcmp(a, "--atol") && v) o.atol = atof(argv[++i]);
        else if (!strcmp(a, "--timeout") && v) timeout_s = atoi(argv[++i]);
        else if (!strcmp(a, "--opt-level") && v) o.opt_level = atoi(argv[++i]);
        else if (!strcmp(a, "--placement") && v) o.placement = argv[++i];
        else if (!strcmp(a, "--precision") && v) o.precision = argv[++i];
        else if (!strcmp(a, "--verbose")) verbose = true;
        else if (!strcmp(a, "--no-fork")) fork_tests = false;
        else if (a[0] == '-') {
            fprintf(stderr, "tandem conformance: unknown option '%s'\n", a);
            conf_usage(stderr);
            return 2;
        } else dir = a;
    }
    regex_t re;
    if (filter && regcomp(&re, filter, REG_EXTENDED | REG_NOSUB) != 0) {
        fprintf(stderr, "tandem conformance: bad --filter regex '%s'\n", filter);
        return 2;
    }
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "tandem conformance: cannot open '%s' (install libonnx-testdata?)\n", dir);
        if (filter) regfree(&re);
        return 1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        /* a test is any sub-folder holding a model.onnx */
        if (e->d_name[0] == '.') continue;
        char mp[4096];
        snprintf(mp, sizeof mp, "%s/%s/model.onnx", dir, e->d_name);
        if (!file_exists(mp)) continue;
        if (filter && regexec(&re, e->d_name, 0, NULL, 0) != 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) break;
            names = nn;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (filter) regfree(&re);
    if (n > 1) qsort(names, n, sizeof *names, cmp_str); /* (names is NULL when nothing matched) */

    char **expected = NULL;
    size_t n_exp = 0;
    if (expect) {
        FILE *f = fopen(expect, "r");
        if (!f) {
            fprintf(stderr, "tandem conformance: cannot read '%s'\n", expect);
            return 1;
        }
        char line[512];
        size_t ecap = 0;
        while (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\r\n ")] = 0;
            if (!line[0] || line[0] == '#') continue;
            if (n_exp == ecap) {
                ecap = ecap ? ecap * 2 : 256;
                expected = realloc(expected, ecap * sizeof *expected);
            }
            expected[n_exp++] = strdup(line);
        }
        fclose(f);
    }
    FILE *lf = list_out ? fopen(list_out, "w") : NULL;
    int passed = 0, failed = 0, skipped = 0, regressions = 0;
    bool *ran_pass = calloc(n_exp + 1, sizeof(bool));
    for (size_t i = 0; i < n; i++) {
        char full[4096], why[1100] = "";
        snprintf(full, sizeof full, "%s/%s", dir, names[i]);
        result r = fork_tests ? run_forked(full, &o, timeout_s, why, sizeof why)
                              : run_one(full, &o, why, sizeof why);
        if (r == R_PASS) {
            passed++;
            if (verbose) printf("PASS %s\n", names[i]);
            if (lf) fprintf(lf, "%s\n", names[i]);
            for (size_t k = 0; k < n_exp; k++)
                if (!strcmp(expected[k], names[i])) ran_pass[k] = true;
        } else if (r == R_SKIP) {
            skipped++;
            if (verbose) printf("SKIP %s: %s\n", names[i], why);
        } else {
            failed++;
            printf("FAIL %s: %s\n", names[i], why);
        }
        fflush(stdout);
    }
    for (size_t k = 0; k < n_exp; k++) {
        bool listed = false;
        for (size_t i = 0; i < n; i++)
            if (!strcmp(names[i], expected[k])) listed = true;
        if (listed && !ran_pass[k]) {
            printf("REGRESSION %s: expected to pass\n", expected[k]);
            regressions++;
        }
    }
    if (lf) fclose(lf);
    if (expect) printf("%d regressions against %s\n", regressions, expect);
    if (n == 0) fprintf(stderr, "tandem conformance: no tests found in '%s'%s\n", dir,
                        filter ? " matching the filter" : "");
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    for (size_t k = 0; k < n_exp; k++) free(expected[k]);
    free(expected);
    free(ran_pass);
    if (n == 0) return 1;
    if (expect) return regressions ? 1 : 0;
    return failed ? 1 : 0;
}

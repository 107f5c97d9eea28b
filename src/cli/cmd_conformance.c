/* Runs ONNX backend node tests: DIR/test_NAME/model.onnx with test_data_set_N/input_N.pb and
 * output_N.pb. The tests run in a child process, one after the other on one environment (its
 * devices made once: an OpenCL or CUDA context costs 50-300 ms, more than most tests), which
 * reports each result through a pipe; a crash or a hang is reported as a failure of the test
 * it happened in, and a new child goes on with the next test. */
#include <dirent.h>
#include <errno.h>
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
static result run_one(tdm_env *env, const char *dir, const conf_opts *o, char *why, size_t why_size) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    tdm_session *s = NULL;
    result r = R_PASS;
    tdm_session_options so = {TDM_API_VERSION, o->devices, 1, o->opt_level,
                              o->devices && strchr(o->devices, ',') == NULL, o->placement};
    so.precision = o->precision;
    tdm_status *st = tdm_session_create(env, path, &so, &s);
    if (st) {
        const char *msg = tdm_status_message(st);
        r = (strstr(msg, "sequence type") || strstr(msg, "optional type") || strstr(msg, "map type") ||
             strstr(msg, "sparse tensor type"))
                ? R_SKIP
                : R_FAIL;
        snprintf(why, why_size, "[%s] %s", tdm_code_name(tdm_status_code(st)), msg);
        tdm_status_free(st);
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
    return r;
}

/* One test's result on the pipe: the result byte, the message's length (4 bytes), the message. */
static bool put_result(int fd, result r, const char *msg) {
    char head[5] = {(char)r};
    uint32_t len = (uint32_t)strlen(msg);
    memcpy(head + 1, &len, 4);
    return write(fd, head, 5) == 5 && write(fd, msg, len) == (ssize_t)len;
}

static bool read_full(int fd, void *buf, size_t n) {
    for (size_t got = 0; got < n;) {
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        got += (size_t)k;
    }
    return true;
}

/* Runs tests [from, n) in turn on one environment, each result through report(). */
typedef void (*report_fn)(void *user, size_t i, result r, const char *why);

static void run_range(char *const *names, size_t from, size_t n, const char *dir, const conf_opts *o,
                      int timeout_s, report_fn report, void *user) {
    tdm_env *env = NULL;
    if (timeout_s > 0) alarm((unsigned)timeout_s); /* (a device that hangs at start-up) */
    tdm_status *st = tdm_env_create(NULL, &env);
    char env_why[1100] = "";
    if (st) {
        snprintf(env_why, sizeof env_why, "[%s] %s", tdm_code_name(tdm_status_code(st)),
                 tdm_status_message(st));
        tdm_status_free(st);
    }
    for (size_t i = from; i < n; i++) {
        char full[4096], why[1100] = "";
        snprintf(full, sizeof full, "%s/%s", dir, names[i]);
        if (timeout_s > 0) alarm((unsigned)timeout_s);
        result r = env ? run_one(env, full, o, why, sizeof why) : R_FAIL;
        if (timeout_s > 0) alarm(0);
        report(user, i, r, env ? why : env_why);
    }
    tdm_env_free(env);
}

static void report_to_pipe(void *user, size_t i, result r, const char *why) { /* user: the fd */
    (void)i;
    if (!put_result(*(int *)user, r, why)) _exit(3); /* the parent is gone */
}

/* The parent's side of a child running [from, n): each result it reports goes to report();
 * returns how many tests are done. A child that died before reporting them all failed the test
 * after the last one reported (its signal as the reason); one that failed after reporting
 * them all (freeing the environment) is reported with the index SIZE_MAX. */
static size_t wait_child(pid_t pid, int fd, size_t from, size_t n, report_fn report, void *user) {
    size_t i = from;
    for (; i < n; i++) {
        char head[5];
        uint32_t len;
        if (!read_full(fd, head, 5)) break;
        memcpy(&len, head + 1, 4);
        char why[1100];
        size_t keep = len < sizeof why - 1 ? len : sizeof why - 1;
        if (!read_full(fd, why, keep)) break;
        for (uint32_t k = (uint32_t)keep; k < len; k++) { /* (longer than printed: skipped) */
            char c;
            if (!read_full(fd, &c, 1)) break;
        }
        why[keep] = 0;
        report(user, i, (result)head[0], why);
    }
    close(fd);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    char why[200];
    if (WIFSIGNALED(status))
        snprintf(why, sizeof why, "crashed (signal %d%s)", WTERMSIG(status),
                 WTERMSIG(status) == SIGALRM ? ": timed out" : "");
    else if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
        snprintf(why, sizeof why, "the test process exited with status %d", WEXITSTATUS(status));
    else if (i < n)
        snprintf(why, sizeof why, "the test process ended without a result");
    else
        return i - from;
    if (i < n) {
        report(user, i, R_FAIL, why);
        return i + 1 - from;
    }
    report(user, SIZE_MAX, R_FAIL, why);
    return i - from;
}

/* Runs every test: in child processes (a new one after a crash), each test in a child of its
 * own (fork_each: a fresh environment every test), or in this process. */
static void run_all(char *const *names, size_t n, const char *dir, const conf_opts *o, int timeout_s,
                    bool fork_tests, bool fork_each, report_fn report, void *user) {
    if (!fork_tests) {
        run_range(names, 0, n, dir, o, 0, report, user);
        return;
    }
    for (size_t i = 0; i < n;) {
        size_t to = fork_each ? i + 1 : n;
        int fds[2];
        fflush(stdout);
        pid_t pid = pipe(fds) == 0 ? fork() : -1;
        if (pid < 0) { /* no child: the rest in this process */
            run_range(names, i, n, dir, o, 0, report, user);
            return;
        }
        if (pid == 0) {
            close(fds[0]);
            signal(SIGPIPE, SIG_IGN);
            run_range(names, i, to, dir, o, timeout_s, report_to_pipe, &fds[1]);
            close(fds[1]);
            _exit(0);
        }
        close(fds[1]);
        size_t done = wait_child(pid, fds[0], i, to, report, user);
        i += done ? done : 1;
    }
}

/* The results as they come: counts, lines, the passing tests. */
typedef struct tally {
    char *const *names;
    size_t n;
    char *const *expected;
    size_t n_exp;
    bool *ran_pass; /* expected[k] passed */
    FILE *lf;       /* --list-passing */
    bool verbose;
    int passed, failed, skipped;
} tally;

static void tally_result(void *user, size_t i, result r, const char *why) {
    tally *t = user;
    if (i >= t->n) { /* SIZE_MAX: the test process failed after its last test */
        t->failed++;
        printf("FAIL (after the last test): %s\n", why);
    } else if (r == R_PASS) {
        t->passed++;
        if (t->verbose) printf("PASS %s\n", t->names[i]);
        if (t->lf) fprintf(t->lf, "%s\n", t->names[i]);
        for (size_t k = 0; k < t->n_exp; k++)
            if (!strcmp(t->expected[k], t->names[i])) t->ran_pass[k] = true;
    } else if (r == R_SKIP) {
        t->skipped++;
        if (t->verbose) printf("SKIP %s: %s\n", t->names[i], why);
    } else {
        t->failed++;
        printf("FAIL %s: %s\n", t->names[i], why);
    }
    fflush(stdout);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void conf_usage(FILE *f) {
    fprintf(f,
            "usage: tandem conformance [DIR] [--devices LIST] [--filter REGEX] [--expect FILE]\n"
            "                          [--list-passing FILE] [--verbose] [--no-fork | --fork-each]\n"
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
            "  --no-fork            run the tests in this process (default: in a child process,\n"
            "                       one after the other on one set of devices; a crash or a hang\n"
            "                       fails the test it happened in, and a new child goes on)\n"
            "  --fork-each          each test in a child of its own, with its own devices\n"
            "  --rtol X             relative tolerance: |got - want| <= atol + rtol * |want|\n"
            "                       (default 1e-3; float16/bfloat16 1e-2); integers are exact\n"
            "  --atol X             absolute tolerance (default 1e-5; float16/bfloat16 1e-3)\n"
            "  --timeout S          seconds a test may take in a child (default 120)\n"
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
    bool verbose = false, fork_tests = true, fork_each = false;
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
        else if (!strcmp(a, "--fork-each")) fork_each = true;
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
    tally t = {names, n, expected, n_exp, calloc(n_exp + 1, sizeof(bool)),
               list_out ? fopen(list_out, "w") : NULL, verbose};
    run_all(names, n, dir, &o, timeout_s, fork_tests, fork_each, tally_result, &t);
    FILE *lf = t.lf;
    bool *ran_pass = t.ran_pass;
    int passed = t.passed, failed = t.failed, skipped = t.skipped, regressions = 0;
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

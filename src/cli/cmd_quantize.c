/* tandem quantize: post-training INT8 quantization (include/tandem/quantize.h) with an
 * accuracy report of the quantized model against the float one. Public API only. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "tandem/quantize.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem quantize MODEL --output OUT.onnx [options]\n\n"
            "Writes an ONNX QDQ model (QuantizeLinear/DequantizeLinear around Conv, MatMul, Gemm,\n"
            "Add, Mul, Concat and pooling; int8 weights) calibrated on sample inputs, and reports\n"
            "its accuracy against the float model.\n\n"
            "  --output OUT.onnx         the quantized model (required)\n"
            "  --calibration DIR         one subfolder per sample holding INPUT_NAME.npy for each\n"
            "                            model input ('/' and ':' in names read as '_')\n"
            "  --validate DIR            held-out samples (same layout) for the accuracy report\n"
            "  --method M                minmax (default), percentile, entropy (KL divergence)\n"
            "  --percentile P            kept share for --method percentile (default 99.999)\n"
            "  --per-channel             one weight scale per output channel (default)\n"
            "  --per-tensor              one weight scale per weight tensor\n"
            "  --activation-type T       uint8 (default, asymmetric) or int8\n"
            "  --reduce-range            7-bit weights ([-64, 64]): for CPUs without VNNI (AVX2,\n"
            "                            AVX-512 before Cascade Lake), whose int8 kernels add\n"
            "                            pairs of products in saturating 16-bit lanes\n"
            "  --exclude PATTERN         keep nodes in float: an op type, /REGEX/ on node names or\n"
            "                            #FIRST-LAST node positions; repeatable, or comma-separated\n"
            "  --mode static|dynamic     dynamic: int8 weights, activations quantized per run\n"
            "                            (MatMul/Gemm: DynamicQuantizeLinear + MatMulInteger)\n"
            "  --report                  per-node sensitivity: the error when only that node is\n"
            "                            quantized, worst first\n"
            "  --target-cosine X         keep the most sensitive nodes in float until every\n"
            "                            output's cosine similarity reaches X\n"
            "  --max-samples N           use at most N samples of each folder\n"
            "  --threads N               intra-op threads\n"
            "  --json                    machine-readable report on stdout\n");
}

/* ---- samples ---- */

typedef struct sample_set {
    const char *dir;
    size_t n;             /* samples */
    size_t n_inputs;
    char **names;         /* sample folder names */
    tdm_tensor **t;       /* n x n_inputs */
} sample_set;

static void samples_free(sample_set *s) {
    for (size_t i = 0; s->t && i < s->n * s->n_inputs; i++) tdm_tensor_free(s->t[i]);
    for (size_t i = 0; s->names && i < s->n; i++) free(s->names[i]);
    free(s->t);
    free(s->names);
    memset(s, 0, sizeof *s);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool shape_fits(const tdm_value_desc *d, const tdm_tensor *t) {
    if (d->rank < 0) return true;
    if (tdm_tensor_rank(t) != d->rank) return false;
    for (int k = 0; k < d->rank; k++)
        if (d->dims[k] >= 0 && d->dims[k] != tdm_tensor_dims(t)[k]) return false;
    return true;
}

/* Reads DIR/<sample>/<input>.npy for every model input; 0 or 1 after a message. */
static int samples_read(tdm_env *env, const tdm_model *m, const char *what, const char *dir,
                        size_t max_samples, sample_set *s) {
    memset(s, 0, sizeof *s);
    s->dir = dir;
    s->n_inputs = tdm_model_input_count(m);
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "tandem quantize: %s folder '%s': %s\n", what, dir, strerror(errno));
        return 1;
    }
    size_t cap = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        if (s->n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(s->names, cap * sizeof *nn);
            if (!nn) {
                rc = 1;
                break;
            }
            s->names = nn;
        }
        if (!(s->names[s->n] = strdup(e->d_name))) {
            rc = 1;
            break;
        }
        s->n++;
    }
    closedir(d);
    if (rc) {
        fprintf(stderr, "tandem quantize: out of memory\n");
        return 1;
    }
    if (!s->n) {
        fprintf(stderr, "tandem quantize: %s folder '%s' has no sample subfolders (expected "
                        "DIR/<sample>/<input name>.npy)\n", what, dir);
        return 1;
    }
    qsort(s->names, s->n, sizeof *s->names, cmp_str);
    if (max_samples && s->n > max_samples) {
        for (size_t i = max_samples; i < s->n; i++) free(s->names[i]);
        s->n = max_samples;
    }
    s->t = calloc(s->n * s->n_inputs + 1, sizeof *s->t);
    if (!s->t) {
        fprintf(stderr, "tandem quantize: out of memory\n");
        return 1;
    }
    for (size_t k = 0; k < s->n; k++)
        for (size_t i = 0; i < s->n_inputs; i++) {
            tdm_value_desc vd;
            tdm_status *st = tdm_model_input(m, i, &vd);
            if (st) return cli_fail(st, "quantize");
            char file[1024], p[4096], why[512];
            snprintf(file, sizeof file, "%s.npy", vd.name);
            for (char *c = file; *c; c++)
                if (*c == '/' || *c == ':') *c = '_';
            snprintf(p, sizeof p, "%s/%s/%s", dir, s->names[k], file);
            struct stat sb;
            if (stat(p, &sb) != 0) {
                fprintf(stderr, "tandem quantize: %s sample '%s/%s' has no %s for model input '%s'\n",
                        what, dir, s->names[k], file, vd.name);
                return 1;
            }
            tdm_tensor *t = NULL;
            if (npy_read(env, p, &t, why, sizeof why) != 0) {
                fprintf(stderr, "tandem quantize: %s sample: %s\n", what, why);
                return 1;
            }
            s->t[k * s->n_inputs + i] = t;
            char want[128], got[128];
            if (tdm_tensor_dtype(t) != vd.dtype) {
                fprintf(stderr, "tandem quantize: %s: %s but model input '%s' is %s\n", p,
                        tdm_dtype_name(tdm_tensor_dtype(t)), vd.name, tdm_dtype_name(vd.dtype));
                return 1;
            }
            if (!shape_fits(&vd, t)) {
                fprintf(stderr, "tandem quantize: %s: shape %s does not fit model input '%s' %s "
                                "(-1: any size)\n",
                        p, cli_shape_str(tdm_tensor_rank(t), tdm_tensor_dims(t), got, sizeof got),
                        vd.name, cli_shape_str(vd.rank, vd.dims, want, sizeof want));
                return 1;
            }
        }
    return 0;
}

/* ---- accuracy ---- */

/* The command's small bookkeeping allocations: out of memory ends the command. */
static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "tandem quantize: out of memory\n");
        exit(1);
    }
    return p;
}

typedef struct out_stats {
    char name[256];
    double dot, na, nb, max_err;
    bool classifier;
    long top1_same, top1_total;
    bool bad; /* shapes or dtypes differ */
} out_stats;

static double cosine(const out_stats *o) {
    if (o->bad) return 0;
    if (o->na == 0 && o->nb == 0) return 1;
    if (o->na == 0 || o->nb == 0) return 0;
    return o->dot / (sqrt(o->na) * sqrt(o->nb));
}

static void accumulate(out_stats *o, const tdm_tensor *a, const tdm_tensor *b) {
    if (tdm_tensor_dtype(a) != TDM_FLOAT || tdm_tensor_dtype(b) != TDM_FLOAT ||
        tdm_tensor_element_count(a) != tdm_tensor_element_count(b)) {
        if (tdm_tensor_dtype(a) != tdm_tensor_dtype(b) ||
            tdm_tensor_element_count(a) != tdm_tensor_element_count(b))
            o->bad = true;
        return; /* non-float outputs (labels, indices): not compared */
    }
    const float *x = tdm_tensor_data_const(a), *y = tdm_tensor_data_const(b);
    int64_t n = tdm_tensor_element_count(a);
    for (int64_t i = 0; i < n; i++) {
        o->dot += (double)x[i] * y[i];
        o->na += (double)x[i] * x[i];
        o->nb += (double)y[i] * y[i];
        double e = fabs((double)x[i] - y[i]);
        if (e > o->max_err || e != e) o->max_err = e;
    }
    /* a classifier: [batch, classes] scores */
    if (tdm_tensor_rank(a) == 2 && tdm_tensor_dims(a)[1] >= 2) {
        o->classifier = true;
        int64_t rows = tdm_tensor_dims(a)[0], C = tdm_tensor_dims(a)[1];
        for (int64_t r = 0; r < rows; r++) {
            int64_t ia = 0, ib = 0;
            for (int64_t c = 1; c < C; c++) {
                if (x[r * C + c] > x[r * C + ia]) ia = c;
                if (y[r * C + c] > y[r * C + ib]) ib = c;
            }
            o->top1_same += ia == ib;
            o->top1_total++;
        }
    }
}

/* Runs both sessions on every sample of `s`; stats per output (n_out of them). */
static tdm_status *evaluate(tdm_session *fs, tdm_session *qs, const tdm_model *m,
                            const sample_set *s, size_t limit, out_stats *st_out) {
    size_t n_out = tdm_model_output_count(m), n_in = s->n_inputs;
    const char **in_names = xcalloc(n_in + 1, sizeof *in_names);
    tdm_tensor **fo = xcalloc(n_out + 1, sizeof *fo), **qo = xcalloc(n_out + 1, sizeof *qo);
    tdm_status *st = NULL;
    for (size_t i = 0; !st && i < n_in; i++) {
        tdm_value_desc d;
        st = tdm_model_input(m, i, &d);
        if (!st) in_names[i] = d.name;
    }
    for (size_t j = 0; !st && j < n_out; j++) {
        tdm_value_desc d;
        st = tdm_model_output(m, j, &d);
        if (!st) {
            memset(&st_out[j], 0, sizeof st_out[j]);
            snprintf(st_out[j].name, sizeof st_out[j].name, "%s", d.name);
        }
    }
    size_t n = limit && limit < s->n ? limit : s->n;
    for (size_t k = 0; !st && k < n; k++) {
        const tdm_tensor *const *in = (const tdm_tensor *const *)(s->t + k * n_in);
        st = tdm_session_run(fs, n_in, in_names, in, n_out, NULL, fo);
        if (!st) st = tdm_session_run(qs, n_in, in_names, in, n_out, NULL, qo);
        for (size_t j = 0; !st && j < n_out; j++) accumulate(&st_out[j], fo[j], qo[j]);
        for (size_t j = 0; j < n_out; j++) {
            tdm_tensor_free(fo[j]);
            tdm_tensor_free(qo[j]);
            fo[j] = qo[j] = NULL;
        }
    }
    free(in_names);
    free(fo);
    free(qo);
    return st;
}

static double min_cosine(const out_stats *o, size_t n) {
    double c = 1;
    for (size_t j = 0; j < n; j++)
        if (cosine(&o[j]) < c) c = cosine(&o[j]);
    return c;
}

static double max_error(const out_stats *o, size_t n) {
    double e = 0;
    for (size_t j = 0; j < n; j++)
        if (o[j].max_err > e) e = o[j].max_err;
    return e;
}

/* The quantized model as the quantizer now stands, as a session. */
static tdm_status *quant_session(tdm_env *env, tdm_quantizer *q, const char *base_dir, int threads,
                                 tdm_session **out) {
    void *buf = NULL;
    size_t size = 0;
    tdm_status *st = tdm_quantizer_save_buffer(q, &buf, &size);
    if (st) return st;
    tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = "cpu", .threads = threads,
                              .opt_level = 1};
    st = tdm_session_create_from_buffer(env, buf, size, base_dir, &so, out);
    tdm_string_free(buf);
    return st;
}

/* ---- JSON ---- */

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.9g", v);
    else fprintf(f, "null");
}

static void print_stats(FILE *f, bool json, const char *set, const out_stats *o, size_t n, size_t samples) {
    if (json) {
        fprintf(f, "{\"set\": ");
        json_str(f, set);
        fprintf(f, ", \"samples\": %zu, \"outputs\": [", samples);
        for (size_t j = 0; j < n; j++) {
            fprintf(f, "%s{\"name\": ", j ? ", " : "");
            json_str(f, o[j].name);
            fprintf(f, ", \"cosine\": ");
            json_num(f, cosine(&o[j]));
            fprintf(f, ", \"max_abs_error\": ");
            json_num(f, o[j].max_err);
            if (o[j].classifier)
                fprintf(f, ", \"top1_agreement\": %.6f, \"top1_same\": %ld, \"top1_total\": %ld",
                        o[j].top1_total ? (double)o[j].top1_same / o[j].top1_total : 0.0, o[j].top1_same,
                        o[j].top1_total);
            fprintf(f, "}");
        }
        fprintf(f, "]}");
        return;
    }
    for (size_t j = 0; j < n; j++) {
        fprintf(f, "  %-11s %-24s %9.6f  %11.4g", set, o[j].name, cosine(&o[j]), o[j].max_err);
        if (o[j].classifier)
            fprintf(f, "  %6.2f%% (%ld/%ld)", o[j].top1_total ? 100.0 * o[j].top1_same / o[j].top1_total : 0.0,
                    o[j].top1_same, o[j].top1_total);
        fprintf(f, "\n");
    }
}

/* ---- the command ---- */

typedef struct sens {
    size_t node;
    double cos, err;
} sens;

static int cmp_sens(const void *a, const void *b) {
    const sens *x = a, *y = b;
    return x->cos < y->cos ? -1 : x->cos > y->cos ? 1 : (x->node > y->node) - (x->node < y->node);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct qargs {
    const char *model, *output, *calib, *validate;
    tdm_quantize_options o;
    char exclude[4096];
    bool report, json;
    double target;
    size_t max_samples;
} qargs;

static int parse(int argc, char **argv, qargs *a) {
    memset(a, 0, sizeof *a);
    a->o.api_version = TDM_API_VERSION;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED()                                                                           \
    do {                                                                                 \
        if (!v) {                                                                        \
            fprintf(stderr, "tandem quantize: %s needs a value\n", s);                   \
            return 2;                                                                    \
        }                                                                                \
        i++;                                                                             \
    } while (0)
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(s, "--output") || !strcmp(s, "-o")) {
            NEED();
            a->output = v;
        } else if (!strcmp(s, "--calibration")) {
            NEED();
            a->calib = v;
        } else if (!strcmp(s, "--validate")) {
            NEED();
            a->validate = v;
        } else if (!strcmp(s, "--method")) {
            NEED();
            if (!strcmp(v, "minmax")) a->o.method = TDM_QUANT_MINMAX;
            else if (!strcmp(v, "percentile")) a->o.method = TDM_QUANT_PERCENTILE;
            else if (!strcmp(v, "entropy")) a->o.method = TDM_QUANT_ENTROPY;
            else {
                fprintf(stderr, "tandem quantize: --method is minmax, percentile or entropy, not '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(s, "--percentile")) {
            NEED();
            a->o.percentile = atof(v);
        } else if (!strcmp(s, "--per-channel")) {
            a->o.per_tensor = false;
        } else if (!strcmp(s, "--per-tensor")) {
            a->o.per_tensor = true;
        } else if (!strcmp(s, "--reduce-range")) {
            a->o.reduce_range = true;
        } else if (!strcmp(s, "--activation-type")) {
            NEED();
            if (!strcmp(v, "uint8")) a->o.activation_type = TDM_UINT8;
            else if (!strcmp(v, "int8")) a->o.activation_type = TDM_INT8;
            else {
                fprintf(stderr, "tandem quantize: --activation-type is uint8 or int8, not '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(s, "--exclude")) {
            NEED();
            size_t l = strlen(a->exclude);
            if (l + strlen(v) + 2 >= sizeof a->exclude) {
                fprintf(stderr, "tandem quantize: --exclude patterns are too long\n");
                return 2;
            }
            snprintf(a->exclude + l, sizeof a->exclude - l, "%s%s", l ? "," : "", v);
        } else if (!strcmp(s, "--mode")) {
            NEED();
            if (!strcmp(v, "static")) a->o.mode = TDM_QUANT_STATIC;
            else if (!strcmp(v, "dynamic")) a->o.mode = TDM_QUANT_DYNAMIC;
            else {
                fprintf(stderr, "tandem quantize: --mode is static or dynamic, not '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(s, "--report")) {
            a->report = true;
        } else if (!strcmp(s, "--target-cosine")) {
            NEED();
            a->target = atof(v);
            if (!(a->target > 0 && a->target <= 1)) {
                fprintf(stderr, "tandem quantize: --target-cosine must be in (0, 1]\n");
                return 2;
            }
        } else if (!strcmp(s, "--max-samples")) {
            NEED();
            a->max_samples = (size_t)atol(v);
        } else if (!strcmp(s, "--threads")) {
            NEED();
            a->o.threads = atoi(v);
        } else if (!strcmp(s, "--json")) {
            a->json = true;
        } else if (s[0] == '-') {
            fprintf(stderr, "tandem quantize: unknown option '%s'\n", s);
            return 2;
        } else if (!a->model) {
            a->model = s;
        } else {
            fprintf(stderr, "tandem quantize: more than one model given ('%s')\n", s);
            return 2;
        }
#undef NEED
    }
    if (!a->model || !a->output) {
        usage(stderr);
        return 2;
    }
    if (a->o.mode == TDM_QUANT_STATIC && !a->calib) {
        fprintf(stderr, "tandem quantize: static quantization needs --calibration DIR (or --mode dynamic)\n");
        return 2;
    }
    if (a->exclude[0]) a->o.exclude = a->exclude;
    return 0;
}

typedef struct run_ctx {
    tdm_env *env;
    tdm_model *m;
    tdm_quantizer *q;
    tdm_session *fs;
    sample_set cal, val;
    const sample_set *eval; /* the set sensitivity and the target are measured on */
    char dir[4096];
    size_t n_out;
    out_stats *stats;
    sens *sv;
    size_t n_sens;
    double calib_s, report_s;
} run_ctx;

static tdm_status *measure(run_ctx *c, const qargs *a, const sample_set *s, double *cos, double *err) {
    tdm_session *qs = NULL;
    tdm_status *st = quant_session(c->env, c->q, c->dir, a->o.threads, &qs);
    if (!st) st = evaluate(c->fs, qs, c->m, s, 0, c->stats);
    tdm_session_free(qs);
    if (!st) {
        *cos = min_cosine(c->stats, c->n_out);
        *err = max_error(c->stats, c->n_out);
    }
    return st;
}

/* Per node: the error when it alone is quantized. */
static tdm_status *sensitivity(run_ctx *c, const qargs *a) {
    size_t N = tdm_quantizer_node_count(c->q);
    bool *was = xcalloc(N + 1, 1);
    c->sv = xcalloc(N + 1, sizeof *c->sv);
    for (size_t i = 0; i < N; i++) was[i] = tdm_quantizer_node_enabled(c->q, i);
    tdm_status *st = NULL;
    for (size_t i = 0; i < N && !st; i++) {
        if (!was[i]) continue;
        for (size_t k = 0; k < N; k++) tdm_quantizer_set_enabled(c->q, k, k == i);
        sens *s = &c->sv[c->n_sens++];
        s->node = i;
        st = measure(c, a, c->eval, &s->cos, &s->err);
    }
    for (size_t i = 0; i < N; i++) tdm_quantizer_set_enabled(c->q, i, was[i]);
    free(was);
    qsort(c->sv, c->n_sens, sizeof *c->sv, cmp_sens);
    return st;
}

/* The k most sensitive nodes (of those measured) in float, the others quantized. */
static void keep_first_in_float(run_ctx *c, size_t k) {
    for (size_t j = 0; j < c->n_sens; j++) tdm_quantizer_set_enabled(c->q, c->sv[j].node, j >= k);
}

static void print_node(FILE *f, const tdm_quantizer *q, size_t i) {
    const char *name = tdm_quantizer_node_name(q, i);
    fprintf(f, "#%lld %s %s", (long long)tdm_quantizer_node_position(q, i), tdm_quantizer_node_op(q, i),
            name && name[0] ? name : "(unnamed)");
}

static int run(run_ctx *c, const qargs *a) {
    tdm_status *st = tdm_env_create(NULL, &c->env);
    if (!st) st = tdm_model_load(c->env, a->model, &c->m);
    if (st) return cli_fail(st, a->model);
    snprintf(c->dir, sizeof c->dir, "%s", a->model);
    char *slash = strrchr(c->dir, '/');
    if (slash) *slash = 0;
    else snprintf(c->dir, sizeof c->dir, ".");
    if (a->calib && samples_read(c->env, c->m, "calibration", a->calib, a->max_samples, &c->cal)) return 1;
    if (a->validate && samples_read(c->env, c->m, "validation", a->validate, a->max_samples, &c->val))
        return 1;
    c->eval = a->validate ? &c->val : &c->cal;
    st = tdm_quantizer_create(c->env, a->model, &a->o, &c->q);
    if (st) return cli_fail(st, NULL);
    size_t n_in = tdm_model_input_count(c->m);
    const char **names = xcalloc(n_in + 1, sizeof *names);
    for (size_t i = 0; i < n_in && !st; i++) {
        tdm_value_desc d;
        st = tdm_model_input(c->m, i, &d);
        if (!st) names[i] = d.name;
    }
    double t0 = now_s();
    if (!st && a->o.mode == TDM_QUANT_STATIC)
        st = tdm_quantizer_calibrate(c->q, c->cal.n, n_in, names, (const tdm_tensor *const *)c->cal.t);
    c->calib_s = now_s() - t0;
    free(names);
    if (st) return cli_fail(st, "calibration");
    bool have_samples = c->cal.n || c->val.n;
    if ((a->report || a->target > 0) && !have_samples) {
        fprintf(stderr, "tandem quantize: --report and --target-cosine need --calibration or --validate samples\n");
        return 2;
    }
    if (!c->eval->n) c->eval = &c->cal;
    c->n_out = tdm_model_output_count(c->m);
    c->stats = xcalloc(c->n_out + 1, sizeof *c->stats);
    if (have_samples) {
        tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = "cpu",
                                  .threads = a->o.threads, .opt_level = 1};
        st = tdm_session_create(c->env, a->model, &so, &c->fs);
        if (st) return cli_fail(st, a->model);
    }
    t0 = now_s();
    if (a->report || a->target > 0) {
        st = sensitivity(c, a);
        if (st) return cli_fail(st, "sensitivity");
    }
    size_t auto_excluded = 0;
    if (a->target > 0) {
        /* the k most sensitive nodes in float: k = 1, 2, 4, ... until the target is met, then
         * the smallest k between the last two (a few measurements, not one per node) */
        double cos = 0, err = 0;
        st = measure(c, a, c->eval, &cos, &err);
        size_t lo = 0, hi = 0; /* lo: too few; hi: enough (0: not found yet) */
        bool met = cos >= a->target;
        for (size_t k = 1; !st && !met && lo < c->n_sens; k = k * 2 < c->n_sens ? k * 2 : c->n_sens) {
            keep_first_in_float(c, k);
            st = measure(c, a, c->eval, &cos, &err);
            if (!st && cos >= a->target) hi = k, met = true;
            else lo = k;
        }
        while (!st && met && hi - lo > 1) {
            size_t mid = lo + (hi - lo) / 2;
            keep_first_in_float(c, mid);
            st = measure(c, a, c->eval, &cos, &err);
            if (!st && cos >= a->target) hi = mid;
            else lo = mid;
        }
        if (st) return cli_fail(st, "--target-cosine");
        auto_excluded = met ? hi : c->n_sens;
        keep_first_in_float(c, auto_excluded);
        if (!met && !a->json)
            fprintf(stderr, "tandem quantize: warning: cosine %.6f stays below the target %.6f with "
                            "every quantizable node in float\n", cos, a->target);
    }
    c->report_s = now_s() - t0;
    st = tdm_quantizer_save(c->q, a->output);
    if (st) return cli_fail(st, a->output);

    /* ---- the report ---- */
    size_t N = tdm_quantizer_node_count(c->q), on = 0;
    for (size_t i = 0; i < N; i++) on += tdm_quantizer_node_enabled(c->q, i);
    static const char *methods[] = {"minmax", "percentile", "entropy"};
    const char *method = a->o.mode == TDM_QUANT_DYNAMIC ? "dynamic" : methods[a->o.method];
    const char *act = a->o.activation_type == TDM_INT8 ? "int8" : "uint8";
    FILE *f = stdout;
    if (a->json) {
        fprintf(f, "{\"model\": ");
        json_str(f, a->model);
        fprintf(f, ", \"output\": ");
        json_str(f, a->output);
        fprintf(f, ", \"mode\": \"%s\", \"method\": \"%s\", \"weights\": \"%s\", \"activations\": \"%s\"",
                a->o.mode == TDM_QUANT_DYNAMIC ? "dynamic" : "static", method,
                a->o.per_tensor ? "per-tensor" : "per-channel", act);
        fprintf(f, ", \"weight_bits\": %d", a->o.reduce_range ? 7 : 8);
        fprintf(f, ", \"quantizable_nodes\": %zu, \"quantized_nodes\": %zu, \"auto_excluded\": %zu", N, on,
                auto_excluded);
        fprintf(f, ", \"calibration_samples\": %zu, \"calibration_seconds\": %.3f, \"report_seconds\": %.3f",
                c->cal.n, c->calib_s, c->report_s);
        fprintf(f, ", \"excluded\": [");
        for (size_t i = 0, k = 0; i < N; i++) {
            if (tdm_quantizer_node_enabled(c->q, i)) continue;
            fprintf(f, "%s{\"position\": %lld, \"op\": ", k++ ? ", " : "",
                    (long long)tdm_quantizer_node_position(c->q, i));
            json_str(f, tdm_quantizer_node_op(c->q, i));
            fprintf(f, ", \"name\": ");
            json_str(f, tdm_quantizer_node_name(c->q, i));
            fprintf(f, "}");
        }
        fprintf(f, "], \"tensors\": [");
        tdm_quant_param qp;
        for (size_t i = 0; tdm_quantizer_tensor(c->q, i, &qp); i++) {
            fprintf(f, "%s{\"name\": ", i ? ", " : "");
            json_str(f, qp.name);
            fprintf(f, ", \"min\": ");
            json_num(f, qp.observed_min);
            fprintf(f, ", \"max\": ");
            json_num(f, qp.observed_max);
            fprintf(f, ", \"range\": [");
            json_num(f, qp.range_min);
            fprintf(f, ", ");
            json_num(f, qp.range_max);
            fprintf(f, "], \"scale\": ");
            json_num(f, qp.scale);
            fprintf(f, ", \"zero_point\": %d}", (int)qp.zero_point);
        }
        fprintf(f, "]");
    } else {
        fprintf(f, "tandem quantize: %s -> %s\n  %s%s, %s int8 weights%s, %s activations\n", a->model,
                a->output, a->o.mode == TDM_QUANT_DYNAMIC ? "dynamic" : "static, calibration ",
                a->o.mode == TDM_QUANT_DYNAMIC ? "" : method, a->o.per_tensor ? "per-tensor" : "per-channel",
                a->o.reduce_range ? " (7-bit: --reduce-range)" : "",
                a->o.mode == TDM_QUANT_DYNAMIC ? "uint8 (per run)" : act);
        fprintf(f, "  nodes: %zu quantizable, %zu quantized, %zu kept in float", N, on, N - on);
        if (auto_excluded) fprintf(f, " (%zu by --target-cosine)", auto_excluded);
        fprintf(f, "\n");
        if (a->o.mode == TDM_QUANT_STATIC)
            fprintf(f, "  calibration: %zu samples, %zu activations, %.3f s\n", c->cal.n,
                    tdm_quantizer_tensor_count(c->q), c->calib_s);
        for (size_t i = 0; i < N; i++)
            if (!tdm_quantizer_node_enabled(c->q, i)) {
                fprintf(f, "  float: ");
                print_node(f, c->q, i);
                fprintf(f, "\n");
            }
    }
    if (have_samples) {
        tdm_session *qs = NULL;
        st = quant_session(c->env, c->q, c->dir, a->o.threads, &qs);
        if (st) return cli_fail(st, "the quantized model");
        if (a->json) fprintf(f, ", \"accuracy\": [");
        else fprintf(f, "accuracy (quantized vs float):\n  %-11s %-24s %9s  %11s  %s\n", "set", "output",
                     "cosine", "max|err|", "top-1 agreement");
        const sample_set *sets[2] = {&c->cal, &c->val};
        const char *set_names[2] = {"calibration", "validation"};
        for (int k = 0, printed = 0; k < 2 && !st; k++) {
            if (!sets[k]->n) continue;
            st = evaluate(c->fs, qs, c->m, sets[k], 0, c->stats);
            if (st) break;
            if (a->json && printed++) fprintf(f, ", ");
            print_stats(f, a->json, set_names[k], c->stats, c->n_out, sets[k]->n);
        }
        tdm_session_free(qs);
        if (st) return cli_fail(st, "accuracy");
        if (a->json) fprintf(f, "]");
    }
    if (c->n_sens) {
        if (a->json) {
            fprintf(f, ", \"sensitivity\": [");
        } else {
            fprintf(f, "sensitivity (only that node quantized; %s set), worst first:\n",
                    c->eval == &c->val ? "validation" : "calibration");
        }
        for (size_t k = 0; k < c->n_sens; k++) {
            size_t i = c->sv[k].node;
            if (a->json) {
                fprintf(f, "%s{\"position\": %lld, \"op\": ", k ? ", " : "",
                        (long long)tdm_quantizer_node_position(c->q, i));
                json_str(f, tdm_quantizer_node_op(c->q, i));
                fprintf(f, ", \"name\": ");
                json_str(f, tdm_quantizer_node_name(c->q, i));
                fprintf(f, ", \"cosine\": ");
                json_num(f, c->sv[k].cos);
                fprintf(f, ", \"max_abs_error\": ");
                json_num(f, c->sv[k].err);
                fprintf(f, ", \"quantized\": %s}", tdm_quantizer_node_enabled(c->q, i) ? "true" : "false");
            } else {
                fprintf(f, "  cosine %9.6f  max|err| %10.4g  ", c->sv[k].cos, c->sv[k].err);
                print_node(f, c->q, i);
                fprintf(f, "%s\n", tdm_quantizer_node_enabled(c->q, i) ? "" : "  (kept in float)");
            }
        }
        if (a->json) fprintf(f, "]");
    }
    if (a->json) fprintf(f, "}\n");
    return 0;
}

int cmd_quantize(int argc, char **argv) {
    qargs a;
    int rc = parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    run_ctx c;
    memset(&c, 0, sizeof c);
    rc = run(&c, &a);
    free(c.stats);
    free(c.sv);
    tdm_session_free(c.fs);
    tdm_quantizer_free(c.q);
    samples_free(&c.cal);
    samples_free(&c.val);
    tdm_model_free(c.m);
    tdm_env_free(c.env);
    return rc;
}

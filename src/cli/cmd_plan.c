/* tandem plan: where each node runs and why, predicted against measured. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "tandem/generator.h"

static void plan_usage(FILE *f) {
    fprintf(f,
            "usage: tandem plan MODEL [--devices LIST] [--placement auto|first|DEVICE]\n"
            "                   [--affinity RULES] [--no-fallback] [--json] [--segments]\n"
            "                   [--device-memory DEV=SIZE[,DEV=SIZE]] [--residency LIST]\n"
            "                   [--dot FILE] [--measure N] [--shape NAME:d0,d1,...] [--threads N]\n"
            "       tandem plan LLM_FOLDER [--device DEV] [--max-length N] [--device-memory ...]\n\n"
            "Prints, per node (or per segment with --segments), the device chosen, the predicted\n"
            "time on every candidate device, why it was placed there, the copies between devices\n"
            "with their bytes, and the predicted total against each single device.\n"
            "  --devices LIST    devices to plan over, in order of preference (default cpu)\n"
            "  --placement P     auto (default: the cost model), first (the first device that can\n"
            "                    run a node), or a device name\n"
            "  --no-fallback     fail when a node cannot run on the chosen device instead of\n"
            "                    placing it on the CPU\n"
            "  --json            print the plan as one JSON object\n"
            "  --segments        one line per segment (neighbouring nodes on one device)\n"
            "  --shape NAME:DIMS shape of input NAME, planned for (dynamic dims are 1 otherwise;\n"
            "                    repeatable; named dynamic dims are fixed for the session)\n"
            "  --threads N       intra-op threads (default: all cores)\n"
            "  --affinity RULES  \"Conv=opencl:0;/decoder.*/=cpu;#10-20=cpu\" (op type, /regex/ on\n"
            "                    node names, or node positions)\n"
            "  --measure N       run N times on random inputs (after one warm-up run) and show\n"
            "                    measured times and the cost model's error next to the predictions\n"
            "  --dot FILE        write a Graphviz picture (nodes coloured by device, copies in red)\n"
            "  --device-memory B memory budgets (DEV=SIZE, e.g. cuda:0=8GiB, test:0=25%%): the plan\n"
            "                    keeps each device under its budget and says how (weights resident,\n"
            "                    streamed or mapped per layer; --json: per weight, with the bytes\n"
            "                    streamed and the predicted time per run)\n"
            "  --residency LIST  mapped, streamed, layers, window=K (see tandem run --help)\n"
            "  --device DEV      (model folders) the generator's device: the decoder placed there\n"
            "  --max-length N    (model folders) the context the KV cache is sized for\n"
            "A model folder (tandem generate's) is planned as the generator runs it; the plan then\n"
            "says where each layer's KV cache lives (on the device, in host memory, or with its\n"
            "attention on the CPU) and the cache's bytes copied per token (\"kv_cache\" in --json).\n");
}

/* --shape NAME:DIMS as the session's free_dims: each symbolic dim of a named input that
 * --shape sizes, so that the plan is placed for those shapes (they are fixed for the session;
 * --measure runs with them). 0, or the exit status after a message. */
static int shapes_as_free_dims(tdm_env *env, const char *path, int n, const char *const *names,
                               const char *const *dims_text, char *out, size_t size) {
    tdm_model *m = NULL;
    tdm_status *st = tdm_model_load(env, path, &m);
    if (st) return cli_fail(st, NULL);
    size_t len = 0;
    int rc = 0;
    for (int k = 0; k < n && rc == 0; k++) {
        bool found = false;
        for (size_t i = 0; i < tdm_model_input_count(m) && rc == 0; i++) {
            tdm_value_desc d;
            tdm_model_input(m, i, &d);
            if (strcmp(d.name, names[k])) continue;
            found = true;
            int64_t dims[TDM_MAX_RANK];
            int rank = cli_parse_dims(dims_text[k], dims, TDM_MAX_RANK);
            if (rank != d.rank) {
                fprintf(stderr, "tandem plan: --shape %s has %d dims, the input has %d\n", names[k],
                        rank, d.rank);
                rc = 2;
                break;
            }
            for (int j = 0; j < rank; j++) {
                if (d.dims[j] >= 0 && d.dims[j] != dims[j]) {
                    fprintf(stderr, "tandem plan: --shape %s: dim %d is %lld in the model\n",
                            names[k], j, (long long)d.dims[j]);
                    rc = 2;
                    break;
                }
                if (d.dims[j] >= 0 || !d.dim_params[j]) continue; /* (unnamed: 1 in the plan) */
                int w = snprintf(out + len, size - len, "%s%s=%lld", len ? "," : "",
                                 d.dim_params[j], (long long)dims[j]);
                if (w < 0 || (size_t)w >= size - len) {
                    fprintf(stderr, "tandem plan: too many --shape dims\n");
                    rc = 2;
                    break;
                }
                len += (size_t)w;
            }
        }
        if (!found && rc == 0) {
            fprintf(stderr, "tandem plan: --shape: the model has no input '%s'\n", names[k]);
            rc = 2;
        }
    }
    tdm_model_free(m);
    return rc;
}

int cmd_plan(int argc, char **argv) {
    const char *model = NULL, *devices = NULL, *placement = NULL, *affinity = NULL, *dot = NULL;
    const char *device_memory = NULL, *residency = NULL, *device = NULL;
    const char *shape_names[64], *shape_dims[64];
    int n_shapes = 0, threads = 0, measure = 0, max_length = 0;
    bool json = false, segments = false, no_fallback = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool v = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            plan_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--devices") && v) devices = argv[++i];
        else if (!strcmp(a, "--placement") && v) placement = argv[++i];
        else if (!strcmp(a, "--affinity") && v) affinity = argv[++i];
        else if (!strcmp(a, "--dot") && v) dot = argv[++i];
        else if (!strcmp(a, "--device-memory") && v) device_memory = argv[++i];
        else if (!strcmp(a, "--residency") && v) residency = argv[++i];
        else if (!strcmp(a, "--device") && v) device = argv[++i];
        else if (!strcmp(a, "--max-length") && v) max_length = atoi(argv[++i]);
        else if (!strcmp(a, "--measure") && v) measure = atoi(argv[++i]);
        else if (!strcmp(a, "--threads") && v) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--segments")) segments = true;
        else if (!strcmp(a, "--no-fallback")) no_fallback = true;
        else if (!strcmp(a, "--shape") && v && n_shapes < 64) {
            char *c = strrchr(argv[++i], ':');
            if (!c) {
                fprintf(stderr, "tandem plan: --shape expects NAME:d0,d1,...\n");
                return 2;
            }
            *c = 0;
            shape_names[n_shapes] = argv[i];
            shape_dims[n_shapes++] = c + 1;
        } else if (a[0] == '-') {
            fprintf(stderr, "tandem plan: unknown option '%s'\n", a);
            plan_usage(stderr);
            return 2;
        } else if (!model) model = a;
        else {
            fprintf(stderr, "tandem plan: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (!model) {
        plan_usage(stderr);
        return 2;
    }
    tdm_env *env = NULL;
    tdm_session *s = NULL;
    tdm_status *st = tdm_env_create(NULL, &env);
    if (st) return cli_fail(st, "plan");
    tdm_session_options so = {TDM_API_VERSION, devices, threads, 1, no_fallback, placement, affinity,
                              measure > 0};
    so.device_memory = device_memory;
    so.residency = residency;
    int rc = 0;
    char *text = NULL;
    tdm_generator *gen = NULL;
    struct stat sb;
    if (!stat(model, &sb) && S_ISDIR(sb.st_mode)) { /* a model folder: the generator's plan */
        tdm_generator_options go;
        memset(&go, 0, sizeof go);
        go.struct_size = sizeof go;
        go.max_length = max_length;
        go.threads = threads;
        go.device = device;
        go.device_memory = device_memory;
        go.residency = residency;
        if ((st = tdm_generator_create(env, model, &go, &gen))) {
            rc = cli_fail(st, NULL);
            goto done;
        }
        if ((st = tdm_session_explain(tdm_generator_session(gen), json ? TDM_EXPLAIN_JSON
                                      : segments ? TDM_EXPLAIN_SEGMENTS : TDM_EXPLAIN_TEXT, &text))) {
            rc = cli_fail(st, NULL);
            goto done;
        }
        fputs(text, stdout);
        goto done;
    }
    if (device || max_length) {
        fprintf(stderr, "tandem plan: --device and --max-length are for model folders\n");
        rc = 2;
        goto done;
    }
    char free_dims[1024] = "";
    if (n_shapes > 0 && (rc = shapes_as_free_dims(env, model, n_shapes, shape_names, shape_dims,
                                                  free_dims, sizeof free_dims)))
        goto done;
    if (free_dims[0]) so.free_dims = free_dims;
    if ((st = tdm_session_create(env, model, &so, &s))) {
        rc = cli_fail(st, NULL);
        goto done;
    }
    const tdm_model *m = tdm_session_model(s);
    size_t n_in = tdm_model_input_count(m), n_out = tdm_model_output_count(m);
    /* one warm-up run first, not counted (kernel compilation, caches, first allocations) */
    for (int r = measure > 0 ? -1 : 0; r < measure && rc == 0; r++) {
        tdm_tensor *ins[64] = {0}, *outs[64] = {0};
        const char *names[64], *onames[64];
        if (n_in > 64 || n_out > 64) {
            fprintf(stderr, "tandem plan: too many inputs or outputs to measure\n");
            rc = 1;
            break;
        }
        for (size_t i = 0; i < n_in && rc == 0; i++) {
            tdm_value_desc d;
            tdm_model_input(m, i, &d);
            names[i] = d.name;
            int64_t dims[TDM_MAX_RANK];
            int rank = d.rank < 0 ? 0 : d.rank;
            for (int j = 0; j < rank; j++) dims[j] = d.dims[j] < 0 ? 1 : d.dims[j];
            for (int k = 0; k < n_shapes; k++)
                if (!strcmp(shape_names[k], d.name)) rank = cli_parse_dims(shape_dims[k], dims, TDM_MAX_RANK);
            if (rank < 0 || (st = tdm_tensor_create(env, d.dtype, rank, dims, &ins[i]))) {
                rc = st ? cli_fail(st, d.name) : 1;
                break;
            }
            cli_fill_random(ins[i], 1 + i, NULL);
        }
        for (size_t j = 0; j < n_out; j++) {
            tdm_value_desc d;
            tdm_model_output(m, j, &d);
            onames[j] = d.name;
        }
        if (rc == 0 && (st = tdm_session_run(s, n_in, names, (const tdm_tensor *const *)ins, n_out,
                                             onames, outs)))
            rc = cli_fail(st, NULL);
        for (size_t i = 0; i < 64; i++) {
            tdm_tensor_free(ins[i]);
            tdm_tensor_free(outs[i]);
        }
        if (r < 0) tdm_session_reset_measurements(s);
    }
    if (rc) goto done;
    if (dot) {
        if ((st = tdm_session_explain(s, TDM_EXPLAIN_DOT, &text))) {
            rc = cli_fail(st, NULL);
            goto done;
        }
        FILE *f = fopen(dot, "w");
        if (!f || fputs(text, f) < 0) {
            fprintf(stderr, "tandem: cannot write '%s'\n", dot);
            rc = 1;
        }
        if (f) fclose(f);
        tdm_string_free(text);
        text = NULL;
    }
    if ((st = tdm_session_explain(s, json ? TDM_EXPLAIN_JSON : segments ? TDM_EXPLAIN_SEGMENTS
                                                                        : TDM_EXPLAIN_TEXT,
                                  &text))) {
        rc = cli_fail(st, NULL);
        goto done;
    }
    fputs(text, stdout);
done:
    tdm_string_free(text);
    tdm_generator_free(gen);
    tdm_session_free(s);
    tdm_env_free(env);
    return rc;
}

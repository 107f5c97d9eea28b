#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void print_value(const tdm_value_desc *d) {
    printf("  %-24s %-8s [", d->name, tdm_dtype_name(d->dtype));
    if (d->rank < 0) printf("?");
    for (int i = 0; i < d->rank; i++) {
        if (i) printf(",");
        if (d->dim_params[i]) printf("%s", d->dim_params[i]);
        else if (d->dims[i] < 0) printf("?");
        else printf("%lld", (long long)d->dims[i]);
    }
    printf("]\n");
}

/* The number after "key": in the explain JSON's memory object (0 when absent). */
static unsigned long long json_num(const char *json, const char *key) {
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = strstr(json, pat);
    return at ? strtoull(at + strlen(pat), NULL, 10) : 0;
}

/* The string after "key": in json from `at`, unescaped into out ("" when absent). */
static void json_str(const char *at, const char *key, char *out, size_t size) {
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *q = strstr(at, pat);
    size_t n = 0;
    if (q)
        for (q += strlen(pat); *q && *q != '"' && n + 1 < size; q++) {
            if (*q == '\\' && q[1]) q++;
            out[n++] = *q;
        }
    out[n] = 0;
}

/* One line per node of the plan's JSON: name, op, device and what implements it. */
static void print_impls(const char *json) {
    const char *end = strstr(json, "],\"copies\":");
    printf("nodes (implementation: oneDNN's name, or tandem's own kernel):\n");
    printf("  %-4s %-36s %-18s %-10s %s\n", "#", "node", "op", "device", "implementation");
    int refs = 0;
    for (const char *at = strstr(json, "{\"index\":"); at && (!end || at < end);
         at = strstr(at + 1, "{\"index\":")) {
        char name[128], op[64], dev[32], impl[128];
        json_str(at, "name", name, sizeof name);
        json_str(at, "op", op, sizeof op);
        json_str(at, "device", dev, sizeof dev);
        json_str(at, "impl", impl, sizeof impl);
        if (!strncmp(impl, "ref", 3)) refs++;
        printf("  %-4ld %-36s %-18s %-10s %s\n", strtol(at + 9, NULL, 10), name, op, dev,
               impl[0] ? impl : "-");
    }
    printf("  reference (ref) implementations: %d\n", refs);
}

static void print_bytes(const char *what, unsigned long long b) {
    printf("  %-22s %llu bytes (%.2f MiB)\n", what, b, (double)b / (1024.0 * 1024.0));
}

/* --plan: one run on random inputs (dynamic dimensions 1) makes the memory plan; its
 * figures come from tdm_session_explain's JSON "memory" object. Returns an exit code. */
static int inspect_plan(tdm_env *env, const char *path, const char *devices, const char *placement,
                        int n_shapes, const char *const *shape_names, const char *const *shape_dims) {
    tdm_session_options so = {0};
    so.api_version = TDM_API_VERSION;
    so.devices = devices;
    so.placement = placement;
    so.opt_level = 1;
    tdm_session *s = NULL;
    tdm_status *st = tdm_session_create(env, path, &so, &s);
    if (st) return cli_fail(st, "--plan");
    int rc = cli_run_random(env, s, n_shapes, shape_names, shape_dims, 1);
    char *json = NULL;
    if (!rc && (st = tdm_session_explain(s, TDM_EXPLAIN_JSON, &json))) rc = cli_fail(st, "--plan");
    const char *mem = json ? strstr(json, "\"memory\":{") : NULL;
    if (!rc && !mem) {
        fprintf(stderr, "tandem: --plan: the plan has no memory figures\n");
        rc = 1;
    }
    if (!rc) {
        unsigned long long arena = json_num(mem, "arena_bytes"), all = json_num(mem, "intermediate_bytes");
        printf("memory plan (random inputs, dynamic dimensions 1 unless --shape; devices %s):\n", devices ? devices : "cpu");
        printf("  %-22s %s\n", "planned", strstr(mem, "\"planned\":true") ? "yes" : "no");
        print_bytes("arena (peak)", arena);
        print_bytes("all intermediates", all);
        print_bytes("largest live set", json_num(mem, "peak_live_bytes"));
        printf("  %-22s %llu\n", "outputs in place", json_num(mem, "inplace_values"));
        printf("  %-22s %.1f%%\n", "arena / intermediates", all ? 100.0 * (double)arena / (double)all : 0.0);
        const char *w = strstr(mem, "\"weights_bytes\":{");
        for (const char *q = w ? w + strlen("\"weights_bytes\":{") : NULL; q && *q == '"';) {
            const char *e = strchr(q + 1, '"');
            if (!e || e[1] != ':') break;
            char label[96];
            snprintf(label, sizeof label, "weights on %.*s", (int)(e - q - 1), q + 1);
            char *end = NULL;
            print_bytes(label, strtoull(e + 2, &end, 10));
            q = end && *end == ',' ? end + 1 : NULL;
        }
    }
    if (!rc) print_impls(json);
    tdm_string_free(json);
    tdm_session_free(s);
    return rc;
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL, *device = "cpu", *devices = NULL, *placement = NULL;
    bool plan = false;
    const char *shape_names[64], *shape_dims[64];
    int n_shapes = 0;
    for (int i = 1; i < argc; i++) {
        bool v = i + 1 < argc;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: tandem inspect MODEL [--device NAME] [--plan [--devices LIST]\n"
                   "                      [--placement P] [--shape NAME:d0,d1,...]...]\n\n"
                   "Prints the model's IR version, the opset of every domain it imports, inputs,\n"
                   "outputs, node counts (subgraphs included), the operator histogram, parameters\n"
                   "(initializers and Constant nodes) and which operators the device cannot run\n"
                   "(checked in subgraphs too).\n"
                   "  --device NAME      the device whose support is checked (default cpu)\n"
                   "  --plan             also run the model once on random inputs and print its\n"
                   "                     memory plan: the arena (peak of the planned intermediates),\n"
                   "                     the sum of all intermediate tensors, the largest set of\n"
                   "                     them alive at once and the weight bytes each device reads;\n"
                   "                     then every node with its device and implementation\n"
                   "                     (oneDNN's name such as jit:avx512_core, or tandem for an\n"
                   "                     own kernel) and the count of oneDNN reference (ref) ones\n"
                   "  --devices LIST     --plan: the devices to plan for (default cpu)\n"
                   "  --placement P      --plan: auto (default: the cost model), first, or a device\n"
                   "                     name, as tandem run takes it\n"
                   "  --shape NAME:DIMS  --plan: the shape of input NAME (dynamic dimensions are 1\n"
                   "                     otherwise; repeatable)\n");
            return 0;
        } else if (!strcmp(argv[i], "--plan")) {
            plan = true;
        } else if (!strcmp(argv[i], "--devices") && v) {
            devices = argv[++i];
        } else if (!strcmp(argv[i], "--placement") && v) {
            placement = argv[++i];
        } else if (!strcmp(argv[i], "--device") && v) {
            device = argv[++i];
        } else if (!strcmp(argv[i], "--shape") && v) {
            char *c = strrchr(argv[++i], ':');
            if (!c || c == argv[i] || n_shapes == 64) {
                fprintf(stderr, "tandem inspect: --shape expects NAME:d0,d1,...\n");
                return 2;
            }
            *c = 0;
            shape_names[n_shapes] = argv[i];
            shape_dims[n_shapes++] = c + 1;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "tandem inspect: unknown option '%s'\n", argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        fprintf(stderr, "usage: tandem inspect MODEL\n");
        return 2;
    }
    if ((n_shapes || placement) && !plan) {
        fprintf(stderr, "tandem inspect: %s is for --plan\n", n_shapes ? "--shape" : "--placement");
        return 2;
    }
    tdm_env *env = NULL;
    tdm_model *m = NULL;
    tdm_status *st = tdm_env_create(NULL, &env);
    if (!st) st = tdm_model_load(env, path, &m);
    if (st) {
        tdm_env_free(env);
        return cli_fail(st, NULL);
    }
    printf("model:      %s\n", path);
    printf("ir_version: %lld\n", (long long)tdm_model_ir_version(m));
    printf("producer:   %s\n", tdm_model_producer(m));
    printf("opset:      %lld", (long long)tdm_model_opset(m, ""));
    for (size_t i = 0; i < tdm_model_opset_count(m); i++) {
        int64_t version = 0;
        const char *domain = tdm_model_opset_domain(m, i, &version);
        if (domain && domain[0]) printf(", %s %lld", domain, (long long)version);
    }
    printf("\ninputs:\n");
    for (size_t i = 0; i < tdm_model_input_count(m); i++) {
        tdm_value_desc d;
        tdm_model_input(m, i, &d);
        print_value(&d);
    }
    printf("outputs:\n");
    for (size_t i = 0; i < tdm_model_output_count(m); i++) {
        tdm_value_desc d;
        tdm_model_output(m, i, &d);
        print_value(&d);
    }
    size_t nested = tdm_model_nested_node_count(m);
    printf("nodes:      %zu", tdm_model_node_count(m) + nested);
    if (nested)
        printf(" (%zu in the main graph, %zu in %zu subgraphs)", tdm_model_node_count(m), nested,
               tdm_model_subgraph_count(m));
    printf("\n");
    printf("operators:\n");
    size_t unsupported = 0;
    for (size_t i = 0; i < tdm_model_op_type_count(m); i++) {
        size_t n;
        const char *op = tdm_model_op_type(m, i, &n);
        bool ok = tdm_model_op_type_supported(m, i, device);
        if (!ok) unsupported++;
        printf("  %-24s %6zu%s\n", op, n, ok ? "" : "  (unsupported)");
    }
    long long p = (long long)tdm_model_parameter_count(m), b = (long long)tdm_model_parameter_bytes(m);
    printf("parameters: %lld (%.2f MiB)\n", p, (double)b / (1024.0 * 1024.0));
    printf("unsupported operators on %s: %zu\n", device, unsupported);
    int rc = plan ? inspect_plan(env, path, devices, placement, n_shapes, shape_names, shape_dims) : 0;
    tdm_model_free(m);
    tdm_env_free(env);
    return rc;
}

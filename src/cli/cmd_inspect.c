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

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL, *device = "cpu";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: tandem inspect MODEL [--device NAME]\n\nPrints the model's IR version, "
                   "opsets, inputs, outputs, operator histogram, parameter count and bytes, and "
                   "which operators the device (default cpu) cannot run.\n");
            return 0;
        } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            device = argv[++i];
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
    if (tdm_model_opset(m, "com.microsoft")) printf(" (com.microsoft %lld)", (long long)tdm_model_opset(m, "com.microsoft"));
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
    printf("nodes:      %zu\n", tdm_model_node_count(m));
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
    tdm_model_free(m);
    tdm_env_free(env);
    return 0;
}

#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cmd_generate.h"

static void usage(FILE *f) {
    fprintf(f,
            "tandem %s — run ONNX models on CPUs and GPUs together\n\n"
            "usage: tandem <command> [options]\n\n"
            "commands:\n"
            "  run MODEL          run a model on inputs (.npy) or random data\n"
            "  inspect MODEL      opset, inputs, outputs, operators, parameters, support\n"
            "  conformance [DIR]  run ONNX backend node tests (default: the libonnx-testdata set)\n"
            "  devices            list the devices tandem can use, and why others are missing\n"
            "  plan MODEL         where each node would run and why: placement, copies, predictions\n"
            "  profile MODEL      measured time per op and per device; stored for later plans\n"
            "  bench MODEL        latency and throughput (inputs from .npy files or random);\n"
            "                     bench MODEL_DIR --llm: a language model's prefill and decode tokens/s\n"
            "  quantize MODEL     INT8 post-training quantization: a QDQ model from calibration\n"
            "                     samples, with an accuracy report (--output OUT.onnx)\n"
            "  generate MODEL_DIR text from a language model folder (--prompt TEXT)\n"
            "  serve              KServe v2 / Triton-compatible HTTP server (--model-repository DIR)\n\n"
            "  --version          print the version\n"
            "  --help             this text; `tandem <command> --help` for a command's options\n",
            tdm_version_string());
}

int cmd_bench(int argc, char **argv); /* src/cli/cmd_bench.c */
int cmd_serve(int argc, char **argv); /* src/cli/cmd_serve.c */
int cmd_quantize(int argc, char **argv); /* src/cli/cmd_quantize.c */

int cli_fail(tdm_status *st, const char *context) {
    fprintf(stderr, "tandem: %s%s[%s] %s\n", context ? context : "", context ? ": " : "",
            tdm_code_name(tdm_status_code(st)), tdm_status_message(st));
    tdm_status_free(st);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("tandem %s\n", tdm_version_string());
        return 0;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(cmd, "conformance")) return cmd_conformance(argc - 1, argv + 1);
    if (!strcmp(cmd, "devices")) return cmd_devices(argc - 1, argv + 1);
    if (!strcmp(cmd, "plan")) return cmd_plan(argc - 1, argv + 1);
    if (!strcmp(cmd, "profile")) return cmd_profile(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "quantize")) return cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 1, argv + 1);
    fprintf(stderr, "tandem: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}

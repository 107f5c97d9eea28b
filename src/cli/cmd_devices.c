#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(void) {
    printf("usage: tandem devices [--json] [--reprofile] [--threads N]\n\n"
           "Lists the devices tandem found with their measured profile (what the scheduler's\n"
           "cost model uses) and, for backends it looked for but cannot use, the reason.\n"
           "Profiles are measured once (about a second per device) and cached in\n"
           "$TANDEM_CACHE_DIR, $XDG_CACHE_HOME/tandem or ~/.cache/tandem. The CPU's\n"
           "description names the instruction-set level its kernels use: the machine's best,\n"
           "or TANDEM_CPU_ISA=sse41|avx2|avx512_core|... to cap it (profiles are kept per level).\n\n"
           "  --json        print one JSON array: the devices with every number (copies per\n"
           "                direction from pageable and from pinned/staging host memory), then\n"
           "                the unavailable backends ({\"available\": false, \"reason\": ...});\n"
           "                \"isa\" is the CPU's instruction-set level (null for others)\n"
           "  --reprofile   measure again and replace the cached profiles\n"
           "  --threads N   host threads the profiles are for (default: all cores)\n");
}

static void json_string(const char *s) {
    putchar('"');
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') printf("\\n");
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void json_num(const char *key, double v) {
    printf(", \"%s\": ", key);
    if (isfinite(v)) printf("%.6g", v);
    else printf("null");
}

static void print_json_device(const tdm_device_info *d, const char *isa) {
    printf("  {\"name\": ");
    json_string(d->name);
    printf(", \"available\": true, \"description\": ");
    json_string(d->description);
    printf(", \"isa\": "); /* the CPU's instruction-set level (TANDEM_CPU_ISA caps it) */
    if (isa) json_string(isa);
    else printf("null");
    printf(", \"host_memory\": %s, \"threads\": %d", d->host_memory ? "true" : "false",
           d->threads);
    json_num("gemm_gflops", d->gemm_gflops);
    json_num("conv_gflops", d->conv_gflops);
    json_num("mem_gbps", d->mem_gbps);
    json_num("launch_us", d->launch_us);
    json_num("h2d_gbps", d->h2d_gbps);
    json_num("d2h_gbps", d->d2h_gbps);
    json_num("link_latency_us", d->link_latency_us);
    json_num("h2d_latency_us", d->h2d_latency_us);
    json_num("d2h_latency_us", d->d2h_latency_us);
    json_num("h2d_pinned_gbps", d->h2d_pinned_gbps);
    json_num("d2h_pinned_gbps", d->d2h_pinned_gbps);
    json_num("h2d_pinned_latency_us", d->h2d_pinned_latency_us);
    json_num("d2h_pinned_latency_us", d->d2h_pinned_latency_us);
    json_num("conv1x1_gflops", d->conv1x1_gflops);
    json_num("dwconv_gflops", d->dwconv_gflops);
    json_num("host_busy_speed", d->host_busy_speed);
    printf(", \"memory_bytes\": %lld, \"from_cache\": %s}", (long long)d->memory_bytes,
           d->from_cache ? "true" : "false");
}

/* "cuda: no GPU" -> {"backend": "cuda", "available": false, "reason": "no GPU"} */
static void print_json_unavailable(const char *line) {
    const char *sep = strstr(line, ": ");
    printf("  {\"backend\": ");
    if (sep) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(sep - line), line);
        json_string(name);
    } else {
        json_string("");
    }
    printf(", \"available\": false, \"reason\": ");
    json_string(sep ? sep + 2 : line);
    printf("}");
}

static void format_memory(int64_t bytes, char *buf, size_t size) {
    if (bytes <= 0) snprintf(buf, size, "?");
    else if (bytes >= ((int64_t)1 << 30)) snprintf(buf, size, "%.1f GiB", (double)bytes / (1 << 30));
    else snprintf(buf, size, "%.0f MiB", (double)bytes / (1 << 20));
}

static void print_row(const tdm_device_info *d) {
    char mem[32], link[40];
    format_memory(d->memory_bytes, mem, sizeof mem);
    if (d->host_memory) snprintf(link, sizeof link, "-");
    else snprintf(link, sizeof link, "%.1f/%.1f", d->h2d_gbps, d->d2h_gbps);
    printf("%-10s %9.1f %9.1f %8.1f %9.2f %13s %10s  %s\n", d->name, d->gemm_gflops,
           d->conv_gflops, d->mem_gbps, d->launch_us, link, mem, d->description);
}

int cmd_devices(int argc, char **argv) {
    bool json = false, reprofile = false;
    int threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--reprofile")) {
            reprofile = true;
        } else if (!strcmp(a, "--threads") && i + 1 < argc) {
            char *end = NULL;
            long t = strtol(argv[++i], &end, 10);
            if (!*argv[i] || *end || t < 1 || t > 1024) {
                fprintf(stderr, "tandem: devices: --threads wants a number from 1 to 1024\n");
                return 2;
            }
            threads = (int)t;
        } else {
            fprintf(stderr, "tandem devices: unknown option '%s'\n", a);
            return 2;
        }
    }
    tdm_env_options o = {0};
    o.api_version = TDM_API_VERSION;
    o.threads = threads;
    tdm_env *env = NULL;
    tdm_status *st = tdm_env_create(&o, &env);
    if (st) return cli_fail(st, "devices");
    int rc = 0;
    size_t n = tdm_env_device_count(env), measured = 0;
    if (json) printf("[\n");
    else
        printf("%-10s %9s %9s %8s %9s %13s %10s  %s\n", "device", "GEMM", "conv", "memory",
               "launch", "link GB/s", "memory", "description");
    if (!json)
        printf("%-10s %9s %9s %8s %10s %13s %10s\n", "", "GFLOP/s", "GFLOP/s", "GB/s",
               "\xc2\xb5s", "h2d/d2h", "size"); /* the micro sign: 2 bytes, 1 column */
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        tdm_device_info d;
        st = tdm_env_device_profile(env, i, reprofile, &d);
        if (st) { /* report and go on with the other devices */
            fprintf(stderr, "tandem: devices: %s: %s\n", tdm_env_device_name(env, i),
                    tdm_status_message(st));
            tdm_status_free(st);
            rc = 1;
            if (!json) printf("%-10s (profile failed)  %s\n", tdm_env_device_name(env, i),
                              tdm_env_device_description(env, i));
            continue;
        }
        if (!d.from_cache) measured++;
        if (json) {
            if (!first) printf(",\n");
            print_json_device(&d, tdm_env_device_isa(env, i));
            first = false;
        } else {
            print_row(&d);
        }
    }
    for (size_t i = 0; i < tdm_env_unavailable_count(env); i++) {
        if (json) {
            if (!first) printf(",\n");
            print_json_unavailable(tdm_env_unavailable_reason(env, i));
            first = false;
        } else {
            printf("unavailable: %s\n", tdm_env_unavailable_reason(env, i));
        }
    }
    if (json) printf("\n]\n");
    else if (n)
        printf("(%s; link \"-\": works on host memory, no copies; --reprofile measures again)\n",
               measured == 0 ? "profiles from the cache"
               : measured == n ? "profiles measured now" : "some profiles measured now");
    tdm_env_free(env);
    return rc;
}
